"""What kiln did: launches, library kernels, fallbacks, copies, sync points, errors."""
from . import _C


def counters():
    """A dict of counter groups, each a dict from op (or reason) to a count.

    Groups: launches, library_kernels, fallbacks, sync_points, errors,
    bytes_copied (host_to_device, device_to_host, device_to_device).
    """
    return _C.metrics_counters()


def report():
    """The counters as text, largest first."""
    return _C.metrics_report()


def reset():
    """Zero every counter."""
    _C.metrics_reset()

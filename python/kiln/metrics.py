"""What kiln did: how each op ran (traced, library kernel, fallback), launches, copies, sync points, errors."""

from . import _C


def counters():
    """A dict of counter groups, each a dict from op (or reason) to a count.

    How each ATen op ran, by op name: traced_ops (recorded in lazy mode and
    run inside fused kernels), library_kernels (the CPU implementation on
    device memory, one launch each), fallbacks (a host round trip). Then
    launches, sync_points (by reason), errors, bytes_copied (host_to_device,
    device_to_host, device_to_device), trace_flushes, regions,
    kernels_compiled, compile_time, executable_cache, plan_cache,
    executable_launches, bytes_not_written.
    """
    return _C.metrics_counters()


def report():
    """The counters as text, largest first."""
    return _C.metrics_report()


def reset():
    """Zero every counter."""
    _C.metrics_reset()

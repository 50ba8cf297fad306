"""kiln: an adaptive eager-mode JIT for PyTorch on an emulated accelerator.

Importing kiln (which torch does by itself through the ``torch.backends``
entry point, unless TORCH_DEVICE_BACKEND_AUTOLOAD=0) validates the KILN_*
knobs, starts the device runtime and registers the device: ``torch.device
("neuron")``, ``torch.neuron``, ``Tensor.neuron()``, and
``torch.accelerator.current_accelerator()``.
"""

import atexit
import sys
import warnings


def _autoload():
    """Entry point torch calls at the end of its import (``torch.backends``).

    Importing this package does the registration. Defined before ``import
    torch`` because when kiln is imported first, torch's autoload finds kiln
    half-initialized; the registration below then runs once torch is done.
    """


import torch  # noqa: E402

from . import _C  # noqa: E402

for _message in _C._init():  # raises ValueError naming a bad knob
    warnings.warn(_message, stacklevel=2)

DEVICE_NAME = _C.device_name()


def mode():
    """ "lazy" (ops are recorded, fused, compiled and launched at sync points) or
    "eager" (one launch per op). Starts as KILN_MODE says."""
    return _C.mode()


def set_mode(new_mode):
    """Switches between "lazy" and "eager" at run time; whatever was recorded
    so far is flushed first."""
    _C.set_mode(new_mode)


def wait_for_compiles():
    """Blocks until every fused kernel queued for a background compile
    (KILN_ASYNC_COMPILE) is built and handed to the persistent store.

    Results never depend on it: which tier a trace runs in is decided by its
    counts and the cache's contents, not by when a compile finishes. It
    settles what a program reads before its exit: kernels_compiled in
    ``kiln.metrics.counters()``, the store's entries. Traces still recorded
    and not flushed compile nothing yet (``torch.neuron.synchronize()``
    flushes them)."""
    _C.wait_for_background_compiles()


torch.utils.rename_privateuse1_backend(DEVICE_NAME)

from . import device_module as _device_module  # noqa: E402
from . import metrics  # noqa: E402

torch._register_device_module(DEVICE_NAME, _device_module)
torch.utils.generate_methods_for_privateuse1_backend(
    for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
)


def _close_cache():
    """Queued kernels reach the persistent store, which closes before the
    interpreter's (and RocksDB's) teardown; a store write that failed at this
    last moment (a full disk) is still told."""
    for message in _C.cache_close(5000):
        warnings.warn(message, stacklevel=1)


# Registered first, so it runs last: after the metrics report, and after the
# user's own handlers, whose work may still compile kernels.
atexit.register(_close_cache)

if _C.metrics_at_exit():
    atexit.register(lambda: print(metrics.report(), file=sys.stderr))


__all__ = ["DEVICE_NAME", "metrics", "mode", "set_mode", "wait_for_compiles"]

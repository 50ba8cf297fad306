"""torch.<device name>: the device module, shaped like torch.cuda."""
import contextlib

import torch

from . import _C

_NAME = _C.device_name()


def _index(device=None):
    """Device index from None (current), an int, a string or a torch.device."""
    if device is None:
        return _C.current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != _NAME:
        raise ValueError(f"expected a {_NAME} device, got {device}")
    return _C.current_device() if device.index is None else device.index


def is_available():
    return _C.is_initialized() and _C.device_count() > 0


def is_initialized():
    return _C.is_initialized()


def init():
    """The device is initialized when kiln is imported; kept for API parity."""


def _lazy_init():
    pass


def _is_in_bad_fork():
    return _C.is_in_bad_fork()


def device_count():
    return _C.device_count()


def current_device():
    return _C.current_device()


def set_device(device):
    _C.set_device(_index(device))


@contextlib.contextmanager
def _device_context(index):
    previous = _C.current_device()
    if index != previous:
        _C.set_device(index)
    try:
        yield
    finally:
        if index != previous:
            _C.set_device(previous)


class device:
    """Context manager that makes `device` the current device."""

    def __init__(self, device):
        self.idx = _index(device)
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = _C.current_device()
        _C.set_device(self.idx)

    def __exit__(self, *exc):
        _C.set_device(self.prev_idx)
        return False


def synchronize(device=None):
    """Wait for every launch on the device; raises a launch's pending error."""
    _C.synchronize(_index(device))


def get_device_name(device=None):
    return _C.get_device_name(_index(device))


def get_amp_supported_dtype():
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation=True):
    return True


# ---------------------------------------------------------------- random


def default_generator(device=None):
    return _C.default_generator(_index(device))


def manual_seed(seed):
    default_generator().manual_seed(int(seed))


def manual_seed_all(seed):
    for i in range(device_count()):
        default_generator(i).manual_seed(int(seed))


def seed():
    default_generator().seed()


def seed_all():
    for i in range(device_count()):
        default_generator(i).seed()


def initial_seed():
    return default_generator().initial_seed()


def get_rng_state(device=None):
    return default_generator(device).get_state()


def set_rng_state(new_state, device=None):
    default_generator(device).set_state(new_state)


def get_rng_state_all():
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states):
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


# ---------------------------------------------------------------- memory


def memory_stats(device=None):
    return _C.memory_stats(_index(device))


def memory_allocated(device=None):
    return memory_stats(device)["allocated_bytes"]


def max_memory_allocated(device=None):
    return memory_stats(device)["peak_allocated_bytes"]


def memory_reserved(device=None):
    return memory_stats(device)["reserved_bytes"]


def max_memory_reserved(device=None):
    return memory_stats(device)["peak_reserved_bytes"]


def reset_peak_memory_stats(device=None):
    _C.reset_peak_memory_stats(_index(device))


def mem_get_info(device=None):
    stats = memory_stats(device)
    return stats["capacity_bytes"] - stats["allocated_bytes"], stats["capacity_bytes"]


def empty_cache():
    _C.empty_cache()


# ---------------------------------------------------------------- streams


def current_stream(device=None):
    return torch.accelerator.current_stream(_index(device))


def set_stream(stream):
    torch.accelerator.set_stream(stream)

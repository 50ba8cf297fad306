"""torch.<device name>: the device module, shaped like torch.cuda.

What a script written against torch.cuda reaches for behaves as torch.cuda's
does, bad device indices included: set_device(-1) is ignored, properties of a
device that does not exist raise AssertionError("Invalid device id"), and
anything that would use such a device raises RuntimeError naming the valid
range.
"""

import torch

from . import _C

_NAME = _C.device_name()


def _index(device=None, optional=True):
    """Device index from None (current), an int, a string or a torch.device."""
    if device is None:
        return _C.current_device()
    if isinstance(device, int):
        return device
    if isinstance(device, torch.Stream):
        return device.device_index
    device = torch.device(device)
    if device.type != _NAME:
        raise ValueError(f"Expected a {_NAME} device, but got: {device}")
    return _C.current_device() if device.index is None else device.index


def _existing_index(device=None):
    """As torch.cuda's device-property functions: an index that exists, or AssertionError."""
    index = _index(device)
    if index < 0 or index >= device_count():
        raise AssertionError("Invalid device id")
    return index


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
    """Makes `device` current. A negative index is ignored, as on CUDA."""
    index = _index(device)
    if index >= 0:
        _C.set_device(index)


class device:
    """Context manager that makes `device` the current device (-1 or None: no change)."""

    def __init__(self, device):
        self.idx = -1 if device is None else _index(device)
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = _C.current_device()
        if self.idx >= 0 and self.idx != self.prev_idx:
            _C.set_device(self.idx)

    def __exit__(self, *exc):
        if self.idx >= 0 and self.idx != self.prev_idx:
            _C.set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the device of tensor `obj` current (CPU tensors: no change)."""

    def __init__(self, obj):
        super().__init__(obj.get_device() if obj.device.type == _NAME else -1)


def synchronize(device=None):
    """Wait for every launch on the device; raises a launch's pending error."""
    _C.synchronize(_index(device))


# ---------------------------------------------------------------- properties


class _DeviceProperties:
    """torch.cuda.get_device_properties' shape: name, total_memory and the
    usual fields (an emulated device has no compute capability: 0.0)."""

    def __init__(self, index):
        p = _C.device_properties(index)
        self.name = p["name"]
        self.total_memory = p["total_memory"]
        self.multi_processor_count = p["multi_processor_count"]
        self.major = 0
        self.minor = 0
        self.is_integrated = True  # device memory is host memory
        self.is_multi_gpu_board = False
        self.uuid = f"kiln-{_NAME}-{index}"
        self.index = index

    def __repr__(self):
        return (
            f"_{_NAME.capitalize()}DeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
            f"total_memory={self.total_memory >> 20}MB, multi_processor_count={self.multi_processor_count})"
        )


def get_device_properties(device=None):
    return _DeviceProperties(_existing_index(device))


def get_device_name(device=None):
    return get_device_properties(device).name


def get_device_capability(device=None):
    p = get_device_properties(device)
    return p.major, p.minor


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
# The device allocator keeps CUDA's statistics (torch.accelerator reads the
# same ones); these are torch.cuda's names for them.


def memory_stats(device=None):
    """CUDA's flat statistics: "allocated_bytes.all.current", "allocation.all.peak", ..."""
    return torch.accelerator.memory_stats(_index(device))


def memory_stats_as_nested_dict(device=None):
    nested = {}
    for key, value in memory_stats(device).items():
        node = nested
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return nested


def memory_allocated(device=None):
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device=None):
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device=None):
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device=None):
    return memory_stats(device)["reserved_bytes.all.peak"]


memory_cached = memory_reserved
max_memory_cached = max_memory_reserved


def reset_peak_memory_stats(device=None):
    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device=None):
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def reset_max_memory_allocated(device=None):
    reset_peak_memory_stats(device)


reset_max_memory_cached = reset_max_memory_allocated


def mem_get_info(device=None):
    """(free, total) bytes of the device's memory."""
    return torch.accelerator.get_memory_info(_index(device))


def empty_cache():
    torch.accelerator.empty_cache()


def memory_summary(device=None, abbreviated=False):
    """A table of the memory statistics, as torch.cuda.memory_summary prints."""
    index = _index(device)
    stats = memory_stats(index)

    def size(n):
        for unit in ("B", "KiB", "MiB", "GiB"):
            if abs(n) < 1024 or unit == "GiB":
                return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
            n /= 1024

    rows = [
        ("Allocated memory", "allocated_bytes", size),
        ("Active memory", "active_bytes", size),
        ("Requested memory", "requested_bytes", size),
        ("Reserved memory", "reserved_bytes", size),
        ("Allocations", "allocation", str),
        ("Active allocs", "active", str),
    ]
    lines = [
        f"|{'':=^75}|",
        f"| {f'{_NAME} memory summary, device ID {index}':<74}|",
        f"| {'OOMs: ' + str(stats['num_ooms']):<74}|",
        f"|{'':=^75}|",
        f"| {'Metric':<22}| {'Cur Usage':>11} | {'Peak Usage':>11} | {'Tot Alloc':>10} | {'Tot Freed':>10} |",
        f"|{'':-^75}|",
    ]
    for title, key, fmt in rows:
        s = [fmt(stats[f"{key}.all.{k}"]) for k in ("current", "peak", "allocated", "freed")]
        lines.append(f"| {title:<22}| {s[0]:>11} | {s[1]:>11} | {s[2]:>10} | {s[3]:>10} |")
    lines.append(f"|{'':=^75}|")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- streams and events
# Every stream of a device shares its one in-order launch queue (guard.cpp):
# stream order always holds, and cross-stream waits are already met.


def _device_of(device):
    return torch.device(_NAME, _index(device))


class Stream(torch.Stream):
    """torch.cuda.Stream's shape over torch.Stream: Stream(device=None, priority=0)."""

    def __new__(cls, device=None, priority=0, **kwargs):
        if kwargs:  # (stream_id, device_index, device_type): rebuilding a known stream
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=_device_of(device), priority=priority)

    def __eq__(self, other):
        return isinstance(other, torch.Stream) and super().__eq__(other)

    __hash__ = torch.Stream.__hash__


class _EventType(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, torch.Event) and obj.device.type == _NAME


class Event(metaclass=_EventType):
    """torch.cuda.Event's shape: Event(enable_timing=False, blocking=False,
    interprocess=False), recorded on the current stream unless told. It is a
    torch.Event of this device (torch.Event's methods accept no subclass)."""

    def __new__(cls, enable_timing=False, blocking=False, interprocess=False):
        return torch.Event(device=_NAME, enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)


def current_stream(device=None):
    return torch.accelerator.current_stream(_index(device))


def default_stream(device=None):
    index = _index(device)
    return Stream(stream_id=0, device_index=index, device_type=current_stream(index).device_type)


def set_stream(stream):
    if stream is not None:
        torch.accelerator.set_stream(stream)


class StreamContext:
    """Makes `stream` current on its device for the block (None: no change)."""

    def __init__(self, stream):
        self.stream = stream
        self.previous = None

    def __enter__(self):
        if self.stream is None:
            return
        self.previous = current_stream(self.stream.device_index)
        set_stream(self.stream)

    def __exit__(self, *exc):
        if self.stream is not None:
            set_stream(self.previous)
        return False


def stream(stream):
    return StreamContext(stream)

"""What kiln did: how each op ran (traced, library kernel, fallback), launches, copies, sync points, errors, fusion."""

from . import _C


def counters():
    """A dict of counter groups, each a dict from a key (an op, a reason, a kind) to a count.

    The groups, as the C++ counts them (src/support/metrics.cpp):

    - launches: every launch on a device queue, by name: library kernels by op,
      copies ("copy host->device", "copy device->device"), compiled kernels as "fused kernel"
      (event markers and queued frees are not launches).
    - traced_ops: ops recorded in lazy mode and run inside fused kernels, by op; tallied once per flush.
    - library_kernels: ops run as their CPU implementation on device memory, by op
      (launched, or on the host at a first call or a data-dependent shape).
    - fallbacks: ops without a meta kernel, run on the host after draining the queue, by op.
    - sync_points: host waits for a device, by reason ("item", "copy to host", ...).
    - errors: launch errors delivered to the program, by the launch that failed.
    - bytes_copied: bytes, by direction: host_to_device, device_to_host, device_to_device.
    - trace_flushes: micro-traces flushed, by reason ("item", "untraced op", "trace size limit", ...).
    - regions: fused regions, by size bucket ("1 op", "2-3 ops", ..., "64+ ops"): a histogram.
    - kernels_compiled: kernels compiled by LLVM, by kind (pointwise, row).
    - compile_time: microseconds, not counts: total_us and max_us (the compiling thread's CPU time),
      max_wall_us, warm_up_us (the CPU time of the compiler warm-up).
    - executable_cache: executables a flush needed: hit (also every kernel of a reused plan), miss.
    - plan_cache: flush plans: hit (a trace of a known structure), miss.
    - executable_launches: compiled kernels launched, by kind (pointwise, row).
    - bytes_not_written: bytes fusion did not store ("dead intermediates": outputs freed before the flush).
    """
    return _C.metrics_counters()


def report():
    """The counters as text, largest first."""
    return _C.metrics_report()


def reset():
    """Zero every counter."""
    _C.metrics_reset()

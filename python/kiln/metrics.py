"""What kiln did: how each op ran (traced, library kernel, fallback), launches, copies, sync points, errors, fusion;
and where the time went (breakdown())."""

import threading

from . import _C

# host_python_s is the main thread's time outside kiln.
if threading.current_thread() is threading.main_thread():
    _C.metrics_mark_main_thread()


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
      max_wall_us, warm_up_us (the CPU time of the compiler warm-up), device_wait_us (the device
      queue waiting for background compiles, KILN_ASYNC_COMPILE).
    - executable_cache: executables a flush needed: hit (also every kernel of a reused plan), miss;
      evicted (dropped from memory, least recently used first, past 4,096).
    - plan_cache: flush plans: hit (a trace of a known structure), miss; evicted (past 512).
    - executable_launches: compiled kernels launched, by kind (pointwise, row).
    - bytes_not_written: bytes fusion did not store ("dead intermediates": outputs freed before the flush).
    - bytes_reused: bytes of outputs that took memory only a pending trace still held ("held by a trace":
      an input its owner freed after recording its last use; eager mode would have reused it too).
    - executable_store: lookups in the persistent cache (KILN_CACHE_DIR) of kernels this process had
      not in memory: hit; the misses by reason: miss (a new kernel), miss (evicted) (stored once, evicted
      past KILN_CACHE_MAX_MB), miss (other environment) (the same kernel stored for another fingerprint:
      KILN_LOG=cache names the fields), corrupt (an entry that failed its checks: deleted and
      recompiled), load failed (an intact entry whose object did not load: deleted and recompiled);
      evicted (entries this process's writer evicted to stay within KILN_CACHE_MAX_MB).
    - store_time: microseconds, not counts: load_us (store hits' lookups and loads), compile_saved_us
      (what those kernels took to compile when they were stored), lock_wait_us (the writer waiting
      while other processes held the database).
    - stored_verdicts: first-sight argument checks kept in KILN_CACHE_DIR across processes: loaded (at
      the first query), used (a check this process skipped), learned (new here, saved at exit).
    - warm_start: bytes, not counts: prefilled_bytes (device memory reserved and paged in while the
      program started, as its last run needed), prefill_used_bytes (of those, what allocations took).
    - tiers: flushes by how their trace ran: fused (its fused kernels launched), library (its ops ran
      as library kernels as they were recorded: a trace's first occurrences under the adaptive policy,
      while its fused kernels compile or until KILN_COMPILE_THRESHOLD; docs/tuning.md, "Tiers").
    - first_sight_checks: the first call of each argument case of a traced op, whose inputs may not be
      computed yet, runs the CPU kernel to raise eager's errors at the op, by what it ran on: small
      stand-in (the same case with small sizes: a large call's check), zero-filled twins (the
      call's own sizes; also where the stand-in raised or disagreed).
    """
    return _C.metrics_counters()


def breakdown():
    """Where the time went since the last reset() (or kiln's import): a dict of seconds.

    Host time is measured by kiln's own timers on the thread that spends it. Each thread's time
    goes to its innermost timer (exclusive time): a flush inside an op counts as flush_s, not
    host_record_s, and a compile inside the flush as compile_s.

    - wall_s: wall time since the reset.
    - host_record_s: host time inside kiln's dispatch of device ops (its ATen entry points:
      the library kernel every op reaches, copies, allocation, .item(), resize_): recording in
      lazy mode, shape inference, argument checks, running an op on the host, enqueueing library
      kernels. Views (view, as_strided) are metadata and count as Python time.
    - flush_s: host time flushing traces: plan signatures, plan lookup or planning, launch
      submission (compile time excluded).
    - compile_s: wall time compiling kernels with LLVM (and loading them), on the thread that
      compiles: the background compile thread (KILN_ASYNC_COMPILE=1), else the flushing one; a
      compile that waits for the background compiler warm-up counts the wait. The warm-up itself
      is not counted (counters()["compile_time"]["warm_up_us"] has it).
    - host_wait_s: host time blocked waiting for a device: synchronize, .item(), copies to host,
      events, the recorder's contended lock, out-of-memory retries.
    - host_python_s: wall_s minus the four above as the main thread spent them: its time in
      Python, autograd and the PyTorch dispatcher outside kiln. Clamped at 0.
    - fused_kernel_s: device time running compiled (fused) kernels.
    - library_kernel_s: device time running library kernels and copies; library_kernels_by_op:
      that time by launch name ("aten::mm", "copy host->device"; top_library_kernels() sorts it).
    - device_idle_s: wall_s minus the device's busy time (every task its queue ran: kernels,
      copies, queued frees, event markers), summed over the devices that ran anything since the
      reset; device 0's (wall_s) when none did.

    Device times are summed over devices. The host parts other than host_python_s are summed over
    threads: autograd's device thread records the backward pass while the main thread waits in
    backward() (host_python_s), so with it these may overlap; on one thread the host parts add up
    to wall_s. Device time overlaps host time: the device runs while the host records.
    """
    return _C.metrics_breakdown()


def top_library_kernels(n=5, times=None):
    """The `n` library kernels (and copies) with the most device time: [(launch name, seconds)],
    largest first, from `times` (a breakdown()) or a new breakdown."""
    by_op = (times if times is not None else breakdown())["library_kernels_by_op"]
    return sorted(by_op.items(), key=lambda kv: kv[1], reverse=True)[:n]


def report():
    """The counters as text, largest first, then the time breakdown (ms and % of wall_s)."""
    return _C.metrics_report()


def reset():
    """Zero every counter and the time breakdown (its wall clock restarts)."""
    _C.metrics_reset()

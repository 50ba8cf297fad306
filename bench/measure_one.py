"""Measures one (workload, contender) pair in this process, which must be fresh:
bench/run_bench.py starts one of these per pair, so no contender inherits
another's compiles, allocator state or warm caches.

    python bench/measure_one.py WORKLOAD CONTENDER --scale S --warmup-s W --reps R --budget-s B --out FILE
    python bench/measure_one.py WORKLOAD CONTENDER --scale S --first-only --out FILE
    python bench/measure_one.py WORKLOAD CONTENDER --scale S --warmup-s W --budget-s B --turns R,W --out FILE

Writes one JSON object to FILE: the first step (cold: includes every compile),
the warm-up, and the per-step times of the steady state (median, min, max,
reps); kiln contenders add their peak device memory, kiln lazy its metrics.
With --first-only, the process stops after its first step (one more sample of
a cold first step: bench/run_bench.py's "first_samples"). With --turns, its
timed steps run in turns that the parent hands out over two pipes (file
descriptors R and W), one process of a lockstep group at a time
(run_bench.measure_group).
"""

import sys
import time

import memory_backing

# Before the imports, and before the clock of start-up: bench memory, not the contender's (memory_backing.py).
HELD = memory_backing.HeldMemory(memory_backing.mb_from_argv(sys.argv))
STARTED = time.perf_counter()  # before the imports: start-up is part of what a pair costs

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import traceback  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stats  # noqa: E402
import workloads  # noqa: E402
from contenders import BY_KEY  # noqa: E402

MAX_TIMES_KEPT = 20  # the per-step times a result keeps (the first ones)
WARMUP_TIMES_KEPT = 7  # the warm-up's first steps: steps 2-8 (the "steady within 5 steps")


def _identity(fn):
    return fn


def _device_module(device):
    return None if device == "cpu" else getattr(torch, device)


def warm_up(step, sync, warmup_s, times):
    """Runs `step` until a steady state: (seconds, steps); appends the first steps' seconds to `times`."""
    # At least 3 steps and `warmup_s`: backward graphs compile, optimizer state
    # appears, and allocators settle (glibc's malloc hands the first large
    # blocks back to the OS, so early CPU-eager iterations page-fault).
    t0 = time.perf_counter()
    for i in range(1000):
        t = time.perf_counter()
        out = step()
        sync()
        del out
        if len(times) < WARMUP_TIMES_KEPT:
            times.append(time.perf_counter() - t)
        if i >= 2 and time.perf_counter() > t0 + warmup_s:
            break
    return time.perf_counter() - t0, i + 1


def timed_step(step, sync):
    """Seconds of one step, the device synchronized; its result is dropped after the clock stops."""
    t0 = time.perf_counter()
    out = step()
    sync()
    seconds = time.perf_counter() - t0
    del out
    return seconds


def timed_steps(step, sync, reps, budget_s):
    """Per-step seconds of up to `reps` steps, stopping after `budget_s` (3 steps at least)."""
    times = []
    deadline = time.perf_counter() + budget_s
    while len(times) < reps and (len(times) < 3 or time.perf_counter() < deadline):
        times.append(timed_step(step, sync))
    return times


def steps_in_turns(step, sync, turns, snapshot):
    """The timed steps of a process in a lockstep group: it runs steps only in
    the turns the parent hands it (a line "turn SECONDS STEPS": steps for that
    long, one at least and STEPS at most), while the group's other processes
    wait for theirs, so each of them sees the same phases of the machine's
    load. Answers each turn with "TIMED_SECONDS STEPS" so far; "end" ends
    them. Returns (step seconds, [start, end] of each turn, what `snapshot`
    (kiln's metrics, or None) gained over the timed steps alone: not over the
    waits between turns)."""
    turn_in, turn_out = turns
    times, spans, gained = [], [], {}
    turn_out.write("ready\n")
    turn_out.flush()
    for line in turn_in:
        command = line.split()
        if command[0] != "turn":
            break
        seconds, most = float(command[1]), len(times) + int(command[2])
        before = snapshot() if snapshot else None
        start = time.perf_counter()
        times.append(timed_step(step, sync))
        while len(times) < most and time.perf_counter() < start + seconds:
            times.append(timed_step(step, sync))
        spans.append([start, time.perf_counter()])
        if snapshot:
            add_gain(gained, before, snapshot())
        turn_out.write(f"{sum(times)} {len(times)}\n")
        turn_out.flush()
    return times, spans, gained


def add_gain(total, before, after):
    """Adds after - before to `total`, field by field (nested dicts of numbers)."""
    for key, value in after.items():
        if isinstance(value, dict):
            add_gain(total.setdefault(key, {}), before.get(key, {}), value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            total[key] = total.get(key, 0) + value - before.get(key, 0)


def measure(workload, contender, scale, warmup_s, reps, budget_s, first_only=False, turns=None):
    """The numbers of one pair, as a dict (see the module docstring)."""
    if contender.kiln_mode is None:
        device = "cpu"
        kiln = None
    else:
        import kiln

        kiln.set_mode(contender.kiln_mode)
        device = kiln.DEVICE_NAME
    started_s = time.perf_counter() - STARTED
    mod = _device_module(device)

    def sync():
        if mod is not None:
            mod.synchronize()

    torch.manual_seed(0)
    t0 = time.perf_counter()
    step = workload.build(device, scale, torch.compile if contender.compiled else _identity)
    sync()
    build_s = time.perf_counter() - t0
    # Results stay referenced until the sync, as a program that uses them
    # keeps them: lazy mode computes nothing nobody holds.
    lazy = contender.kiln_mode == "lazy"
    HELD.release()  # its pages, backed, are the first step's fresh memory (and unmapping them is not the step's)
    if lazy:
        kiln.metrics.reset()
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    out = step()
    sync()
    first_s = time.perf_counter() - t0
    first_usage = usage_between(usage0, resource.getrusage(resource.RUSAGE_SELF))
    first_breakdown = per_step(kiln.metrics.breakdown(), 1) if lazy else None
    del out
    backing = HELD.record()
    if first_only:
        return {
            "startup_s": started_s,
            "build_s": build_s,
            "first_s": first_s,
            "first_usage": first_usage,
            "memory_backing": backing,
        }

    warmup_times = []
    warm_s, warm_steps = warm_up(step, sync, warmup_s, warmup_times)

    if mod is not None:
        mod.reset_peak_memory_stats()
        base_bytes = mod.memory_allocated()
    if lazy:
        kiln.metrics.reset()
    spans = None
    if turns is None:
        times = timed_steps(step, sync, reps, budget_s)
        counters = kiln.metrics.counters() if lazy else None
        breakdown = kiln.metrics.breakdown() if lazy else None
    else:

        def snapshot():
            return {"counters": kiln.metrics.counters(), "breakdown": kiln.metrics.breakdown()}

        times, spans, gained = steps_in_turns(step, sync, turns, snapshot if lazy else None)
        counters, breakdown = gained.get("counters"), gained.get("breakdown")
    result = {
        "startup_s": started_s,
        "build_s": build_s,
        "first_s": first_s,
        # What the first step cost the process beside its wall time: a first
        # step that is slow in some processes only shows where here.
        "first_usage": first_usage,
        "memory_backing": backing,
        "warmup_s": warm_s,
        "warmup_steps": warm_steps,
        "warmup_times_s": warmup_times,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "reps": len(times),
        "p10_s": stats.percentile(times, 0.1),
        "p90_s": stats.percentile(times, 0.9),
        # The first steps' times: fast workloads run hundreds of steps in the budget.
        "times_s": times[:MAX_TIMES_KEPT],
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }
    if spans is not None:
        result["turns"] = spans
    if mod is not None:
        result["peak_bytes"] = mod.max_memory_allocated()
        result["base_bytes"] = base_bytes
    if lazy:
        result["first_breakdown"] = first_breakdown
        result["counters"] = counters
        result["breakdown_per_step"] = per_step(breakdown, len(times))
        # Every region this process compiled (first step and warm-up included): (CPU ms, wall ms).
        result["compile_times_ms"] = kiln._C.compile_times_ms()
    return result


def usage_between(before, after):
    """CPU time, page faults and context switches between two getrusage() readings."""
    return {
        "user_s": after.ru_utime - before.ru_utime,
        "system_s": after.ru_stime - before.ru_stime,
        "minor_faults": after.ru_minflt - before.ru_minflt,
        "major_faults": after.ru_majflt - before.ru_majflt,
        "voluntary_switches": after.ru_nvcsw - before.ru_nvcsw,
        "involuntary_switches": after.ru_nivcsw - before.ru_nivcsw,
    }


def per_step(breakdown, steps):
    """kiln.metrics.breakdown() (seconds since the reset) divided by the measured steps."""
    out = {k: v / steps for k, v in breakdown.items() if isinstance(v, (int, float))}
    out["library_kernels_by_op"] = {op: s / steps for op, s in breakdown.get("library_kernels_by_op", {}).items()}
    return out


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("workload")
    parser.add_argument("contender")
    parser.add_argument("--scale", type=float, required=True)
    parser.add_argument("--first-only", action="store_true", help="stop after the first step")
    parser.add_argument("--warmup-s", type=float, default=0.0)
    parser.add_argument("--reps", type=int, default=3, help="at most this many timed steps")
    parser.add_argument("--budget-s", type=float, default=0.0, help="timed steps stop after this (3 at least)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--turns", default=None, help="R,W: the pipes of a lockstep group's turns (timed steps)")
    parser.add_argument(
        memory_backing.FLAG, type=int, default=0, help="MiB held from the start, let go just before the first step"
    )
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    turns = None
    if args.turns:
        read_fd, write_fd = (int(fd) for fd in args.turns.split(","))
        turns = (os.fdopen(read_fd, "r"), os.fdopen(write_fd, "w"))
    torch.set_num_threads(args.threads)  # the same for every contender; kiln's kernels use torch's pool
    workload = next(w for w in workloads.WORKLOADS if w.name == args.workload)
    try:
        result = measure(
            workload,
            BY_KEY[args.contender],
            args.scale,
            args.warmup_s,
            args.reps,
            args.budget_s,
            args.first_only,
            turns,
        )
    except Exception as e:  # a contender that cannot run this workload gets a row saying why
        traceback.print_exc()
        result = {"skipped": f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}
    result["pid"] = os.getpid()
    with open(args.out, "w") as fh:
        json.dump(result, fh)
    # The numbers are out: skip the interpreter's teardown, which takes 0.5 s
    # for PyTorch and 1-2 s with kiln loaded (measured), on every child. The
    # parent ends whatever this process started (Inductor's compile workers).
    # os._exit skips atexit handlers, so kiln's store is closed here: what
    # this process compiled and learned reaches it (the warm contender's
    # priming run is there for nothing else).
    if "kiln" in sys.modules:
        sys.modules["kiln"]._C.cache_close(5000)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()

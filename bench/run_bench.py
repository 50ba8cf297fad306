"""`make bench`: measures kiln against PyTorch eager CPU and torch.compile (CPU),
and the machine's memory bandwidth; writes bench/results/<date>-<host>.json.
bench/report.py turns it into docs/benchmarks.md and docs/img/*.png.

    python bench/run_bench.py [--quick | --smoke] [--only w1,w2] [--rounds N] [--compile-on all|w1,w2]
                              [--compile-rounds N] [--jobs N (smoke only)] [--micro build/kiln_runtime_bench]
                              [--out FILE] [--report]

Every (workload, contender) pair runs in a fresh process (bench/measure_one.py),
so nothing one contender did (torch.compile's compiles, allocator state, warm
caches, another workload) is in the process that measures the next. Pairs are
interleaved over rounds: round 1 runs every pair once, round 2 again, and so
on, so each contender sees the machine's load of every phase of the run.
Within a round, a workload's timed processes take turns at their steady
steps (bench/children.py), so they see the same phases at a finer grain.
bench/stats.py turns the rounds into medians and per-round ratios.

This process measures nothing: it starts children and collects their JSON.
"""

import argparse
import concurrent.futures
import datetime
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import memory_backing  # noqa: E402
import stats  # noqa: E402
from children import TurnTaker, run_child, take_turns  # noqa: E402
from contenders import BY_KEY, CONTENDERS, WARM_START_WORKLOADS  # noqa: E402

# Per mode: workload size scale, rounds, the child's warm-up (seconds, 3 steps
# at least), timed steps (at most `reps`, stopping after `budget_s` once 3 are
# in), where torch.compile runs ("all" or a tuple of workloads) and in how many
# rounds, the first-step-only processes per round beside the timed one of each
# contender whose first step a "not slower" target compares (Contender.
# first_sampled_on), the STREAM array size, how long one child may take, and
# the MiB a child holds from its start and lets go of just before its first
# step, so that the first step's fresh pages are pages the VM already backs
# (memory_backing.py; at scale 0.25 the largest first step grows a process by
# about 100 MiB, at scale 1 by 400 MiB).
#
# Sized from costs measured on the 2-core VM (Dec 2026, other work running):
# a child costs ~3.5-4 s before its first step even on tiny sizes (import
# torch 1.3-2 s; the first device randn or optimizer step imports
# torch._dynamo, 1.5-2 s more), and torch.compile's cold compile 15-55 s per
# workload and process at scale 1 (~30 s for gpt_train at scale 0.25).
# - quick: 12 workloads x 3 contenders x ~4.5 s is ~160 s a round, so one
#   round, and torch.compile only on gpt_train (its one acceptance target).
# - full: every contender but torch.compile 5 rounds; with 12 workloads that
#   is ~4-5 minutes of PyTorch and kiln processes a round, and ~5-8 minutes
#   of cold compiles per torch.compile round, so torch.compile runs in the
#   first 2 rounds (5 would take the run past 40 minutes). Its timed steps
#   are bound by the budget, not `reps`: a fast workload's median over 10
#   steps of 2 ms moved 5-10% between processes of one contender (pointwise
#   chain), over the budget's ~500 steps 2-5%. Two first-step-only processes
#   (1.5-5 s each) per sampled pair add ~3 minutes a round: a first step is
#   then the median of 3 processes.
MODES = {
    "smoke": {
        "scale": 0.002,
        "rounds": 1,
        "warmup_s": 0.0,
        "reps": 2,
        "budget_s": 0.1,
        "compile_on": (),
        "compile_rounds": 0,
        "first_samples": 0,
        "stream_elements": 1 << 16,
        "child_timeout_s": 300,
        "backing_mb": 8,  # the path is tested; no smoke step needs more
    },
    "quick": {
        "scale": 0.25,
        "rounds": 1,
        "warmup_s": 0.3,
        "reps": 5,
        "budget_s": 0.3,
        "compile_on": ("gpt_train",),
        "compile_rounds": 1,
        "first_samples": 0,
        "stream_elements": 1 << 24,
        "child_timeout_s": 600,
        "backing_mb": 256,
    },
    "full": {
        "scale": 1.0,
        "rounds": 5,
        "warmup_s": 1.0,
        "reps": 1000,
        "budget_s": 1.0,
        "compile_on": "all",
        "compile_rounds": 2,
        "first_samples": 2,
        "stream_elements": 1 << 26,
        "child_timeout_s": 1800,
        "backing_mb": 1024,
    },
}


def child_env(contender, cache_dir=None):
    """The environment of a child: CPU contenders without kiln, kiln ones in their mode."""
    env = dict(os.environ)
    if contender is None or contender.kiln_mode is None:
        # Plain PyTorch: kiln is not even loaded (its compiler warm-up thread
        # would share the cores with the contender's first steps).
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    else:
        env["KILN_MODE"] = contender.kiln_mode  # the start-up mode too: no lazy warm-up in an eager process
        env.update(dict(contender.env))
        # A cold start: an empty persistent store of its own (none at all without a directory).
        env.pop("KILN_CACHE_DIR", None)
        if cache_dir is None:
            env["KILN_CACHE"] = "0"
        else:
            env["KILN_CACHE"] = "1"
            env["KILN_CACHE_DIR"] = cache_dir
    if cache_dir is not None and contender.compiled:
        env["TORCHINDUCTOR_CACHE_DIR"] = cache_dir  # a cold compile: an empty Inductor (and FX graph) cache
    return env


def child_argv(workload, key, settings, warmup_s=0.0, reps=3, budget_s=0.0):
    return [
        os.path.join(BENCH, "measure_one.py"),
        workload,
        key,
        f"--scale={settings['scale']}",
        f"--warmup-s={warmup_s}",
        f"--reps={reps}",
        f"--budget-s={budget_s}",
        f"--threads={settings['threads']}",
        f"{memory_backing.FLAG}={settings['backing_mb']}",
    ]


def timed_argv(workload, key, settings):
    """A pair's measuring process: its first step, warm-up and timed steps."""
    return child_argv(workload, key, settings, settings["warmup_s"], settings["reps"], settings["budget_s"])


class ColdStart:
    """What a contender's process starts from: an empty compile cache of its own
    (Inductor's, or kiln's store), or for the warm contender a store that a
    first run of the same workload filled (its first step and two more: every
    kernel and first-sight verdict). `failed`: why priming failed, or None."""

    def __init__(self, workload, contender, settings):
        cached = contender.compiled or contender.kiln_mode is not None
        self.cache_dir = tempfile.mkdtemp(prefix="kiln-bench-cache-") if cached else None
        self.env = child_env(contender, self.cache_dir)
        self.load = os.getloadavg()[0]  # other work on the machine: the report shows the range
        self.failed = None
        if contender.warm_store:
            primed, _ = run_child(
                child_argv(workload, "kiln_lazy", settings),
                child_env(BY_KEY["kiln_lazy"], self.cache_dir),
                settings["child_timeout_s"],
            )
            if "skipped" in primed:
                self.failed = {"skipped": "priming the store " + primed["skipped"]}

    def close(self, result, wall):
        if self.cache_dir:
            shutil.rmtree(self.cache_dir, ignore_errors=True)
        result = self.failed or result
        result["process_s"] = wall
        result["load_1min"] = self.load
        return result


def measure_pair(workload, contender, settings, sample=0):
    """One pair in a fresh process, its steps timed one after another; the
    result gets its process wall time. `sample` > 0: a first-step-only process
    (one more sample of its first step)."""
    start = ColdStart(workload, contender, settings)
    result, wall = {}, 0.0
    try:
        if not start.failed:
            args = timed_argv(workload, contender.key, settings)
            result, wall = run_child(
                args + ["--first-only"] if sample else args, start.env, settings["child_timeout_s"]
            )
    finally:
        result = start.close(result, wall)
    return result


# A turn of a lockstep group: short, so that a round of turns (every
# contender of the workload, up to 7) spans well under a second of the
# machine's drift; a step longer than this is a turn of its own.
TURN_S = 0.05


def measure_group(workload, contenders, settings):
    """The timed processes of one workload's contenders in a round, in
    lockstep (bench/children.py): each starts, runs its first step and
    warm-up while the others wait, then they take turns at their timed
    steps. Results in the order of `contenders`, each with its process wall
    time (waits included)."""
    starts, takers = [], []
    try:
        for c in contenders:
            start = ColdStart(workload, c, settings)
            starts.append(start)
            takers.append(None)
            if not start.failed:
                takers[-1] = TurnTaker(timed_argv(workload, c.key, settings), start.env, settings["child_timeout_s"])
        take_turns([t for t in takers if t], settings["turn_s"], settings["budget_s"], 3, settings["reps"])
    finally:
        results = []
        for start, taker in zip(starts, takers):
            result, wall = taker.finish() if taker else ({}, 0.0)
            results.append(start.close(result, wall))
    return results


def probe(name, settings, contender=None, **kw):
    argv = [os.path.join(BENCH, "probes.py"), name] + [f"--{k}={v}" for k, v in kw.items()]
    result, wall = run_child(argv, child_env(contender), settings["child_timeout_s"])
    result["process_s"] = wall
    return result


def micro_benchmarks(binary, quick):
    """The C++ Google Benchmark results (runtime launch overhead, throughput, copies, allocation)."""
    if not binary or not os.path.exists(binary):
        return {"error": f"micro-benchmark binary not found: {binary}"}
    args = [binary, "--benchmark_format=json", f"--benchmark_min_time={0.02 if quick else 0.2}"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        return {"error": out.stderr[-2000:]}
    data = json.loads(out.stdout)
    keep = (
        "name",
        "real_time",
        "cpu_time",
        "time_unit",
        "items_per_second",
        "bytes_per_second",
        "cached_ms",
        "streaming_ms",
        "vscalef_us",
        "portable_us",
        "speedup",
        "median_us",
        "p90_us",
    )
    return {
        "context": data.get("context", {}),
        "benchmarks": [{k: b[k] for k in keep if k in b} for b in data["benchmarks"]],
    }


def machine():
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "host": socket.gethostname(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_GiB": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "python": platform.python_version(),
    }


def import_workloads():
    """bench/workloads.py, for names and sizes. It imports torch, which would load kiln here
    (autoload), whose threads and compiler warm-up would share the cores with the children."""
    saved = os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD")
    os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    try:
        import workloads
    finally:
        if saved is None:
            del os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"]
        else:
            os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = saved
    return workloads


def compiled_on(settings, name):
    return settings["compile_on"] == "all" or name in settings["compile_on"]


def only_on(contender):
    """The workloads a contender is limited to, or None: every workload."""
    return WARM_START_WORKLOADS if contender.warm_store else contender.workloads


def runs_on(contender, name):
    return only_on(contender) is None or name in only_on(contender)


def rotated(items, by):
    """`items` from place `by` on, then the ones before it (round-robin)."""
    if not items:
        return items
    k = by % len(items)
    return items[k:] + items[:k]


def plan(settings, names):
    """The processes in run order: [(round, workload, contender, sample)], rounds
    outermost, then workloads. Sample 0 is a pair's timed process; after a
    workload's timed processes come its first-step-only ones, sample 1 of every
    sampled contender, then sample 2, and so on, so they interleave too. Each
    round, and each sample, starts one contender later than the one before
    (`rotated`): where a process falls in a group (how many others are alive
    beside its first step, which process ran just before it) is spread over
    the contenders instead of always falling on the same one."""
    pairs = []
    for r in range(1, settings["rounds"] + 1):
        for name in names:
            timed = []
            for c in CONTENDERS:
                if c.reason is not None or not runs_on(c, name):
                    continue
                if c.compiled and (not compiled_on(settings, name) or r > settings["compile_rounds"]):
                    continue
                timed.append((r, name, c, 0))
            pairs += rotated(timed, r - 1)
            for i in range(1, settings["first_samples"] + 1):
                sampled = [(r, name, c, i) for _, _, c, _ in timed if c.first_sampled(name) and not c.warm_store]
                pairs += rotated(sampled, r - 1 + i)
    return pairs


def merge_first_samples(timed, samples):
    """The timed process's result with the first steps of its pair's first-step-only
    processes: "first_s" becomes the median over all of them (the timed one's own
    stays in "first_s_timed"), "first_samples" keeps each process's first step."""
    if "first_s" not in timed or not samples:
        return timed
    timed["first_samples"] = [
        {"first_s": s.get("first_s"), "minor_faults": s.get("first_usage", {}).get("minor_faults")}
        | ({"skipped": s["skipped"]} if "skipped" in s else {})
        for s in [timed, *samples]
    ]
    timed["first_s_timed"] = timed["first_s"]
    timed["first_s"] = statistics.median(s["first_s"] for s in timed["first_samples"] if s["first_s"] is not None)
    return timed


def left_out(mode, settings, names, all_names):
    """What this run did not measure that a full run does, in words (the report prints them)."""
    out = []
    skipped = [n for n in all_names if n not in names]
    if skipped:
        out.append(f"workloads not run (--only): {', '.join(skipped)}")
    compiled = [n for n in names if compiled_on(settings, n)]
    if settings["compile_rounds"] == 0 or not compiled:
        out.append("torch.compile: not run at all")
    else:
        if len(compiled) < len(names):
            rest = [n for n in names if n not in compiled]
            out.append(
                f"torch.compile: run on {', '.join(compiled)} only; no torch.compile numbers for {', '.join(rest)}"
            )
        if settings["compile_rounds"] < settings["rounds"]:
            out.append(f"torch.compile: in {settings['compile_rounds']} of the {settings['rounds']} rounds")
    if settings["first_samples"] < MODES["full"]["first_samples"]:
        out.append(
            f'first steps compared by a "not slower" target: the median of {settings["first_samples"] + 1} '
            f"process(es) per round instead of {MODES['full']['first_samples'] + 1}"
        )
    if settings["backing_mb"] == 0:
        out.append(
            "first steps: no memory held until them (--backing-mb 0), so their fresh pages may wait for the VM "
            "to back them (bench/memory_backing.py)"
        )
    full = MODES["full"]
    smaller = []
    if settings["scale"] != full["scale"]:
        smaller.append(f"size scale {settings['scale']} instead of {full['scale']}")
    if settings["rounds"] < full["rounds"]:
        smaller.append(f"{settings['rounds']} round(s) instead of {full['rounds']}")
    if any(settings[k] != full[k] for k in ("warmup_s", "reps", "budget_s")):
        smaller.append(
            f"warm-up {settings['warmup_s']} s, at most {settings['reps']} timed steps or {settings['budget_s']} s "
            f"per process instead of {full['warmup_s']} s, {full['reps']} and {full['budget_s']} s"
        )
    if smaller:
        out.append(", ".join(smaller))
    return out


def settings_for(args):
    mode = "smoke" if args.smoke else ("quick" if args.quick else "full")
    settings = dict(MODES[mode])
    if args.rounds is not None:
        settings["rounds"] = args.rounds
        settings["compile_rounds"] = args.rounds if settings["compile_rounds"] else 0
    if args.compile_on is not None:
        settings["compile_on"] = "all" if args.compile_on == "all" else tuple(args.compile_on.split(","))
        settings["compile_rounds"] = settings["rounds"]
    if args.compile_rounds is not None:
        settings["compile_rounds"] = args.compile_rounds
    if args.first_samples is not None:
        settings["first_samples"] = args.first_samples
    if args.backing_mb is not None:
        if args.backing_mb < 0:
            raise SystemExit(f"--backing-mb: expected 0 or more MiB; got {args.backing_mb}")
        settings["backing_mb"] = args.backing_mb
    settings["compile_rounds"] = min(settings["compile_rounds"], settings["rounds"])
    settings["jobs"] = args.jobs
    settings["turn_s"] = TURN_S if args.jobs == 1 else None  # timed steps in lockstep (run_pairs)
    settings["rotated_order"] = True  # plan() turns the start order each round (recorded: earlier runs did not)
    # All cores for every contender; children run side by side only in the smoke test, which times nothing.
    settings["threads"] = max(1, (os.cpu_count() or 1) // args.jobs)
    return mode, settings


def run_pairs(pairs, settings, jobs):
    """Measures every pair. One process at a time, but the timed processes of
    one workload in a round (sample 0) in lockstep: they take turns at their
    timed steps (measure_group). With `jobs` > 1 (the smoke test only, which
    times nothing worth reading) pairs run apart, `jobs` at a time."""
    results = [None] * len(pairs)

    def report(i, result):
        r, name, c, sample = pairs[i]
        result["round"] = r
        if sample and "first_s" in result:
            what = f"first-step sample {sample}: first {result['first_s'] * 1e3:9.1f} ms"
        elif "median_s" in result:
            what = f"median {result['median_s'] * 1e3:10.3f} ms (first {result['first_s'] * 1e3:9.1f} ms, "
            what += f"{result['reps']} reps)"
        else:
            what = result["skipped"]
        print(
            f"round {r} [{i + 1:3d}/{len(pairs)}] {name:20s} {c.key:12s} {what}  process {result['process_s']:.1f} s",
            flush=True,
        )
        results[i] = result

    def one(i):
        r, name, c, sample = pairs[i]
        report(i, measure_pair(name, c, settings, sample))

    if jobs > 1:
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            list(pool.map(one, range(len(pairs))))
        return results
    for i, (r, name, _, sample) in enumerate(pairs):
        if results[i] is not None:
            continue
        if sample:
            one(i)
            continue
        group = [j for j, (r2, name2, _, s2) in enumerate(pairs) if (r2, name2, s2) == (r, name, 0)]
        for j, result in zip(group, measure_group(name, [pairs[j][2] for j in group], settings)):
            report(j, result)
    return results


def compile_times(data):
    """Compile time per region over every kiln lazy process (each compiles its regions cold)."""
    times = [t for w in data["workloads"] for r in stats.runs_of(w, "kiln_lazy") for t in r.get("compile_times_ms", [])]
    out = {"regions": len(times)}
    for clock, i in (("", 0), ("wall_", 1)):
        values = [t[i] for t in times]
        out[f"{clock}median_ms"] = stats.spread(values)["median"] if values else None
        out[f"{clock}p99_ms"] = stats.percentile(values, 0.99)
        out[f"{clock}max_ms"] = max(values) if values else None
    return out


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer rounds (< 5 minutes)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, 1 round, no torch.compile: checks it runs")
    parser.add_argument("--only", default=None, help="comma-separated workload names")
    parser.add_argument("--rounds", type=int, default=None, help="rounds for every contender")
    parser.add_argument("--compile-on", default=None, help='"all" or comma-separated workloads for torch.compile')
    parser.add_argument("--compile-rounds", type=int, default=None, help="rounds torch.compile runs in (the first N)")
    parser.add_argument("--first-samples", type=int, default=None, help="first-step-only processes per sampled pair")
    parser.add_argument(
        "--backing-mb", type=int, default=None, help="MiB a child holds until its first step (memory_backing.py)"
    )
    parser.add_argument("--jobs", type=int, default=1, help="children at once; > 1 only with --smoke (no timing)")
    parser.add_argument("--micro", default="build/kiln_runtime_bench")
    parser.add_argument("--out", default=None)
    parser.add_argument("--report", action="store_true", help="then regenerate docs/benchmarks.md and docs/img")
    args = parser.parse_args(argv)
    if args.jobs > 1 and not args.smoke:
        parser.error("--jobs > 1 only with --smoke: measurements run one process at a time")
    started = time.perf_counter()
    mode, settings = settings_for(args)

    workloads = import_workloads()
    all_names = [w.name for w in workloads.WORKLOADS]
    wanted = set(args.only.split(",")) if args.only else None
    if wanted and wanted - set(all_names):
        parser.error(f"unknown workloads: {', '.join(sorted(wanted - set(all_names)))}")
    names = [n for n in all_names if not wanted or n in wanted]
    pairs = plan(settings, names)
    print(f"{mode}: {len(pairs)} processes over {settings['rounds']} rounds", flush=True)

    data = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "mode": mode,
        "scale": settings["scale"],
        "settings": settings,
        "left_out": left_out(mode, settings, names, all_names),
        "machine": machine(),
        "contenders": [
            {
                "key": c.key,
                "label": c.label,
                "reason": c.reason,
                "repeats": c.repeats,
                "first_sampled_on": c.first_sampled_on,
            }
            for c in CONTENDERS
        ],
        "workloads": [],
    }
    # Memory bandwidth once per round, before the round's pairs, so bandwidth
    # shares can be taken round by round too.
    stream, runs = [], {}
    for r in range(1, settings["rounds"] + 1):
        s = probe("stream", settings, elements=settings["stream_elements"])
        s["round"] = r
        stream.append(s)
        print(f"round {r} memory bandwidth: {s}", flush=True)
        round_pairs = [p for p in pairs if p[0] == r]
        results = run_pairs(round_pairs, settings, settings["jobs"])
        samples = {}
        for (_, name, c, sample), res in zip(round_pairs, results):
            if sample:
                samples.setdefault((name, c.key), []).append(res)
        for (_, name, c, sample), res in zip(round_pairs, results):
            if not sample:
                runs.setdefault((name, c.key), []).append(merge_first_samples(res, samples.get((name, c.key), [])))
    good = [s for s in stream if "triad_GBps" in s]
    data["stream"] = {
        "rounds": stream,
        "elements": settings["stream_elements"],
        "copy_GBps": stats.spread(s["copy_GBps"] for s in good)["median"] if good else None,
        "triad_GBps": stats.spread(s["triad_GBps"] for s in good)["median"] if good else None,
    }

    by_name = {w.name: w for w in workloads.WORKLOADS}
    for name in names:
        w = by_name[name]
        row = {
            "name": name,
            "description": w.description,
            "min_bytes": w.min_bytes(settings["scale"]) if w.min_bytes else None,
            "ops": w.ops(settings["scale"]) if w.ops else None,
            "results": {},
        }
        for c in CONTENDERS:
            if c.reason is not None:
                row["results"][c.key] = {"skipped": c.reason}
            elif (name, c.key) in runs:
                row["results"][c.key] = {"runs": runs[(name, c.key)]}
            elif not runs_on(c, name):
                row["results"][c.key] = {"skipped": f"measured on {', '.join(only_on(c))} only"}
            else:
                row["results"][c.key] = {"skipped": f"not run in this {mode} run (see what it left out)"}
        data["workloads"].append(row)
    first = next((r for rs in runs.values() for r in rs if "torch" in r), {})
    data["machine"].update({"torch": first.get("torch"), "threads": first.get("threads")})
    data["compile"] = compile_times(data)
    data["load_1min"] = stats.spread(r.get("load_1min") for rs in runs.values() for r in rs)
    # What a child costs before it builds anything: import torch (+ kiln), in the child's own clock.
    data["child_startup_s"] = {
        kind: stats.spread(
            r.get("startup_s") for (_, key), rs in runs.items() if (BY_KEY[key].kiln_mode is None) == cpu for r in rs
        )
        for kind, cpu in (("cpu", True), ("kiln", False))
    }

    data["recording"] = probe("recording", settings, contender=BY_KEY["kiln_lazy"])
    print(f"recording: {data['recording']}; compile: {data['compile']}", flush=True)

    # Last: the micro-benchmark process churns through memory, and CPU eager's
    # fresh large temporaries page-fault several times slower right after it
    # (measured: pointwise chain 8 ms before, 38 ms after).
    data["micro"] = {} if mode == "smoke" else micro_benchmarks(args.micro, mode == "quick")
    if "error" in data["micro"]:
        raise SystemExit(f"runtime micro-benchmarks failed: {data['micro']['error']}")
    data["wall_s"] = time.perf_counter() - started
    data["summary"] = stats.summarize(data)

    out = args.out or os.path.join(BENCH, "results", f"{datetime.date.today().isoformat()}-{socket.gethostname()}.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as fh:
        json.dump(data, fh, indent=1)
    print(f"wrote {out} ({data['wall_s']:.0f} s)")
    if args.report:
        import report

        report.main([out])
    return out


if __name__ == "__main__":
    main()

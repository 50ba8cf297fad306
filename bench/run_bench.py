"""`make bench`: measures kiln against PyTorch eager CPU and torch.compile (CPU),
side by side in one run, and the machine's memory bandwidth; writes
bench/results/<date>-<host>.json. bench/report.py turns it into
docs/benchmarks.md and docs/img/*.png.

    python bench/run_bench.py [--quick] [--smoke] [--micro build/kiln_runtime_bench] [--out FILE]
"""

import argparse
import datetime
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

# torch.compile's "first call" is a cold compile: a fresh Inductor cache for
# every run (set before torch reads its configuration).
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="kiln-bench-inductor-"))

import torch  # noqa: E402

import kiln  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workloads  # noqa: E402

DEVICE = torch._C._get_privateuse1_backend_name()


def _identity(fn):
    return fn


def _compiled(fn):
    return torch.compile(fn)


NO_CACHE = "not built yet: the persistent executable cache is the next issue"

# (key, label, device, compile function or None, reason it cannot run, kiln mode)
CONTENDERS = [
    ("cpu_eager", "PyTorch eager, CPU", "cpu", _identity, None, None),
    ("cpu_compile", "torch.compile (Inductor), CPU", "cpu", _compiled, None, None),
    ("kiln_eager", "kiln eager (one launch per op)", DEVICE, _identity, None, "eager"),
    ("kiln_lazy", "kiln lazy (fused, compiled)", DEVICE, _identity, None, "lazy"),
    ("kiln_lazy_cold", "kiln lazy, cold persistent cache", DEVICE, None, NO_CACHE, None),
    ("kiln_lazy_warm", "kiln lazy, warm persistent cache", DEVICE, None, NO_CACHE, None),
]


def _sync(device):
    if device != "cpu":
        getattr(torch, device).synchronize()


def measure(workload, device, compile_fn, scale, reps, budget_s, warmup_s):
    """Returns {first_s, median_s, min_s, max_s, reps} for one workload on one contender."""
    torch.manual_seed(0)
    if compile_fn is _compiled:
        torch._dynamo.reset()
    step = workload.build(device, scale, compile_fn)
    # Results stay referenced until the sync, as a program that uses them
    # keeps them: lazy mode computes nothing nobody holds.
    t0 = time.perf_counter()
    out = step()
    _sync(device)
    first = time.perf_counter() - t0
    del out
    # Warm-up until a steady state: backward graphs compile, optimizer state
    # appears, and allocators settle (glibc's malloc hands the first large
    # blocks back to the OS, so early CPU-eager iterations page-fault).
    warm_until = time.perf_counter() + warmup_s
    for i in range(1000):
        out = step()
        _sync(device)
        del out
        if i >= 2 and time.perf_counter() > warm_until:
            break
    times = []
    deadline = time.perf_counter() + budget_s
    while len(times) < reps and (len(times) < 3 or time.perf_counter() < deadline):
        t0 = time.perf_counter()
        out = step()
        _sync(device)
        times.append(time.perf_counter() - t0)
        del out
    return {
        "first_s": first,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "reps": len(times),
    }


def stream_bandwidth(elements, reps=5):
    """STREAM-like copy and triad on the CPU, all threads: best GB/s of `reps`."""
    a = torch.zeros(elements)
    b = torch.rand(elements)
    c = torch.rand(elements)
    best_copy = best_triad = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        a.copy_(b)
        best_copy = min(best_copy, time.perf_counter() - t0)
        t0 = time.perf_counter()
        torch.add(b, c, alpha=3.0, out=a)
        best_triad = min(best_triad, time.perf_counter() - t0)
    return {
        "elements": elements,
        "copy_GBps": 2 * 4 * elements / best_copy / 1e9,
        "triad_GBps": 3 * 4 * elements / best_triad / 1e9,
    }


def recording_overhead(ops=4000):
    """Per-op cost on 1-element float32 tensors: PyTorch eager CPU (its own
    dispatch plus a tiny kernel) and kiln lazy recording (no sync inside the
    timed loop), measured alternately, best of 7."""
    best = {"cpu": float("inf"), "kiln": float("inf")}
    kiln.set_mode("lazy")
    for _ in range(7):
        for key, device in (("cpu", "cpu"), ("kiln", DEVICE)):
            x = torch.ones(1, device=device)
            _sync(device)
            t0 = time.perf_counter()
            y = x
            for _ in range(ops // 2):
                y = y * 1.0001
                y = y + 0.0001
            best[key] = min(best[key], (time.perf_counter() - t0) / ops)
            _sync(device)
            del y
    return {
        "cpu_eager_us_per_op": best["cpu"] * 1e6,
        "kiln_lazy_record_us_per_op": best["kiln"] * 1e6,
        "overhead_us_per_op": (best["kiln"] - best["cpu"]) * 1e6,
    }


def pointwise_chain_peak_memory(scale):
    """Peak device memory of one pointwise-chain step, lazy vs eager (bytes above the input)."""
    out = {}
    mod = getattr(torch, DEVICE)
    for mode in ("eager", "lazy"):
        kiln.set_mode(mode)
        step = workloads.build_pointwise(DEVICE, scale, _identity)
        step()
        mod.synchronize()
        mod.reset_peak_memory_stats()
        base = mod.memory_allocated()
        y = step()
        mod.synchronize()
        out[mode] = mod.max_memory_allocated() - base
        del y
    return out


def micro_benchmarks(binary, quick):
    """The C++ Google Benchmark results (runtime launch overhead, throughput, copies, allocation)."""
    if not binary or not os.path.exists(binary):
        return {"error": f"micro-benchmark binary not found: {binary}"}
    args = [binary, "--benchmark_format=json", f"--benchmark_min_time={0.02 if quick else 0.2}"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        return {"error": out.stderr[-2000:]}
    data = json.loads(out.stdout)
    return {
        "context": data.get("context", {}),
        "benchmarks": [
            {
                k: b[k]
                for k in (
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
                )
                if k in b
            }
            for b in data["benchmarks"]
        ],
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
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repetitions (< 5 minutes)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, no torch.compile: checks that it runs")
    parser.add_argument("--micro", default="build/kiln_runtime_bench")
    parser.add_argument("--out", default=None)
    parser.add_argument("--only", default=None, help="comma-separated workload names")
    parser.add_argument("--report", action="store_true", help="then regenerate docs/benchmarks.md and docs/img")
    args = parser.parse_args(argv)

    threads = os.cpu_count() or 1
    torch.set_num_threads(threads)  # the same for every contender; kiln's kernels use torch's pool
    scale = 0.002 if args.smoke else (0.25 if args.quick else 1.0)
    reps = 2 if args.smoke else (5 if args.quick else 15)
    budget = 0.5 if args.smoke else (4.0 if args.quick else 20.0)
    warmup = 0.0 if args.smoke else (0.3 if args.quick else 1.0)
    mode = "smoke" if args.smoke else ("quick" if args.quick else "full")

    result = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "mode": mode,
        "scale": scale,
        "warmup_s": warmup,
        "reps": reps,
        "machine": machine(),
        "workloads": [],
        "contenders": [{"key": k, "label": label, "reason": r} for k, label, _, _, r, _ in CONTENDERS],
    }
    result["stream"] = stream_bandwidth(1 << 16 if args.smoke else (1 << 24 if args.quick else 1 << 26))
    print(
        f"memory bandwidth: copy {result['stream']['copy_GBps']:.1f} GB/s, "
        f"triad {result['stream']['triad_GBps']:.1f} GB/s",
        flush=True,
    )

    names = set(args.only.split(",")) if args.only else None
    for w in workloads.WORKLOADS:
        if names and w.name not in names:
            continue
        row = {
            "name": w.name,
            "description": w.description,
            "results": {},
            "min_bytes": w.min_bytes(scale) if w.min_bytes else None,
            "ops": w.ops(scale) if w.ops else None,
        }
        for key, _label, device, compile_fn, reason, mode in CONTENDERS:
            if mode is not None:
                kiln.set_mode(mode)
            if reason is not None:
                row["results"][key] = {"skipped": reason}
                continue
            if args.smoke and compile_fn is _compiled:
                row["results"][key] = {"skipped": "not run in the smoke test (compilation takes minutes)"}
                continue
            try:
                r = measure(w, device, compile_fn, scale, reps, budget, warmup)
                row["results"][key] = r
                print(
                    f"{w.name:20s} {key:14s} median {r['median_s'] * 1e3:9.3f} ms  "
                    f"(first {r['first_s'] * 1e3:9.1f} ms, {r['reps']} reps)",
                    flush=True,
                )
            except Exception as e:  # a contender that cannot run this workload gets a row saying why
                traceback.print_exc()
                row["results"][key] = {"skipped": f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"}
        result["workloads"].append(row)

    kiln.set_mode("lazy")
    # Compile time is the compiling thread's CPU time; wall time also counts
    # the kernels launched before the flush that share the 2 cores meanwhile.
    compiles = kiln._C.compile_times_ms()
    result["compile"] = {"regions": len(compiles)}
    for clock, pick in (("", lambda t: t[0]), ("wall_", lambda t: t[1])):
        times = sorted(pick(t) for t in compiles)
        result["compile"].update(
            {
                f"{clock}median_ms": statistics.median(times) if times else None,
                f"{clock}p99_ms": times[min(len(times) - 1, int(0.99 * len(times)))] if times else None,
                f"{clock}max_ms": times[-1] if times else None,
            }
        )
    if not args.smoke:
        result["recording"] = recording_overhead()
        result["peak_memory"] = pointwise_chain_peak_memory(scale)
        print(
            f"recording: {result['recording']}; peak memory: {result['peak_memory']}; compile: {result['compile']}",
            flush=True,
        )

    # Last: the micro-benchmark process churns through memory, and CPU eager's
    # fresh large temporaries page-fault several times slower right after it
    # (measured: pointwise chain 8 ms before, 38 ms after).
    result["micro"] = {} if args.smoke else micro_benchmarks(args.micro, args.quick)
    if "error" in result["micro"]:
        raise SystemExit(f"runtime micro-benchmarks failed: {result['micro']['error']}")

    out = args.out or os.path.join(
        os.path.dirname(os.path.abspath(__file__)),
        "results",
        f"{datetime.date.today().isoformat()}-{socket.gethostname()}.json",
    )
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as fh:
        json.dump(result, fh, indent=1)
    print(f"wrote {out}")
    if args.report:
        import report

        report.main([out])
    return out


if __name__ == "__main__":
    main()

"""The machine measurements of `make bench`, each run in a fresh process by
bench/run_bench.py (as the workloads are):

    python bench/probes.py stream --elements N --out FILE     # memory bandwidth, CPU, all threads
    python bench/probes.py recording --out FILE               # kiln lazy's per-op recording cost
"""

import argparse
import json
import os
import sys
import time

import torch


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
    timed loop), measured alternately in this one process, best of 7: the two
    loops are microseconds apart, which is what makes the difference meaningful."""
    import kiln

    kiln.set_mode("lazy")
    device = kiln.DEVICE_NAME
    best = {"cpu": float("inf"), "kiln": float("inf")}
    for _ in range(7):
        for key, dev in (("cpu", "cpu"), ("kiln", device)):
            x = torch.ones(1, device=dev)
            if dev != "cpu":
                getattr(torch, dev).synchronize()
            t0 = time.perf_counter()
            y = x
            for _ in range(ops // 2):
                y = y * 1.0001
                y = y + 0.0001
            best[key] = min(best[key], (time.perf_counter() - t0) / ops)
            if dev != "cpu":
                getattr(torch, dev).synchronize()
            del y
    return {
        "cpu_eager_us_per_op": best["cpu"] * 1e6,
        "kiln_lazy_record_us_per_op": best["kiln"] * 1e6,
        "overhead_us_per_op": (best["kiln"] - best["cpu"]) * 1e6,
    }


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("probe", choices=["stream", "recording"])
    parser.add_argument("--elements", type=int, default=1 << 26)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(os.cpu_count() or 1)
    result = stream_bandwidth(args.elements) if args.probe == "stream" else recording_overhead()
    with open(args.out, "w") as fh:
        json.dump(result, fh)
    sys.stdout.flush()
    os._exit(0)  # as bench/measure_one.py: no interpreter teardown (1-2 s with kiln)


if __name__ == "__main__":
    main()

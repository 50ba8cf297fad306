"""`make bench-knobs`: what each adaptive-eager knob setting does to kiln lazy,
against its defaults, on the workloads it is meant for (docs/tuning.md).

    python bench/knob_sweep.py [--rounds N] [--scale S] [--out FILE]

Each (workload, setting) pair runs in a fresh process (bench/measure_one.py,
an empty persistent store of its own, as make bench's kiln_lazy), and the
pairs are interleaved over the rounds, so every setting sees the machine's
load of every phase. Prints one markdown table: the first step (an empty
store: every compile is in it), the steady step, and both against the
defaults' of the same round (median and range of the per-round ratios).
"""

import argparse
import datetime
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
from contenders import BY_KEY  # noqa: E402
from run_bench import MODES, child_env, run_child  # noqa: E402

DEFAULTS = "defaults"
# (label, the environment it sets); the defaults row first.
SETTINGS = [
    (DEFAULTS, {}),
    ("KILN_ASYNC_COMPILE=0", {"KILN_ASYNC_COMPILE": "0"}),
    ("KILN_COMPILE_THRESHOLD=1", {"KILN_COMPILE_THRESHOLD": "1"}),
    ("KILN_COMPILE_THRESHOLD=3", {"KILN_COMPILE_THRESHOLD": "3"}),
    ("KILN_SHAPE_SPECIALIZE=1", {"KILN_SHAPE_SPECIALIZE": "1"}),
    ("KILN_OPT_LEVEL=3", {"KILN_OPT_LEVEL": "3"}),
    ("KILN_QUEUE_LOW_WATERMARK=15", {"KILN_QUEUE_LOW_WATERMARK": "15"}),
]
FULL = MODES["full"]  # warm-up and timed steps as make bench's full mode
WORKLOADS = ("small_op_storm", "pointwise_chain", "adamw_foreach_off", "gpt_train", "varlen_infer")


def measure(workload, env_extra, scale):
    cache_dir = tempfile.mkdtemp(prefix="kiln-knobs-cache-")
    try:
        env = child_env(BY_KEY["kiln_lazy"], cache_dir)
        env.update(env_extra)
        argv = [
            os.path.join(BENCH, "measure_one.py"),
            workload,
            "kiln_lazy",
            f"--scale={scale}",
            f"--warmup-s={FULL['warmup_s']}",
            f"--reps={FULL['reps']}",
            f"--budget-s={FULL['budget_s']}",
            f"--threads={os.cpu_count() or 1}",
        ]
        result, _ = run_child(argv, env, 1800)
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    return result


def summary(values):
    return f"{statistics.median(values):.3g} ({min(values):.3g}-{max(values):.3g})"


def table(runs, rounds):
    lines = [
        "| workload | setting | first step ms | steady step ms | first vs defaults | steady vs defaults |",
        "|---|---|---|---|---|---|",
    ]
    for workload in runs:
        base = runs[workload][DEFAULTS]
        for label, _ in SETTINGS:
            got = runs[workload][label]
            ok = [r for r in range(rounds) if "skipped" not in got[r] and "skipped" not in base[r]]
            if not ok:
                lines.append(f"| {workload} | {label} | skipped | | | |")
                continue
            first = [got[r]["first_s"] * 1000 for r in ok]
            steady = [got[r]["median_s"] * 1000 for r in ok]
            # Ratios > 1: this setting is slower than the defaults in that round.
            first_ratio = [got[r]["first_s"] / base[r]["first_s"] for r in ok]
            steady_ratio = [got[r]["median_s"] / base[r]["median_s"] for r in ok]
            lines.append(
                f"| {workload} | {label} | {summary(first)} | {summary(steady)} | "
                f"{summary(first_ratio)}x | {summary(steady_ratio)}x |"
            )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--only", default=None, help="comma-separated workloads")
    parser.add_argument("--settings", default=None, help="comma-separated setting labels (the defaults always run)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    workloads = args.only.split(",") if args.only else WORKLOADS
    if args.settings:
        wanted = {DEFAULTS, *args.settings.split(",")}
        unknown = wanted - {label for label, _ in SETTINGS}
        if unknown:
            parser.error(f"unknown settings {sorted(unknown)}; known: {[label for label, _ in SETTINGS]}")
        SETTINGS[:] = [(label, env) for label, env in SETTINGS if label in wanted]
    runs = {w: {label: [] for label, _ in SETTINGS} for w in workloads}
    for r in range(args.rounds):
        for w in workloads:
            for label, env in SETTINGS:
                result = measure(w, env, args.scale)
                runs[w][label].append(result)
                first = result.get("first_s", float("nan")) * 1000
                steady = result.get("median_s", float("nan")) * 1000
                print(f"round {r + 1} {w:18} {label:26} first {first:8.1f} ms  steady {steady:8.2f} ms", flush=True)
    print()
    print(table(runs, args.rounds))
    out = args.out or os.path.join(
        BENCH, "results", f"knobs-{datetime.date.today().isoformat()}-{socket.gethostname()}.json"
    )
    with open(out, "w") as fh:
        json.dump({"scale": args.scale, "rounds": args.rounds, "runs": runs}, fh, indent=1)
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()

"""The statistics of `make bench`, from the raw per-round numbers of a
bench/results/*.json (no torch, no processes: tests/python/test_bench_stats.py).

A contender's time is the median over rounds of its per-process medians, with
the min-max over rounds as its spread. A ratio of two contenders is taken
round by round (the same round and workload, so both saw the same machine
load), and reported as the median of the per-round ratios with their min-max.
"""

import math
import statistics


def spread(values):
    """{median, min, max, n} of the values that are not None, or None if there are none."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def by_round(runs, field="median_s"):
    """{round: value} of the per-process results that have `field`."""
    return {r["round"]: r[field] for r in runs if field in r and r.get(field) is not None}


def per_round_ratios(numerator_runs, denominator_runs, field="median_s"):
    """numerator / denominator of each round both have, in round order."""
    num, den = by_round(numerator_runs, field), by_round(denominator_runs, field)
    return [num[r] / den[r] for r in sorted(num) if r in den and den[r]]


def ratio(numerator_runs, denominator_runs, field="median_s"):
    """The median of the per-round ratios, with their min-max; None without a common round."""
    return spread(per_round_ratios(numerator_runs, denominator_runs, field))


def runs_of(workload, key):
    """The per-process results of one contender on one workload (each with its "round")."""
    return workload["results"].get(key, {}).get("runs", [])


# (name in the summary, numerator contender, denominator contender, the per-process field compared):
# >1 means the denominator is faster.
RATIOS = [
    ("kiln_lazy_vs_cpu_eager", "cpu_eager", "kiln_lazy", "median_s"),
    ("kiln_eager_vs_cpu_eager", "cpu_eager", "kiln_eager", "median_s"),
    ("kiln_lazy_vs_cpu_compile", "cpu_compile", "kiln_lazy", "median_s"),
    ("kiln_lazy_vs_kiln_eager", "kiln_eager", "kiln_lazy", "median_s"),
    # First steps, each in a fresh process: eager CPU's over kiln lazy's on a warm store, and on an empty one.
    ("warm_first_vs_cpu_eager_first", "cpu_eager", "kiln_lazy_warm", "first_s"),
    ("cold_first_vs_cpu_eager_first", "cpu_eager", "kiln_lazy", "first_s"),
    # The adaptive policy (kiln lazy's defaults) against the fixed one, first step and steady step.
    ("adaptive_vs_fixed_first", "kiln_lazy_fixed", "kiln_lazy", "first_s"),
    ("adaptive_vs_fixed_steady", "kiln_lazy_fixed", "kiln_lazy", "median_s"),
    # Two processes of one contender (the noise floor): the first over the second.
    ("fixed_again_first", "kiln_lazy_fixed", "kiln_lazy_fixed_again", "first_s"),
    ("fixed_again_steady", "kiln_lazy_fixed", "kiln_lazy_fixed_again", "median_s"),
    ("cpu_eager_again_first", "cpu_eager", "cpu_eager_again", "first_s"),
    ("cpu_eager_again_steady", "cpu_eager", "cpu_eager_again", "median_s"),
]


def repeated_contenders(data):
    """{key of a second-process contender: key of the contender it repeats} (bench/contenders.py)."""
    return {c["key"]: c["repeats"] for c in data.get("contenders", []) if c.get("repeats")}


def timed_contenders(data):
    """The contenders of the timing tables and plots: those that ran, less second processes."""
    return [c for c in data["contenders"] if not c["reason"] and not c.get("repeats")]


# The chance that a "not slower" target between contenders doing the same
# work reads "slower" when they do not differ, over all the ratios it reads.
FALSE_ALARM_RATE = 0.05


def noise_floor(data, field, workloads=None, originals=None, comparisons=1):
    """How far below 1.0x a median over rounds of per-round ratios lies by chance alone on this run,
    in `field` ("first_s" or "median_s"), measured on two processes of one contender (each repeated
    contender over its original, on `workloads` and for the contenders `originals`; None: all),
    whose true ratio is 1.0. Their per-round log ratios give the spread of one round (root mean
    square around 0); the median of n rounds varies about sqrt(pi / 2n) times as much; the floor is
    the quantile of that which `comparisons` ratios pass below with a chance of FALSE_ALARM_RATE
    in all. (The largest of the pairs' medians, the floor before, is passed by one of as many
    like draws more often than not.) {floor, sigma, n, worst} or None."""
    logs, rounds, worst = [], [], None
    for w in data["workloads"]:
        if workloads is not None and w["name"] not in workloads:
            continue
        for again, original in repeated_contenders(data).items():
            if originals is not None and original not in originals:
                continue
            per_round = per_round_ratios(runs_of(w, original), runs_of(w, again), field)
            if not per_round:
                continue
            logs += [math.log(r) for r in per_round]
            rounds.append(len(per_round))
            median = statistics.median(per_round)
            if worst is None or abs(1 - median) > worst[0]:
                worst = (abs(1 - median), f"{w['name']} {original} {median:.2f}x")
    if not logs:
        return None
    sigma = math.sqrt(sum(x * x for x in logs) / len(logs))
    n = statistics.median(rounds)
    z = statistics.NormalDist().inv_cdf(1 - FALSE_ALARM_RATE / comparisons)
    floor = 1 - math.exp(-z * sigma * math.sqrt(math.pi / (2 * n)))
    return {"floor": floor, "sigma": sigma, "n": len(rounds), "worst": worst[1]}


def breakdown_summary(runs):
    """Median over rounds of each per-step breakdown entry (seconds); ops missing from a round count 0."""
    rows = [r["breakdown_per_step"] for r in runs if r.get("breakdown_per_step")]
    if not rows:
        return None
    keys = sorted({k for row in rows for k in row if k != "library_kernels_by_op"})
    out = {k: statistics.median(row.get(k, 0.0) for row in rows) for k in keys}
    ops = sorted({op for row in rows for op in row.get("library_kernels_by_op", {})})
    out["library_kernels_by_op"] = {
        op: statistics.median(row.get("library_kernels_by_op", {}).get(op, 0.0) for row in rows) for op in ops
    }
    return out


def contender_summary(runs):
    """Time, first step, peak memory and breakdown of one contender over its rounds."""
    times = spread(r.get("median_s") for r in runs)
    if times is None:
        return None
    return {
        "time_s": times,
        "first_s": spread(r.get("first_s") for r in runs),
        "peak_bytes": spread(r.get("peak_bytes") for r in runs),
        "breakdown_per_step": breakdown_summary(runs),
    }


def library_kernel_ceiling(workload_summary):
    """Eager CPU's step time over kiln lazy's library-kernel time per step: the most kiln lazy
    could gain over eager CPU if all else (fused kernels, host work, idle) took no time, since
    library kernels are CPU's own implementations. None without both numbers."""
    contenders = workload_summary["contenders"]
    eager, lazy = contenders.get("cpu_eager"), contenders.get("kiln_lazy")
    breakdown = lazy and lazy.get("breakdown_per_step")
    if not eager or not breakdown or not breakdown.get("library_kernel_s"):
        return None
    return eager["time_s"]["median"] / breakdown["library_kernel_s"]


def share_per_round(runs, bytes_moved, reference_by_round):
    """Per-round achieved GB/s (bytes / the round's median time) over the same round's reference GB/s.

    `reference_by_round` is {round: GB/s}, or a single number for a reference measured once."""
    out = []
    for r, seconds in sorted(by_round(runs).items()):
        ref = reference_by_round if isinstance(reference_by_round, (int, float)) else reference_by_round.get(r)
        if ref and seconds:
            out.append(bytes_moved / seconds / 1e9 / ref)
    return spread(out)


def summarize(data):
    """{workload: {"contenders": {key: contender_summary}, "ratios": {name: ratio}}} of a results file."""
    out = {}
    for w in data["workloads"]:
        contenders = {}
        for key, res in w["results"].items():
            if "runs" in res:
                contenders[key] = contender_summary(res["runs"])
        ratios = {name: ratio(runs_of(w, num), runs_of(w, den), field) for name, num, den, field in RATIOS}
        out[w["name"]] = {"contenders": contenders, "ratios": ratios}
    return out


def percentile(values, q):
    """The q-quantile (0..1) of the values by the nearest rank below, or None if there are none."""
    values = sorted(values)
    if not values:
        return None
    return values[min(len(values) - 1, int(q * len(values)))]

"""Turns a bench/results/*.json into docs/benchmarks.md and docs/img/*.png.
Every number on the page comes from the JSON; bench/notes.md (hand-written,
optional) is included verbatim under "What bounds the targets not met".

python bench/report.py bench/results/<file>.json [--docs docs] [--notes bench/notes.md]
"""

import argparse
import json
import os

import plots
import stats
import targets

BENCH = os.path.dirname(os.path.abspath(__file__))
NOTES = os.path.join(BENCH, "notes.md")
NOT_MEASURED = "not measured"


def ms_range(s):
    """'median (min-max)' of a spread of seconds, in ms."""
    if not s:
        return "—"
    return f"{s['median'] * 1e3:.3f} ({s['min'] * 1e3:.3f}-{s['max'] * 1e3:.3f})"


def s_range(s):
    if not s:
        return "—"
    return f"{s['median']:.2f} ({s['min']:.2f}-{s['max']:.2f})"


def ratio_range(r):
    if not r:
        return "—"
    return f"{r['median']:.2f}x ({r['min']:.2f}-{r['max']:.2f})"


def mib(b):
    return f"{b / 2**20:.1f}"


def every_run(data):
    """Every timed process's result in the run, of every workload and contender."""
    return [r for w in data["workloads"] for c in w["results"].values() for r in c.get("runs", [])]


def lockstep_bullet(data):
    """How the timed steps were taken, where the run took them in lockstep (bench/children.py)."""
    turns = [len(r["turns"]) for r in every_run(data) if "turns" in r]
    if not turns:
        return []
    return [
        "- **Timed steps in lockstep**: a workload's timed processes of one round are alive together; each runs "
        "its first step and warm-up while the others wait, then they take turns at their timed steps (turns of "
        f"{1e3 * data['settings']['turn_s']:.0f} ms, a step at least, the order reversed every other round of turns; "
        f"{min(turns)}-{max(turns)} turns a process), so that every contender's steps span the same phases of "
        "the machine's load. Run one after another, processes of one contender differed by 10-30% in their "
        "steady step on this VM; taking turns, by 0-6% (bench/notes.md). kiln's metrics of a process cover its "
        "timed steps, not its waits.",
    ]


def first_samples_bullet(data):
    """The Method bullet on first steps taken over several processes, or nothing where none were."""
    n = data.get("settings", {}).get("first_samples", 0)
    sampled = [c for c in data.get("contenders", []) if c.get("first_sampled_on")]
    if not n or not sampled:
        return []
    where = ", ".join(
        f"{c['key']} ({'every workload' if c['first_sampled_on'] == 'all' else ', '.join(c['first_sampled_on'])})"
        for c in sampled
    )
    return [
        f'- **First steps of several processes**: where a "not slower" target compares first steps, a '
        f"contender's first step in a round is the median over {n + 1} fresh processes: its timed one and {n} "
        "that stop after their first step, run after the workload's timed processes (sample 1 of every such "
        "contender, then sample 2, ...). One process's first step is mostly compiles and fresh pages, whose cost "
        "varies from process to process more than those targets allow. Sampled: "
        f"{where}. The JSON keeps each process's first step (`first_samples`) and the timed one's (`first_s_timed`).",
    ]


def backing_bullet(data):
    """The Method bullet on the memory a child holds until its first step, or nothing where none was held."""
    mb = data.get("settings", {}).get("backing_mb", 0)
    held = [r["memory_backing"]["seconds"] for r in every_run(data) if r.get("memory_backing", {}).get("mb")]
    if not mb or not held:
        return []
    return [
        f"- **Backed memory for the first step**: each process writes {mb} MiB of memory at its start, before "
        "it imports torch, and frees it just before its first step, so that the first step's fresh pages are "
        "pages the guest already backs. This VM hands memory that stays free for a couple of seconds back to its "
        "host (free page reporting), and a page the host took back faults in the host again at its next touch: "
        "whether a first step paid that depended on what ran before it, not on the contender (large-tensor "
        "first steps took 60-120 ms in some processes and 490-650 ms in others, under either kiln policy; "
        f"`bench/memory_backing.py`). Writing it took {min(held):.2f}-{max(held):.2f} s a process, outside every "
        "timed span (`memory_backing` in the JSON). Runs before 2026-12-07 afternoon did not do this.",
    ]


def method(data):
    st = data.get("settings", {})
    m = data["machine"]
    rounds = st.get("rounds", "?")
    start = data.get("child_startup_s", {})
    load = data.get("load_1min")
    startup = ", ".join(
        f"{kind} {s['median']:.1f} s (median; {s['min']:.1f}-{s['max']:.1f})"
        for kind, s in (("plain PyTorch", start.get("cpu")), ("with kiln", start.get("kiln")))
        if s
    )
    lines = [
        "## Method",
        "",
        f"- **Machine**: {m['cpu']}, {m['cores']} cores, {m['memory_GiB']} GiB; Python {m['python']}, torch "
        f"{m.get('torch')}; {m.get('threads')} intra-op threads for every contender (`torch.set_num_threads`; "
        "kiln's library kernels run on torch's thread pool). The machine is shared: other work on it shows up as "
        "spread, which is why contenders are interleaved and ratios taken round by round.",
        "- **A fresh process per (workload, contender) pair** (`bench/measure_one.py`, started by "
        "`bench/run_bench.py`, which measures nothing itself): no process measures a second contender or a "
        "second workload, so nothing one did (torch.compile's compiles, allocator state, warm caches) helps or "
        "hurts the next. PyTorch contenders run without kiln loaded (`TORCH_DEVICE_BACKEND_AUTOLOAD=0`); kiln "
        "contenders start in their mode (`KILN_MODE`) and call `kiln.set_mode` before building."
        + (f" Start-up before a child builds anything (import torch, and kiln): {startup}." if startup else ""),
        f"- **In each process**: build the workload, run the *first step* (cold: it includes every compile, "
        f"torch.compile's and kiln's, and lazy imports), warm up for at least 3 steps and {st.get('warmup_s')} s, "
        f"then time up to {st.get('reps')} steps (at least {min(3, st.get('reps') or 3)}, stopping after "
        f"{st.get('budget_s')} s), synchronizing "
        "the device after each step. A process reports the median, min and max of its timed steps.",
        *lockstep_bullet(data),
        f"- **Interleaved rounds**: {targets.rounds(rounds)}; round 1 runs every pair once (workload by workload, the "
        "contenders in the order of the tables), then round 2 the same, and so on"
        + (
            ", each round starting one contender later in that order (as does each first-step sample), so that "
            "no contender always goes first"
            if st.get("rotated_order")
            else ""
        )
        + ". A STREAM probe (its own process) starts each round.",
        "- **Statistics**: a contender's time is the median over rounds of its per-process medians, with the "
        "min-max over rounds as its spread. A ratio is computed round by round (eager CPU time / kiln time of the "
        "same round and workload; likewise torch.compile / kiln) and reported as the median of the per-round "
        "ratios with their min-max. Bandwidth shares are per round too (against the same round's triad).",
        *first_samples_bullet(data),
        *backing_bullet(data),
        "- **Noise floor**: a second process of the fixed policy (every workload) and of eager CPU "
        "(`varlen_infer`) runs in each round beside the first. Their per-round ratios, whose true value is 1.0x, "
        'measure what two runs of one thing differ by on this machine; a "not slower" target between '
        "contenders that do the same work reads a ratio below 1.0x by less than a median over as many rounds "
        f"would lie below 1.0x by chance (with {100 * stats.FALSE_ALARM_RATE:.0f}% false alarms over the ratios "
        f"the target reads; counted up to {100 * targets.MAX_NOISE_FLOOR:.0f}%) as a tie "
        '(section "Adaptive policy and noise floor").',
        "- **torch.compile compiles cold in each of its processes**: each gets a fresh, empty "
        "`TORCHINDUCTOR_CACHE_DIR` (removed after), so its first step is a cold compile; its steady state follows.",
        "- After the rounds: kiln's recording overhead (one process), then the C++ micro-benchmarks "
        "(`build/kiln_runtime_bench`), last because they churn through memory.",
        f"- This run ({data['mode']}) took {data.get('wall_s', 0) / 60:.1f} minutes."
        + (
            f" The 1-minute load average when its children started: median {load['median']:.1f} "
            f"({load['min']:.1f}-{load['max']:.1f}) on {m['cores']} cores; a load above the core count means "
            "other work shared the CPUs."
            if load
            else ""
        ),
        "",
    ]
    left = data.get("left_out", [])
    if left:
        lines += [f"What this {data['mode']} run left out (a full `make bench` measures it):", ""]
        lines += [f"- {x}" for x in left] + [""]
    return lines


def targets_section(data, notes_path):
    rows = targets.targets(data)
    verdict = {True: "met", False: "**not met**", None: NOT_MEASURED}
    lines = [
        "## Targets",
        "",
        "| target | wanted | measured: median of per-round values (min-max) | verdict |",
        "|---|---|---|---|",
    ]
    lines += [f"| {r['target']} | {r['wanted']} | {r['measured']} | {verdict[r['met']]} |" for r in rows]
    lines.append("")
    load, cores = data.get("load_1min"), data.get("machine", {}).get("cores")
    if load and cores and load["median"] > cores + 0.25:  # the bench alone keeps about `cores` busy
        # Eager CPU's OpenMP threads lose far more to a shared core than kiln does (bench/notes.md).
        lines += [
            f"**This run is not a verdict**: other work shared the {cores} cores (1-minute load average "
            f"{load['median']:.1f} when the children started, see Method), which slows eager CPU far more "
            "than kiln, so every ratio against eager CPU above is too high. Rerun on a quiet machine.",
            "",
        ]
    if notes_path and os.path.exists(notes_path):
        with open(notes_path) as fh:
            notes = fh.read().strip()
        lines += ["### What bounds the targets not met", "", notes, ""]
    return lines


def contender_table(data, summary, contenders, field, fmt):
    """A markdown table: one row per workload, one column per contender, `fmt` of its summary's `field`."""
    rows = [
        "| workload | " + " | ".join(c["label"] for c in contenders) + " |",
        "|---|" + "---|" * len(contenders),
    ]
    for w in data["workloads"]:
        cs = summary[w["name"]]["contenders"]
        rows.append(
            f"| {w['name']} | " + " | ".join(fmt(cs.get(c["key"]) and cs[c["key"]][field]) for c in contenders) + " |"
        )
    return rows


def e2e_section(data, summary):
    contenders = stats.timed_contenders(data)
    lines = [
        "## End-to-end workloads",
        "",
        "Steady-state milliseconds per step: median over rounds of the per-process medians (min-max over rounds):",
        "",
        *contender_table(data, summary, contenders, "time_s", ms_range),
    ]
    names = [
        ("kiln_eager_vs_cpu_eager", "kiln eager vs eager CPU"),
        ("kiln_lazy_vs_cpu_eager", "kiln lazy vs eager CPU"),
        ("kiln_lazy_vs_cpu_compile", "kiln lazy vs torch.compile"),
        ("kiln_lazy_vs_kiln_eager", "kiln lazy vs kiln eager"),
    ]
    lines += [
        "",
        "Speed-ups (>1x: kiln faster), median of the per-round ratios (min-max):",
        "",
        "| workload | " + " | ".join(label for _, label in names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for w in data["workloads"]:
        r = summary[w["name"]]["ratios"]
        lines.append(f"| {w['name']} | " + " | ".join(ratio_range(r.get(k)) for k, _ in names) + " |")
    lines += [
        "",
        "First step, seconds (cold process: compiles included), median over rounds (min-max):",
        "",
        *contender_table(data, summary, contenders, "first_s", s_range),
    ]
    lines += ["", "Workloads:", ""] + [f"- `{w['name']}`: {w['description']}" for w in data["workloads"]] + [""]
    return lines + skipped_section(data)


def warm_start_section(data, summary):
    """Cold and warm first steps beside eager CPU's, for the workloads measured warm."""
    rows = []
    for w in data["workloads"]:
        cs, ratios = summary[w["name"]]["contenders"], summary[w["name"]]["ratios"]
        if not cs.get("kiln_lazy_warm"):
            continue
        cells = [cs.get(k) and cs[k]["first_s"] for k in ("cpu_eager", "kiln_lazy", "kiln_lazy_warm")]
        steady = cs.get("kiln_lazy") and cs["kiln_lazy"]["time_s"]
        rows.append(
            f"| {w['name']} | "
            + " | ".join(ms_range(c) for c in cells)
            + f" | {ms_range(steady)} | {ratio_range(ratios.get('warm_first_vs_cpu_eager_first'))}"
            + f" | {ratio_range(ratios.get('cold_first_vs_cpu_eager_first'))} |"
        )
    if not rows:
        return []
    return [
        "## Warm start",
        "",
        "First step in a fresh process, ms, median over rounds (min-max). kiln lazy starts on an empty",
        "persistent store (cold); the warm contender starts on the store a priming kiln lazy process of",
        "the same workload left (its kernels, its first-sight verdicts, and the kernels and device memory",
        "its run needed, which a warm start loads and reserves on an idle-priority thread while the script",
        "builds its model: docs/cache.md, \"Warm start\"). Ratios: eager CPU's first step over kiln's, per",
        "round (>1x: kiln's first step is faster).",
        "",
        "| workload | eager CPU first | kiln cold first | kiln warm first | kiln steady step | warm vs CPU first |"
        " cold vs CPU first |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def skipped_section(data):
    """Contenders without numbers on a workload, and why (a contender that cannot run, or failed in every round)."""
    why = {}
    for w in data["workloads"]:
        for key, res in w["results"].items():
            reasons = [res["skipped"]] if "skipped" in res else []
            if "runs" in res and not any("median_s" in r for r in res["runs"]):
                reasons = sorted({r.get("skipped", "no result") for r in res["runs"]})
            for reason in reasons:
                why.setdefault((key, reason), []).append(w["name"])
    failed_rounds = [
        f"{w['name']} / {key}, round {r['round']}: {r['skipped']}"
        for w in data["workloads"]
        for key, res in w["results"].items()
        if any("median_s" in x for x in res.get("runs", []))
        for r in res.get("runs", [])
        if "skipped" in r
    ]
    lines = []
    if why:
        labels = {c["key"]: c["label"] for c in data["contenders"]}
        lines += ["Contenders without numbers, and why:", "", "| contender | workloads | why |", "|---|---|---|"]
        for (key, reason), names in why.items():
            which = "all" if len(names) == len(data["workloads"]) else ", ".join(names)
            lines.append(f"| {labels.get(key, key)} | {which} | {reason} |")
        lines.append("")
    if failed_rounds:
        lines += ["Rounds that failed (the pair's numbers come from its other rounds):", ""]
        lines += [f"- {x}" for x in failed_rounds] + [""]
    return lines


def policy_section(data, summary):
    """The adaptive policy against the fixed one, beside two processes of one contender (the noise floor)."""
    names = [
        ("adaptive_vs_fixed_first", "adaptive vs fixed, first step"),
        ("adaptive_vs_fixed_steady", "adaptive vs fixed, steady"),
        ("fixed_again_first", "fixed vs fixed, first step"),
        ("fixed_again_steady", "fixed vs fixed, steady"),
        ("cpu_eager_again_first", "eager CPU vs eager CPU, first step"),
    ]
    rows = []
    for w in data["workloads"]:
        r = summary[w["name"]]["ratios"]
        if any(r.get(k) for k, _ in names):
            rows.append(f"| {w['name']} | " + " | ".join(ratio_range(r.get(k)) for k, _ in names) + " |")
    if not rows:
        return []
    return [
        "## Adaptive policy and noise floor",
        "",
        "kiln lazy's defaults (the adaptive policy) against the fixed policy (`KILN_COMPILE_THRESHOLD=1`,",
        "`KILN_ASYNC_COMPILE=0`: every trace compiled at its first flush, which waits), and two processes of",
        "one contender against each other in the same round: what two runs of the same thing differ by on",
        'this machine. The "not slower" targets read a ratio below 1.0x by less than the noise floor these',
        "measure (the Targets table gives it) as a tie, counted up to "
        f"{100 * targets.MAX_NOISE_FLOOR:.0f}%. Median of the per-round ratios (min-max); >1x: the second is faster.",
        "",
        "| workload | " + " | ".join(label for _, label in names) + " |",
        "|---|" + "---|" * len(names),
        *rows,
        "",
    ]


def memory_section(data, summary):
    lines = [
        "## Peak device memory",
        "",
        "Peak bytes allocated on the device during the timed steps (`torch.neuron.reset_peak_memory_stats()` after "
        "the warm-up, `torch.neuron.max_memory_allocated()` after the timed steps), median over rounds, MiB:",
        "",
        "| workload | kiln eager | kiln lazy | lazy / eager |",
        "|---|---|---|---|",
    ]
    for w in data["workloads"]:
        cs = summary[w["name"]]["contenders"]
        eager = cs.get("kiln_eager") and cs["kiln_eager"]["peak_bytes"]
        lazy = cs.get("kiln_lazy") and cs["kiln_lazy"]["peak_bytes"]
        share = f"{lazy['median'] / eager['median']:.2f}" if eager and lazy and eager["median"] else "—"
        lines.append(
            f"| {w['name']} | {mib(eager['median']) if eager else '—'} | {mib(lazy['median']) if lazy else '—'} "
            f"| {share} |"
        )
    return lines + [""]


BREAKDOWN = [
    ("wall_s", "wall"),
    ("host_python_s", "host Python"),
    ("host_record_s", "host recording"),
    ("flush_s", "flush"),
    ("compile_s", "compile"),
    ("host_wait_s", "host wait"),
    ("fused_kernel_s", "fused kernels"),
    ("library_kernel_s", "library kernels"),
    ("device_idle_s", "device idle"),
]


def breakdown_section(data, summary):
    """Where kiln lazy's time goes (kiln.metrics.breakdown() over the timed steps); only when measured."""
    rows = []
    for w in data["workloads"]:
        lazy = summary[w["name"]]["contenders"].get("kiln_lazy")
        b = lazy and lazy["breakdown_per_step"]
        if not b:
            continue
        top = sorted(b.get("library_kernels_by_op", {}).items(), key=lambda kv: -kv[1])[:5]
        ops = ", ".join(f"{op} {s * 1e3:.2f}" for op, s in top) or "—"
        cells = [f"{b[k] * 1e3:.2f}" if k in b else "—" for k, _ in BREAKDOWN]
        ceiling = stats.library_kernel_ceiling(summary[w["name"]])
        cells.append(f"{ceiling:.2f}×" if ceiling else "—")
        rows.append(f"| {w['name']} | " + " | ".join(cells) + f" | {ops} |")
    if not rows:
        return []
    return [
        "## Where the time goes (kiln lazy)",
        "",
        "Milliseconds per timed step from `kiln.metrics.breakdown()` (reset after the warm-up), median over rounds; "
        "the last column is the library kernels' five largest ops. Library kernels are CPU's own "
        "implementations (matmuls, convolutions, attention), so they take about what they take in eager "
        "CPU: *ceiling* is eager CPU's step time over kiln lazy's library-kernel time, the most kiln "
        "lazy could gain over eager CPU if everything else took no time.",
        "",
        "| workload | " + " | ".join(label for _, label in BREAKDOWN) + " | ceiling | top library kernels (ms) |",
        "|---|" + "---|" * (len(BREAKDOWN) + 2),
        *rows,
        "",
    ]


def machine_section(data):
    s = data["stream"]
    triads = stats.spread(r.get("triad_GBps") for r in s.get("rounds", []))
    copies = stats.spread(r.get("copy_GBps") for r in s.get("rounds", []))
    lines = ["## Machine limits", ""]
    if triads and copies:
        lines.append(
            f"STREAM-like, on the CPU with all threads, one process per round: copy **{copies['median']:.1f} GB/s** "
            f"({copies['min']:.1f}-{copies['max']:.1f}), triad **{triads['median']:.1f} GB/s** "
            f"({triads['min']:.1f}-{triads['max']:.1f}), {s['elements']:,} float32 per array."
        )
    else:
        lines.append(f"STREAM: {NOT_MEASURED}.")
    lines += ["", chain_ceiling(data, triads and triads["median"]), ""]
    return lines


def chain_ceiling(data, triad):
    """The pointwise chain's ceiling: its kernel's speed with no memory traffic (micro-benchmarks of this run)."""
    l1 = targets.micro(data, targets.CEILING_BENCHMARK)
    big = targets.micro(data, "BM_StreamingStores/7/2")
    ceiling = targets.chain_ceiling_GBps(data)
    if ceiling is None or not big or "streaming_ms" not in big or not triad:
        return "The chain's compute ceiling was not measured in this run (micro-benchmarks missing)."
    threads = data["machine"]["threads"]
    kernel = 8 * (4 << 20) / (big["streaming_ms"] * 1e-3) / 1e9
    peak = targets.micro(data, "BM_VectorFmaPeak")
    peak_text = (
        f" The CPU's peak is {peak['items_per_second'] / 1e9:.2f} G 512-bit FMAs per second per thread "
        "(`BM_VectorFmaPeak`)."
        if peak and "items_per_second" in peak
        else ""
    )
    return (
        f"The pointwise chain's compute ceiling: its compiled kernel over 4,096 floats that stay in L1 (no memory "
        f"traffic) moves {l1['bytes_per_second'] / 1e9:.1f} GB/s-equivalent on one thread "
        f"(`{targets.CEILING_BENCHMARK}`), so at most **{ceiling:.1f} GB/s on {threads} threads** "
        f"({100 * ceiling / triad:.0f}% of the triad), whatever the memory does. Over 4M elements on {threads} "
        f"threads the kernel alone reaches {kernel:.1f} GB/s ({100 * kernel / triad:.0f}% of the triad, "
        f'`BM_StreamingStores/7/2`).{peak_text} docs/fusion.md ("The chain\'s compute ceiling") counts the vector '
        "operations its sin, exp and tanh take."
    )


def launch_section(data, summary):
    lines = ["## Launch overhead", ""]
    storm = targets.workload(data, "small_op_storm")
    if storm and storm.get("ops"):
        ops = storm["ops"]
        lines += [
            f"Per-op time in the small-op storm ({ops} dependent ops on 256-element float32 tensors, end to end "
            "including the final synchronization), median over rounds (min-max):",
            "",
            "| contender | µs per op |",
            "|---|---|",
        ]
        for c in stats.timed_contenders(data):
            s = summary["small_op_storm"]["contenders"].get(c["key"])
            if s:
                t = s["time_s"]
                lines.append(
                    f"| {c['label']} | {t['median'] / ops * 1e6:.2f} ({t['min'] / ops * 1e6:.2f}-"
                    f"{t['max'] / ops * 1e6:.2f}) |"
                )
        lines.append("")
    empty = targets.micro(data, "BM_EmptyLaunchSync")
    thr1 = targets.micro(data, "BM_QueueThroughput/1024/real_time/threads:1")
    thr2 = targets.micro(data, "BM_QueueThroughput/1024/real_time/threads:2")
    if empty and thr1:
        lines.append(
            f"Runtime alone (C++, `bench/runtime_bench.cpp`): an empty launch plus synchronize takes "
            f"**{empty['real_time'] / 1e3 if empty['time_unit'] == 'ns' else empty['real_time']:.2f} µs**; "
            f"queue throughput is **{thr1['items_per_second'] / 1e6:.2f} M launches/s** from one thread"
            + (f" and {thr2['items_per_second'] / 1e6:.2f} M launches/s from two" if thr2 else "")
            + "."
        )
        lines += ["", "| micro-benchmark | time | throughput |", "|---|---|---|"]
        for b in data["micro"]["benchmarks"]:
            lines.append(f"| `{b['name']}` | {b['real_time']:.1f} {b['time_unit']} | {micro_throughput(b)} |")
        lines.append("")
    return lines


def micro_throughput(b):
    if "median_us" in b:  # BM_StoreHit: each hit timed on its own
        return f"median {b['median_us']:.0f} µs per hit, 90th percentile {b['p90_us']:.0f} µs"
    if "cached_ms" in b:  # BM_StreamingStores: both variants, alternately
        return f"cached stores {b['cached_ms']:.2f} ms, streaming {b['streaming_ms']:.2f} ms: {b['speedup']:.2f}x"
    if "vscalef_us" in b:  # BM_ExpScaling: both variants, alternately
        return f"portable scaling {b['portable_us']:.2f} µs, vscalefps {b['vscalef_us']:.2f} µs: {b['speedup']:.2f}x"
    if "items_per_second" in b:
        return f"{b['items_per_second'] / 1e6:.2f} M items/s"
    if "bytes_per_second" in b:
        return f"{b['bytes_per_second'] / 1e9:.2f} GB/s"
    return ""


def compile_and_recording_section(data):
    """Issue 4's limits on compile time and recording overhead, with this run's values."""
    comp = data.get("compile", {})
    rec = data.get("recording", {})
    rows = []
    for what, key, limit in (("median", "median_ms", 15), ("99th percentile", "p99_ms", 60)):
        v, wall = comp.get(key), comp.get(f"wall_{key}")
        value = f"{v:.1f} ms (wall {wall:.1f} ms)" if v is not None and wall is not None else NOT_MEASURED
        verdict = NOT_MEASURED if v is None else ("met" if v <= limit else "**not met**")
        rows.append(
            f"| compile time per region (CPU time of the compiling thread), {what} | <= {limit} ms | {value} "
            f"| {verdict} |"
        )
    ov = rec.get("overhead_us_per_op")
    value = (
        f"{ov:.2f} µs ({rec['kiln_lazy_record_us_per_op']:.2f} vs {rec['cpu_eager_us_per_op']:.2f} µs)"
        if ov is not None
        else NOT_MEASURED
    )
    verdict = NOT_MEASURED if ov is None else ("met" if ov <= 1.5 else "**not met**")
    rows.append(
        f"| recording overhead per op above PyTorch eager CPU (1-element tensors) | <= 1.5 µs | {value} | {verdict} |"
    )
    return [
        "## Compile time and recording overhead",
        "",
        f"Compile times are those of every region the kiln lazy processes compiled ({comp.get('regions', 0)} "
        "compiles: each process compiles its regions cold, so a region counts once per round). The compiling "
        "thread's CPU time is the measure; wall time, beside it, also counts the kernels launched before the "
        "flush that share the cores meanwhile. Recording overhead: PyTorch eager CPU and kiln lazy recording "
        "alternately in one process of their own, best of 7.",
        "",
        "| measurement | limit (issue 4) | measured | verdict |",
        "|---|---|---|---|",
        *rows,
        "",
    ]


def bandwidth_section(data, summary):
    triads = {r["round"]: r["triad_GBps"] for r in data["stream"].get("rounds", []) if "triad_GBps" in r}
    rows = []
    for w in data["workloads"]:
        if not w.get("min_bytes"):
            continue
        for c in stats.timed_contenders(data):
            runs = stats.runs_of(w, c["key"])
            s = summary[w["name"]]["contenders"].get(c["key"])
            share = stats.share_per_round(runs, w["min_bytes"], triads) if triads else None
            if s and share:
                gbps = w["min_bytes"] / s["time_s"]["median"] / 1e9
                rows.append(
                    f"| {w['name']} | {c['label']} | {gbps:.1f} | {100 * share['median']:.0f}% "
                    f"({100 * share['min']:.0f}-{100 * share['max']:.0f}%) |"
                )
    if not rows:
        return []
    return [
        "## Achieved bandwidth of memory-bound workloads",
        "",
        "Bytes a fully fused kernel must move (read inputs once, write outputs once) divided by the median time; "
        "the share of the triad is taken round by round (median, min-max):",
        "",
        "| workload | contender | GB/s | share of triad |",
        "|---|---|---|---|",
        *rows,
        "",
    ]


def markdown(data, png_names, notes_path=NOTES):
    summary = stats.summarize(data)
    lines = [
        "# Benchmarks",
        "",
        f"Produced by `make bench{' QUICK=1' if data['mode'] == 'quick' else ''}` on {data['date']} "
        f"(mode: {data['mode']}, size scale {data['scale']}). Every number on this page comes from that one run: "
        f"`bench/results/{os.path.basename(data.get('_file', ''))}` (its per-round raw data included).",
        "",
    ]
    lines += method(data)
    lines += targets_section(data, notes_path)
    lines += e2e_section(data, summary)
    lines += warm_start_section(data, summary)
    lines += policy_section(data, summary)
    lines += memory_section(data, summary)
    lines += breakdown_section(data, summary)
    lines += machine_section(data)
    lines += launch_section(data, summary)
    lines += compile_and_recording_section(data)
    lines += bandwidth_section(data, summary)
    if png_names:
        lines += ["## Plots", ""] + [f"![{n}](img/{n})" for n in png_names] + [""]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("result")
    parser.add_argument("--docs", default=os.path.join(os.path.dirname(BENCH), "docs"))
    parser.add_argument("--notes", default=NOTES, help="hand-written notes on the targets not met (optional)")
    args = parser.parse_args(argv)
    with open(args.result) as fh:
        data = json.load(fh)
    data["_file"] = args.result
    pngs = plots.plots(data, stats.summarize(data), os.path.join(args.docs, "img"))
    with open(os.path.join(args.docs, "benchmarks.md"), "w") as fh:
        fh.write(markdown(data, pngs, args.notes))
    print(f"wrote {os.path.join(args.docs, 'benchmarks.md')}")


if __name__ == "__main__":
    main()

"""make bench's statistics, targets, report sections and run plan on made-up numbers (no timing; the only
children are three trivial Python processes that check how a child's result, crash or timeout is read)."""

import argparse
import copy
import math
import os
import statistics
import sys

import pytest

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "bench"))
import report  # noqa: E402
import run_bench  # noqa: E402
import stats  # noqa: E402
import targets  # noqa: E402


def runs(*medians, field="median_s"):
    """Per-process results of rounds 1, 2, ...; None is a round that failed."""
    return [
        {"round": i + 1, "skipped": "failed: made up"} if m is None else {"round": i + 1, field: m}
        for i, m in enumerate(medians)
    ]


def test_spread_is_median_min_max_of_the_values_present():
    assert stats.spread([3.0, 1.0, None, 2.0, 10.0]) == {"median": 2.5, "min": 1.0, "max": 10.0, "n": 4}
    assert stats.spread([None]) is None
    assert stats.spread([]) is None


def test_ratios_are_taken_round_by_round_then_their_median():
    cpu = runs(10.0, 20.0, 30.0)
    kiln = runs(5.0, 20.0, 10.0)
    assert stats.per_round_ratios(cpu, kiln) == [2.0, 1.0, 3.0]
    assert stats.ratio(cpu, kiln) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    # Not the ratio of the medians (20 / 10 = 2.0 here by chance; the next case tells them apart).
    cpu, kiln = runs(10.0, 10.0, 40.0), runs(10.0, 2.0, 10.0)
    assert stats.ratio(cpu, kiln)["median"] == 4.0
    assert stats.spread([10.0, 10.0, 40.0])["median"] / stats.spread([10.0, 2.0, 10.0])["median"] == 1.0


def test_ratios_use_only_rounds_both_contenders_have():
    cpu = runs(10.0, None, 30.0, 40.0)
    compiled = runs(5.0, 10.0)  # fewer rounds (QUICK): rounds 1 and 2 only
    assert stats.per_round_ratios(cpu, compiled) == [2.0]
    assert stats.ratio(cpu, runs()) is None


def test_share_per_round_against_each_rounds_reference_or_one_number():
    timed = runs(1.0, 2.0)
    assert stats.share_per_round(timed, 10e9, {1: 20.0, 2: 5.0}) == {"median": 0.75, "min": 0.5, "max": 1.0, "n": 2}
    assert stats.share_per_round(timed, 10e9, 10.0)["max"] == 1.0
    assert stats.share_per_round(timed, 10e9, {3: 1.0}) is None


def test_breakdown_summary_is_per_key_median_and_missing_ops_count_zero():
    rows = [
        {"round": 1, "median_s": 1, "breakdown_per_step": {"wall_s": 1.0, "library_kernels_by_op": {"mm": 0.4}}},
        {"round": 2, "median_s": 1, "breakdown_per_step": {"wall_s": 3.0, "library_kernels_by_op": {}}},
        {"round": 3, "median_s": 1, "breakdown_per_step": {"wall_s": 2.0, "library_kernels_by_op": {"mm": 0.2}}},
    ]
    b = stats.breakdown_summary(rows)
    assert b["wall_s"] == 2.0 and b["library_kernels_by_op"] == {"mm": 0.2}
    assert stats.breakdown_summary([{"round": 1, "median_s": 1, "breakdown_per_step": None}]) is None


def test_library_kernel_ceiling_is_eager_time_over_lazy_library_time():
    def summary(library_s):
        lazy = {"time_s": {"median": 1.0}, "breakdown_per_step": {"library_kernel_s": library_s}}
        return {"contenders": {"cpu_eager": {"time_s": {"median": 0.8}}, "kiln_lazy": lazy}}

    assert stats.library_kernel_ceiling(summary(0.5)) == pytest.approx(1.6)
    assert stats.library_kernel_ceiling(summary(0.0)) is None  # no library kernels: no bound from them
    assert stats.library_kernel_ceiling({"contenders": {"cpu_eager": {"time_s": {"median": 1}}}}) is None


def test_percentile_nearest_rank_below():
    assert stats.percentile(range(1, 101), 0.99) == 100
    assert stats.percentile([5.0], 0.99) == 5.0
    assert stats.percentile([], 0.5) is None


def workload(name, min_bytes=None, ops=None, **results):
    return {
        "name": name,
        "description": name,
        "min_bytes": min_bytes,
        "ops": ops,
        "results": {k: {"runs": v} for k, v in results.items()},
    }


def made_up_run():
    peak = [{"round": 1, "median_s": 1.0, "peak_bytes": 100}, {"round": 2, "median_s": 1.0, "peak_bytes": 100}]
    bigger = [{"round": 1, "median_s": 1.0, "peak_bytes": 200}, {"round": 2, "median_s": 1.0, "peak_bytes": 200}]
    return {
        "machine": {"threads": 2},
        "stream": {"rounds": [{"round": 1, "triad_GBps": 10.0}, {"round": 2, "triad_GBps": 20.0}]},
        "micro": {"benchmarks": [{"name": targets.CEILING_BENCHMARK, "bytes_per_second": 5e9}]},
        "workloads": [
            workload(
                "gpt_train",
                cpu_eager=runs(14.0, 13.0),
                cpu_compile=runs(8.0, 10.0),
                kiln_lazy=runs(10.0, 10.0),
                kiln_eager=bigger,
            ),
            workload("mlp_train", cpu_eager=runs(1.0, 1.0), kiln_lazy=peak, kiln_eager=peak),
            # 8e9 bytes in 1 s = 8 GB/s: 80% of round 1's 10 GB/s triad, 40% of round 2's 20 GB/s.
            workload("memory_chain", min_bytes=8e9, cpu_eager=runs(2.0, 2.0), kiln_lazy=runs(1.0, 1.0)),
            # 9e9 bytes in 1 s against a ceiling of 5 GB/s x 2 threads: 90%.
            workload("pointwise_chain", min_bytes=9e9, cpu_eager=runs(3.0, 3.0), kiln_lazy=runs(1.0, 1.0)),
        ],
    }


def by_target(rows, start):
    return next(r for r in rows if r["target"].startswith(start))


def test_targets_met_not_met_and_not_measured():
    rows = targets.targets(made_up_run())
    assert len(rows) == 25
    gpt = by_target(rows, "gpt_train: kiln lazy vs eager CPU")
    assert gpt["met"] is True and gpt["measured"].startswith("1.35x (1.30-1.40, 2 rounds)")
    compiled = by_target(rows, "gpt_train: kiln lazy vs torch.compile")
    assert compiled["met"] is False and compiled["measured"].startswith("0.90x (0.80-1.00")
    assert compiled["wanted"] == ">= 1.0x"
    assert by_target(rows, "mlp_train")["met"] is False  # 1.0x against 1.2x
    for name in ("lstm_lm_train", "hf_gpt2_train", "convnet_train", "varlen_infer", "small_op_storm", "adamw"):
        assert by_target(rows, name)["met"] is None and by_target(rows, name)["measured"] == "not measured"
    mem = by_target(rows, "memory_chain")
    assert mem["measured"].startswith("60% (40-80%") and mem["met"] is False
    chain = by_target(rows, "pointwise_chain")
    assert chain["measured"].startswith("90%") and chain["met"] is True
    slower = by_target(rows, "every workload: kiln lazy not slower")
    assert slower["met"] is True and "4 of 4 workloads measured" in slower["measured"]
    peaks = by_target(rows, "every workload: kiln lazy peak")
    assert peaks["met"] is True and "1 of 4" in peaks["measured"]  # mlp_train only has both


def test_adaptive_policy_targets_from_first_steps_and_the_fixed_contender():
    data = made_up_run()
    gpt = data["workloads"][0]["results"]
    gpt["kiln_lazy"]["runs"] = [
        {"round": 1, "median_s": 1.0, "first_s": 3.0},
        {"round": 2, "median_s": 1.0, "first_s": 2.0},
    ]
    gpt["kiln_eager"]["runs"] = [
        {"round": 1, "median_s": 2.0, "first_s": 2.0},
        {"round": 2, "median_s": 2.0, "first_s": 2.0},
    ]
    gpt["kiln_lazy_fixed"] = {"runs": [{"round": 1, "median_s": 0.9, "first_s": 4.0}]}
    data["workloads"].append(
        workload(
            "varlen_infer",
            cpu_eager=[{"round": 1, "median_s": 1.0, "first_s": 2.0}],
            kiln_lazy=[{"round": 1, "median_s": 1.0, "first_s": 1.2}],
        )
    )
    rows = targets.targets(data)
    stall = by_target(rows, "gpt_train: kiln lazy's first step")
    assert stall["measured"].startswith("1.25x (1.00-1.50, 2 rounds)") and stall["met"] is True
    varlen = by_target(rows, "varlen_infer: kiln lazy's first pass")
    assert varlen["measured"].startswith("1.20x") and varlen["met"] is True
    assert by_target(rows, "varlen_infer: eager CPU's first pass")["measured"].startswith("1.67x")
    fixed = by_target(rows, "every workload: the adaptive policy not slower")
    # Round 1 only: first step 4.0 vs 3.0 (faster), steady 0.9 vs 1.0 (slower).
    assert fixed["met"] is False and fixed["measured"].startswith("slower: gpt_train steady 0.90x (2 ratios); "), fixed
    assert "no noise floor measured (read strictly)" in fixed["measured"]
    assert by_target(rows, "small_op_storm: the adaptive policy")["met"] is None
    assert by_target(rows, "gpt_train: kiln lazy's step 5")["met"] is None  # no warm-up times


def test_the_fifth_step_is_read_against_the_spread_of_single_steady_steps():
    data = made_up_run()
    gpt = data["workloads"][0]["results"]
    # Steps 2-8 of the warm-up; the fifth step is the warm-up's fourth: 1.05 and 1.30 over a p90 of 1.1 and 1.0.
    gpt["kiln_lazy"]["runs"] = [
        {"round": 1, "median_s": 1.0, "p90_s": 1.1, "warmup_times_s": [3.0, 2.0, 1.5, 1.05, 1.0, 1.0, 1.0]},
        {"round": 2, "median_s": 1.0, "p90_s": 1.0, "warmup_times_s": [3.0, 2.0, 1.5, 1.3, 1.0, 1.0, 1.0]},
        {"round": 3, "median_s": 1.0, "p90_s": 1.0, "warmup_times_s": [3.0, 2.0, 1.5, 0.9, 1.0, 1.0, 1.0]},
    ]
    fifth = by_target(targets.targets(data), "gpt_train: kiln lazy's step 5")
    assert fifth["measured"].startswith("0.95x (0.90-1.30, 3 rounds)") and fifth["met"] is True, fifth
    gpt["kiln_lazy"]["runs"][2]["warmup_times_s"][3] = 1.2
    assert by_target(targets.targets(data), "gpt_train: kiln lazy's step 5")["met"] is False


def test_not_slower_targets_are_read_against_the_noise_floor_of_two_processes_of_one_contender():
    data = made_up_run()
    data["contenders"] = [
        {"key": "kiln_lazy_fixed_again", "repeats": "kiln_lazy_fixed"},
        {"key": "cpu_eager_again", "repeats": "cpu_eager"},
        {"key": "kiln_lazy", "repeats": None},
    ]
    gpt = data["workloads"][0]["results"]
    # Steady: adaptive 0.97x and 0.90x of the fixed policy; its two processes differ by 3% and 4%.
    gpt["kiln_lazy"]["runs"] = [{"round": 1, "median_s": 1.0, "first_s": 1.0}]
    gpt["kiln_lazy_fixed"] = {"runs": [{"round": 1, "median_s": 0.97, "first_s": 1.0}]}
    gpt["kiln_lazy_fixed_again"] = {"runs": [{"round": 1, "median_s": 1.0, "first_s": 1.02}]}
    mlp = data["workloads"][1]["results"]
    mlp["kiln_lazy"]["runs"] = [{"round": 1, "median_s": 1.0, "first_s": 1.0}]
    mlp["kiln_lazy_fixed"] = {"runs": [{"round": 1, "median_s": 0.90, "first_s": 1.0}]}
    mlp["kiln_lazy_fixed_again"] = {"runs": [{"round": 1, "median_s": 0.9375, "first_s": 1.0}]}
    floor = stats.noise_floor(data, "median_s")
    sigma = math.sqrt((math.log(0.97) ** 2 + math.log(0.96) ** 2) / 2)  # one round: the median is the draw
    assert floor["sigma"] == pytest.approx(sigma) and floor["n"] == 2 and floor["worst"].startswith("mlp_train")
    z = statistics.NormalDist().inv_cdf(1 - 0.05)
    assert floor["floor"] == pytest.approx(1 - math.exp(-z * sigma * math.sqrt(math.pi / 2)))
    # More ratios read against it: a wider floor, for the same 5% chance of a false "slower" in all.
    assert stats.noise_floor(data, "median_s", comparisons=24)["floor"] > floor["floor"]
    # More rounds: the median of several varies less than one round's ratio.
    five_rounds = copy.deepcopy(data)
    for results in (w["results"] for w in five_rounds["workloads"][:2]):
        for key in ("kiln_lazy_fixed", "kiln_lazy_fixed_again"):
            results[key]["runs"] = [dict(results[key]["runs"][0], round=k) for k in range(1, 6)]
    assert stats.noise_floor(five_rounds, "median_s")["floor"] < floor["floor"]
    assert stats.noise_floor(data, "median_s", workloads=("gpt_train",))["sigma"] == pytest.approx(-math.log(0.97))
    assert stats.noise_floor(data, "median_s", originals=("cpu_eager",)) is None
    fixed = by_target(targets.targets(data), "every workload: the adaptive policy not slower")
    assert fixed["met"] is False, fixed
    assert fixed["measured"].startswith("slower: mlp_train steady 0.90x (4 ratios); "), fixed
    assert "below 1.0x within the noise floor: gpt_train steady 0.97x;" in fixed["measured"]
    spread = "(one round's spread 3.6% over 2 pairs of processes; widest pair mlp_train kiln_lazy_fixed 0.96x)"
    assert spread in fixed["measured"], fixed
    data["contenders"] = [dict(c, label=c["key"], reason=None) for c in data["contenders"]]
    assert [c["key"] for c in stats.timed_contenders(data)] == ["kiln_lazy"]  # second processes: own section
    section = "\n".join(report.policy_section(data, stats.summarize(data)))
    gpt_row = "| gpt_train | 1.00x (1.00-1.00) | 0.97x (0.97-0.97) | 0.98x (0.98-0.98) | 0.97x (0.97-0.97) | — |"
    assert gpt_row in section
    mlp["kiln_lazy_fixed"]["runs"][0]["median_s"] = 0.99
    assert by_target(targets.targets(data), "every workload: the adaptive policy not slower")["met"] is True
    # With like processes 1% apart, 0.97x is slower: the floor follows the run's noise.
    gpt["kiln_lazy_fixed_again"]["runs"][0]["median_s"] = 0.98
    mlp["kiln_lazy_fixed_again"]["runs"][0]["median_s"] = 1.0
    fixed = by_target(targets.targets(data), "every workload: the adaptive policy not slower")
    assert fixed["met"] is False and fixed["measured"].startswith("slower: gpt_train steady 0.97x"), fixed
    # varlen: CPU's first pass 0.95x of kiln's, two CPU processes 0.94x apart: within the floor.
    data["workloads"].append(
        workload(
            "varlen_infer",
            cpu_eager=[{"round": 1, "median_s": 1.0, "first_s": 0.95}],
            cpu_eager_again=[{"round": 1, "median_s": 1.0, "first_s": 1.0106}],
            kiln_lazy=[{"round": 1, "median_s": 1.0, "first_s": 1.0}],
        )
    )
    varlen = by_target(targets.targets(data), "varlen_infer: eager CPU's first pass")
    assert varlen["met"] is True and "noise floor 12.0%" in varlen["measured"], varlen
    data["workloads"][-1]["results"]["cpu_eager_again"]["runs"][0]["first_s"] = 0.96
    assert by_target(targets.targets(data), "varlen_infer: eager CPU's first pass")["met"] is False
    # A noisy run does not loosen the target past 5%: 0.94x with two CPU processes 0.5x apart.
    data["workloads"][-1]["results"]["cpu_eager"]["runs"][0]["first_s"] = 0.94
    data["workloads"][-1]["results"]["cpu_eager_again"]["runs"][0]["first_s"] = 1.88
    varlen = by_target(targets.targets(data), "varlen_infer: eager CPU's first pass")
    assert varlen["met"] is False and "counted as 5%" in varlen["measured"], varlen


def test_peak_memory_and_slower_targets_name_the_workloads_that_miss():
    data = made_up_run()
    gpt = data["workloads"][0]["results"]
    gpt["kiln_lazy"]["runs"] = [{"round": 1, "median_s": 20.0, "peak_bytes": 300 * 2**20}]
    gpt["kiln_eager"]["runs"] = [{"round": 1, "median_s": 20.0, "peak_bytes": 200 * 2**20}]
    rows = targets.targets(data)
    assert by_target(rows, "every workload: kiln lazy peak")["measured"].startswith(
        "higher: gpt_train 300.0 vs 200.0 MiB (+102400 KiB)"
    )
    assert by_target(rows, "every workload: kiln lazy not slower")["measured"].startswith("slower: gpt_train 0.70x")


def test_summarize_gives_times_and_ratios_per_workload():
    s = stats.summarize(made_up_run())
    gpt = s["gpt_train"]
    assert gpt["contenders"]["cpu_eager"]["time_s"] == {"median": 13.5, "min": 13.0, "max": 14.0, "n": 2}
    assert gpt["ratios"]["kiln_lazy_vs_cpu_compile"] == {"median": 0.9, "min": 0.8, "max": 1.0, "n": 2}
    assert s["mlp_train"]["ratios"]["kiln_lazy_vs_cpu_compile"] is None


@pytest.mark.parametrize("mode", ["smoke", "quick", "full"])
def test_plan_interleaves_rounds_and_says_what_it_left_out(mode):
    settings = dict(run_bench.MODES[mode])
    names = ["a", "gpt_train", "b"]
    pairs = run_bench.plan(settings, names)
    rounds = [r for r, _, _, _ in pairs]
    assert rounds == sorted(rounds) and set(rounds) == set(range(1, settings["rounds"] + 1))
    first = [(n, c.key) for r, n, c, i in pairs if r == 1 and not i]
    assert [n for n, _ in first] == sorted([n for n, _ in first], key=names.index)  # workload by workload
    for r in range(1, settings["rounds"] + 1):  # every round has every pair it plans, once
        again = [(n, c.key, i) for rr, n, c, i in pairs if rr == r]
        assert len(again) == len(set(again))
    compiled = {(r, n) for r, n, c, _ in pairs if c.compiled}
    left = " ".join(run_bench.left_out(mode, settings, names, names))
    if mode == "full":
        # every workload compiled in the first compile_rounds rounds, and the report says so
        assert len(compiled) == 3 * settings["compile_rounds"] and settings["rounds"] >= 5
        assert settings["compile_rounds"] >= 2 and f"in {settings['compile_rounds']} of the 5 rounds" in left
    elif mode == "quick":
        assert {n for _, n in compiled} == {"gpt_train"} and "no torch.compile numbers for a, b" in left
    else:
        assert not compiled and "torch.compile: not run at all" in left


def test_each_round_starts_a_workloads_processes_one_contender_later():
    settings = dict(run_bench.MODES["full"], rounds=4, compile_rounds=4)
    pairs = run_bench.plan(settings, ["gpt_train"])
    timed = {r: [c.key for rr, _, c, i in pairs if rr == r and not i] for r in range(1, 5)}
    keys = timed[1]
    assert len(keys) >= 4 and len(set(keys)) == len(keys)
    for r in range(2, 5):  # the same contenders, the order turned by one more place each round
        assert timed[r] == keys[r - 1 :] + keys[: r - 1]
    assert len({t[0] for t in timed.values()}) == 4  # no contender is always started first
    assert run_bench.rotated([], 3) == [] and run_bench.rotated([1, 2, 3], 4) == [2, 3, 1]


def test_the_method_says_the_order_turns_only_for_a_run_that_turned_it():
    data = made_up_run()
    data["machine"].update(cpu="x", cores=2, memory_GiB=1, python="3")
    data.update(settings={"rounds": 2}, mode="full", scale=1.0)
    assert "no contender always goes first" not in "\n".join(report.method(data))
    data["settings"]["rotated_order"] = True
    assert "no contender always goes first" in "\n".join(report.method(data))


def test_first_step_samples_follow_their_workloads_timed_processes_and_give_the_median():
    settings = dict(run_bench.MODES["full"], rounds=1)
    pairs = run_bench.plan(settings, ["gpt_train", "varlen_infer"])
    samples = [(n, c.key, i) for _, n, c, i in pairs if i]
    assert samples == [
        (name, key, i)
        for name, keys in (
            ("gpt_train", ("kiln_lazy", "kiln_lazy_fixed", "kiln_lazy_fixed_again")),
            ("varlen_infer", ("cpu_eager", "kiln_lazy", "kiln_lazy_fixed", "kiln_lazy_fixed_again", "cpu_eager_again")),
        )
        for i in range(1, settings["first_samples"] + 1)
        for key in run_bench.rotated(list(keys), i)  # each sample starts one contender later
    ]
    # Each workload's samples come after its timed processes, before the next workload's.
    for name in ("gpt_train", "varlen_infer"):
        kinds = [bool(i) for _, n, _, i in pairs if n == name]
        assert kinds == sorted(kinds) and any(kinds) and not all(kinds)
    names = [n for _, n, _, _ in pairs]
    assert names == sorted(names, key=["gpt_train", "varlen_infer"].index)

    timed = {"first_s": 0.30, "median_s": 0.1, "first_usage": {"minor_faults": 7}}
    merged = run_bench.merge_first_samples(
        timed, [{"first_s": 0.10, "first_usage": {"minor_faults": 5}}, {"skipped": "failed"}, {"first_s": 0.20}]
    )
    assert merged["first_s"] == 0.20 and merged["first_s_timed"] == 0.30 and merged["median_s"] == 0.1
    assert [s["first_s"] for s in merged["first_samples"]] == [0.30, 0.10, None, 0.20]
    assert merged["first_samples"][0]["minor_faults"] == 7 and merged["first_samples"][2]["skipped"] == "failed"
    assert run_bench.merge_first_samples({"first_s": 0.3}, []) == {"first_s": 0.3}  # nothing sampled: unchanged
    assert run_bench.merge_first_samples({"skipped": "x"}, [{"first_s": 0.1}]) == {"skipped": "x"}


def test_overrides_rounds_and_compile_workloads():
    args = argparse.Namespace(
        smoke=False,
        quick=True,
        rounds=7,
        compile_on="all",
        compile_rounds=None,
        first_samples=None,
        backing_mb=None,
        jobs=1,
    )
    mode, settings = run_bench.settings_for(args)
    assert mode == "quick" and settings["rounds"] == 7 and settings["compile_rounds"] == 7
    assert run_bench.compiled_on(settings, "anything")
    args.compile_rounds = 2
    _, settings = run_bench.settings_for(args)
    pairs = run_bench.plan(settings, ["w"])
    assert [r for r, _, c, _ in pairs if c.compiled] == [1, 2]
    assert "torch.compile: in 2 of the 7 rounds" in run_bench.left_out("full", settings, ["w"], ["w"])
    assert settings["backing_mb"] == run_bench.MODES["quick"]["backing_mb"] > 0
    assert "--back-memory-mb=256" in run_bench.child_argv("w", "kiln_lazy", settings)
    assert "no memory held" not in " ".join(run_bench.left_out("quick", settings, ["w"], ["w"]))


def test_the_memory_held_until_a_first_step_can_be_set_and_its_absence_is_said():
    args = argparse.Namespace(
        smoke=False,
        quick=False,
        rounds=None,
        compile_on=None,
        compile_rounds=None,
        first_samples=None,
        backing_mb=0,
        jobs=1,
    )
    _, settings = run_bench.settings_for(args)
    assert "--back-memory-mb=0" in run_bench.child_argv("w", "cpu_eager", settings)
    assert "first steps: no memory held until them (--backing-mb 0)" in " ".join(
        run_bench.left_out("full", settings, ["w"], ["w"])
    )
    args.backing_mb = -1
    with pytest.raises(SystemExit, match="--backing-mb: expected 0 or more MiB; got -1"):
        run_bench.settings_for(args)


def test_where_the_time_goes_is_rendered_only_with_breakdown_data():
    data = made_up_run()
    summary = stats.summarize(data)
    assert report.breakdown_section(data, summary) == []
    by_op = {f"op{i}": i * 1e-3 for i in range(7)}  # seconds per step
    per_step = {"wall_s": 0.010, "host_python_s": 0.002, "fused_kernel_s": 0.004, "library_kernels_by_op": by_op}
    for r in data["workloads"][0]["results"]["kiln_lazy"]["runs"]:
        r["breakdown_per_step"] = per_step
    text = "\n".join(report.breakdown_section(data, stats.summarize(data)))
    assert "## Where the time goes (kiln lazy)" in text
    assert "| gpt_train | 10.00 | 2.00 | — | — | — | — | 4.00 | — | — |" in text
    assert "op6 6.00, op5 5.00, op4 4.00, op3 3.00, op2 2.00 |" in text  # the top 5, largest first


def test_run_child_reports_a_result_a_failure_or_a_timeout():
    env = dict(os.environ)
    ok = "import json, sys; json.dump({'x': 1}, open(sys.argv[-1], 'w'))"
    assert run_bench.run_child(["-c", ok], env, 60)[0] == {"x": 1}
    crash = "import sys; print('it broke'); sys.exit(3)"
    assert run_bench.run_child(["-c", crash], env, 60)[0] == {"skipped": "failed: exit code 3: it broke"}
    result, wall = run_bench.run_child(["-c", "import time; time.sleep(60)"], env, 0.5)
    assert result == {"skipped": "failed: timed out after 0.5 s"} and wall < 30


def test_breakdown_is_divided_by_the_timed_steps():
    import measure_one

    b = {"wall_s": 2.0, "compile_s": 0, "library_kernels_by_op": {"mm": 1.0}}
    assert measure_one.per_step(b, 4) == {"wall_s": 0.5, "compile_s": 0.0, "library_kernels_by_op": {"mm": 0.25}}


def test_a_loaded_run_says_it_is_not_a_verdict():
    data = made_up_run()
    data["machine"] = {"cores": 2}
    data["load_1min"] = {"median": 1.9, "min": 1.5, "max": 2.1}
    assert "not a verdict" not in "\n".join(report.targets_section(data, None))
    data["load_1min"] = {"median": 3.4, "min": 2.8, "max": 4.0}
    assert "not a verdict" in "\n".join(report.targets_section(data, None))


def test_warm_start_and_second_processes_are_planned_on_their_workloads_and_warm_start_reported():
    settings = dict(run_bench.MODES["quick"])
    pairs = run_bench.plan(settings, ["gpt_train", "mlp_train", "lstm_lm_train"])
    warm = {n for _, n, c, _ in pairs if c.warm_store}
    assert warm == {"gpt_train", "lstm_lm_train"}
    pairs = run_bench.plan(settings, ["gpt_train", "varlen_infer"])
    again = {(n, c.key) for _, n, c, _ in pairs if c.repeats}
    assert again == {
        ("gpt_train", "kiln_lazy_fixed_again"),
        ("varlen_infer", "kiln_lazy_fixed_again"),
        ("varlen_infer", "cpu_eager_again"),
    }
    data = made_up_run()
    gpt = data["workloads"][0]["results"]
    for key, firsts in (("cpu_eager", (0.09, 0.10)), ("kiln_lazy", (0.30, 0.40)), ("kiln_lazy_warm", (0.10, 0.08))):
        for run, first in zip(gpt[key]["runs"] if key in gpt else [], firsts):
            run["first_s"] = first
    gpt["kiln_lazy_warm"] = {
        "runs": [{"round": 1, "median_s": 0.07, "first_s": 0.10}, {"round": 2, "median_s": 0.07, "first_s": 0.08}]
    }
    row = by_target(targets.targets(data), "gpt_train: first step on a warm store")
    assert row["measured"].startswith("1.07x (0.90-1.25, 2 rounds)") and row["met"] is True  # 0.09/0.10, 0.10/0.08
    text = "\n".join(report.warm_start_section(data, stats.summarize(data)))
    assert "## Warm start" in text
    assert "| gpt_train | 95.000 (90.000-100.000) | 350.000 (300.000-400.000) | 90.000 (80.000-100.000) |" in text
    assert report.warm_start_section(made_up_run(), stats.summarize(made_up_run())) == []  # nothing measured warm


class FakeTaker:
    """A lockstep child that takes `seconds` a step, for take_turns' order."""

    def __init__(self, name, log, step_s, fail_after=None):
        self.name, self.log, self.step_s, self.fail_after = name, log, step_s, fail_after
        self.timed_s, self.steps, self.taking_turns = 0.0, 0, True

    def turn(self, seconds, most_steps):
        if self.fail_after is not None and len([n for n in self.log if n == self.name]) >= self.fail_after:
            self.taking_turns = False
            return False
        self.log.append(self.name)
        n = min(most_steps, max(1, int(seconds / self.step_s)))
        self.steps += n
        self.timed_s += n * self.step_s
        return True


def test_turns_alternate_in_reversed_order_until_each_has_its_budget():
    import children

    log = []
    a, b, c = FakeTaker("a", log, 0.01), FakeTaker("b", log, 0.05), FakeTaker("c", log, 0.01, fail_after=1)
    children.take_turns([a, b, c], 0.2, 0.5, 3, 1000)
    # 0.2 s turns: a and b need 3 turns for 0.5 s; c stops answering after one.
    assert log == ["a", "b", "c", "b", "a", "a", "b"]
    assert (a.steps, b.steps) == (60, 12)
    # At most `max_steps`, and a turn never asks for more than are left.
    log.clear()
    d = FakeTaker("d", log, 0.001)
    children.take_turns([d], 0.2, 10.0, 3, 250)
    assert d.steps == 250 and log == ["d", "d"]

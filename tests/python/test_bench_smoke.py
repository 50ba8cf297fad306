"""`make bench` runs: every workload gets a fresh process per contender and a
row for every contender (a number or a reason), and the targets are computed.
Smoke mode times nothing worth reading: tiny sizes, 1 round, no torch.compile,
two children at a time (bench/stats.py's arithmetic is test_bench_stats.py's)."""

import json
import os
import sys

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "bench"))
import report  # noqa: E402
import run_bench  # noqa: E402
import stats  # noqa: E402
import targets  # noqa: E402
import workloads  # noqa: E402

MEASURED = ("cpu_eager", "kiln_eager", "kiln_lazy")  # every workload runs on these in the smoke test


def test_bench_smoke(tmp_path):
    out = run_bench.main(["--smoke", "--jobs", "2", "--out", str(tmp_path / "smoke.json")])
    with open(out) as fh:
        data = json.load(fh)
    assert data["stream"]["rounds"][0]["triad_GBps"] > 0
    assert data["recording"]["kiln_lazy_record_us_per_op"] > 0
    assert [w["name"] for w in data["workloads"]] == [w.name for w in workloads.WORKLOADS]
    keys = [c["key"] for c in data["contenders"]]
    pids = set()
    for w in data["workloads"]:
        assert set(w["results"]) == set(keys)
        for key, res in w["results"].items():
            assert ("runs" in res) != ("skipped" in res), (w["name"], key, res)
            for r in res.get("runs", []):
                assert ("median_s" in r) != ("skipped" in r), (w["name"], key, r)
        for key in MEASURED:
            (run,) = w["results"][key]["runs"]
            assert run["round"] == 1 and run["reps"] >= 2 and run["median_s"] > 0, (w["name"], key, run)
            assert run["pid"] not in pids  # a process of its own
            held = run["memory_backing"]  # held from the child's start until its first step
            assert held["mb"] == run_bench.MODES["smoke"]["backing_mb"] > 0 and held["seconds"] > 0
            pids.add(run["pid"])
        for key in ("kiln_eager", "kiln_lazy"):
            assert w["results"][key]["runs"][0]["peak_bytes"] > 0
        assert "counters" in w["results"]["kiln_lazy"]["runs"][0]
        assert "skipped" in w["results"]["cpu_compile"]
        ratio = data["summary"][w["name"]]["ratios"]["kiln_lazy_vs_cpu_eager"]
        assert ratio["n"] == 1 and ratio["median"] > 0
    assert data["compile"]["regions"] > 0
    assert "torch.compile: not run at all" in data["left_out"]
    assert stats.summarize(data) == data["summary"]

    rows = targets.targets(data)
    names = {w["name"] for w in data["workloads"]}
    for r in rows:
        workload = r["target"].split(":")[0]
        if f"step {targets.STEADY_BY_STEP}" in r["target"]:
            # Smoke mode warms up for 3 steps: its processes have no fifth step.
            assert r["met"] is None, r
        elif workload in names and "torch.compile" not in r["target"] and "ceiling" not in r["target"]:
            assert r["met"] is not None, r  # measured in this run, so computed
    assert all(r["met"] is not None for r in rows if r["target"].startswith("every workload"))

    text = report.markdown(data, [], notes_path=None)
    for heading in (
        "## Method",
        "**Backed memory for the first step**",
        "## Targets",
        "## End-to-end workloads",
        "## Peak device memory",
        "µs per op",
    ):
        assert heading in text
    notes = tmp_path / "notes.md"
    notes.write_text("The chain is bound by its exp.\n")
    assert "### What bounds the targets not met\n\nThe chain is bound by its exp." in report.markdown(
        data, [], notes_path=str(notes)
    )


def test_a_sampled_first_step_is_the_median_of_its_processes(tmp_path):
    out = run_bench.main(
        [
            "--smoke",
            "--only",
            "small_op_storm",
            "--first-samples",
            "1",
            "--jobs",
            "2",
            "--out",
            str(tmp_path / "s.json"),
        ]
    )
    with open(out) as fh:
        data = json.load(fh)
    (w,) = data["workloads"]
    for key in ("kiln_lazy", "kiln_lazy_fixed", "kiln_lazy_fixed_again"):  # sampled on every workload
        (run,) = w["results"][key]["runs"]
        timed, sample = run["first_samples"]
        assert timed["first_s"] == run["first_s_timed"] and sample["first_s"] > 0, run
        assert run["first_s"] == (timed["first_s"] + sample["first_s"]) / 2  # the median of two
        assert sample["minor_faults"] >= 0
    for key in ("cpu_eager", "kiln_eager"):  # not sampled here
        (run,) = w["results"][key]["runs"]
        assert "first_samples" not in run and "first_s_timed" not in run
    assert data["settings"]["first_samples"] == 1
    assert "median of 2 process(es) per round instead of 3" in " ".join(data["left_out"])
    text = report.markdown(data, [], notes_path=None)
    assert "**First steps of several processes**" in text and "median over 2 fresh processes" in text


def test_a_workloads_timed_processes_take_turns_and_never_overlap():
    settings = dict(run_bench.MODES["smoke"], reps=10**6, budget_s=0.3, threads=2, turn_s=0.2)
    contenders = [run_bench.BY_KEY["cpu_eager"], run_bench.BY_KEY["kiln_lazy"]]
    eager, lazy = run_bench.measure_group("small_op_storm", contenders, settings)
    assert eager["pid"] != lazy["pid"]
    turns = sorted([(*span, "eager") for span in eager["turns"]] + [(*span, "lazy") for span in lazy["turns"]])
    # 0.2 s turns for 0.3 s of steps: two each, the second round in reversed order.
    assert [who for _, _, who in turns] == ["eager", "lazy", "lazy", "eager"]
    assert all(end <= next_start for (_, end, _), (next_start, _, _) in zip(turns, turns[1:]))
    for run in (eager, lazy):
        assert run["reps"] >= 3 and sum(end - start for start, end, _ in turns) >= 0.3
    # kiln's metrics cover the timed steps, not the waits between turns.
    per_step = lazy["breakdown_per_step"]["wall_s"]
    assert 0.5 * lazy["median_s"] < per_step < 2 * lazy["median_s"], (per_step, lazy["median_s"])
    assert sum(lazy["counters"]["tiers"].values()) % lazy["reps"] == 0

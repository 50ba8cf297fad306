"""`make bench` runs: every workload gets a row for every contender (a number or a reason)."""

import json
import os
import sys

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "bench"))
import report  # noqa: E402
import run_bench  # noqa: E402
import workloads  # noqa: E402


def test_bench_smoke(tmp_path):
    out = run_bench.main(["--smoke", "--out", str(tmp_path / "smoke.json")])
    with open(out) as fh:
        data = json.load(fh)
    assert data["stream"]["triad_GBps"] > 0
    assert [w["name"] for w in data["workloads"]] == [w.name for w in workloads.WORKLOADS]
    keys = [c["key"] for c in data["contenders"]]
    for w in data["workloads"]:
        assert set(w["results"]) == set(keys)
        for key, r in w["results"].items():
            assert ("median_s" in r) != ("skipped" in r), (w["name"], key, r)
        assert "median_s" in w["results"]["kiln_eager"], (w["name"], w["results"]["kiln_eager"])
        assert "median_s" in w["results"]["cpu_eager"]
    text = report.markdown(data, [])
    assert "## End-to-end workloads" in text and "µs per op" in text

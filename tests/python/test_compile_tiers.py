"""KILN_COMPILE_THRESHOLD: a trace whose fused kernels are not cached runs op
by op (one kernel per op, shared by every trace) until it has been seen that
many times; then its fused kernels are compiled. Which tier an occurrence
runs in depends on counts and cache contents only, so results never depend
on compile timing, and the tiers give the same bits (kiln's own float sin
and tanh may differ from eager CPU's by an ulp, in every tier alike)."""

import json
import os

import pytest

from conftest import REPO, run_python

# One trace structure, flushed five times (each .cpu() is a sync point).
SAME_TRACE_FIVE_TIMES = """
import json, torch, kiln
d = kiln.DEVICE_NAME
torch.manual_seed(0)
x = torch.randn(4096)
xd = x.to(d)
got = []
for i in range(5):
    got.append((((xd * (i + 2)).sin() + 1).tanh().amax(0)).cpu())
want = [((x * (i + 2)).sin() + 1).tanh().amax(0) for i in range(5)]
c = kiln.metrics.counters()
print(json.dumps({"tiers": c["tiers"], "compiled": c["kernels_compiled"], "values": [g.item() for g in got],
                  "close": all(torch.allclose(g, w) for g, w in zip(got, want))}))
"""


AT_FIRST_SIGHT = {}


def values_at_first_sight():
    """The five values with every trace fused at its first flush."""
    if not AT_FIRST_SIGHT:
        AT_FIRST_SIGHT.update(run(SAME_TRACE_FIVE_TIMES, 1))
    return AT_FIRST_SIGHT["values"]


def same(out):
    return out["close"] and out["values"] == values_at_first_sight()


def run(code, threshold, async_compile="0", extra=None):
    env = {"KILN_MODE": "lazy", "KILN_CACHE": "0", "KILN_ASYNC_COMPILE": async_compile}
    env["KILN_COMPILE_THRESHOLD"] = str(threshold)
    env.update(extra or {})
    r = run_python(code, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_below_the_threshold_a_trace_runs_op_by_op_then_fused():
    out = run(SAME_TRACE_FIVE_TIMES, 3)
    assert same(out), out
    assert out["tiers"].get("op by op") == 2 and out["tiers"].get("fused") == 3, out


def test_at_threshold_one_every_trace_is_fused_at_first_sight():
    out = run(SAME_TRACE_FIVE_TIMES, 1)
    assert same(out), out
    assert out["tiers"] == {"fused": 5}, out


def test_under_async_compile_the_compiling_occurrence_runs_op_by_op():
    out = run(SAME_TRACE_FIVE_TIMES, 2, async_compile="1", extra={"KILN_COMPILE_DELAY_MS": "50"})
    assert same(out), out
    assert out["tiers"].get("op by op") == 1, out
    assert out["tiers"].get("op by op, compiling") == 1, out
    assert out["tiers"].get("fused") == 3, out


def test_a_trace_never_seen_often_enough_compiles_no_fused_kernel():
    few = run(SAME_TRACE_FIVE_TIMES, 6)
    assert same(few) and few["tiers"] == {"op by op": 5}, few
    # It compiled the one-op kernels, exactly what fusing nothing compiles.
    one_op_kernels = run(SAME_TRACE_FIVE_TIMES, 1, extra={"KILN_FUSION_MAX_OPS": "1"})
    assert few["compiled"] == one_op_kernels["compiled"], (few, one_op_kernels)
    fused = run(SAME_TRACE_FIVE_TIMES, 1)
    assert fused["compiled"] != one_op_kernels["compiled"], (fused, one_op_kernels)


def test_a_trace_whose_fused_kernels_are_stored_runs_fused_at_first_sight(tmp_path):
    store = {"KILN_CACHE": "1", "KILN_CACHE_DIR": str(tmp_path / "cache")}
    first = run(SAME_TRACE_FIVE_TIMES, 1, extra=store)
    assert first["tiers"] == {"fused": 5}, first
    warm = run(SAME_TRACE_FIVE_TIMES, 4, extra=store)
    assert same(warm) and warm["tiers"] == {"fused": 5}, warm
    assert sum(warm["compiled"].values()) == 0, warm


TRAIN = os.path.join(REPO, "tests", "python", "scripts", "cache_train.py")


@pytest.mark.parametrize(("threshold", "async_compile", "delay_ms"), [(3, "0", 0), (2, "1", 30)])
def test_a_training_script_gives_the_same_bits_whatever_its_tiers(threshold, async_compile, delay_ms):
    code = f"import runpy, sys; sys.argv = [{TRAIN!r}, '--steps', '4']; runpy.run_path({TRAIN!r}, run_name='__main__')"
    at_first_sight = run(code, 1)
    tiered = run(code, threshold, async_compile, {"KILN_COMPILE_DELAY_MS": str(delay_ms)})
    keys = ("loss", "checksum", "first")
    assert {k: tiered[k] for k in keys} == {k: at_first_sight[k] for k in keys}

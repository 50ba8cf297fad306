"""Metrics counters and the host-fallback policy (KILN_FALLBACK)."""

import pytest
import torch

import kiln
from conftest import DEVICE, run_python


def test_counters_by_op_and_direction(dev):
    (torch.randn(10).to(dev) * 2).relu()  # first calls of a signature run on the host: warm them
    kiln.metrics.reset()
    x = torch.randn(1000).to(dev)
    y = (x * 2).relu()
    y.cpu()
    c = kiln.metrics.counters()
    assert c["bytes_copied"]["host_to_device"] == 4000
    assert c["bytes_copied"]["device_to_host"] == 4000
    if kiln.mode() == "eager":
        assert c["launches"]["aten::mul.Tensor"] >= 1 or c["launches"].get("aten::mul.out", 0) >= 1
        assert sum(c["library_kernels"].values()) >= 2
    else:  # mul and relu fused into one compiled kernel
        assert c["launches"]["fused kernel"] == 1
        assert c["executable_launches"]["pointwise"] == 1
        assert c["library_kernels"] == {}
    assert c["sync_points"]["copy to host"] >= 1
    text = kiln.metrics.report()
    assert "launches" in text and "host_to_device" in text
    kiln.metrics.reset()
    assert kiln.metrics.counters()["launches"] == {}


def test_errors_are_counted(dev):
    x = torch.arange(4.0).to(dev)
    x[torch.tensor([1]).to(dev)]  # warm the op: the first call of a signature runs synchronously
    kiln.metrics.reset()
    x[torch.tensor([9]).to(dev)]
    with pytest.raises(IndexError):
        getattr(torch, DEVICE).synchronize()
    assert kiln.metrics.counters()["errors"].get("aten::index.Tensor") == 1


FALLBACK_CODE = f"""
import warnings, torch, kiln
warnings.simplefilter('always')
x = torch.randn(6).to('{DEVICE}')
try:
    a = torch.logcumsumexp(x, 0)   # aten::_logcumsumexp has no meta kernel: a host fallback
    b = torch.logcumsumexp(x, 0)
    print('match', torch.allclose(a.cpu(), torch.logcumsumexp(x.cpu(), 0)))
except RuntimeError as e:
    print('error', 'KILN_FALLBACK=error' in str(e) and '_logcumsumexp' in str(e))
print('fallbacks', kiln.metrics.counters()['fallbacks'].get('aten::_logcumsumexp', 0))
"""


@pytest.mark.parametrize("policy", ["warn", "silent", "error"])
def test_fallback_policy(policy):
    r = run_python(FALLBACK_CODE, env={"KILN_FALLBACK": policy})
    assert r.returncode == 0, r.stderr
    warned = r.stderr.count("ran as a host fallback")
    if policy == "warn":
        assert "match True" in r.stdout and "fallbacks 2" in r.stdout
        assert warned == 1  # once per op name
    elif policy == "silent":
        assert "match True" in r.stdout and warned == 0
    else:
        assert "error True" in r.stdout


def test_metrics_report_at_exit():
    r = run_python(f"import torch; (torch.ones(3, device='{DEVICE}') + 1).cpu()", env={"KILN_METRICS": "1"})
    assert "kiln metrics" in r.stderr and "launches" in r.stderr


def test_an_op_registered_after_one_was_removed_gets_its_own_plan(dev):
    """A removed op's address is reused by the next one registered (custom ops
    of a torch.library.Library that is destroyed): kiln's plan for it, looked
    up by address, must not be the removed op's. The fallback counter names
    the op whose plan ran."""
    wrong = []
    for i in range(8):
        lib = torch.library.Library("kilntest", "DEF")
        name = f"plus_one_{i}"
        lib.define(f"{name}(Tensor x) -> Tensor")
        lib.impl(name, lambda x: x + 1, "CPU")
        kiln.metrics.reset()
        out = getattr(torch.ops.kilntest, name)(torch.ones(3, device=dev)).cpu()  # a host fallback: warns
        assert torch.equal(out, torch.full((3,), 2.0))
        if set(kiln.metrics.counters()["fallbacks"]) != {f"kilntest::{name}"}:
            wrong.append((name, kiln.metrics.counters()["fallbacks"]))
        lib._destroy()
    assert not wrong, wrong

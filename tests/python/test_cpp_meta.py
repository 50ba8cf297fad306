"""Shape inference uses ATen's C++ meta functions where torch replaced an
op's Meta kernel with a Python reference (src/dispatch/eager/cpp_meta.h): a
program's first pointwise op or cat on the device must not import
torch._dynamo and sympy (a second of CPU, once per process), and the
geometry must be eager CPU's."""

import os
import subprocess
import sys

import pytest
import torch

from conftest import DEVICE, REPO, run_python

FIRST_OPS = """
import sys, torch, kiln
kiln.set_mode({mode!r})
x = torch.ones(3, 4, device={device!r})
y = torch.cat([torch.add(x, x), x * x, x - 1, x == 1], dim=0)
torch.{device}.synchronize()
assert y.shape == (12, 4), y.shape
print("dynamo" if "torch._dynamo" in sys.modules else "", "sympy" if "sympy" in sys.modules else "")
"""


@pytest.mark.parametrize("mode", ["eager", "lazy"])
def test_first_ops_import_neither_dynamo_nor_sympy(mode):
    r = run_python(FIRST_OPS.format(mode=mode, device=DEVICE))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "", f"the first ops imported: {r.stdout.strip()}"


def test_committed_table_matches_the_installed_torch():
    r = subprocess.run(
        [sys.executable, os.path.join(REPO, "tools", "gen_cpp_meta_table.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def _layouts():
    base = torch.randn(2, 3, 4, 5)
    return {
        "contiguous": base,
        "channels_last": base.contiguous(memory_format=torch.channels_last),
        "transposed": base.transpose(1, 3),
        "expanded": torch.randn(1, 3, 1, 5).expand(2, 3, 4, 5),
    }


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "transposed", "expanded"])
def test_table_ops_give_eager_cpus_geometry(mode, layout):
    """Ops that the table covers, on inputs whose layout decides the output's
    strides: sizes, strides and dtype as on CPU."""
    a = _layouts()[layout]
    b = torch.randn(a.shape[-1])
    cases = {
        "add": lambda x, y: torch.add(x, y, alpha=2),
        "mul_int": lambda x, y: x * 3,
        "gt": lambda x, y: x > y,
        "cat": lambda x, y: torch.cat([x, x], dim=1),
        "clamp": lambda x, y: torch.clamp(x, min=-0.5, max=0.5),
        "gelu": lambda x, y: torch.nn.functional.gelu(x),
        "pow": lambda x, y: x.pow(2),
        "maximum": lambda x, y: torch.maximum(x, y),
    }
    for name, fn in cases.items():
        want = fn(a, b)
        got = fn(a.to(DEVICE), b.to(DEVICE))
        assert (got.shape, got.stride(), got.dtype) == (want.shape, want.stride(), want.dtype), (name, layout)
        torch.testing.assert_close(got.cpu(), want, msg=f"{name} on {layout}")


def test_table_op_errors_are_eager_cpus(mode):
    a, b = torch.randn(3, 4), torch.randn(5, 4)
    with pytest.raises(RuntimeError) as cpu:
        torch.add(a, b)
    with pytest.raises(RuntimeError) as dev:
        torch.add(a.to(DEVICE), b.to(DEVICE))
    assert str(dev.value) == str(cpu.value)

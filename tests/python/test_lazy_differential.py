"""Lazy mode against eager CPU on random programs of traceable ops.

KILN_DIFF_CASES sets the number of seeded programs (default 2000). A failure
prints the program: paste it into Python with DEV = "neuron" to reproduce.
"""
import os

import pytest
import torch

import kiln
from lazy_programs import Program

CASES = int(os.environ.get("KILN_DIFF_CASES", "2000"))
CHUNK = 250

def compare(program, name, got, want):
    """Integers and bool exactly; floats within the program's tolerance for the
    value (see lazy_programs.TOLERANCE), relative to its largest magnitude."""
    assert got.dtype == want.dtype, f"{name}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{name}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    if not want.dtype.is_floating_point:
        assert torch.equal(got, want), f"{name}: values differ\n got {got}\nwant {want}"
        return
    w = want.double()
    finite = torch.isfinite(w)
    scale = max(1.0, w[finite].abs().max().item()) if finite.any() else 1.0
    tol = program.tolerance(name, want.dtype) * scale
    torch.testing.assert_close(got.double(), w, rtol=0, atol=tol, equal_nan=True, msg=lambda m: f"{name}: {m}")


@pytest.mark.skipif(kiln.mode() != "lazy", reason="compares lazy mode with eager CPU")
@pytest.mark.parametrize("chunk", range((CASES + CHUNK - 1) // CHUNK))
def test_random_programs_match_eager(dev, chunk):
    for seed in range(chunk * CHUNK, min(CASES, (chunk + 1) * CHUNK)):
        program = Program(seed)
        want = program.run("cpu")
        try:
            got = program.run(str(dev))
            for name in want:
                compare(program, name, got[name], want[name])
        except Exception as e:  # noqa: BLE001 - any failure gets the reproducer
            pytest.fail(f"seed {seed}: {e}\n--- reproducer (DEV = '{dev}') ---\n{program.source()}\n---")


def test_programs_cover_the_traceable_forms():
    """The generator keeps producing the forms the test is meant to exercise."""
    text = "\n".join(Program(seed).source() for seed in range(200))
    for form in ["_(", "del ", "softmax", "transpose", ".to(torch.", "out=", "torch.where", "argmax", "::2"]:
        assert form in text, form

"""Lazy mode against eager CPU on random programs of traceable ops
(lazy_programs.py): in-place ops on overlapping, expanded and aliased
tensors, lines eager refuses (the device must raise the same exception type
at that line), and extreme values.

KILN_DIFF_CASES sets the number of seeded programs (default 2000). A failure
prints the program with its prelude: paste it into Python to reproduce.
"""

import math
import os

import pytest
import torch

import kiln
from conftest import UNDER_FIXED_POLICY
from lazy_programs import Program

CASES = int(os.environ.get("KILN_DIFF_CASES", "2000"))
CHUNK = 250


def compare(program, name, got, want):
    """Integers and bool exactly. Floats: an ordinary element within the
    program's tolerance for the value (see lazy_tables.TOLERANCE), relative
    to the largest finite magnitude of the ordinary elements, or within the
    last-bit differences the ops before it can amplify to (the ulp bound:
    log1p(tanh(x)) near x = -6 turns one float32 ulp of tanh into 4e-4);
    an element an extreme input or scalar reached, within the bound the CPU
    run propagated to it. See lazy_programs' docstring. inf must be inf and
    nan nan, except where the bound is infinite."""
    assert got.dtype == want.dtype, f"{name}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{name}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    if not want.dtype.is_floating_point:
        assert torch.equal(got, want), f"{name}: values differ\n got {got}\nwant {want}"
        return
    w, g = want.double(), got.double()
    tol = program.tolerance(name, want.dtype)
    bounds = program.bounds.get(name)
    if bounds is None:  # not tracked: every element is ordinary, the plain model
        zeros = torch.zeros(w.shape, dtype=torch.float64)
        bounds = (zeros, zeros, torch.zeros(w.shape, dtype=torch.bool))
    bound, ulp_bound, extreme = bounds
    ordinary = torch.isfinite(w) & ~extreme
    scale = max(1.0, w[ordinary].abs().max().item()) if ordinary.any() else 1.0
    allowed = torch.where(extreme, bound, torch.clamp(ulp_bound, min=tol * scale))
    close = (g == w) | (torch.isnan(g) & torch.isnan(w)) | ((g - w).abs() <= allowed) | torch.isinf(allowed)
    if bool(close.all()):
        return
    bad = (~close).nonzero().tolist()
    rows = "\n".join(
        f"  at {tuple(i)}: got {g[tuple(i)].item()!r} want {w[tuple(i)].item()!r} allowed "
        f"{allowed[tuple(i)].item():.3g} ({'extreme' if extreme[tuple(i)] else 'ordinary'})"
        for i in bad[:8]
    )
    raise AssertionError(
        f"{name}: {len(bad)} of {w.numel()} elements differ (ordinary: {tol:g} x {scale:.6g}; "
        f"extreme: propagated bound)\n{rows}"
    )


def check(program, dev):
    """Runs `program` on CPU and on `dev`; raises on any difference. The
    device is synchronized before the comparison, so an error kiln defers to
    a launch surfaces in the program that caused it."""
    want = program.run("cpu")
    got = program.run(str(dev))
    getattr(torch, dev.type).synchronize()
    for name in want:
        compare(program, name, got[name], want[name])


@pytest.mark.skipif(kiln.mode() != "lazy", reason="compares lazy mode with eager CPU")
@pytest.mark.parametrize("chunk", range((CASES + CHUNK - 1) // CHUNK))
def test_random_programs_match_eager(dev, chunk):
    failures = []
    for seed in range(chunk * CHUNK, min(CASES, (chunk + 1) * CHUNK)):
        program = Program(seed)
        try:
            check(program, dev)
        except Exception as e:  # noqa: BLE001 - any failure gets the reproducer
            failures.append(
                f"seed {seed}: {type(e).__name__}: {e}\n--- reproducer ---\n{program.reproducer(str(dev))}\n---"
            )
            try:  # a failed program must not leave an error pending for the next one
                getattr(torch, dev.type).synchronize()
            except RuntimeError:
                pass
    if failures:
        seeds = [f.split(":")[0][5:] for f in failures]
        pytest.fail(
            f"{len(failures)} programs differ from eager (seeds {', '.join(seeds)}); the first ones:\n"
            + "\n".join(failures[:3])
        )


# Found by bench/soak.py (20,000 programs from seed 1,000,000, 2026-12-03):
# lazy mode differed from eager CPU on these. An output given the memory of
# an input of its own kernel (1004650 and three more), fixed in fusion's
# pointer slots (test_lazy_fusion.py); 1017440 matches since shape inference
# uses ATen's C++ meta functions (src/dispatch/eager/cpp_meta.h), a cause not
# traced further.
SOAK_SEEDS_THAT_DIFFERED = [1004650, 1005343, 1015248, 1015469, 1017440]
# The soak of 2026-12-04: the flush failed with "invalid kernel IR: a
# row-level store of an element-level value" for a region over an empty
# space (a size-0 dim), a kernel that is never compiled or launched; its IR
# is no longer validated (fusion/build_kernel.cpp).
SOAK_SEEDS_THAT_DIFFERED.append(1003589)


@pytest.mark.skipif(kiln.mode() != "lazy", reason="compares lazy mode with eager CPU")
@pytest.mark.parametrize("seed", SOAK_SEEDS_THAT_DIFFERED)
def test_soak_programs_that_differed_match_eager(dev, seed):
    check(Program(seed), dev)


# Not a bug: the sign of a zero from a float max or min over +0 and -0 ties.
# Eager does not fix it either (CPU's amax and max give -0 and +0 for one
# input; src/codegen/lower_rows.cpp); a reciprocal then turns it into -inf
# against +inf. Strict, so that a change that makes it match is noticed.
# Under the adaptive policy's defaults the program runs once, as library
# kernels (eager's first calls), and matches.
@pytest.mark.skipif(kiln.mode() != "lazy", reason="compares lazy mode with eager CPU")
@pytest.mark.xfail(
    UNDER_FIXED_POLICY, reason="the sign of an amax over -0.0 and +0.0 (a tie eager does not fix)", strict=True
)
def test_amax_zero_tie_sign_differs_from_eager(dev):
    check(Program(1004001), dev)


def test_programs_cover_the_traceable_forms():
    """The generator keeps producing the forms the test is meant to exercise."""
    programs = [Program(seed) for seed in range(200)]
    text = "\n".join(p.source() for p in programs)
    for form in [
        "_(",
        "del ",
        "softmax",
        "transpose",
        ".to(torch.",
        "out=",
        "torch.where",
        "argmax",
        "::2",
        "expect_error(RuntimeError",
        ".t())",
        ".expand(",
        "float('inf')",
        "float('nan')",
        "-0.0",
        "1e-45",
        "3e38",
    ]:
        assert form in text, form
    forms = {}
    for p in programs:
        for form, n in p.forms.items():
            forms[form] = forms.get(form, 0) + n
    least = {
        "error": 100,  # lines eager refuses, kept: the device must raise the same
        "error: overlapping in-place": 20,  # a.add_(a.t()), a[1:].copy_(a[:-1])
        "error: write through an expanded view": 10,  # expanded.add_(...)
        "overlapping in-place": 20,  # the ones eager allows
        "write through an expanded view": 40,  # fill_/zero_
        "read before a write through an expanded view": 40,
        "read after a write through an expanded view": 20,
        "read before a write through another view": 20,
        "write through a view, another view read later": 40,
        "read after a write through another view": 40,
        "extreme input": 50,
        "extreme scalar": 50,
    }
    for form, n in least.items():
        assert forms.get(form, 0) >= n, (form, forms.get(form, 0))
    # Extreme inputs of every float dtype.
    for dtype in ["float32", "float64", "bfloat16", "float16"]:
        assert any(
            f".to(torch.{dtype})).to(DEV)" in line and "float('nan')" in line
            for p in programs
            for line in p.lines[: len(p.inputs)]
        ), dtype
    # The error bounds follow the programs (else the plain model is all that checks them).
    untracked = []
    for p in programs[:50]:
        p.run("cpu")
        if p.tracking_failure is not None:
            untracked.append((p.seed, p.tracking_failure))
    assert not untracked, untracked


def _program(*lines):
    """A hand-written program (inputs are the lines that move to DEV)."""
    program = object.__new__(Program)
    program.lines = list(lines)
    program.inputs = [line.split(" = ")[0] for line in lines if ".to(DEV)" in line]
    program.names = [line.split(" = ")[0] for line in lines]
    program.group = {n: n for n in program.names}
    program.group_tolerance = {}
    program.bounds = {}
    return program


def test_comparison_checks_small_elements_next_to_huge_ones():
    """A 3e38 in a result no longer hides the other elements' errors."""
    program = _program("v0 = torch.tensor([3e38, 0.5, 1e-38, -2.0]).to(DEV)", "v1 = v0 + torch.tanh(v0)")
    want = program.run("cpu")["v1"]
    compare(program, "v1", want.clone(), want)
    for i, wrong in [(1, want[1] + 1e-3), (2, 0.0), (3, want[3] * (1 + 1e-4))]:
        got = want.clone()
        got[i] = wrong
        with pytest.raises(AssertionError):
            compare(program, "v1", got, want)


def test_comparison_allows_what_an_ill_conditioned_chain_amplifies():
    """log1p(tanh(x)) at x = -6: two float32 ulps of tanh (kiln's tanh is
    within 5 ulp, eager's correctly rounded) move the result by 9e-4."""
    program = _program("v0 = torch.tensor([-6.0, -5.0, 0.5]).to(DEV)", "v1 = torch.tanh(v0)", "v2 = torch.log1p(v1)")
    want = program.run("cpu")
    tanh = want["v1"].view(torch.int32).add(torch.tensor([-2, -2, -2], dtype=torch.int32)).view(torch.float32)
    got = torch.log1p(tanh)
    compare(program, "v1", tanh, want["v1"])
    compare(program, "v2", got, want["v2"])
    with pytest.raises(AssertionError):
        compare(program, "v2", want["v2"] * torch.tensor([1.01, 1.0, 1.0]), want["v2"])
    with pytest.raises(AssertionError):  # well conditioned at 0.5: the plain tolerance
        compare(program, "v2", want["v2"] * torch.tensor([1.0, 1.0, 1.001]), want["v2"])


def test_comparison_allows_either_answer_of_a_maybe_zero_over_zero():
    """log1p of the smallest subnormal is 0 in eager (one subnormal ulp off)
    and the subnormal in kiln; divided by an exact 0 that is nan against
    inf. Either is eager's answer to inputs within its error."""
    program = _program(
        "v0 = torch.tensor([1e-45, 1.0, 2.0]).to(DEV)",
        "v1 = torch.tensor([0.0, 0.0, 4.0]).to(DEV)",
        "v2 = torch.log1p(v0)",
        "v3 = v2 / v1",
    )
    want = program.run("cpu")
    assert torch.isnan(want["v3"][0])
    got = want["v3"].clone()
    got[0] = math.inf
    compare(program, "v3", got, want["v3"])
    got[2] = math.nan  # a nonzero divisor leaves nothing undetermined
    with pytest.raises(AssertionError):
        compare(program, "v3", got, want["v3"])


def test_comparison_leaves_the_sign_of_a_tie_of_zeros_open():
    """maximum(-0.0, 0.0) is the first operand in eager's scalar loop (this
    4-element tensor) and the second in its vector loop; divided into 1, the
    two give -inf and inf. Both are eager's."""
    program = _program(
        "v0 = torch.tensor([-0.0, -0.0, 1.0, 2.0], dtype=torch.float64).to(DEV)",
        "v1 = torch.tensor([0.0, 0.0, 1.0, 3.0], dtype=torch.float64).to(DEV)",
        "v2 = torch.maximum(v0, v1)",
        "v3 = torch.reciprocal(v2)",
    )
    want = program.run("cpu")
    assert want["v3"][0].item() == -math.inf
    got = want["v3"].clone()
    got[0] = math.inf
    compare(program, "v3", got, want["v3"])
    got[3] = -got[3]  # elsewhere the sign is eager's
    with pytest.raises(AssertionError):
        compare(program, "v3", got, want["v3"])


def test_comparison_leaves_the_sign_of_a_clamped_zero_open():
    """Seed 38085: relu(x).clamp_max(y) with relu(x) = +0 and y = -0.0 is
    -0.0 in eager and may be +0 in kiln; rsqrt of it is -inf or inf."""
    program = _program(
        "v0 = torch.tensor([0.0, 4.0], dtype=torch.float64).to(DEV)",
        "v1 = torch.tensor([-0.0, 9.0], dtype=torch.float64).to(DEV)",
        "v2 = torch.relu(v0)",
        "v3 = torch.clamp_max(v2, v1)",
        "v4 = torch.rsqrt(v3)",
    )
    want = program.run("cpu")
    got = want["v4"].clone()
    got[0] = -got[0]
    compare(program, "v4", got, want["v4"])
    got[1] = -got[1]
    with pytest.raises(AssertionError):
        compare(program, "v4", got, want["v4"])


def test_comparison_lets_an_undetermined_element_decide_its_row():
    """Seed 95413: log(log1p(-5e-324)) is log(0) = -inf in eager and
    log(-5e-324) = nan in kiln (log1p one subnormal ulp apart); the max of
    its row may then be nan. An infinite bound stayed finite (nan_to_num's
    default turned it into 1.8e308), which refused the nan."""
    program = _program(
        "v0 = torch.tensor([-5e-324, 1e-308], dtype=torch.float64).to(DEV)",
        "v1 = torch.log1p(v0)",
        "v2 = torch.log(v1)",
        "v3 = v2.amax(dim=-1, keepdim=True)",
    )
    want = program.run("cpu")
    got = want["v3"].clone()
    got[0] = math.nan
    compare(program, "v3", got, want["v3"])

"""Eager's argument checks at the op, for ops lazy mode records as well as
library kernels (issue 14): each line below raises on CPU, and must raise
the same exception type, with eager's message, at the same line on the
device, in both modes, whether or not an earlier call of the op with the
same shapes passed. Plus the values lazy kernels must compute like eager's
at the edges the extended differential test found (NaN clamp bounds, -0.0,
FMA contraction, operands rounded to the common dtype)."""

import json

import pytest
import torch

import kiln
from conftest import DEVICE, rerun_with_launch_blocking, run_python, sync


def on(device, make):
    """`make` builds the line's tensors on `device` (plain CPU tensors moved over)."""
    return make(lambda t: t.to(device))


# (name, builds the failing call from a `to` function)
REFUSED = [
    ("in-place write broadcast larger", lambda to: lambda: to(torch.zeros(2)).clamp_min_(to(torch.ones(2, 2)))),
    ("in-place mul broadcast larger", lambda to: lambda: to(torch.zeros(1, 5)).mul_(to(torch.ones(5, 1)))),
    (
        "out= is an input and would grow",
        lambda to: (lambda a, b: lambda: torch.maximum(a, b, out=a))(to(torch.zeros(1, 1)), to(torch.zeros(1, 1, 1))),
    ),
    ("bool minus bool", lambda to: lambda: to(torch.zeros(3, dtype=torch.bool)) - True),
    ("floor of bool", lambda to: lambda: torch.floor(to(torch.zeros(3, dtype=torch.bool)))),
    ("abs of bool", lambda to: lambda: torch.abs(to(torch.zeros(3, dtype=torch.bool)))),
    ("argmax of bool", lambda to: lambda: to(torch.zeros(3, dtype=torch.bool)).argmax(dim=0)),
    ("int64 mul_ by a float", lambda to: lambda: to(torch.zeros(3, dtype=torch.int64)).mul_(0.5)),
    ("uint8 fill_ negative", lambda to: lambda: to(torch.zeros(3, dtype=torch.uint8)).fill_(-0.48)),
    ("half fill_ beyond its range", lambda to: lambda: to(torch.zeros(3, dtype=torch.half)).fill_(1e20)),
    ("half clamp bound beyond its range", lambda to: lambda: to(torch.zeros(3, dtype=torch.half)).clamp_min_(1e20)),
    ("float add with bool alpha", lambda to: lambda: torch.add(to(torch.zeros(3)), to(torch.zeros(3)), alpha=True)),
    ("max over an empty dim", lambda to: lambda: to(torch.zeros(4, 0)).max(dim=1)),
    (
        "copy_ of empty tensors that do not broadcast",
        lambda to: lambda: to(torch.zeros(0, 5)).copy_(to(torch.zeros(0, 3))),
    ),
]


@pytest.mark.parametrize("name,make", REFUSED, ids=[r[0] for r in REFUSED])
def test_refused_arguments_raise_eagers_error_at_the_op(mode, name, make):
    with pytest.raises(Exception) as cpu:
        on("cpu", make)()
    with pytest.raises(type(cpu.value)) as device:
        on(DEVICE, make)()  # the line itself raises, before any sync
    assert type(device.value) is type(cpu.value)
    assert str(cpu.value).split("\n")[0] in str(device.value), (str(device.value), str(cpu.value))
    sync()  # and nothing is left pending


def test_a_case_refused_after_the_same_shapes_passed_still_raises_at_the_op(mode):
    """The check is per argument case, and a scalar that does not fit the
    dtype is a case of its own: fill_(1.5) then fill_(1e20) on the same
    half tensor (and through an expanded view, which lazy mode does not
    trace) raise at the second line."""
    for view in [lambda t: t, lambda t: t.expand(3, 2)]:
        t = torch.zeros(3, 1, dtype=torch.half, device=DEVICE)
        view(t).fill_(1.5)
        view(t).fill_(2.5)
        with pytest.raises(RuntimeError, match="cannot be converted to type c10::Half without overflow"):
            view(t).fill_(1e20)
        sync()
        assert t.cpu().eq(2.5).all()


@pytest.mark.parametrize("run_mode", ["lazy", "eager"])
def test_launch_blocking_keeps_the_errors_at_the_op(run_mode):
    """The error tests above, again with every launch waited for."""
    rerun_with_launch_blocking(__file__, "raise and not launch_blocking", run_mode)


def test_changing_float_scalars_are_one_case(dev):
    """An optimizer's changing learning rate is not a new case: after the
    first step, lazy-mode steps of the same shapes check nothing on the host
    (no library kernels, no sync points)."""
    previous = kiln.mode()
    kiln.set_mode("lazy")
    try:
        p = torch.randn(64, device=dev)
        g = torch.randn(64, device=dev)
        p.add_(g, alpha=-1e-3)
        sync()
        kiln.metrics.reset()
        for step in range(5):
            p.add_(g, alpha=-1e-3 / (step + 2))
            p.mul_(1 - 1e-4 * step)
        sync()
        c = kiln.metrics.counters()
        assert c["library_kernels"] == {}, c["library_kernels"]
        assert sum(c["sync_points"].values()) == 1, c["sync_points"]
    finally:
        kiln.set_mode(previous)


NEW_LENGTHS = """
import torch, kiln
w = torch.randn(16, 24)
w_dev = w.to(kiln.DEVICE_NAME)

def first_calls(lengths):
    kiln.metrics.reset()
    for n in lengths:
        a = torch.randn(n, 16)
        torch.testing.assert_close((a.to(kiln.DEVICE_NAME) @ w_dev).cpu(), a @ w)
    return kiln.metrics.counters()["sync_points"].get("first call with these argument shapes", 0)

print(first_calls(range(33, 41)), first_calls(range(41, 50)), first_calls([1]), first_calls([24]))
"""


@pytest.mark.parametrize("run_mode", ["lazy", "eager"])
def test_a_new_length_is_not_a_new_case(run_mode):
    """A case is the arguments' pattern, not their sizes: variable-length
    inputs are checked once, at their first length. A size that becomes 1
    (a broadcast) or equal to another size is a new pattern, checked again.
    mm runs as a library kernel: its first call of a case runs on the host."""
    r = run_python(NEW_LENGTHS, env={"KILN_MODE": run_mode, "KILN_CACHE": "0"})  # no verdicts of other processes
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["1", "0", "1", "1"], r.stdout


def test_first_call_of_a_traced_op_is_checked_without_a_sync(dev):
    """A traced op's first call with new shapes is checked on zero-filled
    twins of its arguments, which needs neither their values nor a sync:
    the trace keeps growing, and the results are eager's."""
    previous = kiln.mode()
    kiln.set_mode("lazy")
    try:
        x = torch.randn(5, 7, device=dev)
        sync()
        kiln.metrics.reset()
        y = ((x * 3).relu() - 1).tanh()
        z = y.amax(dim=1)
        c = kiln.metrics.counters()
        assert c["sync_points"] == {} and c["library_kernels"] == {}, c
        want = ((x.cpu() * 3).relu() - 1).tanh().amax(dim=1)
        torch.testing.assert_close(z.cpu(), want)
    finally:
        kiln.set_mode(previous)


# A large call's first-sight check runs on a small call of the same case
# (src/dispatch/eager/small_stand_in.h). These large refusals raise eager's
# error, sizes and all. They do not pin the path where a stand-in raises and
# the full-size check decides: raising the stand-in's error instead left
# them passing (the meta kernel raises first, or the message names no
# size), and no traced op was found whose stand-in alone raises.
LARGE = 1 << 17
REFUSED_LARGE = [
    ("half fill_ beyond its range", lambda to: lambda: to(torch.zeros(LARGE, dtype=torch.half)).fill_(1e20)),
    ("int64 mul_ by a float", lambda to: lambda: to(torch.zeros(LARGE, dtype=torch.int64)).mul_(0.5)),
    (
        "float add with bool alpha",
        lambda to: lambda: torch.add(to(torch.zeros(LARGE)), to(torch.zeros(LARGE)), alpha=True),
    ),
    (
        "in-place mul broadcast larger",
        lambda to: lambda: to(torch.zeros(1, LARGE)).mul_(to(torch.ones(3, LARGE))),
    ),
    ("half clamp bound beyond its range", lambda to: lambda: to(torch.zeros(LARGE, dtype=torch.half)).clamp_min_(1e20)),
]


@pytest.mark.parametrize("name,make", REFUSED_LARGE, ids=[r[0] for r in REFUSED_LARGE])
def test_refused_large_arguments_raise_eagers_error_at_the_op(mode, name, make):
    with pytest.raises(Exception) as cpu:
        on("cpu", make)()
    with pytest.raises(type(cpu.value)) as device:
        on(DEVICE, make)()
    assert str(cpu.value).split("\n")[0] in str(device.value), (str(device.value), str(cpu.value))
    sync()


VAR_WARNINGS = """
import json, warnings, torch, kiln
kiln.set_mode("lazy")
x = torch.randn(1 << 17)
heard = {}
for device in ["cpu", kiln.DEVICE_NAME]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        heard[device] = torch.var(x.to(device), correction=5).cpu().item()
    heard[device + " warnings"] = [str(w.message) for w in caught]
print(json.dumps(heard))
"""


def test_a_large_call_warns_as_eager_does_not_as_its_stand_in_would():
    """var with a correction of 5 over 2^17 elements: eager does not warn,
    and kiln must not either, though the small stand-in, with fewer
    elements than the correction, warns that its degrees of freedom are
    <= 0 (so the call is checked at full size instead). Under the fixed
    policy, which checks every first call on twins, with no stored verdicts."""
    env = {"KILN_CACHE": "0", "KILN_COMPILE_THRESHOLD": "1", "KILN_ASYNC_COMPILE": "0"}
    r = run_python(VAR_WARNINGS, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    heard = json.loads(r.stdout)
    assert heard["cpu warnings"] == [] and heard[f"{DEVICE} warnings"] == [], heard
    assert heard[DEVICE] == pytest.approx(heard["cpu"], rel=1e-5), heard


LARGE_CHAIN = """
import json, os, torch, kiln
kiln.set_mode("lazy")
n = int(os.environ["CHAIN_ELEMENTS"])
x = torch.randn(4, n // 4, device=kiln.DEVICE_NAME)
b = torch.randn(1, n // 4, device=kiln.DEVICE_NAME)
getattr(torch, kiln.DEVICE_NAME).synchronize()
kiln.metrics.reset()
y = torch.tanh(x * 1.5 + b).sub_(0.25)
t = y.sum(dtype=torch.float64)
s = y.sum(dim=1)
checks = kiln.metrics.counters()["first_sight_checks"]
want_y = torch.tanh(x.cpu() * 1.5 + b.cpu()).sub_(0.25)
torch.testing.assert_close(y.cpu(), want_y)
torch.testing.assert_close(t.cpu(), want_y.sum(dtype=torch.float64))
torch.testing.assert_close(s.cpu(), want_y.sum(dim=1))
print(json.dumps(checks))
"""


def test_a_large_calls_first_sight_check_runs_on_a_small_call_of_its_case():
    """A chain of pointwise ops over 2^17 floats: each op's first call is
    checked on a stand-in of a few elements, not on 2^17 zeros (which cost
    the first step of a large chain most of its time in page faults). A
    dtype argument (the full sum's) names no size; ops with integer arguments
    (the sum's dim) and small calls are checked at their own sizes. The
    results are eager's."""
    got = {}
    for n in [LARGE, 64]:
        # The fixed policy: every first call is checked on twins (under the
        # adaptive one, a small op's first call runs on the host instead).
        # No cache: no verdicts of other processes.
        env = {"CHAIN_ELEMENTS": str(n), "KILN_CACHE": "0", "KILN_COMPILE_THRESHOLD": "1", "KILN_ASYNC_COMPILE": "0"}
        r = run_python(LARGE_CHAIN, env=env)
        assert r.returncode == 0, r.stderr[-2000:]
        got[n] = json.loads(r.stdout)
    assert got[LARGE] == {"small stand-in": 5, "zero-filled twins": 1}, got
    assert got[64] == {"zero-filled twins": 6}, got


def test_the_check_leaves_random_state_alone(mode):
    """The twins' run uses a throwaway generator: the program's stream is
    the one eager draws from."""
    torch.manual_seed(7)
    getattr(torch, DEVICE).manual_seed(7)
    a = torch.rand(4, 3, device=DEVICE)
    b = torch.nn.functional.dropout(a, 0.5)
    torch.manual_seed(7)
    getattr(torch, DEVICE).manual_seed(7)
    a2 = torch.rand(4, 3, device=DEVICE)
    b2 = torch.nn.functional.dropout(a2, 0.5)
    assert torch.equal(b.cpu(), b2.cpu())


def test_copy_between_views_of_the_same_data_is_a_no_op(mode):
    """Two slices of an expanded tensor that address the same elements:
    eager's copy_ returns before its overlap checks."""
    e = torch.zeros(1, device=DEVICE).expand(3)
    e[:2].copy_(e[1:])
    t = torch.arange(4.0, device=DEVICE)
    t.copy_(t.view(4))
    assert t.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]


# ---------------------------------------------------------------- values at the edges


def close_bits(got, want):
    """Equal values with equal signs (so -0.0 is not 0.0); NaN matches NaN."""
    got, want = got.cpu(), want
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got), nan)
    assert torch.equal(got[~nan], want[~nan]) and torch.equal(torch.signbit(got[~nan]), torch.signbit(want[~nan])), (
        got,
        want,
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_clamp_with_a_nan_scalar_bound_is_nan(mode, dtype):
    x = torch.tensor([-1.0, 0.5, 2.0], dtype=dtype)
    for f in [
        lambda t: t.clamp_min(float("nan")),
        lambda t: t.clone().clamp_max_(float("nan")),
        lambda t: torch.clamp(t, min=0.0, max=float("nan")),
        lambda t: torch.clamp(t, min=float("nan")),
    ]:
        close_bits(f(x.to(DEVICE)), f(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_sin_keeps_the_sign_of_zero(mode, dtype):
    x = torch.tensor([-0.0, 0.0, -1e-30, 2.0], dtype=dtype)
    close_bits(torch.sin(x.to(DEVICE)), torch.sin(x))
    y = x.to(DEVICE).clone()
    y.sin_()
    close_bits(y, torch.sin(x))
    close_bits(torch.rsqrt(torch.sin(torch.trunc(x.to(DEVICE) * 0.1))), torch.rsqrt(torch.sin(torch.trunc(x * 0.1))))


def test_addcmul_contracts_like_eager(mode):
    """fma(value * t1, t2, self): -inf + 1.29 * 1e300 * 1e300 is -inf, not
    NaN; and integer operands of a half result round to half first."""
    s = torch.tensor([-float("inf"), 1.0, -1.7e308], dtype=torch.float64)
    t = torch.tensor([1e300, 3.0, 1e154], dtype=torch.float64)
    close_bits(torch.addcmul(s.to(DEVICE), t.to(DEVICE), t.to(DEVICE), value=1.29), torch.addcmul(s, t, t, value=1.29))
    h = torch.tensor([0.5, 1.0, -2.0], dtype=torch.half)
    i = torch.tensor([70000, 9223372036854775807, 3], dtype=torch.int64)
    close_bits(torch.addcmul(h.to(DEVICE), i.to(DEVICE), i.to(DEVICE), value=0.5), torch.addcmul(h, i, i, value=0.5))


def test_logical_ops_round_a_wider_zero_dim_operand_first(mode):
    x = torch.tensor([1.0, 0.0, 2.0], dtype=torch.bfloat16)
    tiny = torch.tensor(1e-50, dtype=torch.float64)
    for f in [torch.logical_and, torch.logical_or, torch.logical_xor]:
        close_bits(f(x.to(DEVICE), tiny.to(DEVICE)), f(x, tiny))


def test_float32_variance_of_everything_overflows_like_eager(mode):
    """Reduced to one element, eager takes a float32 mean first: inf."""
    x = torch.full([2], -3e38)
    close_bits(x.to(DEVICE).var(dim=-1, keepdim=True), x.var(dim=-1, keepdim=True))
    close_bits(x.to(DEVICE).std(), x.std())
    y = torch.full([2, 2], -3e38)
    close_bits(y.to(DEVICE).var(dim=0), y.var(dim=0))


def test_mul_and_div_keep_only_a_one_element_second_operand_in_opmath(mode):
    """A half tensor divided by an int32 tensor divides by half(int32): inf
    beyond 65504; by a one-element operand, eager reads its original value
    in float32 (the is_scalar fast path)."""
    h = torch.tensor([[1.0, -2.0, 0.0], [3.0, 4.0, -0.0]], dtype=torch.half)
    big = torch.tensor([2147483647, 16777217, 3], dtype=torch.int32)
    for divisor in [big, big[:1], big[1:2].reshape(1, 1), torch.tensor(70000, dtype=torch.int32)]:
        close_bits(h.to(DEVICE) / divisor.to(DEVICE), h / divisor)
        close_bits(h.to(DEVICE) * divisor.to(DEVICE), h * divisor)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_maximum_and_minimum_propagate_nan_beside_a_negative_zero(mode, dtype):
    """minimum(-0.0, nan) is nan in vectors of float16 too (LLVM 19's x86
    lowering of a half-vector llvm.minimum returned -0.0), and
    maximum(abs(x), 0) is abs(x) (LLVM 19's InstCombine folded a
    compare-and-select form of it into x > 0 ? abs(x) : 0). A tie of +0 and
    -0 may give either: eager's own vector and scalar loops differ there."""
    a = torch.tensor([-0.0, 1.0, float("nan"), 2.0, 0.0, -0.0, 5.0, -1.0] * 8, dtype=dtype)
    b = torch.tensor([float("nan"), float("nan"), 1.0, 3.0, -0.0, 0.0, 5.0, -2.0] * 8, dtype=dtype)
    zeros = torch.zeros(64, dtype=dtype)
    for f in [torch.minimum, torch.maximum]:
        for x, y in [(a, b), (b, a), (a.abs(), zeros), (-a.abs(), zeros)]:
            got, want = f(x.to(DEVICE), y.to(DEVICE)).cpu(), f(x, y)
            assert torch.equal(torch.isnan(got), torch.isnan(want))
            assert torch.equal(got.nan_to_num(7), want.nan_to_num(7)), (f, x, y, got, want)
    for x in [a, -a]:
        got = torch.maximum(torch.abs(x.to(DEVICE)), zeros.to(DEVICE))
        assert torch.equal(got.cpu().nan_to_num(7), torch.maximum(torch.abs(x), zeros).nan_to_num(7))


def test_write_through_an_empty_expanded_view_beside_a_reduction(mode):
    """Seed 73311: an in-place op on an empty expanded view fused with an
    argmax over the expanded dim made invalid kernel IR (a store at one
    address along the reduced dim). Empty or not, such writes are not traced."""

    def run(device):
        x = torch.zeros(7, 0, dtype=torch.float64, device=device).unsqueeze(0).expand(2, 7, 0)
        s = torch.tensor([0.5], dtype=torch.float64, device=device)
        m = torch.maximum(s, x)
        lse = torch.logsumexp(s, dim=0)
        x.div_(m)
        return lse, m.argmax(dim=0, keepdim=True)

    (lse, idx), (want_lse, want_idx) = run(DEVICE), run("cpu")
    sync()
    close_bits(lse, want_lse)
    assert idx.shape == want_idx.shape and idx.dtype == want_idx.dtype

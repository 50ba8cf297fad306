"""Shape inference uses ATen's C++ meta functions where torch replaced an
op's Meta kernel with a Python reference (src/dispatch/eager/cpp_meta.h): a
program's first pointwise op or cat on the device must not import
torch._dynamo and sympy (a second of CPU, once per process), and the
geometry must be eager CPU's."""

import os
import subprocess
import sys
import warnings

import pytest
import torch

import kiln
from conftest import DEVICE, REPO, run_python

FIRST_OPS = """
import sys, torch, kiln
kiln.set_mode({mode!r})
x = torch.ones(3, 4, device={device!r})
y = torch.cat([torch.add(x, x), x * x, x - 1, x == 1], dim=0)
# Ops whose meta kernel kiln writes by hand (written_meta.cpp):
z = torch.where(x > 0, torch.relu(x), 0.0)
z = torch.nn.functional.layer_norm(z, (4,))
with torch.no_grad():  # inference: nn.TransformerEncoderLayer's fused op, and attention's
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True).eval().to({device!r})
    e = layer(torch.ones(2, 3, 8, device={device!r}))
    q = torch.ones(1, 2, 3, 4, device={device!r})
    a = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
w = torch.ones(4, device={device!r}, requires_grad=True)
torch.nn.functional.layer_norm(x, (4,), w).sum().backward()  # training: layer_norm's backward
k = torch.ones(2, 3, 3, 3, device={device!r}, requires_grad=True)
torch.nn.functional.conv2d(torch.ones(1, 3, 5, 5, device={device!r}), k, padding=1).sum().backward()  # a conv net's
torch.{device}.synchronize()
assert e.shape == (2, 3, 8) and a.shape == (1, 2, 3, 4), (e.shape, a.shape)
assert y.shape == (12, 4), y.shape
assert z.shape == (3, 4), z.shape
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


def _layer_norm_backward(t, shape, weight, bias, mask):
    """native_layer_norm_backward of `t` (any layout) with a gradient laid out like it."""
    _, mean, rstd = torch.ops.aten.native_layer_norm(t, shape, weight, bias, 1e-5)
    grads = torch.ops.aten.native_layer_norm_backward(t * 0.5, t, shape, mean, rstd, weight, bias, mask)
    return tuple(g for g in grads if g is not None)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "transposed", "expanded"])
def test_written_metas_give_eager_cpus_geometry(mode, layout):
    """relu, where, native_layer_norm and its backward, whose meta kernels kiln writes (no
    C++ meta function in ATen): sizes, strides and dtypes as on CPU, over the
    layouts, dtype promotions and mixed-precision parameters they handle."""
    a = _layouts()[layout]
    n = a.shape[-1]
    w, o = torch.randn(n), torch.randn(n)
    cases = {
        "relu": lambda t, to: torch.relu(t),
        "relu_int": lambda t, to: torch.relu((t * 4).to(torch.int32)),
        "where": lambda t, to: torch.where(t > 0, t, to(o)),
        "where_scalar": lambda t, to: torch.where(t > 0, t, 0.0),
        "where_promotes": lambda t, to: torch.where(t > 0, t.double(), (t * 2).to(torch.int64)),
        "where_uint8_condition": lambda t, to: torch.where((t > 0).to(torch.uint8), t, t),
        "layer_norm": lambda t, to: torch.ops.aten.native_layer_norm(t, [n], to(w), to(w), 1e-5),
        "layer_norm_2d": lambda t, to: torch.ops.aten.native_layer_norm(t, list(t.shape[-2:]), None, None, 1e-5),
        "layer_norm_bf16_float_weights": lambda t, to: torch.ops.aten.native_layer_norm(
            t.bfloat16(), [n], to(w), to(w), 1e-5
        ),
        "layer_norm_half": lambda t, to: torch.ops.aten.native_layer_norm(t.half(), [n], None, None, 1e-5),
        "layer_norm_backward": lambda t, to: _layer_norm_backward(t, [n], to(w), to(o), [True, True, True]),
        "layer_norm_backward_input_only": lambda t, to: _layer_norm_backward(t, [n], to(w), None, [True, False, False]),
        "layer_norm_backward_2d_no_affine": lambda t, to: _layer_norm_backward(
            t, list(t.shape[-2:]), None, None, [True, False, False]
        ),
        "layer_norm_backward_bf16_float_weights": lambda t, to: _layer_norm_backward(
            t.bfloat16(), [n], to(w), to(o), [True, True, True]
        ),
    }
    for name, fn in cases.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a uint8 condition is deprecated, warned once per process
            want = fn(a, lambda t: t)
            got = fn(a.to(DEVICE), lambda t: t.to(DEVICE))
        for g, e in zip(*(((r,) if isinstance(r, torch.Tensor) else r) for r in (got, want))):
            assert (g.shape, g.stride(), g.dtype) == (e.shape, e.stride(), e.dtype), (name, layout)
            torch.testing.assert_close(g.cpu(), e, msg=f"{name} on {layout}")


def _encoder_layer_fwd(src, layer, to):
    a, f = layer.self_attn, layer
    return torch._transformer_encoder_layer_fwd(
        src,
        8,
        2,
        *(to(t) for t in (a.in_proj_weight, a.in_proj_bias, a.out_proj.weight, a.out_proj.bias)),
        False,
        layer.norm_first,
        1e-5,
        *(to(t) for t in (f.norm1.weight, f.norm1.bias, f.norm2.weight, f.norm2.bias)),
        *(to(t) for t in (f.linear1.weight, f.linear1.bias, f.linear2.weight, f.linear2.bias)),
        None,
        None,
    )


def _assert_cpus_geometry_then_launched(name, fn):
    """fn(to) on the device gives CPU's results, sizes, strides and dtypes;
    and, the geometry being the meta kernel's, a later call is launched, not
    run on the host (where the CPU kernel's geometry would mend a wrong meta
    kernel)."""
    want = fn(lambda t: t)
    got = fn(lambda t: t.to(DEVICE))
    for g, e in zip(*(((r,) if isinstance(r, torch.Tensor) else r) for r in (got, want))):
        assert (g.shape, g.stride(), g.dtype) == (e.shape, e.stride(), e.dtype), name
        torch.testing.assert_close(g.cpu(), e, msg=name)
    getattr(torch, DEVICE).synchronize()
    kiln.metrics.reset()
    fn(lambda t: t.to(DEVICE))
    getattr(torch, DEVICE).synchronize()
    waits = kiln.metrics.counters().get("sync_points", {})
    assert set(waits) <= {"synchronize", "copy to device"}, (name, waits)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_and_attention_metas_give_eager_cpus_geometry(mode, norm_first):
    """_transformer_encoder_layer_fwd (nn.TransformerEncoderLayer in inference)
    and _scaled_dot_product_flash_attention_for_cpu, whose meta kernels kiln
    writes: a contiguous result whatever the input's strides, and attention's
    log-sum-exp transposed, in float for a bfloat16 query."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, norm_first=norm_first).eval()
    x = torch.randn(3, 5, 8)
    q, k, v = torch.randn(2, 2, 5, 4), torch.randn(2, 2, 7, 4), torch.randn(2, 2, 7, 4)
    qkv = torch.randn(2, 5, 24)
    attention = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    cases = {
        "encoder": lambda to: _encoder_layer_fwd(to(x), layer, to),
        "encoder_transposed_input": lambda to: _encoder_layer_fwd(to(x).transpose(0, 1), layer, to),
        "encoder_empty": lambda to: _encoder_layer_fwd(to(x[:0]), layer, to),
        "attention": lambda to: attention(to(q), to(k), to(v)),
        # As attention modules call it: (batch, length, heads, dim) transposed,
        # and sliced from one qkv projection (Hugging Face GPT-2).
        "attention_transposed": lambda to: attention(
            *(to(t).transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v)), 0.0, True
        ),
        "attention_from_qkv": lambda to: attention(
            *(t.view(2, 5, 2, 4).transpose(1, 2) for t in to(qkv).split(8, dim=2)), 0.0, True
        ),
        "attention_causal_bf16": lambda to: attention(to(q).bfloat16(), to(k).bfloat16(), to(v).bfloat16(), 0.0, True),
    }
    with torch.no_grad():
        for name, fn in cases.items():
            _assert_cpus_geometry_then_launched(name, fn)


def test_layer_norm_backward_is_launched_not_run_on_the_host(mode):
    """A training step's layer norm backward: after its first call, the
    meta kernel's geometry is the CPU kernel's, so the op is launched (a
    wrong geometry would run it on the host at every call)."""
    x, w, b = torch.randn(6, 5, 8), torch.randn(8), torch.randn(8)

    def backward():
        return _layer_norm_backward(x.to(DEVICE), [8], w.to(DEVICE), b.to(DEVICE), [True, True, True])

    want = _layer_norm_backward(x, [8], w, b, [True, True, True])
    backward()
    getattr(torch, DEVICE).synchronize()
    kiln.metrics.reset()
    got = backward()
    getattr(torch, DEVICE).synchronize()
    waits = kiln.metrics.counters().get("sync_points", {})
    assert set(waits) <= {"synchronize", "copy to device"}, waits
    for g, e in zip(got, want):
        torch.testing.assert_close(g.cpu(), e)


def _conv_cases():
    torch.manual_seed(0)
    x1, x2, x3 = torch.randn(2, 4, 9), torch.randn(2, 4, 9, 7), torch.randn(1, 4, 5, 6, 7)
    w1, w2, w3 = torch.randn(6, 4, 3), torch.randn(6, 4, 3, 3), torch.randn(6, 4, 3, 3, 3)
    wg, wt, b = torch.randn(6, 2, 3, 3), torch.randn(4, 3, 3, 3), torch.randn(6)
    cl = torch.channels_last
    F = torch.nn.functional
    return {
        "conv1d": lambda to: F.conv1d(to(x1), to(w1), to(b), padding=1),
        "conv1d_strided_input": lambda to: F.conv1d(to(x1.transpose(1, 2).contiguous().transpose(1, 2)), to(w1)),
        "conv2d": lambda to: F.conv2d(to(x2), to(w2), to(b), stride=2, padding=1),
        "conv2d_no_bias_dilated": lambda to: F.conv2d(to(x2), to(w2), dilation=2, padding=2),
        "conv2d_channels_last_input": lambda to: F.conv2d(to(x2.contiguous(memory_format=cl)), to(w2), padding=1),
        "conv2d_channels_last_weight": lambda to: F.conv2d(to(x2), to(w2.contiguous(memory_format=cl))),
        "conv2d_groups": lambda to: F.conv2d(to(x2), to(wg), groups=2, padding=(1, 0)),
        "conv2d_double": lambda to: F.conv2d(to(x2.double()), to(w2.double()), padding=1),
        "conv2d_double_channels_last": lambda to: F.conv2d(
            to(x2.double().contiguous(memory_format=cl)), to(w2.double()), padding=1
        ),
        "conv2d_bf16": lambda to: F.conv2d(to(x2.bfloat16()), to(w2.bfloat16())),
        "conv2d_empty_batch": lambda to: F.conv2d(to(x2[:0]), to(w2)),
        "conv3d": lambda to: F.conv3d(to(x3), to(w3), padding=1),
        "conv_transpose2d": lambda to: F.conv_transpose2d(to(x2), to(wt), stride=2, padding=1, output_padding=1),
        "conv_transpose2d_channels_last": lambda to: F.conv_transpose2d(
            to(x2.contiguous(memory_format=cl)), to(wt), stride=2
        ),
    }


def test_convolution_meta_gives_eager_cpus_geometry(mode):
    """aten::convolution, whose meta kernel kiln writes (torch's Python one
    imports sympy, and leaves every output contiguous): the layout the CPU
    kernel's backend gives, channels last included, for 1-d to 3-d,
    transposed, grouped, dilated and double convolutions; and a later call is
    launched, not run on the host."""
    for name, fn in _conv_cases().items():
        _assert_cpus_geometry_then_launched(name, fn)


def _assert_errors_are_eager_cpus(cases):
    """Each case(to) raises on the device the RuntimeError it raises on CPU, at the op."""
    for i, case in enumerate(cases):
        with pytest.raises(RuntimeError) as cpu:
            case(lambda t: t)
        with pytest.raises(RuntimeError) as dev:
            case(lambda t: t.to(DEVICE))
        assert str(cpu.value).split("\n")[0] in str(dev.value), (i, str(dev.value), str(cpu.value))


def test_convolution_meta_errors_are_eager_cpus(mode):
    """Shapes a convolution refuses raise eager's error at the op, also once
    a call of the same pattern has run (the meta kernel checks them)."""
    F = torch.nn.functional
    x, w = torch.randn(2, 4, 9, 7), torch.randn(6, 4, 3, 3)
    F.conv2d(x.to(DEVICE), w.to(DEVICE))  # the pattern's first call: on the host
    cases = [
        lambda to: F.conv2d(to(x), to(torch.randn(6, 3, 3, 3))),  # channels
        lambda to: F.conv2d(to(x), to(w), to(torch.randn(5))),  # bias size
        lambda to: F.conv2d(to(x[:, :, :2]), to(w)),  # a kernel larger than the padded input
        lambda to: F.conv2d(to(x), to(torch.randn(6, 2, 3, 3)), groups=3),  # channels not divisible by groups
    ]
    _assert_errors_are_eager_cpus(cases)


def test_written_meta_errors_are_eager_cpus(mode):
    """The checks the written meta kernels make raise eager's errors at the op."""
    a = torch.randn(3, 4)
    cases = [
        lambda to: torch.relu(to(torch.zeros(3, dtype=torch.bool))),
        lambda to: torch.where(to(a), to(a), to(a)),
        lambda to: torch.nn.functional.layer_norm(to(a), (5,)),
        lambda to: torch.nn.functional.layer_norm(to(a), (4,), weight=to(torch.ones(3))),
        lambda to: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(*(to(a[None]),) * 3),
    ]
    _assert_errors_are_eager_cpus(cases)

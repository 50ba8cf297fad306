"""scaled_dot_product_attention on the device takes the backend eager CPU takes
(src/dispatch/eager/attention.cpp): CPU's flash-attention kernel where CPU's
checks pass, so forward and backward give CPU's bits; the math path where they
do not, or where the user asks for it."""

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from conftest import DEVICE


def _inputs(shape=(2, 4, 16, 8), seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g, requires_grad=True) for _ in range(3)]


def _on_device(tensors):
    return [t.detach().to(DEVICE).requires_grad_() for t in tensors]


def _run(q, k, v, **kwargs):
    out = F.scaled_dot_product_attention(q, k, v, **kwargs)
    cotangent = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    out.backward(cotangent.to(out.device))
    return out, [t.grad for t in (q, k, v)]


CASES = {
    "plain": {},
    "causal": {"is_causal": True},
    "bool mask": {"attn_mask": "bool"},
    "float mask": {"attn_mask": "float"},
    "scale": {"scale": 0.3},
}


def _mask(kind, device):
    g = torch.Generator().manual_seed(1)
    m = torch.rand(16, 16, generator=g) > 0.3
    m.fill_diagonal_(True)
    return (m if kind == "bool" else torch.where(m, 0.0, -5.0)).to(device)


@pytest.mark.parametrize("case", CASES)
def test_sdpa_takes_cpus_flash_kernel_and_gives_cpus_bits(case, mode):
    kwargs = dict(CASES[case])
    q, k, v = _inputs()
    qd, kd, vd = _on_device((q, k, v))
    cpu_kwargs, dev_kwargs = dict(kwargs), dict(kwargs)
    if "attn_mask" in kwargs:
        cpu_kwargs["attn_mask"] = _mask(kwargs["attn_mask"], "cpu")
        dev_kwargs["attn_mask"] = _mask(kwargs["attn_mask"], DEVICE)
    out, grads = _run(q, k, v, **cpu_kwargs)
    dev_out, dev_grads = _run(qd, kd, vd, **dev_kwargs)
    assert type(out.grad_fn).__name__ == "ScaledDotProductFlashAttentionForCpuBackward0"
    assert type(dev_out.grad_fn).__name__ == type(out.grad_fn).__name__
    torch.testing.assert_close(dev_out.cpu(), out, rtol=0, atol=0)
    for d, c in zip(dev_grads, grads):
        torch.testing.assert_close(d.cpu(), c, rtol=0, atol=0)


def test_sdpa_math_backend_when_asked(mode):
    q, k, v = _inputs()
    qd, kd, vd = _on_device((q, k, v))
    with sdpa_kernel(SDPBackend.MATH):
        out, grads = _run(q, k, v, is_causal=True)
        dev_out, dev_grads = _run(qd, kd, vd, is_causal=True)
    assert "Flash" not in type(dev_out.grad_fn).__name__
    torch.testing.assert_close(dev_out.cpu(), out, rtol=1e-5, atol=1e-6)
    for d, c in zip(dev_grads, grads):
        torch.testing.assert_close(d.cpu(), c, rtol=1e-5, atol=1e-6)


def test_sdpa_backend_cpu_lacks_fails_as_on_cpu(mode):
    """A backend CPU cannot run is refused on the device too, with CPU's error."""
    q, k, v = _inputs()
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION), pytest.raises(RuntimeError) as cpu_error:
        F.scaled_dot_product_attention(q, k, v)
    qd, kd, vd = _on_device((q, k, v))
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION), pytest.raises(RuntimeError) as dev_error:
        F.scaled_dot_product_attention(qd, kd, vd)
    assert str(dev_error.value).splitlines()[0] == str(cpu_error.value).splitlines()[0]


def test_sdpa_with_dropout_runs_on_the_device(mode):
    """Dropout needs the device's generator: CPU's flash kernel does not take it, so the math path runs."""
    q, k, v = _on_device(_inputs())
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    out.sum().backward()
    assert out.shape == q.shape and torch.isfinite(out.cpu()).all()
    assert "Flash" not in type(out.grad_fn).__name__

"""Eager semantics on the device: copies, views, in-place, dtypes, out=, errors."""

import pytest
import torch

from conftest import DEVICE, run_python

ALL_DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.bool,
    torch.complex64,
    torch.complex128,
]


def rand(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_complex or dtype.is_floating_point:
        return (
            torch.randn(shape, generator=g).to(dtype)
            if not dtype.is_complex
            else torch.randn(shape, generator=g, dtype=dtype)
        )
    return torch.randint(-5 if dtype != torch.uint8 else 0, 100, shape, generator=g).to(dtype)


# ---------------------------------------------------------------- copies


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_round_trip_every_dtype(dev, dtype):
    x = rand((3, 4), dtype)
    y = x.to(dev)
    assert y.device == dev and y.dtype == dtype
    assert torch.equal(y.cpu(), x)


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.arange(24.0).reshape(4, 6).t(),  # non-contiguous
        lambda: torch.arange(40.0).reshape(5, 8)[::2, 1::3],  # strided with offset
        lambda: torch.arange(10.0)[3:7],  # offset
        lambda: torch.arange(3.0).reshape(3, 1).expand(3, 5),  # stride 0
        lambda: torch.empty(0, 3),  # empty
        lambda: torch.tensor(3.5),  # 0-dim
    ],
    ids=["transposed", "strided", "offset", "broadcast", "empty", "0-dim"],
)
def test_copies_both_ways(dev, make):
    x = make()
    y = x.to(dev)
    assert y.shape == x.shape
    assert torch.equal(y.cpu(), x)
    # device -> device copy into a non-contiguous destination, then back
    z = torch.zeros(x.shape[::-1], device=dev).t() if x.dim() == 2 else torch.zeros_like(y)
    z.copy_(y)
    assert torch.equal(z.cpu(), x)
    # host -> device copy into an existing strided device tensor
    w = torch.full(x.shape[::-1], 7.0, device=dev).t() if x.dim() == 2 else torch.full_like(y, 7.0)
    w.copy_(x)
    assert torch.equal(w.cpu(), x)


def test_copy_with_dtype_conversion_and_broadcast(dev):
    x = torch.arange(4, dtype=torch.int32)
    y = torch.zeros(3, 4, device=dev)
    y.copy_(x)
    assert torch.equal(y.cpu(), x.float().expand(3, 4))


def test_copies_to_the_host_broadcast_convert_and_take_any_layout(dev):
    """Device-to-host copies go through the device's copy of plain bytes; every
    other source or destination layout is staged, with eager's result."""
    x = torch.arange(12.0).reshape(3, 4)
    d = x.to(dev)
    for src, src_cpu in [(d[:1], x[:1]), (d.t(), x.t()), (d[:, ::2], x[:, ::2]), (d[1:2], x[1:2])]:
        for out in [torch.zeros(5, *src_cpu.shape), torch.zeros(src_cpu.shape[::-1]).t(), torch.zeros(src_cpu.shape)]:
            if out.shape[-2:] != src_cpu.shape:
                continue
            for dtype in (torch.float32, torch.int64):
                got, want = out.to(dtype), out.to(dtype)
                got.copy_(src)
                want.copy_(src_cpu)
                assert torch.equal(got, want), (src_cpu.shape, out.shape, dtype)
    assert torch.equal(torch.zeros(2, 4).copy_(d[:1]), x[:1].expand(2, 4))  # a broadcast [1, 4] source


def test_host_source_may_change_after_copy(dev):
    x = torch.ones(1000)
    y = x.to(dev)
    x.fill_(5)
    assert torch.equal(y.cpu(), torch.ones(1000))


def test_cross_device_copy():
    if torch.accelerator.device_count() < 2:
        pytest.skip("needs 2 devices")
    a = torch.arange(6.0).to(f"{DEVICE}:0") * 2
    b = a.to(f"{DEVICE}:1")
    assert b.device.index == 1
    assert torch.equal(b.cpu(), torch.arange(6.0) * 2)


# ---------------------------------------------------------------- views and in-place


def test_inplace_on_strided_view_changes_base(dev):
    x = torch.arange(8.0).to(dev)
    x[::2].mul_(2)
    expected = torch.arange(8.0)
    expected[::2] *= 2
    assert torch.equal(x.cpu(), expected)


def test_inplace_on_transpose_changes_base(dev):
    x = torch.arange(6.0).reshape(2, 3).to(dev)
    y = x.t()
    y.add_(1)
    assert torch.equal(x.cpu(), torch.arange(6.0).reshape(2, 3) + 1)


def test_views_alias_device_storage(dev):
    x = torch.arange(24.0).to(dev)
    views = [
        x.view(4, 6),
        x.reshape(2, 12),
        x.view(4, 6).transpose(0, 1),
        x[5:9],
        x.view(2, 3, 4).permute(2, 0, 1),
        x.unfold(0, 4, 2),
        x.as_strided((3, 3), (4, 1), 2),
        x.view(4, 6).select(1, 2),
        x.unsqueeze(0).expand(3, 24),
        x.view(2, 12).narrow(1, 3, 4),
        x.view(4, 6).diagonal(),
        x.view(torch.int32),
    ]
    for v in views:
        assert v.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    x.view(4, 6)[1, 2] = -1
    assert x[8].item() == -1


def test_view_ops_are_not_fallbacks(dev):
    import kiln

    kiln.metrics.reset()
    x = torch.arange(24.0).to(dev)
    x.unfold(0, 4, 2).sum().item()
    x.view(4, 6).t().contiguous().cpu()
    assert kiln.metrics.counters()["fallbacks"] == {}


def test_add_into_overlapping_view(dev):
    x = torch.arange(6.0)
    y = x.to(dev)
    x[1:].add_(x[:-1].clone())
    y[1:].add_(y[:-1].clone())
    assert torch.equal(y.cpu(), x)


def test_zero_dim_and_scalars(dev):
    a = torch.tensor(2.5, device=dev)
    assert a.dim() == 0
    assert (a * 2).item() == 5.0
    assert (a + torch.tensor(1.0)).item() == 3.5  # CPU 0-dim tensor acts as a scalar
    assert float(a) == 2.5 and bool(a > 2)


def test_type_promotion(dev):
    i = torch.arange(5, dtype=torch.int32)
    f = torch.linspace(0, 1, 5, dtype=torch.float16)
    for a, b in [(i, f), (i, 2.5), (f, torch.arange(5.0).double()), (i.bool(), i)]:
        expected = a + b
        actual = a.to(dev) + (b.to(dev) if isinstance(b, torch.Tensor) else b)
        assert actual.dtype == expected.dtype
        assert torch.equal(actual.cpu(), expected)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_ops_every_dtype(dev, dtype):
    x = rand((4, 5), dtype, 1)
    y = rand((4, 5), dtype, 2)
    d = x.to(dev), y.to(dev)
    ops = [
        lambda a, b: a == b,
        lambda a, b: torch.cat([a, b]),
        lambda a, b: a.flip(0),
        lambda a, b: torch.where(a == b, a, b),
    ]
    if dtype != torch.bool:
        ops += [lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a.sum(1)]
    for op in ops:
        expected = op(x, y)
        actual = op(*d)
        assert actual.dtype == expected.dtype
        assert torch.equal(actual.cpu(), expected)


def test_out_variants(dev):
    a = torch.randn(3, 4)
    b = torch.randn(3, 4)
    out = torch.empty(0, device=dev)
    r = torch.add(a.to(dev), b.to(dev), out=out)
    assert r is out and out.shape == (3, 4)
    assert torch.equal(out.cpu(), a + b)
    out2 = torch.empty(12, device=dev)[::2]  # wrong shape, gets resized
    torch.mul(a.to(dev), 2, out=out2)
    assert torch.equal(out2.cpu(), a * 2)
    vals, idx = torch.empty(0, device=dev), torch.empty(0, dtype=torch.long, device=dev)
    torch.max(a.to(dev), 1, out=(vals, idx))
    ev, ei = torch.max(a, 1)
    assert torch.equal(vals.cpu(), ev) and torch.equal(idx.cpu(), ei)


def test_data_dependent_ops(dev):
    x = torch.tensor([0.0, 1.0, 0.0, 3.0, -2.0])
    d = x.to(dev)
    assert torch.equal(torch.nonzero(d).cpu(), torch.nonzero(x))
    assert torch.equal(d[d > 0].cpu(), x[x > 0])
    assert torch.equal(torch.unique(d).cpu(), torch.unique(x))


def test_indexing_with_cpu_indices(dev):
    x = torch.arange(10.0)
    idx = torch.tensor([1, 3, 5])
    assert torch.equal(x.to(dev)[idx].cpu(), x[idx])
    y = x.to(dev)
    y[idx] = 0
    x[idx] = 0
    assert torch.equal(y.cpu(), x)


def test_printing(dev):
    x = torch.tensor([1.5, 2.0, -3.25]).to(dev)
    text = str(x)
    assert "1.5000" in text and f"device='{DEVICE}:0'" in text


# ---------------------------------------------------------------- errors


def test_out_of_memory_then_usable(dev):
    mod = getattr(torch, DEVICE)
    capacity = mod.mem_get_info()[1]
    with pytest.raises(torch.OutOfMemoryError) as info:
        torch.empty(capacity // 4 + 1024, dtype=torch.float32, device=dev)
    message = str(info.value)
    assert f"device {dev.index}" in message and "tried to allocate" in message and "free" in message
    assert (torch.ones(10, device=dev) * 3).sum().item() == 30


# The first call with given argument shapes runs synchronously (the CPU
# kernel checks the arguments, and its result the op's shape inference), so
# these tests warm the op first: only errors that depend on data are left
# to the launch, and arrive at the next sync with eager's exception type.


def test_async_error_surfaces_at_sync_naming_op(dev):
    x = torch.arange(5.0).to(dev)
    x[torch.tensor([0, 1]).to(dev)]
    bad = torch.tensor([0, 10]).to(dev)
    y = x[bad]  # index out of range: raised by the launch, not here
    with pytest.raises(IndexError, match=r"aten::index"):  # eager's type, and the op's name
        getattr(torch, DEVICE).synchronize()
    # the device keeps working and the error is delivered once
    assert (x + 1).sum().item() == 15
    del y


def test_async_error_surfaces_at_item(dev):
    x = torch.arange(5.0).to(dev)
    torch.index_select(x, 0, torch.tensor([1]).to(dev))
    torch.index_select(x, 0, torch.tensor([7]).to(dev))
    with pytest.raises(IndexError, match="index_select"):
        x.sum().item()
    assert x.sum().item() == 10


def test_launch_blocking_raises_at_the_op():
    code = f"""
import torch
x = torch.arange(5.).to('{DEVICE}')
x[torch.tensor([0, 1]).to('{DEVICE}')]
bad = torch.tensor([0, 10]).to('{DEVICE}')
try:
    y = x[bad]
except IndexError as e:
    print('raised at op:', 'aten::index' in str(e))
else:
    print('not raised')
print('usable:', (x + 1).sum().item())
"""
    r = run_python(code, env={"KILN_LAUNCH_BLOCKING": "1"})
    assert "raised at op: True" in r.stdout, r.stderr
    assert "usable: 15.0" in r.stdout


def test_device_index_out_of_range(dev):
    count = torch.accelerator.device_count()
    with pytest.raises((RuntimeError, IndexError), match=f"{DEVICE}:{count}.*not a valid device"):
        torch.empty(3, device=f"{DEVICE}:{count}")
    with pytest.raises((RuntimeError, IndexError)):
        getattr(torch, DEVICE).set_device(count + 3)
    assert torch.ones(2, device=dev).sum().item() == 2


def test_cross_device_op_without_copy_is_an_error(dev):
    a = torch.ones(3, device=dev)
    with pytest.raises(RuntimeError, match="same device"):
        a + torch.ones(3)
    if torch.accelerator.device_count() > 1:
        with pytest.raises(RuntimeError, match="same device"):
            a + torch.ones(3, device=f"{DEVICE}:1")
    assert (a + 1).sum().item() == 6


def test_shape_error_is_eager(dev):
    with pytest.raises(RuntimeError, match="size of tensor"):
        torch.ones(3, device=dev) + torch.ones(4, device=dev)


# ---------------------------------------------------------------- device module and integration


def test_device_module(dev):
    mod = getattr(torch, DEVICE)
    assert mod.is_available() and mod.device_count() >= 1
    assert "emulated" in mod.get_device_name()
    with mod.device(mod.device_count() - 1):
        assert mod.current_device() == mod.device_count() - 1
        assert torch.empty(1, device=DEVICE).device.index == mod.device_count() - 1
    assert mod.current_device() == 0


def test_memory_stats(dev):
    mod = getattr(torch, DEVICE)
    mod.synchronize()
    before = mod.memory_allocated()
    x = torch.empty(1 << 20, device=dev)
    assert mod.memory_allocated() >= before + (4 << 20)
    assert mod.max_memory_allocated() >= mod.memory_allocated()
    assert mod.memory_reserved() >= mod.memory_allocated()
    assert torch.accelerator.memory_allocated() == mod.memory_allocated()
    del x
    mod.synchronize()
    assert mod.memory_allocated() == before
    mod.empty_cache()
    assert mod.memory_reserved() <= mod.max_memory_reserved()


def test_rng_seeding_and_state(dev):
    mod = getattr(torch, DEVICE)
    torch.manual_seed(123)
    a = torch.randn(100, device=dev).cpu()
    torch.manual_seed(123)
    b = torch.randn(100, device=dev).cpu()
    assert torch.equal(a, b)
    state = mod.get_rng_state()
    c = torch.rand(50, device=dev).cpu()
    mod.set_rng_state(state)
    assert torch.equal(torch.rand(50, device=dev).cpu(), c)
    g = torch.Generator(device=DEVICE).manual_seed(7)
    d1 = torch.randn(10, device=dev, generator=g).cpu()
    g.manual_seed(7)
    assert torch.equal(torch.randn(10, device=dev, generator=g).cpu(), d1)
    u = torch.rand(20000, device=dev)
    assert 0.45 < u.mean().item() < 0.55 and u.min().item() >= 0 and u.max().item() < 1


def test_streams_and_events(dev):
    s = torch.Stream(device=dev)
    start = torch.Event(device=dev, enable_timing=True)
    end = torch.Event(device=dev, enable_timing=True)
    previous = torch.accelerator.current_stream(dev)
    torch.accelerator.set_stream(s)
    assert torch.accelerator.current_stream(dev) == s
    start.record()
    x = torch.randn(256, 256, device=dev) @ torch.randn(256, 256, device=dev)
    end.record()
    torch.accelerator.set_stream(previous)
    end.synchronize()
    assert end.query()
    assert start.elapsed_time(end) >= 0
    torch.accelerator.synchronize()
    assert x.shape == (256, 256)


def test_generated_methods(dev):
    t = torch.ones(2)
    moved = getattr(t, DEVICE)()
    assert getattr(moved, f"is_{DEVICE}")
    m = torch.nn.Linear(2, 2)
    getattr(m, DEVICE)()
    assert m.weight.device.type == DEVICE


def test_save_load(tmp_path, dev):
    x = torch.randn(4, 4).to(dev)
    path = tmp_path / "t.pt"
    torch.save({"x": x}, path)
    loaded = torch.load(path)
    assert loaded["x"].device == dev and torch.equal(loaded["x"].cpu(), x.cpu())
    on_cpu = torch.load(path, map_location="cpu")
    assert on_cpu["x"].device.type == "cpu"
    to_dev = torch.load(tmp_path / "t.pt", map_location=DEVICE)
    assert to_dev["x"].device.type == DEVICE


def test_pin_memory(dev):
    x = torch.randn(64).pin_memory()
    assert x.is_pinned()
    assert torch.equal(x.to(dev, non_blocking=True).cpu(), x)


def test_autocast(dev):
    a = torch.randn(8, 8, device=dev)
    b = torch.randn(8, 8, device=dev)
    for dtype in (torch.bfloat16, torch.float16):
        with torch.autocast(device_type=DEVICE, dtype=dtype):
            c = a @ b  # lower-precision policy
            s = torch.exp(c)  # fp32 policy
        assert c.dtype == dtype
        expected = a.cpu().to(dtype) @ b.cpu().to(dtype)
        assert torch.equal(c.cpu(), expected)
        assert s.dtype == torch.float32


def test_autograd_backward(dev):
    a = torch.randn(5, 3, requires_grad=True)
    ad = a.detach().to(dev).requires_grad_()
    (a.sin() * 2).sum().backward()
    (ad.sin() * 2).sum().backward()
    assert torch.allclose(ad.grad.cpu(), a.grad)


def test_fork_child_cannot_use_device(dev):
    code = f"""
import os, torch
x = torch.ones(2, device='{DEVICE}')
pid = os.fork()
if pid == 0:
    try:
        torch.ones(2, device='{DEVICE}')
        os._exit(1)
    except RuntimeError as e:
        os._exit(0 if 'forked subprocess' in str(e) else 2)
_, status = os.waitpid(pid, 0)
print('child status', os.waitstatus_to_exitcode(status))
"""
    r = run_python(code)
    assert "child status 0" in r.stdout, r.stdout + r.stderr


def test_inplace_on_views_at_different_offsets(dev):
    # Shape inference is memoized; a written view's offset must not leak between calls.
    x = torch.zeros(5, 4)
    d = x.to(dev)
    for k in range(5):
        x.narrow(0, k, 1).add_(k + 1)
        d.narrow(0, k, 1).add_(k + 1)
    assert torch.equal(d.cpu(), x)
    for k in range(3):
        v, w = d[k : k + 1], x[k : k + 1]
        v.squeeze_(0)
        w.squeeze_(0)
        assert v.storage_offset() == w.storage_offset() and torch.equal(v.cpu(), w)

"""torch.<device> offers what torch.cuda scripts reach for, and behaves as
torch.cuda does, bad device indices included."""

import gc

import pytest
import torch

from conftest import DEVICE

mod = getattr(torch, DEVICE)


def test_device_queries():
    assert mod.is_available() and mod.is_initialized()
    assert mod.device_count() == torch.accelerator.device_count() >= 1
    assert mod.current_device() == 0
    props = mod.get_device_properties(0)
    assert props.total_memory == mod.mem_get_info(0)[1] > 0
    assert props.name == mod.get_device_name() and "emulated" in props.name
    assert props.multi_processor_count >= 1
    assert (props.major, props.minor) == mod.get_device_capability()
    assert DEVICE in repr(props).lower()


def test_bad_device_indices_behave_as_on_cuda():
    count = mod.device_count()
    mod.set_device(-1)  # ignored, as torch.cuda.set_device(-1) is
    assert mod.current_device() == 0
    assert torch.ones(2, device=DEVICE).sum().item() == 2  # the next allocation still works
    for bad in (-1, count):
        with pytest.raises(AssertionError, match="Invalid device id"):
            mod.get_device_name(bad)
        with pytest.raises(AssertionError, match="Invalid device id"):
            mod.get_device_properties(bad)
    with pytest.raises(RuntimeError, match="not a valid device"):
        mod.set_device(count)
    with pytest.raises(RuntimeError, match="not a valid device"):
        torch.empty(1, device=f"{DEVICE}:{count}")
    with pytest.raises(RuntimeError, match="not a valid device"):
        with mod.device(count):
            pass
    with pytest.raises(ValueError, match=f"Expected a {DEVICE} device"):
        mod.memory_allocated("cpu")
    assert mod.current_device() == 0


def test_device_context_and_device_of():
    with mod.device(0):
        assert mod.current_device() == 0
    with mod.device(None):
        assert mod.current_device() == 0
    with mod.device_of(torch.ones(1, device=DEVICE)):
        assert mod.current_device() == 0
    with mod.device_of(torch.ones(1)):  # a CPU tensor: no change
        assert mod.current_device() == 0


@pytest.fixture
def no_collection():
    """Tensors of earlier tests left in reference cycles are freed first, and
    no collection frees one mid-test: the counts below are exact."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_memory_statistics_and_their_resets(no_collection):
    mod.synchronize()
    mod.reset_peak_memory_stats()
    mod.reset_accumulated_memory_stats()
    before = mod.memory_stats()
    assert before["allocation.all.allocated"] == 0 and before["allocated_bytes.all.freed"] == 0
    x = torch.empty(1 << 20, device=DEVICE)  # 4 MiB
    y = torch.empty(1 << 18, device=DEVICE)  # 1 MiB
    del y
    stats = mod.memory_stats()
    assert stats["allocation.all.allocated"] == 2 and stats["allocation.all.freed"] == 1
    assert stats["allocation.all.current"] == before["allocation.all.current"] + 1
    assert stats["allocation.all.peak"] >= stats["allocation.all.current"] + 1
    assert stats["allocated_bytes.all.allocated"] >= 5 << 20
    assert stats["allocated_bytes.all.freed"] >= 1 << 20
    assert stats["requested_bytes.all.current"] >= 4 << 20
    assert mod.memory_allocated() == stats["allocated_bytes.all.current"] == torch.accelerator.memory_allocated()
    assert mod.max_memory_allocated() >= mod.memory_allocated() + (1 << 20)
    assert mod.memory_reserved() >= mod.memory_allocated()
    nested = mod.memory_stats_as_nested_dict()
    assert nested["allocation"]["all"]["allocated"] == 2
    mod.reset_peak_memory_stats()
    assert mod.max_memory_allocated() == mod.memory_allocated()
    mod.reset_accumulated_memory_stats()
    after = mod.memory_stats()
    assert after["allocation.all.allocated"] == 0 and after["allocated_bytes.all.freed"] == 0
    assert after["allocation.all.current"] == stats["allocation.all.current"]
    free, total = mod.mem_get_info()
    assert 0 < free <= total
    summary = mod.memory_summary()
    assert "Allocated memory" in summary and "Reserved memory" in summary and "device ID 0" in summary
    del x


def test_rng_per_device():
    mod.manual_seed(7)
    a = torch.rand(4, device=DEVICE).cpu()
    state = mod.get_rng_state(0)
    b = torch.rand(4, device=DEVICE).cpu()
    mod.set_rng_state(state, 0)
    assert torch.equal(torch.rand(4, device=DEVICE).cpu(), b)
    mod.manual_seed_all(7)
    assert torch.equal(torch.rand(4, device=DEVICE).cpu(), a)
    assert mod.initial_seed() == 7
    assert len(mod.get_rng_state_all()) == mod.device_count()


def test_streams_and_events():
    default = mod.default_stream()
    assert mod.current_stream() == default
    s = mod.Stream()
    assert isinstance(s, torch.Stream) and s.device.type == DEVICE and s != default
    start, end = mod.Event(enable_timing=True), mod.Event(enable_timing=True)
    assert isinstance(start, mod.Event) and not isinstance(torch.Event("cpu"), mod.Event)
    with mod.stream(s):
        assert mod.current_stream() == s
        start.record()
        y = torch.ones(256, 256, device=DEVICE) @ torch.ones(256, 256, device=DEVICE)
        end.record()
    assert mod.current_stream() == default
    end.synchronize()
    assert end.query() and start.elapsed_time(end) >= 0
    default.wait_stream(s)
    s.synchronize()
    assert s.query()
    assert y[0, 0].item() == 256
    mod.set_stream(s)
    assert mod.current_stream() == s
    mod.set_stream(default)
    with mod.stream(None):  # no change
        assert mod.current_stream() == default
    mod.synchronize()

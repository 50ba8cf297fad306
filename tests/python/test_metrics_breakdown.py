"""kiln.metrics.breakdown(): each field responds to what it measures.

The machine is shared and noisy: the checks compare orders of magnitude, never percent.
"""

import contextlib
import json
import time

import pytest
import torch

import kiln
from conftest import DEVICE, FIXED_POLICY, run_python, sync

KEYS = {
    "wall_s",
    "host_record_s",
    "flush_s",
    "compile_s",
    "host_wait_s",
    "host_python_s",
    "fused_kernel_s",
    "library_kernel_s",
    "library_kernels_by_op",
    "device_idle_s",
}
HOST_PARTS = ("host_record_s", "flush_s", "compile_s", "host_wait_s", "host_python_s")


@contextlib.contextmanager
def in_mode(new_mode):
    previous = kiln.mode()
    kiln.set_mode(new_mode)
    try:
        yield
    finally:
        kiln.set_mode(previous)


def square_matrices(dev, n=1024):
    a, b = torch.randn(n, n).to(dev), torch.randn(n, n).to(dev)
    sync()
    return a, b


def warm_matmul(a, b):
    """The first call of an argument case runs on the host; later ones launch."""
    for _ in range(2):
        a @ b
    sync()


def pointwise_chain(x, ops=40):
    for _ in range(ops):
        x = (x * 1.001).sin()
    return x


def test_the_keys_are_the_contract():
    t = kiln.metrics.breakdown()
    assert set(t) == KEYS
    assert all(isinstance(t[k], float) for k in KEYS - {"library_kernels_by_op"})
    assert isinstance(t["library_kernels_by_op"], dict)


def test_a_large_matmul_is_library_kernel_time_on_the_device(dev):
    a, b = square_matrices(dev)
    warm_matmul(a, b)
    kiln.metrics.reset()
    t0 = time.perf_counter()
    a @ b
    sync()
    elapsed = time.perf_counter() - t0
    t = kiln.metrics.breakdown()
    mm = t["library_kernels_by_op"]["aten::mm"]
    # The device ran the matmul for most of the time the host saw it take.
    assert elapsed / 5 < mm <= elapsed
    assert t["library_kernel_s"] >= mm
    assert t["fused_kernel_s"] < mm / 10
    assert t["device_idle_s"] <= t["wall_s"] - mm * 0.99
    assert kiln.metrics.top_library_kernels(1, t) == [("aten::mm", mm)]


def test_a_long_pointwise_chain_is_fused_kernel_time(dev):
    with in_mode("lazy"):
        x = torch.randn(1 << 20).to(dev)
        pointwise_chain(x)
        sync()  # compiled once
        kiln.metrics.reset()
        t0 = time.perf_counter()
        pointwise_chain(x)
        sync()
        elapsed = time.perf_counter() - t0
        t = kiln.metrics.breakdown()
    assert elapsed / 10 < t["fused_kernel_s"] <= elapsed
    assert t["library_kernel_s"] < t["fused_kernel_s"] / 10
    assert t["library_kernels_by_op"] == {}
    assert t["flush_s"] > 0 and t["host_record_s"] > 0
    assert t["compile_s"] == 0  # the plan was reused


def test_recording_many_small_ops_is_host_record_time(dev):
    with in_mode("lazy"):
        y = torch.ones(256).to(dev)
        for _ in range(100):
            y = y * 1.0001
        sync()
        kiln.metrics.reset()
        t0 = time.perf_counter()
        for _ in range(3000):
            y = y * 1.0001
        elapsed = time.perf_counter() - t0
        t = kiln.metrics.breakdown()
        sync()
    # Recording is a real share of each op (the rest is Python and the dispatcher).
    assert elapsed / 50 < t["host_record_s"] < elapsed
    assert t["host_python_s"] > 0


COMPILE_CODE = f"""
import json, torch, kiln
kiln.set_mode("lazy")
x = torch.randn(4096).to("{DEVICE}")
def chain(x):
    return ((x * 1.5).cos() + 0.25).exp().tanh()
out = []
for _ in range(2):
    kiln.metrics.reset()
    y = chain(x)  # kept: a chain whose results are all dropped compiles nothing
    torch.{DEVICE}.synchronize()
    out.append(kiln.metrics.breakdown()["compile_s"])
print(json.dumps(out))
"""


def test_compile_time_is_counted_once_per_new_kernel():
    # A fresh process, nothing compiled yet; the fixed policy fuses the chain at its first flush.
    r = run_python(COMPILE_CODE, env=FIXED_POLICY)
    assert r.returncode == 0, r.stderr
    first, repeat = json.loads(r.stdout.strip().splitlines()[-1])
    assert first > 1e-3  # LLVM takes milliseconds at least
    assert repeat < first / 20


def test_sleeping_in_python_is_python_time_and_device_idle_time():
    kiln.metrics.reset()
    time.sleep(0.2)
    t = kiln.metrics.breakdown()
    assert 0.19 < t["host_python_s"] <= t["wall_s"]
    assert 0.19 < t["device_idle_s"] <= t["wall_s"]
    assert t["host_record_s"] + t["flush_s"] + t["compile_s"] + t["host_wait_s"] < 0.01


def test_synchronizing_after_big_work_is_host_wait_time(dev):
    a, b = square_matrices(dev)
    warm_matmul(a, b)
    kiln.metrics.reset()
    for _ in range(3):
        a @ b  # launched: returns before the device ran it
    sync()
    t = kiln.metrics.breakdown()
    mm = t["library_kernels_by_op"]["aten::mm"]
    assert mm / 3 < t["host_wait_s"] <= t["wall_s"]


def test_reset_zeroes_everything(dev):
    a, b = square_matrices(dev, 256)
    warm_matmul(a, b)
    with in_mode("lazy"):
        pointwise_chain(a, 4)
        sync()
    time.sleep(0.05)
    before = kiln.metrics.breakdown()
    assert before["wall_s"] > 0.05 and before["library_kernels_by_op"]
    kiln.metrics.reset()
    t = kiln.metrics.breakdown()
    assert t["wall_s"] < 0.05
    assert t["library_kernels_by_op"] == {}
    for k in ("host_record_s", "flush_s", "compile_s", "host_wait_s", "fused_kernel_s", "library_kernel_s"):
        assert t[k] == 0, k
    assert t["host_python_s"] <= t["wall_s"] and t["device_idle_s"] <= t["wall_s"]


def test_the_fields_add_up(dev):
    a, b = square_matrices(dev, 512)
    with in_mode("lazy"):  # compiled first: background compiles run on a thread of their own
        pointwise_chain(a @ b, 8).cpu()
    kiln.metrics.reset()
    with in_mode("lazy"):
        c = pointwise_chain(a @ b, 8)
        c.sum().item()
        c.cpu()
    time.sleep(0.02)
    t = kiln.metrics.breakdown()
    assert all(t[k] >= 0 for k in KEYS - {"library_kernels_by_op"})
    # One thread ran everything: its parts are the wall time (host_python_s is the rest).
    host = sum(t[k] for k in HOST_PARTS)
    assert abs(host - t["wall_s"]) < 0.01 * t["wall_s"] + 1e-3
    assert sum(t["library_kernels_by_op"].values()) == pytest.approx(t["library_kernel_s"], rel=1e-9)
    # One device: its busy time and idle time fit in the wall time.
    assert t["fused_kernel_s"] + t["library_kernel_s"] + t["device_idle_s"] <= t["wall_s"] * 1.001
    assert t["fused_kernel_s"] > 0 and t["library_kernel_s"] > 0


def test_the_report_has_the_breakdown_table(dev):
    a, b = square_matrices(dev, 256)
    warm_matmul(a, b)
    text = kiln.metrics.report()
    assert "time breakdown" in text
    for row in ("host_record", "host_wait", "host_python", "fused_kernel", "library_kernel", "device_idle"):
        assert row in text, row
    assert "aten::mm" in text.split("time breakdown")[1]


def test_kiln_metrics_prints_the_breakdown_at_exit():
    r = run_python(f"import torch; (torch.ones(8).to('{DEVICE}') * 2).cpu()", env={"KILN_METRICS": "1"})
    assert r.returncode == 0, r.stderr
    assert "time breakdown" in r.stderr and "% wall" in r.stderr

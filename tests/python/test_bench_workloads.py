"""The bench's user workloads compute on the device what they compute on CPU.

Each workload is built on CPU and on the device from the same seed (build()
seeds itself and makes its data on the CPU), at a small scale, and run for 3
steps in each kiln mode: the training workloads' losses, and the memory-bound
chain's output, must match CPU's. A workload that kiln gets wrong is a kiln
bug, not a bench problem.
"""

import functools
import os
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from conftest import DEVICE, REPO

sys.path.insert(0, os.path.join(REPO, "bench"))
import workloads  # noqa: E402

STEPS = 3
SCALE = 0.01  # LSTM batch 2 x bptt 4, ResNet batch 2, GPT-2 batch 1, 167,772 elements per chain input
# Losses after 3 steps (measured: at most 2.5e-6 relative with AVX-512, the
# LSTM's third loss in lazy mode; 1.05e-5 on an AVX2-only AMD EPYC, the conv
# net's third loss in lazy mode: its batch of 2 through BatchNorm amplifies
# ulp-level differences of fused kernels step by step).
LOSS_RTOL = 3e-5
TRAINING = ["lstm_lm_train", "convnet_train", "hf_gpt2_train"]


def workload(name):
    return next(w for w in workloads.WORKLOADS if w.name == name)


def run_steps(name, device):
    step = workload(name).build(device, SCALE, lambda fn: fn)
    return [step().cpu() for _ in range(STEPS)]


@functools.cache
def cpu_results(name):
    return run_steps(name, "cpu")


@pytest.mark.parametrize("name", TRAINING)
def test_training_losses_match_cpu(name, mode):
    cpu = cpu_results(name)
    dev = run_steps(name, DEVICE)
    for loss in cpu:
        assert loss.shape == () and not loss.requires_grad  # step() returns the detached loss
        assert torch.isfinite(loss)
    torch.testing.assert_close(torch.stack(dev), torch.stack(cpu), rtol=LOSS_RTOL, atol=0)


def test_memory_chain_matches_cpu(mode):
    cpu = cpu_results("memory_chain")
    dev = run_steps("memory_chain", DEVICE)
    assert cpu[-1].shape == (max(1024, int(workloads.MEMORY_ELEMENTS * SCALE)),)
    for d, c in zip(dev, cpu):
        torch.testing.assert_close(d, c)  # float32 defaults: rtol 1.3e-6, atol 1e-5


def test_memory_chain_counts():
    """`ops` is the number of ATen ops one step runs, and `min_bytes` its
    inputs read once plus its output written once: what the report divides by."""
    ops = []

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            ops.append(func)
            return func(*args, **(kwargs or {}))

    step = workload("memory_chain").build("cpu", SCALE, lambda fn: fn)
    with Count():
        out = step()
    assert len(ops) == workload("memory_chain").ops(SCALE), ops
    assert workload("memory_chain").min_bytes(SCALE) == (workloads.MEMORY_INPUTS + 1) * out.numel() * 4

"""oneMKL's vector math picks each function's kernel at that function's
first call, and a first call made from several threads at once can run one
thread's chunk with the low-accuracy kernel (pytorch/pytorch#188792). kiln
makes each first call itself at start-up, on one thread
(src/dispatch/backend/mkl_vml_dispatch.h): the list it calls must be every
op the installed torch sends to MKL."""

import os
import re

import pytest
import torch

import kiln


def _ops_sent_to_mkl():
    header = os.path.join(os.path.dirname(torch.__file__), "include", "ATen", "cpu", "vml.h")
    if not os.path.exists(header):
        pytest.skip("the installed torch ships no ATen headers")
    ops = []
    for line in open(header):
        m = re.match(r"\s*IMPLEMENT_VML_MKL\((\w+),", line)  # commented-out entries start with //
        if m:
            ops.append(m.group(1))
    return ops


@pytest.mark.skipif(not torch.backends.mkl.is_available(), reason="torch built without MKL")
def test_start_up_makes_the_first_call_of_every_op_torch_sends_to_mkl():
    ops = _ops_sent_to_mkl()
    assert ops, "no IMPLEMENT_VML_MKL entry found in ATen/cpu/vml.h: has its form changed?"
    assert sorted(kiln._C.mkl_vml_ops()) == sorted(ops)
    assert all(hasattr(torch, op) for op in ops)  # each is called through its ATen op

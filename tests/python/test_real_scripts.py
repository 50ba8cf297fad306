"""What real scripts hit beyond single ops: module conversion keeps tied
weights, fused RNN cells, eager's errors at the line that caused them, launch
blocking in lazy mode, autocast's whole policy, and small API details. Each
test runs in both modes."""

import copy

import pytest
import torch

import kiln
from conftest import DEVICE, rerun_with_launch_blocking, run_python, sync

# ---------------------------------------------------------------- module.to keeps identity


class TiedLM(torch.nn.Module):
    def __init__(self, vocab=50, dim=16):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.mix = torch.nn.Linear(dim, dim)
        self.head = torch.nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        return self.head(torch.tanh(self.mix(self.embed(tokens))))


def test_module_to_keeps_tied_parameters_the_same_object(mode):
    model = TiedLM()
    param_ids = {id(p) for p in model.parameters()}
    model.to(DEVICE)
    assert model.head.weight is model.embed.weight
    assert model.embed.weight.device.type == DEVICE
    assert {id(p) for p in model.parameters()} == param_ids  # swapped in place, as on CUDA
    assert len(list(model.parameters())) == 3


def test_data_can_be_swapped_between_cpu_and_device(mode):
    x = torch.randn(3)
    y = torch.arange(3.0, device=DEVICE)
    x.data = y
    assert x.device.type == DEVICE and x.tolist() == [0.0, 1.0, 2.0]
    x.data = torch.ones(2)
    assert x.device.type == "cpu" and x.tolist() == [1.0, 1.0]


def test_training_a_tied_model_matches_cpu(mode):
    torch.manual_seed(0)
    model = TiedLM()
    g = torch.Generator().manual_seed(3)
    batches = [torch.randint(0, 50, (4, 6), generator=g) for _ in range(4)]

    def train(device):
        m = copy.deepcopy(model).to(device)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        losses = []
        for tokens in batches:
            tokens = tokens.to(device)
            opt.zero_grad()
            logits = m(tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 50), tokens[:, 1:].reshape(-1))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, m.embed.weight.detach().cpu()

    cpu_losses, cpu_weight = train("cpu")
    dev_losses, dev_weight = train(DEVICE)
    torch.testing.assert_close(torch.tensor(dev_losses), torch.tensor(cpu_losses), rtol=1e-5, atol=0)
    torch.testing.assert_close(dev_weight, cpu_weight, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- fused RNN cells


def rnn_cases():
    return [
        ("LSTM", lambda: torch.nn.LSTM(4, 5, num_layers=2), (3, 2, 4)),
        (
            "LSTM_bidirectional_batch_first",
            lambda: torch.nn.LSTM(4, 5, bidirectional=True, batch_first=True),
            (2, 3, 4),
        ),
        ("LSTM_proj", lambda: torch.nn.LSTM(4, 6, proj_size=3), (3, 2, 4)),
        ("GRU", lambda: torch.nn.GRU(4, 5, num_layers=2), (3, 2, 4)),
        ("GRU_no_bias", lambda: torch.nn.GRU(4, 5, bias=False), (3, 2, 4)),
        ("LSTMCell", lambda: torch.nn.LSTMCell(4, 5), (3, 4)),
        ("GRUCell", lambda: torch.nn.GRUCell(4, 5), (3, 4)),
    ]


@pytest.mark.parametrize("name,make,shape", rnn_cases(), ids=[c[0] for c in rnn_cases()])
def test_rnn_forward_and_backward_match_cpu(mode, name, make, shape):
    torch.manual_seed(0)
    module = make()
    x = torch.randn(shape)

    def run(device):
        m = copy.deepcopy(module).to(device)
        inp = x.to(device).requires_grad_()
        out = m(inp)
        outs = (
            [out] if isinstance(out, torch.Tensor) else [out[0], *(out[1] if isinstance(out[1], tuple) else [out[1]])]
        )
        loss = sum((o * (k + 1)).square().sum() for k, o in enumerate(outs))
        loss.backward()
        return [t.detach().cpu() for t in outs] + [inp.grad.cpu()] + [p.grad.cpu() for p in m.parameters()]

    for d, c in zip(run(DEVICE), run("cpu")):
        torch.testing.assert_close(d, c, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(kiln.mode() != "lazy", reason="fusion happens in lazy mode")
def test_lstm_gate_arithmetic_fuses():
    torch.manual_seed(0)
    cell = torch.nn.LSTMCell(8, 16).to(DEVICE)
    x = torch.randn(4, 8, device=DEVICE)
    h = c = torch.zeros(4, 16, device=DEVICE)
    for _ in range(2):  # warm: first calls of the matmuls run on the host
        h, c = cell(x, (h, c))
    sync()
    kiln.metrics.reset()
    h, c = cell(x, (h, c))
    h.sum().item()
    counters = kiln.metrics.counters()
    launches = counters["launches"]
    # The cell is two matmuls and the gate arithmetic (adds, 3 sigmoids,
    # 2 tanh, 3 multiplies): the arithmetic runs as compiled kernels, not
    # as library kernels one op at a time.
    library = counters["library_kernels"]
    assert {name.split(".")[0] for name in library} <= {"aten::mm", "aten::sum"}, library
    assert launches.get("fused kernel", 0) >= 1
    assert launches.get("fused kernel", 0) <= 3


@pytest.mark.parametrize(
    "kwargs", [{}, {"bidirectional": True, "batch_first": True}, {"bias": False}], ids=["plain", "bidir", "nobias"]
)
def test_lstm_runs_cpus_layer_kernel_with_cpus_bits(kwargs, mode):
    """nn.LSTM runs oneDNN's layer kernel, as on CPU (src/dispatch/eager/lstm_layers.cpp):
    two library launches per layer, forward and backward, and CPU's bits, not a matmul per time step."""
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(4, 6, num_layers=2, **kwargs)
    dev_lstm = copy.deepcopy(lstm).to(DEVICE)
    x = torch.randn(5, 3, 4)

    def run(module, inp):
        inp = inp.requires_grad_()
        out, (h, c) = module(inp)
        (out.square().sum() + 2 * h.square().sum() + 3 * c.square().sum()).backward()
        return out, [t.detach().cpu() for t in (out, h, c, inp.grad, *(p.grad for p in module.parameters()))]

    sync()
    kiln.metrics.reset()
    dev_out, got = run(dev_lstm, x.to(DEVICE))
    sync()
    _, want = run(lstm, x.clone())
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)
    library = kiln.metrics.counters()["library_kernels"]
    layers = 2 * (2 if kwargs.get("bidirectional") else 1)
    assert library.get("aten::mkldnn_rnn_layer") == layers, library
    assert library.get("aten::mkldnn_rnn_layer_backward") == layers, library
    assert "aten::mm" not in library, library


def test_lstm_layer_kernel_is_launched_after_its_first_call(mode):
    """mkldnn_rnn_layer's meta kernel sizes oneDNN's workspace 0 bytes: the first call with these shapes runs
    on the host, later ones allocate what it returned and launch with no sync point (OpInfo::geometry_from_cpu)."""
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(4, 6, num_layers=2)
    dev_lstm = copy.deepcopy(lstm).to(DEVICE)
    x = torch.randn(5, 3, 4)
    for step in range(3):
        if step == 2:
            sync()
            kiln.metrics.reset()
        out, _ = dev_lstm(x.to(DEVICE))
        out.sum().backward()
        want, _ = lstm(x)
        want.sum().backward()
        torch.testing.assert_close(out.detach().cpu(), want.detach(), rtol=0, atol=0)
    for p, q in zip(lstm.parameters(), dev_lstm.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=0, atol=0)
    counters = kiln.metrics.counters()
    assert counters["library_kernels"].get("aten::mkldnn_rnn_layer") == 2, counters["library_kernels"]
    reasons = [r for r in counters["sync_points"] if "meta kernel" in r or "first call" in r]
    assert reasons == [], counters["sync_points"]


def test_lstm_outside_the_layer_kernel_steps_through_time(mode):
    """Projections and float64 are not what CPU's layer kernel takes: the time-step path runs, still CPU's answer."""
    for make, dtype in (
        (lambda: torch.nn.LSTM(4, 6, proj_size=3), torch.float32),
        (lambda: torch.nn.LSTM(4, 6), torch.float64),
    ):
        torch.manual_seed(0)
        lstm = make().to(dtype)
        dev_lstm = copy.deepcopy(lstm).to(DEVICE)
        x = torch.randn(5, 3, 4, dtype=dtype)
        sync()
        kiln.metrics.reset()
        got = dev_lstm(x.to(DEVICE))[0].cpu()
        torch.testing.assert_close(got, lstm(x)[0], rtol=1e-5, atol=1e-6)
        assert "aten::mkldnn_rnn_layer" not in kiln.metrics.counters()["library_kernels"]


# ---------------------------------------------------------------- eager's errors, at the op


def device_tensor(*shape):
    return torch.randn(*shape, device=DEVICE)


OVERLAP_CASES = [
    (
        "input_partly_overlaps_output",
        lambda: (lambda x: x.add_(x.t()))(device_tensor(4, 4)),
        "some elements of the input tensor and the written-to tensor refer to a single memory location",
    ),
    (
        "output_overlaps_itself",
        lambda: device_tensor(4).expand(3, 4).add_(1),
        "more than one element of the written-to tensor refers to a single memory location",
    ),
    (
        "copy_into_expanded",
        lambda: torch.empty(1, 4, device=DEVICE).expand(3, 4).copy_(device_tensor(3, 4)),
        "more than one element of the written-to tensor refers to a single memory location",
    ),
    (
        "copy_into_expanded_from_host",
        lambda: torch.empty(1, 4, device=DEVICE).expand(3, 4).copy_(torch.ones(3, 4)),
        "more than one element of the written-to tensor refers to a single memory location",
    ),
    (
        "copy_that_does_not_broadcast",
        lambda: torch.empty(2, 3, device=DEVICE).copy_(device_tensor(4)),
        "must match the size of tensor b",
    ),
    (
        "copy_partly_overlapping",
        lambda: (lambda x: x[:3].copy_(x[1:]))(device_tensor(4)),
        "some elements of the input tensor and the written-to tensor refer to a single memory location",
    ),
]


@pytest.mark.parametrize("name,call,message", OVERLAP_CASES, ids=[c[0] for c in OVERLAP_CASES])
def test_overlaps_eager_refuses_raise_at_the_op(mode, name, call, message):
    for _ in range(2):  # also once the op's shapes have been seen
        with pytest.raises(RuntimeError, match=message):
            call()
        sync()  # nothing left pending


def test_overlaps_eager_allows_still_work(mode):
    x = torch.arange(4.0, device=DEVICE)
    x.expand(3, 4).fill_(2)  # fill_ is idempotent: eager allows it
    assert x.tolist() == [2.0] * 4
    y = torch.arange(4.0, device=DEVICE)
    y.add_(y)  # the same elements: allowed
    assert y.tolist() == [0.0, 2.0, 4.0, 6.0]
    z = torch.arange(8.0, device=DEVICE)
    z[:4].add_(z[4:])  # the same storage, disjoint
    assert z.tolist() == [4.0, 6.0, 8.0, 10.0, 4.0, 5.0, 6.0, 7.0]


def convolution_backward(grad_out, x, w, padding):
    return torch.ops.aten.convolution_backward(
        grad_out, x, w, None, [1, 1], [padding, padding], [1, 1], False, [0, 0], 1, [True, True, False]
    )


ARGUMENT_CASES = [
    (
        "conv_backward_padding",
        lambda d: convolution_backward(
            torch.ones(1, 3, 6, 6, device=d), torch.ones(1, 2, 8, 8, device=d), torch.ones(3, 2, 3, 3, device=d), 1
        ),
    ),
    (
        "conv_backward_shapes",
        lambda d: convolution_backward(
            torch.ones(1, 3, 6, 6, device=d), torch.ones(1, 2, 9, 9, device=d), torch.ones(3, 2, 3, 3, device=d), 0
        ),
    ),
    (
        "index_put_values_do_not_broadcast",
        lambda d: torch.zeros(5, 3, device=d).index_put_((torch.tensor([0, 1], device=d),), torch.ones(3, 2, device=d)),
    ),
    (
        "index_put_accumulate_values_do_not_broadcast",
        lambda d: torch.zeros(5, 3, device=d).index_put_(
            (torch.tensor([0, 1], device=d),), torch.ones(3, 2, device=d), accumulate=True
        ),
    ),
    ("mm_shapes", lambda d: torch.ones(2, 3, device=d) @ torch.ones(4, 2, device=d)),
]


def warm_with_valid_calls(d):
    """Runs each op once with valid arguments of the same signature, so that
    the failing calls below are not their ops' first calls."""
    convolution_backward(
        torch.ones(1, 3, 6, 6, device=d), torch.ones(1, 2, 8, 8, device=d), torch.ones(3, 2, 3, 3, device=d), 0
    )
    torch.zeros(5, 3, device=d).index_put_((torch.tensor([0, 1], device=d),), torch.ones(2, 3, device=d))
    torch.zeros(5, 3, device=d).index_put_(
        (torch.tensor([0, 1], device=d),), torch.ones(2, 3, device=d), accumulate=True
    )
    torch.ones(2, 3, device=d) @ torch.ones(3, 2, device=d)


@pytest.mark.parametrize("name,call", ARGUMENT_CASES, ids=[c[0] for c in ARGUMENT_CASES])
def test_argument_errors_raise_at_the_op_with_eagers_type(mode, name, call):
    with pytest.raises(Exception) as on_cpu:
        call("cpu")
    warm_with_valid_calls(DEVICE)
    sync()
    for _ in range(2):
        with pytest.raises(Exception) as on_device:
            call(DEVICE)
        assert type(on_device.value) is type(on_cpu.value)
        assert str(on_cpu.value).split("\n")[0] in str(on_device.value)
        sync()  # nothing was left for the next sync point


def test_data_dependent_error_arrives_at_sync_with_eagers_type(mode):
    x = torch.arange(5.0, device=DEVICE)
    x[torch.tensor([0, 1], device=DEVICE)]  # these shapes are now checked
    sync()
    with pytest.raises(IndexError, match=r"aten::index.*index 10 is out of bounds"):
        # Out of range: found by the launch, so at the next sync (at the op
        # under KILN_LAUNCH_BLOCKING=1).
        y = x[torch.tensor([0, 10], device=DEVICE)]
        assert not kiln._C.launch_blocking()
        y.sum().item()
    assert (x + 1).sum().item() == 15  # the device keeps working


def test_lazy_mode_with_launch_blocking_does_not_recurse():
    code = f"""
import torch
a = torch.randn(1024, 1024, device='{DEVICE}')
b = a @ a
print('sum finite:', bool(torch.isfinite(b.sum()).item()))
x = torch.arange(5.).to('{DEVICE}')
x[torch.tensor([0, 1]).to('{DEVICE}')]
y = (x * 2).relu()
try:
    x[torch.tensor([0, 10]).to('{DEVICE}')]
except IndexError as e:
    print('raised at op:', 'aten::index' in str(e))
print('value:', y.sum().item())
"""
    r = run_python(code, env={"KILN_MODE": "lazy", "KILN_LAUNCH_BLOCKING": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "sum finite: True" in r.stdout
    assert "raised at op: True" in r.stdout
    assert "value: 20.0" in r.stdout


# ---------------------------------------------------------------- autocast


@pytest.mark.parametrize(
    "op,args,expected",
    [
        ("softmax", lambda x: (torch.softmax, (x, 0)), torch.float32),
        ("log_softmax", lambda x: (torch.log_softmax, (x, 0)), torch.float32),
        ("sum", lambda x: (torch.sum, (x,)), torch.float32),
        ("cumsum", lambda x: (torch.cumsum, (x, 0)), torch.float32),
        ("prod", lambda x: (torch.prod, (x,)), torch.float32),
        ("norm", lambda x: (torch.norm, (x,)), torch.float32),
        ("mm", lambda x: (torch.mm, (x.view(2, 2).float(), x.view(2, 2).float())), torch.float16),
        ("dot_promotes", lambda x: (torch.dot, (x, x.float())), torch.float32),
        ("addcmul_promotes", lambda x: (torch.addcmul, (x.float(), x, x)), torch.float32),
    ],
)
def test_autocast_follows_cudas_policy(mode, op, args, expected):
    x = torch.rand(4, device=DEVICE).half()
    with torch.autocast(DEVICE, dtype=torch.float16):
        fn, a = args(x)
        assert fn(*a).dtype == expected


def test_autocast_refuses_binary_cross_entropy(mode):
    p = torch.rand(3, device=DEVICE)
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            torch.nn.functional.binary_cross_entropy(p, p)
    torch.nn.functional.binary_cross_entropy(p, p)  # allowed outside autocast


# ---------------------------------------------------------------- smaller ones


def test_svd_returns_cpus_strides(mode):
    a = torch.randn(3, 4)
    for _ in range(2):
        expected = torch.linalg.svd(a, full_matrices=False)
        got = torch.linalg.svd(a.to(DEVICE), full_matrices=False)
        for g, e in zip(got, expected):
            assert g.stride() == e.stride()
            torch.testing.assert_close(g.abs().cpu(), e.abs(), rtol=1e-4, atol=1e-5)


def test_an_op_is_checked_per_argument_values_not_per_signature(mode):
    # Its meta kernel gives [1] for an unreduced 1-D loss (CPU: a 0-dim
    # tensor) and agrees for the reduced ones, which share the signature.
    x = torch.randn(4)
    target = torch.tensor([3, 0, -1, 1])
    for reduction in ["mean", "none", "sum", "none"]:
        loss = torch.nn.MultiLabelMarginLoss(reduction=reduction)
        expected = loss(x, target)
        got = loss(x.to(DEVICE), target.to(DEVICE))
        assert got.shape == expected.shape, reduction
        torch.testing.assert_close(got.cpu(), expected)


# ---------------------------------------------------------------- which ops ran where


def test_metrics_count_how_each_op_ran(mode):
    x = torch.randn(8, 8, device=DEVICE)
    (x @ x).sum().item()  # warm: the first call with these shapes runs on the host
    sync()
    kiln.metrics.reset()
    y = (x * 2).relu() @ x
    y.sum().item()
    c = kiln.metrics.counters()
    assert c["library_kernels"].get("aten::mm", 0) == 1
    if mode == "lazy":
        assert c["traced_ops"].get("aten::mul.Tensor") == 1
        assert c["traced_ops"].get("aten::relu") == 1
        assert "aten::mul.Tensor" not in c["library_kernels"]
    else:
        assert not c["traced_ops"]
        assert c["library_kernels"].get("aten::mul.Tensor") == 1
    report = kiln.metrics.report()
    assert "traced_ops" in report and "library_kernels" in report and "fallbacks" in report


# ---------------------------------------------------------------- compiled kernels over the whole float range

EXTREMES = [
    0.0,
    -0.0,
    1e-45,
    -1e-38,
    0.5,
    -3.0,
    88.7,
    89.0,
    -89.5,
    2.0**24 + 1,
    2.0**50,
    -(2.0**60),
    1e20,
    -1e20,
    3e38,
    float("inf"),
    float("-inf"),
    float("nan"),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("fn", ["sin", "cos", "sinh", "cosh", "exp", "tanh", "sigmoid", "erf"])
def test_every_kernel_form_gives_eagers_values_at_the_extremes(mode, dtype, fn):
    # 64 copies: eager's vectorized kernels (which a 32-float block takes) decide.
    x = torch.tensor(EXTREMES * 64, dtype=dtype).view(64, -1)
    f = getattr(torch, fn)
    want = f(x)
    out_of_place = f(x.to(DEVICE))
    in_place = x.to(DEVICE).mul_(1.0)
    getattr(in_place, fn + "_")()
    with_reduction = f(x.to(DEVICE)) - f(x.to(DEVICE)).nan_to_num(0, 0, 0).amax(1, keepdim=True)
    want_with_reduction = want - want.nan_to_num(0, 0, 0).amax(1, keepdim=True)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(out_of_place.cpu(), want, equal_nan=True, **tol)
    torch.testing.assert_close(in_place.cpu(), want, equal_nan=True, **tol)
    torch.testing.assert_close(with_reduction.cpu(), want_with_reduction, equal_nan=True, **tol)


@pytest.mark.parametrize("run_mode", ["lazy", "eager"])
def test_launch_blocking_keeps_errors_at_the_op(run_mode):
    """The error tests above, again with every launch waited for."""
    rerun_with_launch_blocking(__file__, "(raise_at_the_op or data_dependent) and not launch_blocking", run_mode)


def test_batch_norm_of_a_strided_view_matches_cpu_after_the_first_call(mode):
    # native_batch_norm.out is wrong for inputs that are not dense (torch
    # 2.13's CPU kernel): launches use the functional kernel for them.
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm1d(10)
    bn_dev = copy.deepcopy(bn).to(DEVICE)
    for _ in range(3):
        h = torch.randn(4, 20)
        want = bn(h.chunk(2, dim=1)[0])
        got = bn_dev(h.to(DEVICE).chunk(2, dim=1)[0])
        torch.testing.assert_close(got.cpu(), want)
        torch.testing.assert_close(bn_dev.running_mean.cpu(), bn.running_mean)
        torch.testing.assert_close(bn_dev.running_var.cpu(), bn.running_var)


def test_an_out_kernel_that_gives_up_leaves_no_warning():
    code = f"""
import torch
x, y = torch.randn(5, 10, device='{DEVICE}'), torch.randn(5, 10, device='{DEVICE}')
for _ in range(3):
    torch.nn.functional.mse_loss(x, y).item()
print('done')
"""
    r = run_python(code)
    assert "done" in r.stdout, r.stderr[-2000:]
    assert "resized" not in r.stderr, r.stderr[-2000:]

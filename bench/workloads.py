"""End-to-end workloads of `make bench`.

Each workload builds its state on a device and returns a `step()` callable
that runs one iteration (without synchronizing); a training step returns its
loss, detached, so that a test can compare it with CPU's. `scale` < 1 shrinks
sizes for QUICK runs and the smoke test; the report says which scale was used.
`compile` wraps the compute the way a user would with torch.compile.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Workload:
    def __init__(self, name, description, build, min_bytes=None, ops=None):
        self.name = name
        self.description = description
        self.build = build  # build(device, scale, compile_fn) -> step
        self.min_bytes = min_bytes  # min_bytes(scale): bytes a fused kernel must move (memory-bound workloads)
        self.ops = ops  # ops(scale): ATen ops per step (for per-op times)


def _n(base, scale, minimum=1):
    return max(minimum, int(base * scale))


# ---------------------------------------------------------------- pointwise chain

POINTWISE_ELEMENTS = 4 * 1024 * 1024


def _pointwise_fn(x):  # 8 ops
    y = x * 1.5
    y = y + 0.25
    y = torch.sin(y)
    y = y * x
    y = torch.exp(y)
    y = y - 0.5
    y = torch.tanh(y)
    return y * 2.0


def build_pointwise(device, scale, compile_fn):
    x = torch.randn(_n(POINTWISE_ELEMENTS, scale, 1024), device=device)
    fn = compile_fn(_pointwise_fn)
    return lambda: fn(x)


# ---------------------------------------------------------------- small-op storm

STORM_OPS = 1000
STORM_ELEMENTS = 256


def _storm_fn(x, n):
    for _ in range(n // 2):
        x = x * 1.0001
        x = x + 0.0001
    return x


def build_storm(device, scale, compile_fn):
    n = _n(STORM_OPS, scale, 20)
    x = torch.randn(STORM_ELEMENTS, device=device)
    fn = compile_fn(lambda t: _storm_fn(t, n))
    return lambda: fn(x)


# ---------------------------------------------------------------- LayerNorm + Linear + GELU block


class MLPBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


def build_mlp_block(device, scale, compile_fn):
    torch.manual_seed(0)
    d = 256
    block = MLPBlock(d).to(device)
    fwd = compile_fn(block)
    x = torch.randn(_n(512, scale, 8), d, device=device, requires_grad=True)

    def step():
        block.zero_grad(set_to_none=True)
        fwd(x).sum().backward()

    return step


# ---------------------------------------------------------------- AdamW step


def build_adamw(foreach):
    def build(device, scale, compile_fn):
        torch.manual_seed(0)
        n = _n(1 << 20, scale, 1024)
        params = [torch.randn(n, device=device, requires_grad=True) for _ in range(50)]
        for p in params:
            p.grad = torch.randn_like(p) * 1e-3
        opt = torch.optim.AdamW(params, lr=1e-3, foreach=foreach)
        opt_step = compile_fn(opt.step)
        return lambda: opt_step()

    return build


def adamw_min_bytes(scale):
    # read param, grad, exp_avg, exp_avg_sq; write param, exp_avg, exp_avg_sq: 7 floats per element
    return 50 * max(1024, int((1 << 20) * scale)) * 4 * 7


# ---------------------------------------------------------------- MLP training step


def build_mlp_train(device, scale, compile_fn):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)).to(device)
    fwd = compile_fn(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = _n(128, scale, 8)
    x = torch.randn(batch, 784, device=device)
    y = torch.randint(0, 10, (batch,), device=device)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(fwd(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


# ---------------------------------------------------------------- GPT-style transformer training step


class GPT(nn.Module):
    def __init__(self, vocab=1000, d=256, heads=4, layers=2, seq=128):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        layer = nn.TransformerEncoderLayer(
            d, heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True, activation="gelu"
        )
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq), persistent=False)

    def forward(self, idx):
        t = idx.shape[1]
        h = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        h = self.blocks(h, mask=self.mask[:t, :t], is_causal=True)
        return self.head(self.norm(h))


def build_gpt_train(device, scale, compile_fn):
    torch.manual_seed(0)
    seq = 128
    model = GPT(seq=seq).to(device)
    fwd = compile_fn(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    batch = _n(8, scale, 1)
    idx = torch.randint(0, 1000, (batch, seq), device=device)
    target = torch.randint(0, 1000, (batch, seq), device=device)

    def step():
        opt.zero_grad(set_to_none=True)
        logits = fwd(idx)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
        loss.backward()
        opt.step()
        return loss.detach()

    return step


# ---------------------------------------------------------------- variable-length inference


def build_varlen_infer(device, scale, compile_fn):
    torch.manual_seed(0)
    model = GPT(seq=512).to(device).eval()
    fwd = compile_fn(model)
    g = torch.Generator().manual_seed(0)
    count = _n(100, scale, 4)
    lengths = torch.randint(16, 513, (count,), generator=g).tolist()
    inputs = [torch.randint(0, 1000, (1, n), generator=g).to(device) for n in lengths]

    def step():
        with torch.no_grad():
            for idx in inputs:
                fwd(idx)

    return step


WORKLOADS = [
    Workload(
        "pointwise_chain",
        "8-op pointwise chain on 4M float32",
        build_pointwise,
        min_bytes=lambda s: 2 * 4 * max(1024, int(POINTWISE_ELEMENTS * s)),
        ops=lambda s: 8,
    ),
    Workload(
        "small_op_storm",
        "1,000 dependent ops on 256-element tensors",
        build_storm,
        ops=lambda s: max(20, int(STORM_OPS * s)) // 2 * 2,
    ),
    Workload("mlp_block", "LayerNorm + Linear + GELU MLP block, forward and backward (512x256)", build_mlp_block),
    Workload(
        "adamw_foreach_off",
        "AdamW step, 50 params of 1M floats, foreach=False",
        build_adamw(False),
        min_bytes=adamw_min_bytes,
    ),
    Workload(
        "adamw_foreach_on",
        "AdamW step, 50 params of 1M floats, foreach=True",
        build_adamw(True),
        min_bytes=adamw_min_bytes,
    ),
    Workload("mlp_train", "MLP 784-512-512-10 training step, batch 128, AdamW", build_mlp_train),
    Workload("gpt_train", "2-layer GPT (d=256, 4 heads, seq 128, batch 8) training step, AdamW", build_gpt_train),
    Workload("varlen_infer", "inference over 100 random sequence lengths 16..512 (the GPT above)", build_varlen_infer),
]

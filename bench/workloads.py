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


def _classifier_step(fwd, opt, x, y):
    """One training step of a classifier on a fixed batch: cross-entropy, backward, optimizer step."""

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(fwd(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


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

    return _classifier_step(fwd, opt, x, y)


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


# ---------------------------------------------------------------- memory-bound pointwise chain

MEMORY_ELEMENTS = 16 * 1024 * 1024  # 64 MB per float32 tensor: well past the caches
MEMORY_INPUTS = 3


def _memory_fn(a, b, c):  # 8 ops, no transcendentals: a fused kernel is bound by memory, not arithmetic
    y = a * b
    y = y + c
    y = torch.maximum(y, a)
    y = y * 0.5
    y = y - b
    y = torch.clamp(y, -1.0, 1.0)
    keep = c > 0.0
    return torch.where(keep, y, a)


def _memory_elements(scale):
    return _n(MEMORY_ELEMENTS, scale, 1024)


def build_memory_chain(device, scale, compile_fn):
    g = torch.Generator().manual_seed(0)  # made on the CPU: the device's RNG differs from CPU's
    inputs = [torch.randn(_memory_elements(scale), generator=g).to(device) for _ in range(MEMORY_INPUTS)]
    fn = compile_fn(_memory_fn)
    return lambda: fn(*inputs)


def memory_chain_min_bytes(scale):
    # each input read once, the output written once, 4 bytes each
    return (MEMORY_INPUTS + 1) * 4 * _memory_elements(scale)


# ---------------------------------------------------------------- LSTM language model training step


class RNNModel(nn.Module):
    """pytorch/examples word_language_model's RNNModel (LSTM, tied weights):
    Embedding -> Dropout -> LSTM -> Dropout -> Linear -> log_softmax."""

    def __init__(self, ntoken, ninp, nhid, nlayers, dropout):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.decoder.weight = self.encoder.weight  # tied: needs ninp == nhid
        self.nlayers, self.nhid = nlayers, nhid
        self.init_weights()

    def init_weights(self):  # as the example does
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))


LSTM_NTOKEN, LSTM_NHID, LSTM_NLAYERS = 10000, 200, 2
LSTM_BPTT, LSTM_BATCH = 35, 10  # the example has batch 20: 10 keeps one step near 40 ms on 2 cores
LSTM_WINDOWS = 4  # made-up text of 4 BPTT windows, cycled through
LSTM_LR, LSTM_CLIP = 20.0, 0.25  # the example's defaults


def build_lstm_lm_train(device, scale, compile_fn):
    torch.manual_seed(0)
    # Dropout 0: the device's RNG differs from CPU's, and the bench compares numbers.
    model = RNNModel(LSTM_NTOKEN, LSTM_NHID, LSTM_NHID, LSTM_NLAYERS, dropout=0.0).to(device).train()
    fwd = compile_fn(model)
    # scale shrinks batch and bptt alike, so tokens per step shrink with it
    batch = _n(LSTM_BATCH, scale**0.5, 2)
    bptt = _n(LSTM_BPTT, scale**0.5, 4)
    g = torch.Generator().manual_seed(1)
    data = torch.randint(0, LSTM_NTOKEN, (LSTM_WINDOWS * bptt + 1, batch), generator=g).to(device)  # batchified
    params = list(model.parameters())
    state = {"hidden": model.init_hidden(batch), "i": 0}

    def step():
        i = state["i"]
        state["i"] = (i + bptt) % (LSTM_WINDOWS * bptt)
        x, targets = data[i : i + bptt], data[i + 1 : i + 1 + bptt].reshape(-1)
        hidden = tuple(h.detach() for h in state["hidden"])  # repackage_hidden: truncated BPTT
        model.zero_grad()
        output, state["hidden"] = fwd(x, hidden)
        loss = F.nll_loss(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, LSTM_CLIP)
        for p in params:
            p.data.add_(p.grad, alpha=-LSTM_LR)
        return loss.detach()

    return step


# ---------------------------------------------------------------- CIFAR-style ResNet training step


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)  # no bias before BatchNorm
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()  # identity
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


def cifar_resnet(classes=10):
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 1, 1, bias=False),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        BasicBlock(16, 16, 1),
        BasicBlock(16, 32, 2),
        BasicBlock(32, 64, 2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, classes),
    )


CONVNET_BATCH = 32


def build_convnet_train(device, scale, compile_fn):
    torch.manual_seed(0)
    model = cifar_resnet().to(device).train()
    fwd = compile_fn(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    batch = _n(CONVNET_BATCH, scale, 2)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, 3, 32, 32, generator=g).to(device)
    y = torch.randint(0, 10, (batch,), generator=g).to(device)

    return _classifier_step(fwd, opt, x, y)


# ---------------------------------------------------------------- Hugging Face GPT-2 training step

HF_GPT2_SEQ, HF_GPT2_BATCH, HF_GPT2_VOCAB = 128, 8, 1000


def build_hf_gpt2_train(device, scale, compile_fn):
    import transformers  # only this workload needs it

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        vocab_size=HF_GPT2_VOCAB,
        n_positions=HF_GPT2_SEQ,
        n_embd=128,
        n_layer=2,
        n_head=4,
        resid_pdrop=0.0,  # dropout off: the device's RNG differs from CPU's
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    model = transformers.GPT2LMHeadModel(cfg).to(device).train()  # random init, nothing downloaded
    fwd = compile_fn(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = _n(HF_GPT2_BATCH, scale, 1)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, HF_GPT2_VOCAB, (batch, HF_GPT2_SEQ), generator=g).to(device)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = fwd(input_ids=ids, labels=ids).loss  # the model shifts the labels
        loss.backward()
        opt.step()
        return loss.detach()

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
    Workload(
        "lstm_lm_train",
        "word_language_model LSTM (10k tokens, 2x200, tied, bptt 35, batch 10) training step, SGD",
        build_lstm_lm_train,
    ),
    Workload(
        "convnet_train",
        "CIFAR-style ResNet (3 BasicBlocks, BatchNorm, 3x32x32, batch 32) training step, SGD momentum",
        build_convnet_train,
    ),
    Workload(
        "hf_gpt2_train",
        "Hugging Face GPT2LMHeadModel (2 layers, d=128, seq 128, batch 8) training step, AdamW",
        build_hf_gpt2_train,
    ),
    Workload(
        "memory_chain",
        "8-op multiply-add/max/clamp/where chain on 3 x 16M float32 (memory-bound)",
        build_memory_chain,
        min_bytes=memory_chain_min_bytes,
        ops=lambda s: 8,
    ),
]

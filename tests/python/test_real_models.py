"""Real models train on the device as on CPU, in both kiln modes.

Hugging Face GPT-2, BERT, LLaMA and T5 (tiny random-init configs built here:
no downloads), a word_language_model-style LSTM with tied weights, and a
residual conv net with BatchNorm, each trained a few steps on the device and
on CPU from the same initial weights; and a saved GPT-2 loaded back with
from_pretrained generates CPU's tokens on the device.
"""

import copy
import os

import pytest
import torch
from torch import nn

from conftest import DEVICE

# No network: everything below is built from configs or saved to tmp_path.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
import transformers  # noqa: E402  (after the offline switches)

transformers.logging.set_verbosity_error()

RTOL = 1e-5  # as test_training_parity.py
VOCAB, BATCH, SEQ = 128, 2, 12
HF_STEPS, HF_LR = 5, 1e-3


# ---------------------------------------------------------------- Hugging Face


def assert_training_matches(dev, cpu, grad_atol=1e-7, param_atol=1e-7):
    """dev and cpu: (losses, per-step {name: grad or None}, {name: final param}).
    Losses within RTOL; gradients and parameters within RTOL plus the atols;
    and both runs trained."""
    (dev_losses, dev_grads, dev_params), (cpu_losses, cpu_grads, cpu_params) = dev, cpu
    assert list(dev_params) == list(cpu_params)  # the same (deduplicated) parameters
    torch.testing.assert_close(torch.tensor(dev_losses), torch.tensor(cpu_losses), rtol=RTOL, atol=0)
    for step, (dg, cg) in enumerate(zip(dev_grads, cpu_grads)):
        for n in cg:
            assert (dg[n] is None) == (cg[n] is None), n
            if cg[n] is not None:
                torch.testing.assert_close(
                    dg[n],
                    cg[n],
                    rtol=RTOL,
                    atol=grad_atol,
                    msg=lambda m: f"gradient of {n} at step {step}: {m}",  # noqa: B023 - called within this call
                )
    for n in cpu_params:
        torch.testing.assert_close(
            dev_params[n],
            cpu_params[n],
            rtol=RTOL,
            atol=param_atol,
            msg=lambda m: f"parameter {n}: {m}",  # noqa: B023 - called within this call
        )
    assert cpu_losses[-1] < cpu_losses[0] and dev_losses[-1] < dev_losses[0]  # it did train


def tiny_hf_model(name):
    """A tiny random-init model, dropout off everywhere. Attention: the default
    implementation of transformers 4.57 ("sdpa" for GPT-2, BERT and LLaMA, so
    scaled_dot_product_attention runs on the device; T5 has only "eager")."""
    torch.manual_seed(0)
    if name == "gpt2":
        cfg = transformers.GPT2Config(
            vocab_size=VOCAB,
            n_positions=32,
            n_embd=32,
            n_layer=2,
            n_head=4,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
        )
        return transformers.GPT2LMHeadModel(cfg)
    if name == "bert":
        cfg = transformers.BertConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=32,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
        return transformers.BertForMaskedLM(cfg)
    if name == "llama":
        cfg = transformers.LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=32,
            tie_word_embeddings=True,
            attention_dropout=0.0,
        )
        return transformers.LlamaForCausalLM(cfg)
    if name == "t5":
        cfg = transformers.T5Config(
            vocab_size=VOCAB,
            d_model=32,
            d_kv=8,
            d_ff=64,
            num_layers=2,
            num_heads=4,
            dropout_rate=0.0,
            decoder_start_token_id=0,
            pad_token_id=0,
        )
        return transformers.T5ForConditionalGeneration(cfg)
    raise ValueError(name)


def hf_batch(name):
    """Made-up tokens (0 is kept out: it is T5's pad). The same batch every
    step, so that the loss must go down."""
    g = torch.Generator().manual_seed(1)
    x = torch.randint(1, VOCAB, (BATCH, SEQ), generator=g)
    y = torch.randint(1, VOCAB, (BATCH, SEQ), generator=g)
    if name == "bert":  # masked LM on a padded batch: loss on every other token, the last 3 of row 1 padding
        mask = torch.ones_like(x)
        mask[1, -3:] = 0
        labels = x.clone()
        labels[:, ::2] = -100
        labels[mask == 0] = -100
        return dict(input_ids=x, attention_mask=mask, labels=labels)
    if name == "t5":
        return dict(input_ids=x, labels=y)
    return dict(input_ids=x, labels=x)  # causal LM: the model shifts the labels


def is_tied(model):
    return model.get_input_embeddings().weight is model.get_output_embeddings().weight


def train_hf(model, batch, device):
    model = model.to(device)
    tied = is_tied(model)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=HF_LR)
    batch = {k: v.to(device) for k, v in batch.items()}
    losses, grads = [], []
    for _ in range(HF_STEPS):
        opt.zero_grad()
        loss = model(**batch).loss
        loss.backward()
        grads.append(
            {n: None if p.grad is None else p.grad.detach().cpu().clone() for n, p in model.named_parameters()}
        )
        opt.step()
        losses.append(loss.item())
    return tied, losses, grads, {n: p.detach().cpu() for n, p in model.named_parameters()}


# Tolerances for the transformers. Losses: RTOL (measured: at most 1.1e-7
# relative). Gradients, per step: RTOL plus atol 1e-6, not 1e-7: the largest
# measured |device - CPU| is 6.5e-7 (GPT-2 attn.c_proj.bias, eager mode), and
# CPU float32 is itself 1.1e-6 away from a float64 run of the same training
# there. Parameters after 5 AdamW steps: RTOL plus atol 1e-5 (1% of one step,
# lr=1e-3). AdamW moves an element by lr * g / (|g| + eps), eps=1e-8, so where
# g is itself rounding-sized the step depends on the rounding: GPT-2's
# h.1.ln_1.bias[20] has a first gradient of 7.07e-9 on CPU, 6.90e-9 on the
# device and 7.20e-9 in float64 (the tensor's largest is 1.3e-3, whose ulp is
# 1.2e-10), which gives |device - CPU| = 6.0e-6 after 5 steps (eager mode),
# while CPU float32 is 4.3e-6 from float64 there. Likewise the key bias of
# each attention layer, whose gradient is exactly zero in exact arithmetic
# (softmax ignores a per-query constant): 5.9e-6 (GPT-2 c_attn.bias, key part).
# BERT, LLaMA and T5 stay under 7.5e-7. A wrong gradient would show up as a
# whole step (~1e-3), and in the per-step gradient and loss checks.
HF_GRAD_ATOL = 1e-6
HF_PARAM_ATOL = 1e-5


@pytest.mark.parametrize("name", ["gpt2", "bert", "llama", "t5"])
def test_hf_training_matches_cpu(name, mode):
    model = tiny_hf_model(name)
    assert is_tied(model), "the test wants a model with tied input and output embeddings"
    batch = hf_batch(name)
    cpu_tied, cpu_losses, cpu_grads, cpu_params = train_hf(copy.deepcopy(model), batch, "cpu")
    dev_tied, dev_losses, dev_grads, dev_params = train_hf(copy.deepcopy(model), batch, DEVICE)
    assert cpu_tied
    assert dev_tied, "module.to(device) untied the input embedding and the LM head"
    assert_training_matches(
        (dev_losses, dev_grads, dev_params),
        (cpu_losses, cpu_grads, cpu_params),
        grad_atol=HF_GRAD_ATOL,
        param_atol=HF_PARAM_ATOL,
    )


# ------------------------------------------------------------------ LSTM LM


class RNNModel(nn.Module):
    """pytorch/examples word_language_model: Embedding -> LSTM -> Linear, tied."""

    def __init__(self, ntoken=100, nhid=32, nlayers=2):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, nhid)
        self.rnn = nn.LSTM(nhid, nhid, nlayers, dropout=0.0)
        self.decoder = nn.Linear(nhid, ntoken)
        self.decoder.weight = self.encoder.weight
        self.ntoken, self.nlayers, self.nhid = ntoken, nlayers, nhid

    def forward(self, x, hidden):
        out, hidden = self.rnn(self.encoder(x), hidden)
        return self.decoder(out).view(-1, self.ntoken), hidden

    def init_hidden(self, bsz):
        w = next(self.parameters())
        return (w.new_zeros(self.nlayers, bsz, self.nhid), w.new_zeros(self.nlayers, bsz, self.nhid))


def train_lstm(model, data, device, bptt=8, lr=5.0, clip=0.25):
    model = model.to(device)
    tied = model.decoder.weight is model.encoder.weight
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    data = data.to(device)
    hidden = model.init_hidden(data.size(1))
    losses, grads = [], []
    for i in range(0, data.size(0) - 1, bptt):
        seq_len = min(bptt, data.size(0) - 1 - i)
        x, y = data[i : i + seq_len], data[i + 1 : i + 1 + seq_len].reshape(-1)
        hidden = tuple(h.detach() for h in hidden)  # truncated BPTT
        opt.zero_grad()
        out, hidden = model(x, hidden)
        loss = nn.functional.cross_entropy(out, y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip)
        grads.append({n: p.grad.detach().cpu().clone() for n, p in model.named_parameters()})
        opt.step()
        losses.append(loss.item())
    return (tied, losses, grads, {n: p.detach().cpu() for n, p in model.named_parameters()}, [h.cpu() for h in hidden])


def test_lstm_language_model_matches_cpu(mode):
    torch.manual_seed(0)
    model = RNNModel()
    # Made-up text: a period-7 token pattern per column (so the loss can fall),
    # seq-major (49, 2) as batchify makes it: 6 BPTT windows of 8.
    g = torch.Generator().manual_seed(1)
    data = torch.randint(0, 100, (2, 7), generator=g).repeat(1, 7).t().contiguous()
    cpu_tied, cpu_losses, cpu_grads, cpu_params, cpu_hidden = train_lstm(copy.deepcopy(model), data, "cpu")
    dev_tied, dev_losses, dev_grads, dev_params, dev_hidden = train_lstm(copy.deepcopy(model), data, DEVICE)
    assert cpu_tied
    assert dev_tied, "module.to(device) untied decoder.weight from encoder.weight"
    assert_training_matches((dev_losses, dev_grads, dev_params), (cpu_losses, cpu_grads, cpu_params))
    for d, c in zip(dev_hidden, cpu_hidden):
        torch.testing.assert_close(d, c, rtol=RTOL, atol=1e-6)  # carried through 48 timesteps


# ------------------------------------------------------- residual conv net


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        # No conv bias before BatchNorm (see test_training_parity.py).
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


def resnet():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, 1, 1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        BasicBlock(8, 8, 1),
        BasicBlock(8, 16, 2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 5),
    )


def train_resnet(model, x, y, device, steps=5):
    model = model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
    x, y = x.to(device), y.to(device)
    losses, grads = [], []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        grads.append({n: p.grad.detach().cpu().clone() for n, p in model.named_parameters()})
        opt.step()
        losses.append(loss.item())
    with torch.no_grad():
        eval_out = model.eval()(x).cpu()  # uses the running statistics
    return (
        losses,
        grads,
        {n: p.detach().cpu() for n, p in model.named_parameters()},
        {n: b.cpu() for n, b in model.named_buffers()},
        eval_out,
    )


def test_resnet_batchnorm_matches_cpu(mode):
    torch.manual_seed(0)
    model = resnet()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, 3, 12, 12, generator=g)
    y = torch.randint(0, 5, (8,), generator=g)
    cpu_losses, cpu_grads, cpu_params, cpu_buffers, cpu_eval = train_resnet(copy.deepcopy(model), x, y, "cpu")
    dev_losses, dev_grads, dev_params, dev_buffers, dev_eval = train_resnet(copy.deepcopy(model), x, y, DEVICE)
    assert_training_matches((dev_losses, dev_grads, dev_params), (cpu_losses, cpu_grads, cpu_params))
    assert list(dev_buffers) == list(cpu_buffers)
    for n in cpu_buffers:  # running_mean, running_var (atol+rtol), num_batches_tracked (exact)
        torch.testing.assert_close(
            dev_buffers[n],
            cpu_buffers[n],
            rtol=RTOL,
            atol=1e-7,
            msg=lambda m: f"buffer {n}: {m}",  # noqa: B023 - called within this call
        )
    assert int(cpu_buffers["1.num_batches_tracked"]) == 5
    torch.testing.assert_close(dev_eval, cpu_eval, rtol=RTOL, atol=1e-6)


# ---------------------------------------------- from_pretrained + generate


def saved_gpt2(path):
    torch.manual_seed(0)
    # initializer_range 0.2 (not 0.02) so that greedy decoding does not just
    # repeat one token; the smallest top-1/top-2 logit margin is then ~1e-2,
    # against a device/CPU logit difference of ~2e-6, so exact token equality
    # is a fair test.
    cfg = transformers.GPT2Config(
        vocab_size=VOCAB,
        n_positions=64,
        n_embd=32,
        n_layer=2,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        initializer_range=0.2,
        bos_token_id=0,
        eos_token_id=VOCAB - 1,
        pad_token_id=VOCAB - 1,
    )
    transformers.GPT2LMHeadModel(cfg).save_pretrained(path)
    return path


def prompt():
    """Two prompts, the second left-padded (as batched generation does)."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, VOCAB - 1, (2, 6), generator=g)
    mask = torch.ones_like(ids)
    ids[1, :2] = VOCAB - 1
    mask[1, :2] = 0
    return ids, mask


def greedy(model, ids, mask):
    device = model.device
    with torch.no_grad():
        return model.generate(
            ids.to(device), attention_mask=mask.to(device), max_new_tokens=10, min_new_tokens=10, do_sample=False
        )


def check_generate_matches_cpu(path, dev_model):
    ids, mask = prompt()
    cpu_model = transformers.GPT2LMHeadModel.from_pretrained(path).eval()
    assert is_tied(cpu_model) and is_tied(dev_model), "from_pretrained / .to(device) untied the LM head"
    assert dev_model.device.type == DEVICE
    cpu_out = greedy(cpu_model, ids, mask)
    dev_out = greedy(dev_model.eval(), ids, mask)
    assert dev_out.device.type == DEVICE
    assert cpu_out.shape == (2, 16)
    assert len(set(cpu_out[0, 6:].tolist())) > 1  # not a degenerate repeat of one token
    assert dev_out.cpu().tolist() == cpu_out.tolist()


def test_from_pretrained_device_map_generate(mode, tmp_path):
    # transformers 4.57 refuses any device_map without `accelerate`.
    pytest.importorskip("accelerate", reason="from_pretrained(device_map=...) needs accelerate, not installed")
    path = saved_gpt2(tmp_path)
    check_generate_matches_cpu(path, transformers.GPT2LMHeadModel.from_pretrained(path, device_map=DEVICE))


def test_from_pretrained_then_to_device_generate(mode, tmp_path):
    """FALLBACK for test_from_pretrained_device_map_generate while accelerate is
    not installed: load on CPU, then .to(device)."""
    path = saved_gpt2(tmp_path)
    check_generate_matches_cpu(path, transformers.GPT2LMHeadModel.from_pretrained(path).to(DEVICE))

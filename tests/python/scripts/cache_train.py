"""A small training script for the persistent-cache tests.

It trains a GELU MLP with LayerNorm and AdamW on the neuron device (several
distinct fused kernels, pointwise and row) and prints one JSON line: the
trained parameters' checksum, a few raw values and kiln's cache counters.
An argument `--variant N` adds a differently shaped op chain, so that
processes can have kernels of their own beside the shared ones.
"""

import argparse
import json
import time

import torch

import kiln

parser = argparse.ArgumentParser()
parser.add_argument("--variant", type=int, default=0)
# Four steps by default: the adaptive policy compiles a trace at its second
# occurrence (KILN_COMPILE_THRESHOLD=2), and a cold run's first two steps
# differ from the later ones (first calls of an argument case run on the
# host, AdamW creates its state); with fewer, a warm run, whose steps are all
# alike, would still find traces due to compile.
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--idle-s", type=float, default=0.0, help="seconds of start-up before the first op")
parser.add_argument("--deterministic", action="store_true", help="torch.use_deterministic_algorithms(True)")
args = parser.parse_args()
time.sleep(args.idle_s)  # a program's imports and set-up: the device memory reserve runs meanwhile

if args.deterministic:
    # The same tiers (library kernels or fused) on a warm cache as on a cold
    # one, so that their runs give the same bits (docs/tuning.md, "Tiers").
    torch.use_deterministic_algorithms(True)
torch.manual_seed(0)
dev = torch.device(kiln.DEVICE_NAME)
model = torch.nn.Sequential(
    torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU(), torch.nn.Linear(32, 4)
).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
x = torch.randn(8, 16).to(dev)
y = torch.randn(8, 4).to(dev)
for _ in range(args.steps):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
loss_value = loss.item()  # a sync: the variant's ops below are a trace of their own
extra = 0.0
if args.variant:
    # A chain of its own per variant: a different number of ops is a different kernel.
    # Three times: the adaptive policy compiles a trace at its second
    # occurrence, and at its third one whose kernels would each hold one op
    # (docs/tuning.md, "Tiers").
    for _ in range(3):
        z = x[:, :4]
        for _ in range(args.variant):
            z = torch.tanh(z * 1.5 + 0.25)
        extra = z.sum().item()
params = torch.cat([p.detach().flatten() for p in model.parameters()]).cpu()
# The adaptive policy's compiles run on a background thread: the counts below
# are those of every compile the run queued, not of those done by now.
kiln.wait_for_compiles()
c = kiln.metrics.counters()
print(
    json.dumps(
        {
            "loss": loss_value,
            "extra": extra,
            "checksum": params.double().sum().item(),
            "first": params[:8].tolist(),
            "compiled": sum(c["kernels_compiled"].values()),
            "store": c["executable_store"],
            "verdicts": c["stored_verdicts"],
            "first_calls": c["trace_flushes"].get("first call with these argument shapes", 0),
            "warm_start": c["warm_start"],
            "tiers": c["tiers"],
        }
    )
)

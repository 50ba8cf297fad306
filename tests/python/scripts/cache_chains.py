"""Many distinct kernels for the persistent-cache tests: for each length
FIRST..N, a chain of that many sin(1.5 * z + 0.25) steps on the neuron device (a
longer chain is another kernel, and a larger one), run REPEAT times. Prints one JSON line: the
results' sum and kiln's cache counters."""

import argparse
import json

import torch

import kiln

parser = argparse.ArgumentParser()
parser.add_argument("lengths", type=int)
parser.add_argument("--first", type=int, default=1)
parser.add_argument("--announce", action="store_true", help="print 'started' once imported (the crash test)")
# Three times by default, as a program's loop would repeat them: the
# adaptive policy compiles a trace at its second occurrence
# (KILN_COMPILE_THRESHOLD=2), and at its third one whose kernels would each
# hold one op (the shortest chain's; docs/tuning.md, "Tiers").
parser.add_argument("--repeat", type=int, default=3, help="runs of each chain")
args = parser.parse_args()
if args.announce:
    print("started", flush=True)

x = torch.linspace(-1, 1, 64, device=kiln.DEVICE_NAME)
total = 0.0
for length in range(args.first, args.lengths + 1):
    for _ in range(args.repeat):
        z = x
        for _ in range(length):
            z = torch.sin(z * 1.5 + 0.25)
        total += z.sum().item()
kiln.wait_for_compiles()  # the counts of every compile queued, not of those done by now
c = kiln.metrics.counters()
print(json.dumps({"total": total, "compiled": sum(c["kernels_compiled"].values()), "store": c["executable_store"]}))

"""Who `make bench` measures. Shared by the parent (bench/run_bench.py), which
imports no torch, and the child that measures one pair (bench/measure_one.py)."""

from dataclasses import dataclass

NO_CACHE = "not built yet: the persistent executable cache is the next issue"


@dataclass(frozen=True)
class Contender:
    key: str
    label: str
    kiln_mode: str | None = None  # None: plain PyTorch on the CPU, kiln not loaded
    compiled: bool = False  # the workload's compute goes through torch.compile
    reason: str | None = None  # why it cannot run (then it has no numbers)


CONTENDERS = [
    Contender("cpu_eager", "PyTorch eager, CPU"),
    Contender("cpu_compile", "torch.compile (Inductor), CPU", compiled=True),
    Contender("kiln_eager", "kiln eager (one launch per op)", kiln_mode="eager"),
    Contender("kiln_lazy", "kiln lazy (fused, compiled)", kiln_mode="lazy"),
    Contender("kiln_lazy_cold", "kiln lazy, cold persistent cache", reason=NO_CACHE),
    Contender("kiln_lazy_warm", "kiln lazy, warm persistent cache", reason=NO_CACHE),
]

BY_KEY = {c.key: c for c in CONTENDERS}

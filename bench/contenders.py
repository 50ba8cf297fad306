"""Who `make bench` measures. Shared by the parent (bench/run_bench.py), which
imports no torch, and the child that measures one pair (bench/measure_one.py)."""

from dataclasses import dataclass

# The workloads whose first step is also measured on a warm persistent store
# (the transformer and LSTM): a priming kiln lazy process fills the
# store, then a fresh process runs on it.
WARM_START_WORKLOADS = ("gpt_train", "lstm_lm_train")


@dataclass(frozen=True)
class Contender:
    key: str
    label: str
    kiln_mode: str | None = None  # None: plain PyTorch on the CPU, kiln not loaded
    compiled: bool = False  # the workload's compute goes through torch.compile
    reason: str | None = None  # why it cannot run (then it has no numbers)
    warm_store: bool = False  # starts on the store a kiln lazy process of the same workload left
    env: tuple = ()  # (name, value) pairs of knobs it sets on top of its mode


CONTENDERS = [
    Contender("cpu_eager", "PyTorch eager, CPU"),
    Contender("cpu_compile", "torch.compile (Inductor), CPU", compiled=True),
    Contender("kiln_eager", "kiln eager (one launch per op)", kiln_mode="eager"),
    Contender("kiln_lazy", "kiln lazy (fused, compiled)", kiln_mode="lazy"),  # on an empty store: a cold start
    # The fixed policy the adaptive one is measured against (issue 18): every
    # trace compiled at its first flush, which waits for the compile.
    Contender(
        "kiln_lazy_fixed",
        "kiln lazy, fixed policy (compile at first sight, blocking)",
        kiln_mode="lazy",
        env=(("KILN_COMPILE_THRESHOLD", "1"), ("KILN_ASYNC_COMPILE", "0")),
    ),
    Contender("kiln_lazy_warm", "kiln lazy, warm persistent cache", kiln_mode="lazy", warm_store=True),
]

BY_KEY = {c.key: c for c in CONTENDERS}

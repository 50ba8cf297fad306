"""Who `make bench` measures. Shared by the parent (bench/run_bench.py), which
imports no torch, and the child that measures one pair (bench/measure_one.py)."""

from dataclasses import dataclass

# The workloads whose first step is also measured on a warm persistent store
# (the transformer and LSTM): a priming kiln lazy process fills the
# store, then a fresh process runs on it.
WARM_START_WORKLOADS = ("gpt_train", "lstm_lm_train")


# What makes kiln lazy the fixed policy: every trace compiled at its first
# flush, which waits for the compile.
FIXED_POLICY_ENV = (("KILN_COMPILE_THRESHOLD", "1"), ("KILN_ASYNC_COMPILE", "0"))


@dataclass(frozen=True)
class Contender:
    key: str
    label: str
    kiln_mode: str | None = None  # None: plain PyTorch on the CPU, kiln not loaded
    compiled: bool = False  # the workload's compute goes through torch.compile
    reason: str | None = None  # why it cannot run (then it has no numbers)
    warm_store: bool = False  # starts on the store a kiln lazy process of the same workload left
    env: tuple = ()  # (name, value) pairs of knobs it sets on top of its mode
    # A second process of the contender named here, the same in every way: the
    # ratio of the two is what two runs of one thing differ by on this
    # machine (the noise floor the "not slower" targets are read against).
    repeats: str | None = None
    workloads: tuple | None = None  # where it runs; None: every workload
    # Where its first step is the median over several fresh processes (the
    # timed one and first-step-only ones, run_bench's "first_samples"): the
    # workloads whose first step a "not slower" target compares with another
    # contender's ("all": every workload it runs on). One process's first step
    # is mostly fresh pages and compiles, and two processes of one contender
    # differed by 5-20% in a run (2026-12-06), more than those targets allow.
    first_sampled_on: tuple | str | None = None

    def first_sampled(self, workload):
        return self.first_sampled_on == "all" or workload in (self.first_sampled_on or ())


CONTENDERS = [
    Contender("cpu_eager", "PyTorch eager, CPU", first_sampled_on=("varlen_infer",)),
    Contender("cpu_compile", "torch.compile (Inductor), CPU", compiled=True),
    Contender("kiln_eager", "kiln eager (one launch per op)", kiln_mode="eager"),
    # On an empty store: a cold start.
    Contender("kiln_lazy", "kiln lazy (fused, compiled)", kiln_mode="lazy", first_sampled_on="all"),
    # The fixed policy the adaptive one is measured against (issue 18).
    Contender(
        "kiln_lazy_fixed",
        "kiln lazy, fixed policy (compile at first sight, blocking)",
        kiln_mode="lazy",
        env=FIXED_POLICY_ENV,
        first_sampled_on="all",
    ),
    Contender("kiln_lazy_warm", "kiln lazy, warm persistent cache", kiln_mode="lazy", warm_store=True),
    # The noise floor of the two "not slower" targets that compare contenders
    # doing the same work (issue 18): the fixed policy against the adaptive
    # one, where both launch the same kernels once steady, and eager CPU
    # against kiln's first varlen pass, which runs CPU's own kernels.
    Contender(
        "kiln_lazy_fixed_again",
        "kiln lazy, fixed policy, a second process (noise floor)",
        kiln_mode="lazy",
        env=FIXED_POLICY_ENV,
        repeats="kiln_lazy_fixed",
        first_sampled_on="all",
    ),
    Contender(
        "cpu_eager_again",
        "PyTorch eager, CPU, a second process (noise floor)",
        repeats="cpu_eager",
        workloads=("varlen_infer",),
        first_sampled_on="all",
    ),
]

BY_KEY = {c.key: c for c in CONTENDERS}

"""Module conformance: every nn.Module in PyTorch's module_db, on the device and on CPU.

For each ModuleInfo, float32 and training mode, every sample of
module_inputs_func(device="cpu", requires_grad=True, training=True) is run in
each kiln mode ("eager" and "lazy"): the module is built on CPU (seeded),
deep-copied to the device (a lazy module is materialized by a no_grad forward
on each side and then given CPU's parameters, as PyTorch's own
TestModule.test_cpu_gpu_parity does), the forward runs on both with the same
inputs, and then the backward of one scalar (every differentiable floating
output weighted by a fixed random tensor, summed) runs through
torch.autograd.grad. Compared with CPU, with the OpInfo harness's tolerances
(atol=1e-3, rtol=1e-3): every tensor of the nested outputs (shape and dtype
exactly), every buffer after the forward (running statistics), and the
gradient of every parameter and of every input that requires grad. A sample
that raises on CPU passes when it raises on the device too.

Randomness: dropout submodules get p=0 (the device's generator is not CPU's,
so a mask cannot be compared); a sample whose CPU output still depends on the
seed is skipped, with the reason in the report.

Run directly to rewrite the module section of docs/conformance.md:
    python tests/python/module_conformance.py [--modules nn.Linear,nn.LSTM] [--modes eager,lazy]
                                              [--write docs/conformance.md]
(--noncontiguous, which the test does not run: every input a strided view.)
"""

import argparse
import collections
import copy
import datetime
import os
import sys
import time
import traceback
import warnings

import torch
from torch.testing._internal.common_modules import module_db
from torch.utils._pytree import tree_leaves

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conformance  # noqa: E402  (shares the comparer, tolerances and the report file)

ATOL = conformance.ATOL
RTOL = conformance.RTOL
DTYPE = torch.float32
MODES = ("eager", "lazy")

# Why the failures that remain fail, keyed by (module name, sample desc), e.g.
#   ("nn.MultiLabelMarginLoss", "1d_reduction_none"): "the meta kernel gives shape [1] where CPU gives []; ..."
# Each is checked by the run: one listed here that passes is reported as such,
# and a failure not listed fails test_module_conformance. None remain.
EXPLANATIONS = {}

# (mode, module, passed, failed, skipped, notes: {note: count}, failures: [(index, desc, reason)])
Result = collections.namedtuple("Result", "mode module passed failed skipped notes failures")

_cmp = conformance._cmp
_first_line = conformance._first_line


def _device_name():
    return torch._C._get_privateuse1_backend_name()


def _map(fn, x):
    """fn on every tensor of a nested structure of tuples, lists and dicts."""
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*[_map(fn, e) for e in x])
    if isinstance(x, (list, tuple)):
        return type(x)(_map(fn, e) for e in x)
    if isinstance(x, dict):
        return {k: _map(fn, v) for k, v in x.items()}
    return x


def _tensors(x):
    """The tensors of a nested structure, in a fixed order."""
    return [t for t in tree_leaves(x) if isinstance(t, torch.Tensor)]


# --noncontiguous (not part of the test): every input tensor, on CPU and on the
# device alike, is a view of every other element of a buffer twice as wide in
# its last dim, as PyTorch's test_non_contiguous_tensors does.
NONCONTIGUOUS = False


def _copy(t, device):
    t = t.detach()
    if not NONCONTIGUOUS or t.dim() == 0 or t.numel() == 0:
        return t.to(device, copy=True)
    wide = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype, device=device)
    view = wide[..., ::2]
    view.copy_(t)
    return view


def _fresh(x, device):
    """New leaf copies of every tensor of x on device (requires_grad kept), so
    that no forward sees another's in-place changes or autograd history."""
    return _map(lambda t: _copy(t, device).requires_grad_(t.requires_grad), x)


def _zero_dropout(module):
    """Sets p=0 on every dropout submodule with p>0; returns how many."""
    n = 0
    for m in module.modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0:
            m.p = 0.0
            n += 1
        elif isinstance(m, torch.nn.MultiheadAttention) and m.dropout > 0:
            m.dropout = 0.0
            n += 1
    return n


def _forward(module, args, kwargs):
    return module(*args, **kwargs)


def _backward(module, args, kwargs, outputs, weights):
    """Gradients of sum(weight * output) over the differentiable floating outputs,
    for every parameter then every input tensor that requires grad; None where
    a parameter or input is not reached. None when nothing is differentiable."""
    outs = [t for t in _tensors(outputs) if t.requires_grad and t.is_floating_point()]
    if not outs:
        return None
    loss = sum((o * w).sum() for o, w in zip(outs, weights))
    wrt = [p for p in module.parameters() if p.requires_grad]
    wrt += [t for t in _tensors((args, kwargs)) if t.requires_grad]
    return torch.autograd.grad(loss, wrt, allow_unused=True)


def _grad_names(module, args, kwargs):
    names = [f"parameter '{n}'" for n, p in module.named_parameters() if p.requires_grad]
    names += [f"input {i}" for i, t in enumerate(_tensors((args, kwargs))) if t.requires_grad]
    return names


def _grad_weights(outputs, index):
    """A fixed random tensor per differentiable floating output (seeded by the sample's index)."""
    g = torch.Generator().manual_seed(1000 + index)
    return [
        torch.randn(o.shape, generator=g, dtype=o.dtype)
        for o in _tensors(outputs)
        if o.requires_grad and o.is_floating_point()
    ]


def _build(module_info, sample):
    args, kwargs = sample.constructor_input.args, sample.constructor_input.kwargs
    torch.manual_seed(0)
    module = module_info.module_cls(*args, **kwargs).to(DTYPE)
    module.train(True)
    return module


def _compare(actual, expected, what):
    try:
        _cmp.assertEqual(actual, expected, atol=ATOL, rtol=RTOL, equal_nan=True, exact_device=False)
    except AssertionError as e:
        raise _Mismatch(f"{what} mismatch {_first_line(e)}") from None


class _Mismatch(Exception):
    pass


def _check_placement(x, device, what):
    """Every tensor the device module returns lives on the device (a CPU
    tensor would compare equal while the device did nothing)."""
    for t in _tensors(x):
        if t.device.type != device:
            raise _Mismatch(f"{what} is on {t.device}, not on the device")


def _is_random(module, args, kwargs):
    """A sample is random when two seeds give different CPU outputs."""
    outs = []
    for seed in (1, 2):
        m = copy.deepcopy(module)
        a, k = _fresh((args, kwargs), "cpu")
        torch.manual_seed(seed)
        with torch.no_grad():
            outs.append(_forward(m, a, k))
    try:
        _cmp.assertEqual(outs[0], outs[1], atol=0, rtol=0, equal_nan=True)
    except AssertionError:
        return True
    return False


def check_sample(module_info, sample, index, device):
    """One sample in the current mode: "pass", ("skip", reason) or ("fail", reason)."""
    inputs = (sample.forward_input.args, sample.forward_input.kwargs) if sample.forward_input else ((), {})
    try:
        cpu_module = _build(module_info, sample)
    except Exception as e:
        return "skip", f"the module cannot be built on CPU: {_first_line(e)}"
    zeroed = _zero_dropout(cpu_module)
    dev_module = copy.deepcopy(cpu_module)  # before CPU's forward changes any buffer
    args, kwargs = _fresh(inputs, "cpu")
    dev_args, dev_kwargs = _fresh(inputs, device)
    cpu_error = weights = None  # CPU raised in the forward when weights is None, else in the backward
    try:
        if module_info.is_lazy:
            with torch.no_grad():
                _forward(cpu_module, *_fresh(inputs, "cpu"))
        if _is_random(cpu_module, *inputs):
            return "skip", "random: the CPU output depends on the seed" + (
                f" (after setting p=0 on {zeroed} dropout submodule(s))" if zeroed else ""
            )
        torch.manual_seed(0)
        expected = _forward(cpu_module, args, kwargs)
        weights = _grad_weights(expected, index)
        expected_grads = _backward(cpu_module, args, kwargs, expected, weights)
    except Exception as e:
        cpu_error = e
    stage = "forward"
    try:
        dev_module = dev_module.to(device)
        if module_info.is_lazy:
            with torch.no_grad():
                _forward(dev_module, *_fresh(inputs, device))
                for p, q in zip(dev_module.parameters(), cpu_module.parameters()):
                    p.copy_(q)
                for b, c in zip(dev_module.buffers(), cpu_module.buffers()):
                    b.copy_(c)
        torch.manual_seed(0)
        actual = _forward(dev_module, dev_args, dev_kwargs)
        getattr(torch, device).synchronize()
        if weights is not None:  # CPU's forward ran: so does the device's backward
            stage = "backward"
            actual_grads = _backward(dev_module, dev_args, dev_kwargs, actual, [w.to(device) for w in weights])
            getattr(torch, device).synchronize()
    except Exception as e:
        if cpu_error is not None and stage == ("forward" if weights is None else "backward"):
            return "pass", f"raises on CPU and on the device in the {stage} ({_first_line(cpu_error)})"
        if cpu_error is not None:
            return (
                "fail",
                f"device raised in the {stage} {_first_line(e)}, CPU in the "
                f"{'forward' if weights is None else 'backward'} ({_first_line(cpu_error)})",
            )
        return "fail", f"device raised in the {stage} {_first_line(e)}"
    if cpu_error is not None:
        return (
            "fail",
            f"CPU raised in the {'forward' if weights is None else 'backward'} but the device did not "
            f"({_first_line(cpu_error)})",
        )
    try:
        _check_placement(actual, device, "forward output")
        _compare(_map(lambda t: t.cpu(), actual), expected, "forward output")
        flags = [t.requires_grad for t in _tensors(actual)], [t.requires_grad for t in _tensors(expected)]
        if flags[0] != flags[1]:
            raise _Mismatch(f"forward output requires_grad {flags[0]} on the device, {flags[1]} on CPU")
        for (name, b), c in zip(dev_module.named_buffers(), cpu_module.buffers()):
            _check_placement(b, device, f"buffer '{name}'")
            _compare(b.cpu(), c, f"buffer '{name}'")
        if (actual_grads is None) != (expected_grads is None):
            raise _Mismatch("backward: differentiable outputs differ")
        if expected_grads is not None:
            for name, a, e in zip(_grad_names(cpu_module, args, kwargs), actual_grads, expected_grads):
                if (a is None) != (e is None):
                    raise _Mismatch(
                        f"grad of {name}: {'None' if a is None else 'a tensor'} on the device, "
                        f"{'None' if e is None else 'a tensor'} on CPU"
                    )
                if a is not None:
                    _check_placement(a, device, f"grad of {name}")
                    _compare(a.cpu(), e, f"grad of {name}")
    except _Mismatch as e:
        return "fail", str(e)
    except Exception as e:  # an error the device deferred to this sync point
        return "fail", f"device raised at a sync point {_first_line(e)}"
    return "pass"


def check_module(module_info, mode, device):
    passed = failed = skipped = 0
    notes = collections.Counter()
    failures = []
    torch.manual_seed(0)
    try:
        samples = list(
            module_info.module_inputs_func(module_info, device="cpu", dtype=DTYPE, requires_grad=True, training=True)
        )
    except Exception as e:
        return Result(mode, module_info.name, 0, 0, 1, {f"skip: samples cannot be built: {_first_line(e)}": 1}, [])
    for index, sample in enumerate(samples):
        outcome = check_sample(module_info, sample, index, device)
        if outcome == "pass":
            passed += 1
        elif outcome[0] == "pass":
            passed += 1
            notes[f"pass: {outcome[1]}"] += 1
        elif outcome[0] == "skip":
            skipped += 1
            notes[f"skip: {outcome[1]}"] += 1
        else:
            failed += 1
            notes[f"fail: {outcome[1]}"] += 1
            failures.append((index, sample.desc, outcome[1]))
    return Result(mode, module_info.name, passed, failed, skipped, dict(notes), failures)


def _counters():
    import kiln

    return {g: dict(c) for g, c in kiln.metrics.counters().items()}


def _difference(after, before):
    return {
        g: {k: v - before.get(g, {}).get(k, 0) for k, v in c.items() if v != before.get(g, {}).get(k, 0)}
        for g, c in after.items()
    }


def run(module_names=None, modes=MODES, log=None, metrics=None):
    """Results of every sample of every ModuleInfo (or those named) in each
    mode; the kiln mode is restored after. A dict passed as metrics receives,
    per mode, what kiln counted during that mode's run."""
    import kiln

    device = _device_name()
    infos = [m for m in module_db if module_names is None or m.name in module_names]
    results = []
    previous = kiln.mode()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the modules' own deprecation notes, kiln's once-per-op fallback notes
        try:
            _run_modes(infos, modes, device, results, log, metrics)
        finally:
            kiln.set_mode(previous)
    return results


def _run_modes(infos, modes, device, results, log, metrics):
    import kiln

    for mode in modes:
        kiln.set_mode(mode)
        before = _counters()
        for i, info in enumerate(infos):
            start = time.time()
            try:
                r = check_module(info, mode, device)
            except Exception as e:  # a harness problem must not stop the run
                r = Result(
                    mode,
                    info.name,
                    0,
                    1,
                    0,
                    {f"fail: harness error {_first_line(e)}": 1},
                    [(-1, "", f"harness error {_first_line(e)}")],
                )
                traceback.print_exc()
            results.append(r)
            if log:
                log(
                    f"[{mode} {i + 1}/{len(infos)}] {r.module}: {r.passed} passed, {r.failed} failed, "
                    f"{r.skipped} skipped ({time.time() - start:.1f}s)"
                )
        getattr(torch, device).synchronize()
        if metrics is not None:
            metrics[mode] = _difference(_counters(), before)


def harness_errors(results):
    return [(r.mode, r.module, f) for r in results for f in r.failures if f[0] < 0]


def unexplained_failures(results):
    return [(r.mode, r.module, f) for r in results for f in r.failures if (r.module, f[1]) not in EXPLANATIONS]


def totals(results, mode):
    rs = [r for r in results if r.mode == mode]
    return sum(r.passed for r in rs), sum(r.failed for r in rs), sum(r.skipped for r in rs)


def _what_ran(metrics, mode):
    c = metrics[mode]
    launches = c.get("launches", {})
    fused = launches.get("fused kernel", 0)
    copies = sum(v for k, v in launches.items() if k.startswith("copy"))
    fallbacks = c.get("fallbacks", {})
    top = ", ".join(f"`{k}` ({v})" for k, v in sorted(fallbacks.items(), key=lambda kv: -kv[1]))
    return (
        f"| {mode} | {sum(launches.values())} | {fused} | {sum(c.get('library_kernels', {}).values())} | "
        f"{copies} | {sum(fallbacks.values())}: {top or 'none'} |"
    )


def markdown(results, elapsed_s, metrics=None):
    modes = [m for m in MODES if any(r.mode == m for r in results)]
    lines = [
        "# Module conformance",
        "",
        f"Generated by `tests/python/module_conformance.py` (run by `make test`) on "
        f"{datetime.date.today().isoformat()} with torch {torch.__version__}, in {elapsed_s:.0f} s.",
        "",
        "Every ModuleInfo in `torch.testing._internal.common_modules.module_db` (lazy modules included) is "
        "run on every sample of its `module_inputs_func` (float32, training mode), in each kiln mode: "
        "the module is built on CPU (seeded) and deep-copied to the device; the forward runs on both with "
        "the same inputs, then `torch.autograd.grad` of the sum of every differentiable floating output "
        "weighted by a fixed random tensor. Compared with CPU (atol=%g, rtol=%g): every tensor of the "
        "nested outputs, every buffer after the forward, and the gradient of every parameter and of "
        "every input that requires grad. A sample that raises on CPU passes when it raises on the device "
        "too. Dropout submodules get p=0 (the device's generator is not CPU's); a sample whose CPU "
        "output still depends on the seed is skipped. No module or sample is left out: PyTorch's own "
        "TestModule.test_cpu_gpu_parity skips `nn.KLDivLoss` and `nn.GroupNorm` (CUDA issues) and lazy "
        "modules; all three kinds run here. Inputs are contiguous, as module_db builds them "
        "(`module_conformance.py --noncontiguous` runs every input as a strided view; the test does not)."
        % (ATOL, RTOL),
        "",
        "## Totals",
        "",
        "| mode | samples | passed | failed | skipped | pass rate |",
        "|---|---|---|---|---|---|",
    ]
    for mode in modes:
        p, f, s = totals(results, mode)
        lines.append(f"| {mode} | {p + f} | {p} | {f} | {s} | {100.0 * p / max(1, p + f):.2f}% |")
    if metrics:
        lines += [
            "",
            "What ran on the device, from kiln.metrics over each mode's run: launches (of which fused: "
            "kernels kiln compiled; copies: host<->device and device<->device), library-kernel calls (an "
            "op run as its CPU kernel over device memory) and host fallbacks (ops without a meta kernel, "
            "run on the host after the queue is drained).",
            "",
            "| mode | launches | fused kernels | library kernels | copies | host fallbacks |",
            "|---|---|---|---|---|---|",
        ]
        lines += [_what_ran(metrics, m) for m in modes if m in metrics]
    lines += [
        "",
        "## Failures",
        "",
        "| mode | module | sample | desc | reason | explanation |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        for index, desc, reason in r.failures:
            why = EXPLANATIONS.get((r.module, desc), "**NOT EXPLAINED**")
            lines.append(f"| {r.mode} | `{r.module}` | {index} | {desc or '-'} | {reason} | {why} |")
    if not any(r.failures for r in results):
        lines.append("| - | none | | | | |")
    failing = {(r.module, f[1]) for r in results for f in r.failures}
    ran = {r.module for r in results}
    fixed = sorted(f"`{m}` ({d})" for m, d in EXPLANATIONS if m in ran and (m, d) not in failing)
    if fixed:
        lines += ["", "Listed as known failures but passing now: " + ", ".join(fixed)]
    lines += ["", "## Skips", ""]
    skips = [(r.mode, r.module, n, c) for r in results for n, c in sorted(r.notes.items()) if n.startswith("skip")]
    for mode, module, note, count in skips:
        lines.append(f"- `{module}` ({mode}), {count} sample(s): {note[6:]}")
    if not skips:
        lines.append("None.")
    lines += [
        "",
        "## Per module",
        "",
        "| module | " + " | ".join(f"{m}: passed / failed / skipped" for m in modes) + " | notes |",
        "|---|" + "---|" * (len(modes) + 1),
    ]
    by_module = collections.OrderedDict()
    for r in results:
        by_module.setdefault(r.module, {})[r.mode] = r
    for module, per_mode in by_module.items():
        cells = [
            f"{per_mode[m].passed} / {per_mode[m].failed} / {per_mode[m].skipped}" if m in per_mode else "-"
            for m in modes
        ]
        notes = sorted(
            {f"{m}: {n} ({c})" for m, r in per_mode.items() for n, c in r.notes.items() if n.startswith("pass")}
        )
        lines.append(f"| `{module}` | " + " | ".join(cells) + " | " + "; ".join(notes) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--modules", help="comma-separated ModuleInfo names, e.g. nn.Linear (default: all)")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated kiln modes")
    parser.add_argument("--write", help="rewrite the module section of this markdown report")
    parser.add_argument(
        "--noncontiguous",
        action="store_true",
        help="make every input a strided view (on CPU and on the device); not what the test runs",
    )
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    import kiln  # noqa: F401  (autoload does this too)

    global NONCONTIGUOUS
    NONCONTIGUOUS = args.noncontiguous
    if args.noncontiguous and args.write:
        parser.error("--noncontiguous is not what docs/conformance.md reports; leave out --write")

    start = time.time()
    names = set(args.modules.split(",")) if args.modules else None
    metrics = {}
    results = run(
        names,
        modes=tuple(args.modes.split(",")),
        log=None if args.quiet else lambda m: print(m, flush=True),
        metrics=metrics,
    )
    elapsed = time.time() - start
    for mode in args.modes.split(","):
        p, f, s = totals(results, mode)
        print(f"{mode}: {p} passed, {f} failed, {s} skipped ({100.0 * p / max(1, p + f):.2f}%)")
    for mode, module, (index, desc, reason) in [(r.mode, r.module, f) for r in results for f in r.failures]:
        print(f"FAIL {mode} {module} [{index}] {desc}: {reason}")
    print(f"{elapsed:.1f} s")
    if args.write:
        conformance.write_report(args.write, modules=markdown(results, elapsed, metrics))


if __name__ == "__main__":
    main()

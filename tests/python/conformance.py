"""OpInfo conformance: every op in PyTorch's op_db, on the device and on CPU.

For each OpInfo and dtype (float32, and bfloat16 where the op supports it on
CPU), every sample input is run on CPU and on the device (the same sample
moved there) and the results are compared with the tolerances of PyTorch's
own device-vs-CPU test (test_ops.py TestCommon.test_compare_cpu: atol=1e-3,
rtol=1e-3). Random ops (whose CPU results differ between two seeds) are
compared by shape and dtype. A sample that raises on CPU must raise on the
device too.

Run directly to rewrite docs/conformance.md:
    python tests/python/conformance.py [--ops add,mul] [--write docs/conformance.md]
"""

import argparse
import collections
import datetime
import os
import time
import traceback
import warnings

import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase

ATOL = 1e-3
RTOL = 1e-3
DTYPES = (torch.float32, torch.bfloat16)
MAX_SAMPLES_PER_OP = 64  # bounds the run on a 2-core machine

# Why the failures that remain fail. Each is checked by the run: an op listed
# here that starts passing is reported as such, so the list cannot go stale.
EXPLANATIONS = {
    "sparse.sampled_addmm": "sparse layouts are not supported on the device (dense strided tensors only)",
    "sparse.mm.reduce": "sparse layouts are not supported on the device (dense strided tensors only)",
    "to_sparse": "sparse layouts are not supported on the device (dense strided tensors only)",
    "tensor_split": "the harness moves every tensor argument to the device, but tensor_split requires "
    "tensor_indices_or_sections on the CPU (it raises the same way on CUDA)",
    "nn.functional.linear_cross_entropy.chunked": "its Python implementation picks the accumulation policy by "
    "device type (acc_policy='auto'); for bfloat16 the CPU default differs from other devices'",
    "nn.functional.linear_cross_entropy.chunked_none": "its Python implementation picks the accumulation policy by "
    "device type (acc_policy='auto'); for bfloat16 the CPU default differs from other devices'",
}

Result = collections.namedtuple("Result", "op dtype passed failed skipped notes")


class _Comparer(TestCase):
    def runTest(self):  # pragma: no cover - TestCase needs one
        pass


_cmp = _Comparer()


def _device_name():
    return torch._C._get_privateuse1_backend_name()


def _to(device):
    def move(t):
        if isinstance(t, torch.Tensor):
            return t.detach().to(device).requires_grad_(t.requires_grad)
        return t

    return move


def _structure(x):
    """Shapes and dtypes of an output, for random ops."""
    if isinstance(x, torch.Tensor):
        return (tuple(x.shape), x.dtype)
    if isinstance(x, (list, tuple)):
        return tuple(_structure(e) for e in x)
    return type(x).__name__


def _run(op, sample):
    out = op(sample.input, *sample.args, **sample.kwargs)
    return sample.output_process_fn_grad(out)


def _to_cpu(x):
    if isinstance(x, torch.Tensor):
        return x.cpu()
    if isinstance(x, (list, tuple)):
        return type(x)(_to_cpu(e) for e in x) if not hasattr(x, "_fields") else type(x)(*[_to_cpu(e) for e in x])
    return x


def _is_random(op, dtype):
    """An op is random when two seeds give different CPU results."""
    try:
        samples = list(op.sample_inputs("cpu", dtype, requires_grad=False))[:2]
        for sample in samples:
            torch.manual_seed(1)
            a = _run(op, sample)
            torch.manual_seed(2)
            b = _run(op, sample)
            try:
                _cmp.assertEqual(a, b, atol=0, rtol=0, equal_nan=True)
            except AssertionError:
                return True
    except Exception:
        return False
    return False


def _first_line(e):
    text = f"{type(e).__name__}: {e}".strip().splitlines()
    return (text[0] if text else type(e).__name__)[:160].replace("|", "\\|")


def _op_label(op):
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def compare_cpu_skip(op, dtype):
    """The reason the OpInfo itself gives for skipping TestCommon.test_compare_cpu
    (e.g. "output is non-deterministic" for empty), when it applies to every
    device or to PrivateUse1; None otherwise."""
    for info in getattr(op, "decorators", ()):
        if getattr(info, "test_name", None) != "test_compare_cpu":
            continue
        if getattr(info, "cls_name", None) not in (None, "TestCommon"):
            continue
        if info.device_type not in (None, "privateuse1", _device_name()):
            continue
        if info.dtypes is not None and dtype not in info.dtypes:
            continue
        if not info.active_if:
            continue
        for decorator in info.decorators:
            cells = [c.cell_contents for c in (getattr(decorator, "__closure__", None) or ())]
            reasons = [c for c in cells if isinstance(c, str)]
            if reasons:
                return reasons[0]
            if getattr(decorator, "__name__", "") == "expectedFailure":
                return "expected failure"
    return None


def check_op(op, dtype, device):
    """Runs every sample of one OpInfo at one dtype. Returns a Result."""
    passed = failed = skipped = 0
    notes = collections.Counter()
    if dtype not in op.supported_dtypes("cpu"):
        return Result(_op_label(op), dtype, 0, 0, 0, {"dtype not supported on CPU": 1})
    reason = compare_cpu_skip(op, dtype)
    if reason is not None:
        return Result(
            _op_label(op), dtype, 0, 0, 1, {f"skip: the OpInfo skips PyTorch's device-vs-CPU test here ({reason})": 1}
        )
    random_op = _is_random(op, dtype)
    try:
        samples = list(op.sample_inputs("cpu", dtype, requires_grad=False))[:MAX_SAMPLES_PER_OP]
    except Exception as e:  # the OpInfo itself cannot build samples
        return Result(op.name, dtype, 0, 0, 1, {f"skip: samples cannot be built: {_first_line(e)}": 1})
    for sample in samples:
        try:
            torch.manual_seed(0)
            expected = _run(op, sample)
        except Exception as e:
            cpu_error = e
            expected = None
        else:
            cpu_error = None
        try:
            torch.manual_seed(0)
            dev_sample = sample.transform(_to(device))
            actual = _to_cpu(_run(op, dev_sample))
            getattr(torch, device).synchronize()
        except Exception as e:
            if cpu_error is not None:
                passed += 1  # raises on both, as eager does
            else:
                failed += 1
                notes[f"fail: device raised {_first_line(e)}"] += 1
            continue
        if cpu_error is not None:
            failed += 1
            notes[f"fail: CPU raised but device did not ({_first_line(cpu_error)})"] += 1
            continue
        try:
            if random_op:
                assert _structure(actual) == _structure(expected), f"{_structure(actual)} != {_structure(expected)}"
            else:
                _cmp.assertEqual(actual, expected, atol=ATOL, rtol=RTOL, equal_nan=True, exact_device=False)
            passed += 1
        except AssertionError as e:
            failed += 1
            notes[f"fail: mismatch {_first_line(e)}"] += 1
    if random_op:
        notes["random op: shapes and dtypes compared"] += 1
    return Result(_op_label(op), dtype, passed, failed, skipped, dict(notes))


def run(op_names=None, dtypes=DTYPES, log=None):
    device = _device_name()
    results = []
    ops = [op for op in op_db if op_names is None or op.name in op_names or _op_label(op) in op_names]
    warnings.simplefilter("ignore")
    for i, op in enumerate(ops):
        for dtype in dtypes:
            start = time.time()
            try:
                r = check_op(op, dtype, device)
            except Exception as e:  # a harness problem must not stop the run
                r = Result(op.name, dtype, 0, 1, 0, {f"fail: harness error {_first_line(e)}": 1})
                traceback.print_exc()
            results.append(r)
            if log:
                log(
                    f"[{i + 1}/{len(ops)}] {r.op} {str(dtype)[6:]}: {r.passed} passed, {r.failed} failed "
                    f"({time.time() - start:.1f}s)"
                )
    return results


def unexplained_failures(results):
    return [r for r in results if r.failed and r.op not in EXPLANATIONS]


def totals(results, dtype):
    rs = [r for r in results if r.dtype == dtype]
    passed = sum(r.passed for r in rs)
    failed = sum(r.failed for r in rs)
    return passed, failed, sum(r.skipped for r in rs)


def markdown(results, elapsed_s):
    lines = [
        "# OpInfo conformance",
        "",
        f"Generated by `tests/python/conformance.py` (run by `make test`) on "
        f"{datetime.date.today().isoformat()} with torch {torch.__version__}, in {elapsed_s:.0f} s.",
        "",
        "Every OpInfo in `torch.testing._internal.common_methods_invocations.op_db` is run on its sample "
        "inputs (at most %d per op) on the device and on CPU; results are compared with the tolerances "
        "of PyTorch's device-vs-CPU test (atol=%g, rtol=%g). Random ops are compared by shape and dtype. "
        "A sample that raises on CPU passes when it raises on the device too." % (MAX_SAMPLES_PER_OP, ATOL, RTOL),
        "",
        "nn.Module forward and backward over `module_db`, in both kiln modes: "
        "[Module conformance](#module-conformance), after this report.",
        "",
        "## Totals",
        "",
        "| dtype | samples | passed | failed | pass rate |",
        "|---|---|---|---|---|",
    ]
    for dtype in DTYPES:
        p, f, _ = totals(results, dtype)
        rate = 100.0 * p / max(1, p + f)
        lines.append(f"| {str(dtype)[6:]} | {p + f} | {p} | {f} | {rate:.2f}% |")
    lines += ["", "## Failures, explained", ""]
    unexplained = []
    for r in results:
        if r.failed:
            why = EXPLANATIONS.get(r.op)
            if why is None:
                unexplained.append(r)
            first = sorted(n for n in r.notes if n.startswith("fail"))
            lines.append(
                f"- `{r.op}` ({str(r.dtype)[6:]}), {r.failed} sample(s): "
                f"**{why or 'NOT EXPLAINED'}**. First error: {first[0] if first else ''}"
            )
    if not any(r.failed for r in results):
        lines.append("None.")
    fixed = sorted({r.op for r in results if r.op in EXPLANATIONS and not r.failed and r.passed})
    if fixed:
        lines += ["", "Listed as known failures but passing now: " + ", ".join(f"`{o}`" for o in fixed)]
    lines += ["", "## Skips", ""]
    for r in results:
        for note, _count in sorted(r.notes.items()):
            if note.startswith("skip"):
                lines.append(f"- `{r.op}` ({str(r.dtype)[6:]}): {note[6:]}")
    lines += ["", "## Per op", "", "| op | dtype | passed | failed | notes |", "|---|---|---|---|---|"]
    for r in results:
        notes = "; ".join(f"{k} ({v})" for k, v in sorted(r.notes.items()))
        lines.append(f"| `{r.op}` | {str(r.dtype)[6:]} | {r.passed} | {r.failed} | {notes} |")
    return "\n".join(lines) + "\n"


# docs/conformance.md holds two reports: this one, then module_conformance.py's
# between these markers. Each harness rewrites its own part and keeps the other.
MODULES_BEGIN = "<!-- module conformance: written by tests/python/module_conformance.py -->"
MODULES_END = "<!-- end of module conformance -->"


def write_report(path, opinfo=None, modules=None):
    """Rewrites the OpInfo part (opinfo) or the module part (modules) of the
    report at path, keeping the other part as it is."""
    old = open(path).read() if os.path.exists(path) else ""
    begin, end = old.find(MODULES_BEGIN), old.find(MODULES_END)
    if begin >= 0 and end > begin:
        old_opinfo, old_modules = old[:begin] + old[end + len(MODULES_END) :], old[begin : end + len(MODULES_END)]
    else:
        old_opinfo, old_modules = old, ""
    opinfo = (opinfo if opinfo is not None else old_opinfo).rstrip("\n")
    modules = f"{MODULES_BEGIN}\n{modules.rstrip()}\n{MODULES_END}" if modules is not None else old_modules
    with open(path, "w") as fh:
        fh.write(opinfo + "\n" + (f"\n{modules}\n" if modules else ""))


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", help="comma-separated op names (default: all)")
    parser.add_argument("--write", help="write the markdown report here")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    import kiln  # noqa: F401  (autoload does this too)

    start = time.time()
    names = set(args.ops.split(",")) if args.ops else None
    results = run(names, log=None if args.quiet else lambda m: print(m, flush=True))
    elapsed = time.time() - start
    for dtype in DTYPES:
        p, f, _ = totals(results, dtype)
        print(f"{dtype}: {p} passed, {f} failed ({100.0 * p / max(1, p + f):.2f}%)")
    if args.write:
        write_report(args.write, opinfo=markdown(results, elapsed))


if __name__ == "__main__":
    main()

"""The torch function mode that follows every tensor of a program's CPU run
with its error bounds: which ops are views, in place or reductions, and the
bounds lazy_bounds' rules give their results."""

import torch
import torch.utils._pytree as pytree
from torch.overrides import TorchFunctionMode

from lazy_bounds import _SHADOW, _attach, _f64, _pointwise, _reduce

_STRUCTURAL = {
    "__getitem__",
    "transpose",
    "t",
    "narrow",
    "select",
    "unsqueeze",
    "squeeze",
    "expand",
    "expand_as",
    "reshape",
    "view",
    "flatten",
    "permute",
    "contiguous",
    "clone",
    "diagonal",
}
_REDUCTIONS = {"sum", "amax", "max", "argmax", "any", "var", "logsumexp", "softmax", "log_softmax"}
_NAMES = {
    "__add__": "add",
    "__radd__": "add",
    "__iadd__": "add",
    "__sub__": "sub",
    "__rsub__": "rsub",
    "__mul__": "mul",
    "__rmul__": "mul",
    "__truediv__": "div",
    "__div__": "div",
    "__rtruediv__": "rdiv",
    "__rdiv__": "rdiv",
    "__neg__": "neg",
    "__abs__": "abs",
}


def _op_name(name):
    if name in _NAMES:
        return _NAMES[name]
    if name.startswith("__") and name.endswith("__"):
        base = name[2:-2]
        base = base[1:] if base[:1] == "r" and base[1:] in ("and", "or", "xor") else base
        return {"and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor", "invert": "bitwise_not"}.get(base, base)
    return name[:-1] if name.endswith("_") else name


def _same_storage(x, y):
    return (
        isinstance(x, torch.Tensor)
        and isinstance(y, torch.Tensor)
        and x.numel() > 0
        and y.numel() > 0
        and x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
    )


def _same_data(x, y):
    """Views of the same elements the same way (eager's copy_ skips those)."""
    return (
        isinstance(y, torch.Tensor)
        and _same_storage(x, y)
        and x.storage_offset() == y.storage_offset()
        and x.stride() == y.stride()
        and x.shape == y.shape
        and x.dtype == y.dtype
    )


class _ErrorTracking(TorchFunctionMode):
    """During the CPU run, follows every tensor with (bound, ulp bound,
    extreme) per element. A tensor the rules cannot follow sets `failure`,
    and the comparison falls back to the plain model for the program."""

    def __init__(self):
        super().__init__()
        self.failure = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        in_place = (name.endswith("_") and not name.endswith("__")) or "out" in kwargs
        before = None
        if in_place and self.failure is None:  # the operands' values before the write
            before = {id(t): _f64(t).clone() for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        out = func(*args, **kwargs)
        if self.failure is None:
            try:
                self._track(name, func, args, kwargs, out, before)
            except Exception as e:  # noqa: BLE001 - the comparison falls back to the plain model
                self.failure = f"{name}: {type(e).__name__}: {e}"
        return out

    def _track(self, name, func, args, kwargs, out, before):
        outs = list(out) if isinstance(out, tuple) else [out]
        if not any(isinstance(o, torch.Tensor) for o in outs):
            return
        inputs = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        for t in inputs:
            if not hasattr(t, _SHADOW):
                raise LookupError("an input without error bounds")
        op = _op_name(name)
        if before is not None:  # in place: the written tensor's bounds change where it is written
            target = kwargs["out"] if "out" in kwargs else args[0]
            if op == "copy" and _same_data(target, args[1]):  # eager's copy_ onto itself: nothing
                return
            operands = [x for x in args if isinstance(x, (torch.Tensor, int, float))]
            if op in ("copy", "fill", "zero"):
                operands = operands[1:]
            values = [before[id(x)] if isinstance(x, torch.Tensor) else _f64(x) for x in operands]
            overlapping = any(_same_storage(x, target) and x is not target for x in operands)
            new = _pointwise(op, operands, values, target, kwargs, overlapping)
            for shadow, value in zip(getattr(target, _SHADOW), new):
                try:
                    shadow.copy_(value)
                except RuntimeError:  # an expanded view (fill_, zero_): one value everywhere
                    flat = value.reshape(-1)
                    if flat.numel() and not bool((flat == flat[0]).all()):
                        raise
                    if flat.numel():
                        shadow.fill_(flat[0].item())
            return
        if len(outs) == 1 and any(outs[0] is t for t in inputs):  # the input itself (`.to` its own dtype)
            return
        if op in _REDUCTIONS:
            if op == "max" and len(outs) == 2:  # values, indices
                _attach(outs[0], *_reduce("amax", args, kwargs, outs[0]))
                _attach(outs[1], *_reduce("argmax", args, kwargs, outs[1]))
            else:
                _attach(out, *_reduce(op, args, kwargs, out))
            return
        if len(outs) != 1 or not isinstance(out, torch.Tensor):
            raise LookupError(f"no rule for {name} returning {type(out).__name__}")
        views = any(_same_storage(out, t) for t in inputs)
        if name in _STRUCTURAL or op in _STRUCTURAL or views:
            shadows = []
            for k in range(3):
                sub = lambda x: getattr(x, _SHADOW)[k] if isinstance(x, torch.Tensor) else x  # noqa: E731, B023 - tree_map calls it in this iteration
                s = func(*pytree.tree_map(sub, args), **pytree.tree_map(sub, kwargs))
                if s.shape != out.shape:
                    raise LookupError(f"{name}: the bounds do not follow the shape")
                shadow_views = any(_same_storage(s, getattr(t, _SHADOW)[k]) for t in inputs)
                if views and (not shadow_views or s.stride() != out.stride()):
                    raise LookupError(f"{name}: the bounds do not alias like the value")
                if not views and shadow_views:
                    s = s.clone()
                shadows.append(s)
            if views:
                setattr(out, _SHADOW, tuple(shadows))
            else:
                _attach(out, *shadows)
            return
        operands = [x for x in args if isinstance(x, (torch.Tensor, int, float))]
        _attach(out, *_pointwise(op, operands, [_f64(x) for x in operands], out, kwargs))

"""Per-element error bounds of a program's CPU run: the rules that give an
op's result its (bound, ulp bound, extreme) from its operands' (lazy_tracking
applies them to every op of the run)."""

import math

import torch

from lazy_tables import BIG, TINY, TOLERANCE, UNARY_FLOAT

# -- per-element error bounds of the CPU run -------------------------------------
#
# Each tensor of the CPU run carries, per element, (bound, ulp bound, extreme):
# bound and ulp bound are first-order estimates of how far kiln's value may
# legitimately be from eager's, propagated through the ops by their
# derivatives; each inexact op adds its own error, relative to its result:
# TOLERANCE[dtype] for `bound`, OWN_ULPS units in the last place for `ulp
# bound` (kiln's float32 tanh is within 5 ulp where eager's is correctly
# rounded; glibc states 4 ulp for its functions). Exact ops add nothing. An
# infinite bound marks a value that a last-bit difference upstream can change
# without limit (x / 0 of an inexact x): eager's own answer there is not
# determined by its inputs' values alone, so any answer goes.

OWN_ULPS = 8
_SHADOW = "_kiln_error_bound"
# Results that are not a smooth function of the inputs: exact on both sides
# (steps are only applied to exact values), so they carry no error.
_NO_ERROR = {
    "lt",
    "le",
    "gt",
    "ge",
    "eq",
    "ne",
    "logical_and",
    "logical_or",
    "logical_xor",
    "logical_not",
    "bitwise_not",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "isnan",
    "sign",
    "floor",
    "ceil",
    "round",
    "trunc",
    "fill",
    "zero",
}
_INEXACT_OPS = set(UNARY_FLOAT) | {"atan2", "lerp", "addcmul", "addcdiv"}
_LN2 = math.log(2.0)


def _own_scales(dtype):
    """The relative error one inexact op may add, per bound. float16 and
    bfloat16 math runs in float32 on both sides and is rounded once: one ulp."""
    ulps = 1 if dtype in (torch.float16, torch.bfloat16) else OWN_ULPS
    return (TOLERANCE[dtype], ulps * torch.finfo(dtype).eps)


def _f64(x):
    return x.detach().to(torch.float64) if isinstance(x, torch.Tensor) else torch.tensor(float(x), dtype=torch.float64)


def _finite_abs(x):
    x = _f64(x)
    return torch.where(torch.isfinite(x), x.abs(), 0.0)


def _extreme(x):
    """Which elements of input `x` are extreme values."""
    v = _f64(x)
    a = v.abs()
    return ~torch.isfinite(v) | (a > BIG) | ((a > 0) & (a < TINY))


def _scalar_extreme(s):
    a = abs(float(s))
    return not math.isfinite(a) or a > BIG or 0 < a < TINY


def _attach(t, *values):
    """Gives `t` its (bound, ulp bound, extreme), laid out like `t` (so views
    of it, and views of those, alias the way `t`'s views do)."""
    shadows = []
    for value in values:
        s = torch.empty_strided(t.size(), t.stride(), dtype=value.dtype)
        s.copy_(value.expand(t.shape))
        shadows.append(s)
    setattr(t, _SHADOW, tuple(shadows))


def _leaf(t, extreme=None):
    zeros = torch.zeros(t.shape, dtype=torch.float64)
    _attach(t, zeros, zeros, _extreme(t) if extreme is None else extreme)


def _derivatives(op, values, y, kwargs):
    """|d result / d operand| for each operand (None where it carries no error)."""
    x = values
    if op in ("neg", "abs", "relu", "to", "copy", "clone", "clamp"):
        return [1.0] + [None] * (len(x) - 1)
    if op in ("maximum", "minimum", "clamp_min", "clamp_max"):
        return [1.0] * len(x)
    if op in ("add", "sub", "rsub"):
        return [1.0, abs(float(kwargs.get("alpha", 1)))] + [None] * (len(x) - 2)
    if op == "mul":
        return [x[1].abs(), x[0].abs()]
    if op == "div":
        return [1 / x[1].abs(), x[0].abs() / x[1] ** 2]
    if op == "rdiv":  # operands (a, s): s / a
        return [x[1].abs() / x[0] ** 2, 1 / x[0].abs()]
    if op == "where":
        return [None, 1.0, 1.0]
    if op == "lerp":
        return [(1 - x[2]).abs(), x[2].abs(), None]
    if op == "addcmul":
        v = abs(float(kwargs.get("value", 1)))
        return [1.0, v * x[2].abs(), v * x[1].abs()]
    if op == "addcdiv":
        v = abs(float(kwargs.get("value", 1)))
        return [1.0, v / x[2].abs(), v * x[1].abs() / x[2] ** 2]
    if op == "atan2":
        r2 = x[0] ** 2 + x[1] ** 2
        return [x[1].abs() / r2, x[0].abs() / r2]
    v = x[0]
    unary = {
        "exp": lambda: y.abs(),
        "exp2": lambda: _LN2 * y.abs(),
        "expm1": lambda: (y + 1).abs(),
        "log": lambda: 1 / v.abs(),
        "log1p": lambda: 1 / (1 + v).abs(),
        "sin": lambda: v.cos().abs(),
        "cos": lambda: v.sin().abs(),
        "tanh": lambda: (1 - y * y).abs(),
        "sigmoid": lambda: (y * (1 - y)).abs(),
        "erf": lambda: 2 / math.sqrt(math.pi) * torch.exp(-v * v),
        "atan": lambda: 1 / (1 + v * v),
        "sqrt": lambda: 0.5 / y.abs(),
        "rsqrt": lambda: 0.5 * y.abs() ** 3,
        "reciprocal": lambda: y * y,
        "asinh": lambda: 1 / torch.sqrt(1 + v * v),
        "square": lambda: 2 * v.abs(),
    }
    if op not in unary:
        raise LookupError(f"no error rule for {op}")
    return [unary[op]()] + [None] * (len(x) - 1)


# Ops whose result is one of their operands.
_SELECTIONS = {"maximum", "minimum", "clamp_min", "clamp_max", "clamp", "relu", "where"}
_UNARY_F64 = {
    "exp": torch.exp,
    "exp2": torch.exp2,
    "expm1": torch.expm1,
    "log": torch.log,
    "log1p": torch.log1p,
    "sin": torch.sin,
    "cos": torch.cos,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "erf": torch.erf,
    "atan": torch.atan,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "reciprocal": torch.reciprocal,
    "asinh": torch.asinh,
    "square": torch.square,
}


def _fused_term(op, values, kwargs):
    """The product term of an op eager may compute as a fused multiply-add."""
    if op in ("add", "sub") and len(values) > 1:
        return float(kwargs.get("alpha", 1)) * values[1]
    if op == "addcmul":
        return float(kwargs.get("value", 1)) * values[1] * values[2]
    if op == "addcdiv":
        return float(kwargs.get("value", 1)) * values[1] / values[2]
    if op == "lerp":
        return values[2] * (values[1] - values[0])
    return None


def _singular(op, values, errs, shape):
    """Where an operand's bound reaches across a pole or a branch cut: a
    divisor that may be 0, atan2 at the origin or on its cut. There the
    result is undetermined."""
    out = torch.zeros(shape, dtype=torch.bool)
    ambiguous = [
        torch.zeros((), dtype=torch.bool) if e is None else ((e > 0) & (e >= v.abs())).expand(shape)
        for v, e in zip(values, errs)
    ]
    divisor = {"div": 1, "rdiv": 0, "addcdiv": 2}.get(op)
    if divisor is not None and divisor < len(values):
        out = out | ambiguous[divisor]
    # x / 0 and x * inf with an x that may be 0 (log1p of the smallest
    # subnormal is 0 in eager, one subnormal ulp in kiln): nan or +-inf.
    numerator = {"div": 0, "rdiv": 1, "addcdiv": 1}.get(op)
    if divisor is not None and max(divisor, numerator) < len(values):
        out = out | (ambiguous[numerator] & (values[divisor] == 0).expand(shape))
    factors = {"mul": (0, 1), "addcmul": (1, 2)}.get(op)
    if factors is not None and max(factors) < len(values):
        a, b = factors
        out = out | (ambiguous[a] & torch.isinf(values[b]).expand(shape))
        out = out | (ambiguous[b] & torch.isinf(values[a]).expand(shape))
    if op == "atan2":
        y, x = values[0].expand(shape), values[1].expand(shape)
        out = out | (ambiguous[0] & ((x < 0) | ambiguous[1])) | (ambiguous[1] & (y == 0))
    return out


def _settle(err, result, undetermined):
    """A finite result keeps its bound (inf where nothing bounds it); an inf
    or nan result is eager's exactly (bound 0) unless it is undetermined:
    computed from an undetermined value or across a pole (see above)."""
    err = torch.nan_to_num(err, nan=math.inf, posinf=math.inf)
    return torch.where(torch.isfinite(_f64(result)), err, torch.where(undetermined, math.inf, 0.0))


def _pointwise(op, operands, values, result, kwargs, overlapping=False):
    """(bound, ulp bound, extreme) of a pointwise result. `overlapping`: an
    in-place op that reads what it writes through another view (eager's
    answer then depends on its loop order)."""
    shape = result.shape
    ext = torch.zeros(shape, dtype=torch.bool)
    for o in operands:
        if isinstance(o, torch.Tensor):
            ext = ext | getattr(o, _SHADOW)[2].expand(shape)
        elif _scalar_extreme(o):
            ext = torch.ones(shape, dtype=torch.bool)
    for k in ("alpha", "value", "min", "max"):
        if isinstance(kwargs.get(k), (int, float)) and _scalar_extreme(kwargs[k]):
            ext = torch.ones(shape, dtype=torch.bool)
    zeros = torch.zeros(shape, dtype=torch.float64)
    if not result.dtype.is_floating_point or op in _NO_ERROR:
        return zeros, zeros, ext
    inexact = op in _INEXACT_OPS or (op in ("add", "sub") and float(kwargs.get("alpha", 1)) != 1)
    y = _f64(result)
    own = None
    if inexact:  # relative to the result, or to the smallest normal; none for f(+-0) = +-0
        own = torch.clamp(_finite_abs(y), min=torch.finfo(result.dtype).tiny)
        term = _fused_term(op, values, kwargs)
        if term is not None:  # a fused multiply-add rounds its product, or not: relative to the product
            own = torch.maximum(own, _finite_abs(term).expand(shape))
        zero_in = torch.ones(shape, dtype=torch.bool)
        for x in values:
            zero_in = zero_in & (x == 0).expand(shape)
        own = torch.where((y == 0) & zero_in, 0.0, own)
    derivatives = None
    bounds = []
    for k, scale in enumerate(_own_scales(result.dtype)):
        err = zeros
        errs = [getattr(o, _SHADOW)[k] if isinstance(o, torch.Tensor) else None for o in operands]
        undetermined = torch.zeros(shape, dtype=torch.bool)
        if any(e is not None and bool((e > 0).any()) for e in errs):
            if derivatives is None:
                derivatives = [
                    None
                    if d is None
                    else torch.nan_to_num(torch.as_tensor(d, dtype=torch.float64).abs(), nan=math.inf, posinf=math.inf)
                    for d in _derivatives(op, values, y, kwargs)
                ]
            for i, (d, e) in enumerate(zip(derivatives, errs)):
                if d is None or e is None:
                    continue
                undetermined = undetermined | torch.isinf(e).expand(shape)
                spread = d * e
                if op in _SELECTIONS and not overlapping:  # an operand's error counts where it is (or may be) selected
                    gap = (values[i] - y).abs()
                    spread = torch.where(gap <= e, e + gap, 0.0)
                if i == 0 and op in _UNARY_F64:  # the whole interval: nonlinear near a pole or a domain edge
                    f, x = _UNARY_F64[op], values[0]
                    fx, lo, hi = f(x), f(x - e), f(x + e)
                    ends = torch.maximum((hi - fx).abs(), (lo - fx).abs())
                    same = (torch.isfinite(fx) & torch.isfinite(lo) & torch.isfinite(hi)) | (
                        (lo == fx) & (hi == fx)
                    )  # one class (finite, or the same infinity) across it
                    undetermined = undetermined | ((e > 0) & ~same).expand(shape)
                    spread = torch.maximum(spread, ends)
                # 0 * inf, nan: an undetermined input stays undetermined
                err = err + torch.nan_to_num(torch.where(e > 0, spread, 0.0), nan=math.inf, posinf=math.inf).expand(
                    shape
                )
            singular = _singular(op, values, errs, shape)
            undetermined = undetermined | singular
            err = torch.where(singular, math.inf, err)
        if own is not None:
            err = err + scale * own
        bounds.append(_settle(err, result, undetermined))
    if op in ("maximum", "minimum", "fmax", "fmin", "clamp", "clamp_min", "clamp_max"):
        # A tie of +0 and -0 gives one operand in eager's vector loop and the
        # other in its scalar one (small tensors, tails), so the sign of a
        # zero result beside a zero of the other sign is not eager's to
        # define: one subnormal of bound marks it (x / it, rsqrt of it:
        # either infinity).
        tie = torch.zeros(shape, dtype=torch.bool)
        for v in values:
            v = torch.as_tensor(v, dtype=torch.float64).expand(shape)
            tie = tie | ((y == 0) & (v == 0) & (torch.signbit(v) != torch.signbit(y)))
        bounds = [torch.where(tie, torch.clamp(e, min=math.ulp(0.0)), e) for e in bounds]
    return bounds[0], bounds[1], ext


def _reduce(op, args, kwargs, result):
    x = args[0]
    shadows = getattr(x, _SHADOW)
    ext = shadows[2]
    zeros = torch.zeros(result.shape, dtype=torch.float64)
    if x.numel() == 0:  # an empty reduction: eager's identity (0, -inf), exact
        return zeros, zeros, torch.zeros(result.shape, dtype=torch.bool)
    dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
    keep = kwargs.get("keepdim", args[2] if len(args) > 2 else False)
    if op in ("softmax", "log_softmax"):
        rows = lambda t, f: getattr(t, f)(dim=dim, keepdim=True).expand(x.shape)  # noqa: E731
    elif dim is None:
        rows = lambda t, f: getattr(t, f)()  # noqa: E731
    else:
        rows = lambda t, f: getattr(t, f)(dim=dim, keepdim=keep)  # noqa: E731
    out_ext = rows(ext, "any")
    if not result.dtype.is_floating_point:
        return zeros, zeros, out_ext
    y = _f64(result)
    fy = _finite_abs(y)
    v = _f64(x)
    fv = _finite_abs(v)
    bounds = []
    for k, scale in enumerate(_own_scales(result.dtype)):
        err = shadows[k]
        undetermined = rows(torch.isinf(err), "any")
        own = 0.0
        if op == "sum":  # eager's own kernel: same order, no error of its own
            prop = rows(err, "sum")
        elif op in ("amax", "max"):
            prop = rows(err, "amax")
        elif op == "logsumexp":
            prop = rows(err, "amax")
            own = scale * (fy + 1)
        elif op == "softmax":
            prop = fy * (err + rows(err, "amax"))
            top = torch.where(torch.isfinite(v), v, -math.inf).amax(dim=dim, keepdim=True)
            shift = torch.where(torch.isfinite(v) & torch.isfinite(top), (v - top).abs(), 0.0)
            own = scale * fy * (1 + shift)
        elif op == "log_softmax":
            prop = err + rows(err, "amax")
            own = scale * (fy + 1)
        elif op == "var":
            n = max(v.numel() // max(y.numel(), 1), 2)
            mean = v.mean(dim=dim, keepdim=True)
            gap = torch.nan_to_num((v - mean).abs(), nan=math.inf, posinf=math.inf)
            spread = torch.where(err > 0, gap * err, 0.0)
            prop = 2 / (n - 1) * rows(spread, "sum")
            own = scale * torch.clamp(rows(fv * fv, "mean") * n / (n - 1), min=fy)
        else:
            raise LookupError(f"no error rule for {op}")
        # inf stays inf (nan_to_num's default would make it the largest finite)
        bounds.append(_settle(torch.nan_to_num(prop, nan=math.inf, posinf=math.inf) + own, result, undetermined))
    return bounds[0], bounds[1], out_ext

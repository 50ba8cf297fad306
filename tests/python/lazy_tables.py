"""The tables random programs are drawn from: dtypes, ops, the tolerance of
each float dtype, which ops are inexact or steps, and the extreme values an
input or a scalar may hold (lazy_programs.py's docstring says how they are used)."""

import math
import re

import torch

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INTS = [torch.int64, torch.int32, torch.int16, torch.uint8]
DTYPES = FLOATS * 3 + INTS + [torch.bool]

UNARY_FLOAT = [
    "exp",
    "sin",
    "cos",
    "tanh",
    "sigmoid",
    "erf",
    "expm1",
    "log1p",
    "atan",
    "sqrt",
    "rsqrt",
    "reciprocal",
    "log",
    "exp2",
    "asinh",
]
UNARY_ANY = [
    "neg",
    "abs",
    "sign",
    "floor",
    "ceil",
    "round",
    "trunc",
    "relu",
    "isnan",
    "logical_not",
    "bitwise_not",
    "square",
]
BINARY_OPS = ["+", "-", "*", "/", "<", "<=", ">", ">=", "==", "!=", "&", "|", "^"]
BINARY_FNS = ["maximum", "minimum", "logical_and", "logical_or", "logical_xor", "atan2"]
INPLACE = ["add_", "sub_", "mul_", "div_", "clamp_min_", "clamp_max_", "maximum", "lerp_"]

# Per float dtype: how far apart kiln's and eager's results may be, relative
# to the largest magnitude in the result, once a value went through an
# inexact op in that dtype.
TOLERANCE = {torch.float64: 1e-9, torch.float32: 2e-5, torch.bfloat16: 3e-2, torch.float16: 4e-3}

# Ops whose float results may differ from eager's in the last bits (math
# functions: libm/libmvec vs SLEEF; fused multiply-adds; reductions that
# accumulate in another order). Matched as whole words.
INEXACT = UNARY_FLOAT[:] + [
    "atan2",
    "softmax",
    "log_softmax",
    "var",
    "logsumexp",
    "lerp",
    "lerp_",
    "alpha=",
    "addcmul",
    "addcdiv",
]
_INEXACT_RE = re.compile("|".join(rf"\b{re.escape(op)}" + ("" if op.endswith("=") else r"(?!\w)") for op in INEXACT))
# Ops that turn a last-bit difference into a different answer (a step):
# they are only applied to values that are exact on both sides.
STEPS = [
    "floor",
    "ceil",
    "round",
    "trunc",
    "sign",
    "isnan",
    "logical_not",
    "bitwise_not",
    "logical_and",
    "logical_or",
    "logical_xor",
    "argmax",
    "<",
    ">",
    "==",
    "!=",
    "&",
    "|",
    "^",
    "torch.where(",
    ".to(torch.int",
    ".to(torch.uint8",
    ".to(torch.bool",
    "any(",
    "copy_(",
    "fill_(",
    "zero_(",
]

INF, NAN = math.inf, math.nan
# Extreme values an input may hold, per dtype (floats are made in float64 and
# rounded to the dtype: 2**24 + 1 is not a float32, 2049 not a float16).
EXTREMES = {
    torch.float32: [
        0.0,
        -0.0,
        1e-38,
        -1e-38,
        1e-45,
        -1e-45,
        1e20,
        -1e20,
        3e38,
        -3e38,
        2.0**24 + 1,
        2.0**50,
        -(2.0**60),
        INF,
        -INF,
        NAN,
    ],
    torch.float64: [
        0.0,
        -0.0,
        1e-38,
        -1e-45,
        1e-308,
        -5e-324,
        1e20,
        -3e38,
        1e300,
        -1.7e308,
        2.0**24 + 1,
        2.0**53 + 2,
        2.0**50,
        -(2.0**60),
        INF,
        -INF,
        NAN,
    ],
    torch.bfloat16: [
        0.0,
        -0.0,
        1e-38,
        -1e-39,
        1e-40,
        1e20,
        -1e20,
        3e38,
        -3e38,
        257.0,
        2.0**24 + 1,
        2.0**50,
        -(2.0**60),
        INF,
        -INF,
        NAN,
    ],
    torch.float16: [0.0, -0.0, 6e-8, -6e-8, 3e-5, -1e-5, 1e-4, 6e4, -65504.0, 2049.0, 1025.0, INF, -INF, NAN],
    torch.int64: [0, -1, 2**24 + 1, -(2**50), 2**60, 2**63 - 1, -(2**63)],
    torch.int32: [0, -1, 2**24 + 1, 2**31 - 1, -(2**31)],
    torch.int16: [0, -1, 2**15 - 1, -(2**15)],
    torch.uint8: [0, 128, 255],
}
EXTREME_SCALARS = [
    "0.0",
    "-0.0",
    "1e-38",
    "-1e-45",
    "1e-300",
    "6e-8",
    "1e20",
    "-3e38",
    "65504.0",
    "2049",
    "16777217",
    "2**50",
    "-2**60",
    "float('inf')",
    "-float('inf')",
    "float('nan')",
]
# Elements beyond these magnitudes (or non-finite) count as extreme.
BIG, TINY = 1e4, 1e-4

"""Elementwise operators: arithmetic, comparisons, logic, math functions, activations, casts.

All are compositions of ember's elementwise primitives. Functions ember has no primitive for
(atan, asin, ...) are short compositions (Newton's method on tan for atan; the rest follow
from it and from exp/log identities).
"""

from __future__ import annotations

import math

from ... import dtypes as D
from ...tensor import Tensor, where
from .common import filled, scalar


# ---------------------------------------------------------------- arithmetic
def _trunc(x):
    return x.sign() * x.abs().floor()


def div(node, a, b):
    if a.dtype.is_floating_point:
        return a / b
    return _trunc(a.to(D.float64) / b.to(D.float64)).to(a.dtype)  # C's integer division


def mod(node, a, b):
    if node.attr("fmod", 0):
        if a.dtype.is_floating_point:
            return a - _trunc(a / b) * b
        q = _trunc(a.to(D.float64) / b.to(D.float64)).to(a.dtype)
        return a - q * b
    return a % b  # the remainder primitive: the sign of the divisor, like Python


def pow_(node, a, b):
    if a.dtype.is_floating_point:
        return a ** b.to(a.dtype)
    return (a.to(D.float64) ** b.to(D.float64)).round().to(a.dtype)


def _fold(fn):
    def run(node, *xs):
        out = xs[0]
        for x in xs[1:]:
            out = fn(out, x)
        return out

    return run


def mean(node, *xs):
    return _fold(lambda a, b: a + b)(node, *xs) / len(xs)


def bit_shift(node, x, y):
    # the shift primitives define counts past the width (0, or -1 for negatives shifted right)
    return x << y if node.attr("direction") == "LEFT" else x >> y


# ---------------------------------------------------------------- math functions
def _atan(x):
    # Newton on f(y) = sin(y) - x cos(y) from a start within 0.01 rad of atan(x).
    big = x.abs() > 1
    t = where(big, 1 / x, x)
    y = t / (1 + 0.28 * t * t)
    for _ in range(3):
        s, c = y.sin(), y.cos()
        y = y - (s - t * c) / (c + t * s)
    return where(big, x.sign() * (math.pi / 2) - y, y)


def _asin(x):
    return _atan(x / (1 - x * x).sqrt())


def _round_half_even(x):
    r = (x + 0.5).floor()
    tie = (r - x) == 0.5
    odd = (r - 2 * (r / 2).floor()) == 1
    return where(tie & odd, r - 1, r)


UNARY = {
    "Neg": lambda x: -x,
    "Abs": lambda x: x.abs(),
    "Sign": lambda x: x.sign(),
    "Exp": lambda x: x.exp(),
    "Log": lambda x: x.log(),
    "Sqrt": lambda x: x.sqrt(),
    "Reciprocal": lambda x: x.reciprocal(),
    "Floor": lambda x: x.floor(),
    "Ceil": lambda x: x.ceil(),
    "Round": _round_half_even,
    "Erf": lambda x: x.erf(),
    "Sin": lambda x: x.sin(),
    "Cos": lambda x: x.cos(),
    "Tan": lambda x: x.sin() / x.cos(),
    "Tanh": lambda x: x.tanh(),
    "Sigmoid": lambda x: x.sigmoid(),
    "Atan": _atan,
    "Asin": _asin,
    "Acos": lambda x: math.pi / 2 - _asin(x),
    "Sinh": lambda x: (x.exp() - (-x).exp()) / 2,
    "Cosh": lambda x: (x.exp() + (-x).exp()) / 2,
    "Asinh": lambda x: (x + (x * x + 1).sqrt()).log(),
    "Acosh": lambda x: (x + (x * x - 1).sqrt()).log(),
    "Atanh": lambda x: ((1 + x) / (1 - x)).log() / 2,
    "Relu": lambda x: x.relu(),
    "Softsign": lambda x: x / (1 + x.abs()),
    "Softplus": lambda x: x.relu() + (-x.abs()).exp().log1p(),
    "Mish": lambda x: x * (x.relu() + (-x.abs()).exp().log1p()).tanh(),
    "IsNaN": lambda x: x.isnan(),
    "Not": lambda x: ~x,
    "Identity": lambda x: x,
}


# The opset each unary operator first appeared in (the rest of UNARY date from opset 1).
SINCE = {
    "Sin": 7,
    "Cos": 7,
    "Tan": 7,
    "Asin": 7,
    "Acos": 7,
    "Atan": 7,
    "Sinh": 9,
    "Cosh": 9,
    "Asinh": 9,
    "Acosh": 9,
    "Atanh": 9,
    "Erf": 9,
    "IsNaN": 9,
    "Sign": 9,
    "Round": 11,
    "Mish": 18,
}


def _unary(fn):
    return lambda node, x: fn(x)


# ---------------------------------------------------------------- activations with attributes
def leaky_relu(node, x):
    return where(x < 0, x * node.attr("alpha", 0.01), x)


def elu(node, x):
    a = node.attr("alpha", 1.0)
    return where(x > 0, x, a * x.expm1())


def selu(node, x):
    a, g = node.attr("alpha", 1.67326319217681884765625), node.attr("gamma", 1.05070102214813232421875)
    return g * where(x > 0, x, a * x.expm1())


def celu(node, x):
    a = node.attr("alpha", 1.0)
    return x.relu() + (a * (x / a).expm1()).clamp(max=0)


def hard_sigmoid(node, x):
    return (node.attr("alpha", 0.2) * x + node.attr("beta", 0.5)).clamp(0, 1)


def hard_swish(node, x):
    return x * (x / 6 + 0.5).clamp(0, 1)


def thresholded_relu(node, x):
    return where(x > node.attr("alpha", 1.0), x, 0)


def prelu(node, x, slope):
    if node.version < 7 and slope.ndim == 1 and x.ndim > 2 and slope.shape[0] == x.shape[1]:
        slope = slope.reshape([-1] + [1] * (x.ndim - 2))  # opset 6: slope per channel
    return where(x < 0, slope * x, x)


def gelu(node, x):
    if node.attr("approximate", "none") == "tanh":
        return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())
    return 0.5 * x * (1 + (x / math.sqrt(2)).erf())


def swish(node, x):
    return x * (node.attr("alpha", 1.0) * x).sigmoid()


def shrink(node, x):
    lam, bias = node.attr("lambd", 0.5), node.attr("bias", 0.0)
    return where(x < -lam, x + bias, where(x > lam, x - bias, 0))


def is_inf(node, x):
    pos, neg = node.attr("detect_positive", 1), node.attr("detect_negative", 1)
    inf = x.isinf()
    if pos and neg:
        return inf
    if pos:
        return inf & (x > 0)
    if neg:
        return inf & (x < 0)
    return inf & False


def clip(node, x, lo=None, hi=None):
    if node.version < 11:
        lo, hi = node.attr("min"), node.attr("max")
    else:
        lo, hi = scalar(lo), scalar(hi)
    return x.clamp(lo, hi) if lo is not None or hi is not None else x


def where_(node, c, a, b):
    return where(c, a, b)


# ---------------------------------------------------------------- casts
def cast_to(node, x, dtype):
    """``x.to(dtype)``; to a float8 format, values past its range saturate to its largest
    value unless the node says ``saturate=0`` (then they round to inf or NaN, as ember casts);
    to e8m0, the node's ``round_mode`` and ``saturate`` decide (:func:`to_e8m0`)."""
    if dtype is D.float8_e8m0fnu and x.dtype.is_floating_point:
        return to_e8m0(x, node.attr("round_mode", "up"), node.attr("saturate", 1))
    if dtype in D.FLOAT8 and node.attr("saturate", 1):
        top = D.FLOAT8_MAX[dtype]
        x = x.clamp(-top, top)
    return x.to(dtype)


E8M0_MAX = 2.0**127


def to_e8m0(x, mode: str, saturate) -> Tensor:
    """Round ``|x|`` to a power of two, ``mode`` "up", "down" or "nearest" (ties up, at 1.5
    times a power), as ONNX's Cast does (the sign is ignored, as in ONNX's reference). ember's
    own cast rounds to nearest, so the power below ``|x|`` is that or half of it. Saturating,
    inf and values past 2**127 become 2**127 (ONNX's table; its reference makes inf NaN);
    otherwise what rounds past 2**127, inf and NaN become NaN. A float32 subnormal rounds to
    2**-127 or 2**-126 by value, where ONNX's reference rounds by its bits."""
    if mode not in ("up", "down", "nearest"):
        raise ValueError(f"round_mode {mode!r} is not up, down or nearest")
    a = x.to(D.float32).abs()
    if saturate:
        a = where(a.isnan(), a, a.clamp(None, E8M0_MAX))
    if mode == "nearest":
        return a.to(D.float8_e8m0fnu)
    c = where(a > E8M0_MAX, E8M0_MAX, a)  # NaN stays NaN
    p = c.to(D.float8_e8m0fnu).to(D.float32)
    if mode == "down":
        r = where(p > c, p * 0.5, p)  # the largest power of two <= |x| (2**-127 at least)
    else:  # the smallest power >= |x|: 2p where p < |x| (so p <= 2**126: no overflow), else p
        r = where(p < c, p, p * 0.5) * 2.0
    if not saturate:  # rounding down, only inf leaves the range
        r = where(a > E8M0_MAX if mode == "up" else a.isinf(), a, r)
    return r.to(D.float8_e8m0fnu)


def cast(node, x):
    return cast_to(node, x, node.dtype(node.attr("to")))


def cast_like(node, x, like):
    return cast_to(node, x, like.dtype)


def dropout(node, x, ratio=None, training=None):
    train = bool(scalar(training, False))
    if node.version < 12:
        train = not node.attr("is_test", 0) and node.version < 7
    p = float(scalar(ratio, node.attr("ratio", 0.5)))
    if not train or p == 0:
        return x, filled(x.shape, True, x, D.bool_)
    # ember's own random numbers (ember.manual_seed): not the ones ONNX's reference draws.
    from ...random import rand

    keep = rand(*x.shape, backend=x.backend) >= p
    return where(keep, x / (1 - p), 0.0), keep


OPS = {
    "Add": (_fold(lambda a, b: a + b), 1),
    "Sub": (_fold(lambda a, b: a - b), 1),
    "Mul": (_fold(lambda a, b: a * b), 1),
    "Div": (div, 1),
    "Mod": (mod, 10),
    "Pow": (pow_, 1),
    "Max": (_fold(lambda a, b: a.maximum(b)), 1),
    "Min": (_fold(lambda a, b: a.minimum(b)), 1),
    "Sum": (_fold(lambda a, b: a + b), 1),
    "Mean": (mean, 1),
    "Equal": (lambda n, a, b: a == b, 1),
    "Less": (lambda n, a, b: a < b, 1),
    "LessOrEqual": (lambda n, a, b: a <= b, 12),
    "Greater": (lambda n, a, b: a > b, 1),
    "GreaterOrEqual": (lambda n, a, b: a >= b, 12),
    "And": (lambda n, a, b: a & b, 1),
    "Or": (lambda n, a, b: a | b, 1),
    "Xor": (lambda n, a, b: a ^ b, 1),
    "BitShift": (bit_shift, 11),
    **{name: (_unary(fn), SINCE.get(name, 1)) for name, fn in UNARY.items()},
    "LeakyRelu": (leaky_relu, 1),
    "Elu": (elu, 1),
    "Selu": (selu, 1),
    "Celu": (celu, 12),
    "HardSigmoid": (hard_sigmoid, 1),
    "HardSwish": (hard_swish, 14),
    "ThresholdedRelu": (thresholded_relu, 10),
    "PRelu": (prelu, 1),
    "Gelu": (gelu, 20),
    "Swish": (swish, 24),
    "Shrink": (shrink, 9),
    "IsInf": (is_inf, 10),
    "Clip": (clip, 1),
    "Where": (where_, 9),
    "Cast": (cast, 1),
    "CastLike": (cast_like, 15),
    "Dropout": (dropout, 1),
}

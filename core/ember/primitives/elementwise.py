"""Elementwise primitives: unary math, binary arithmetic, comparisons, logic, where, cast.

Each ``defprim`` below is the whole of what ember knows about one primitive (record.py): spec,
abstract rule, VJP rule, conformance dtypes and cases. Families share their spec, abstract
rule and case generator; the VJP rules are one line each, as in HIPS autograd.
"""

from __future__ import annotations

import math

from .. import dtypes as D
from ..errors import DTypeError
from .adjoint import binary_vjp, needs, unbroadcast
from .record import ALL, FLOATS, NUMERIC, defprim
from .shapes import aval, broadcast_shapes

#: the records defined here; ember.primitives re-exports them (P.add, ...)
__all__ = [
    "neg",
    "exp",
    "log",
    "sin",
    "cos",
    "tanh",
    "sqrt",
    "reciprocal",
    "abs",
    "sign",
    "floor",
    "erf",
    "logical_not",
    "add",
    "sub",
    "mul",
    "div",
    "pow",
    "maximum",
    "minimum",
    "remainder",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "logical_and",
    "logical_or",
    "logical_xor",
    "where",
    "cast",
]


# ----------------------------------------------------------------------------- abstract rules
def _same(x):
    return x


def _to_bool(x):
    return x[0], D.bool_


def _binary(a, b):
    (sa, da), (sb, db) = aval(a), aval(b)
    if da is not None and db is not None and da is not db:
        raise DTypeError(f"operands have different dtypes {da} and {db} (the front end casts first)")
    return broadcast_shapes(sa, sb), da or db


def _compare(a, b):
    return _binary(a, b)[0], D.bool_


def _where(c, a, b):
    (sc, dc) = c
    shape, dtype = _binary(a, b)
    if dc is not D.bool_:
        raise DTypeError(f"where: condition must be bool, got {dc}")
    return broadcast_shapes(sc, shape), dtype


def _cast(x, dtype):
    return x[0], D.get(dtype)


# ----------------------------------------------------------------------------- tier-2 cases
def _unary_tier2(d, dt):
    return d.case([d.array(d.shape(), dt, special=True)])


def _operands(d, dt, kinds=None, ties=False):
    """Two arrays in a broadcasting pattern, or an array and a Python scalar (of each kind in
    ``kinds``, default bool, int and float) on either side."""
    form = d.sampled_from(("arrays", "scalar right", "scalar left"))
    if form == "arrays":
        sa, sb = d.broadcastable(2, max_side=4)
        return [d.array(sa, dt, special=True, ties=ties), d.array(sb, dt, special=True, ties=ties)]
    x = d.array(d.shape(), dt, special=True, ties=ties)
    s = d.weak_scalar(d.sampled_from(kinds or d.scalar_kinds), dt, special=True)
    return [x, s] if form == "scalar right" else [s, x]


def _binary_tier2(d, dt):
    return d.case(_operands(d, dt))


def _compare_tier2(d, dt):
    return d.case(_operands(d, dt, ties=True))  # equal elements: lt and le differ there


def _logical_tier2(d, dt):
    return d.case(_operands(d, "bool", kinds=("bool",)))


def _where_tier2(d, dt):
    scalar_at = d.sampled_from((None, 1, 2))
    if scalar_at is None:
        sc, sa, sb = d.broadcastable(3)
        return d.case([d.array(sc, "bool"), d.array(sa, dt, special=True), d.array(sb, dt, special=True)])
    sc, sa = d.broadcastable(2, max_dims=2)
    vals = [d.weak_scalar(d.sampled_from(d.scalar_kinds), dt, special=True), d.array(sa, dt, special=True)]
    return d.case([d.array(sc, "bool")] + (vals if scalar_at == 1 else vals[::-1]))


def _cast_tier2(d, dt):
    target = d.sampled_from(sorted(d.ctx.dtype_names))
    if dt in FLOATS and target not in FLOATS and target != "bool":
        # float -> int truncates toward zero; NaN, inf and out-of-range values are undefined
        lo, hi = (0.0, 9.0) if target.startswith("uint") else (-20.0, 20.0)
        x = d.array(d.shape(), dt, lo=lo, hi=hi)
    else:
        x = d.array(d.shape(), dt, special=True)
    return d.case([x], dict(dtype=D.get(target)))


# ----------------------------------------------------------------------------- tier-3 cases
def _smooth(lo=None, hi=None):
    def cases(r):
        return [r.case([r.normal((3, 4), lo, hi)]), r.case([r.normal((), lo, hi)], label="0-d")]

    return cases


def _kinked_tier3(r):
    return [r.case([r.away_from_zero((3, 4))])]


def _floor_tier3(r):
    x = r.rng.integers(-3, 3, (3, 4)) + r.rng.uniform(0.2, 0.8, (3, 4))
    return [r.case([r.array(x)])]


def _binary_tier3(kind="any"):
    """Same shapes, broadcast shapes, and a Python scalar operand."""

    def cases(r):
        if kind == "pow":  # positive base: the exponent's gradient needs log(a)
            a, a1 = r.normal((3, 4), 0.5, 2.0), r.normal((3, 1), 0.5, 2.0)
            b, b1 = r.normal((3, 4), -1.5, 1.5), r.normal((1, 4), -1.5, 1.5)
        elif kind == "cmp":  # a and b at least 0.2 apart: maximum/minimum have one winner
            a, b1 = r.normal((3, 4)), r.normal((1, 4), -1.0, 1.0)
            b = r.array(a + r.away_from_zero((3, 4)))
            a1 = r.array([[3.0], [-3.0], [2.5]])
        else:
            a, a1, b1 = r.normal((3, 4)), r.normal((3, 1)), r.normal((1, 4))
            b = r.away_from_zero((3, 4)) if kind == "div" else r.normal((3, 4))
            b1 = r.away_from_zero((1, 4)) if kind == "div" else b1
        scalar_a = r.array(a.round() + 0.5) if kind == "cmp" else a  # never equal to 0.3
        return [
            r.case([a, b], diff=(0, 1), label="same shape"),
            r.case([a1, b1], diff=(0, 1), label="broadcast"),
            r.case([scalar_a, 0.3 if kind == "cmp" else 2.5], diff=(0,), label="scalar operand"),
        ]

    return cases


def _remainder_tier3(r):
    # a / b between integers (k + 0.2 .. k + 0.8): away from the jumps, where finite differences fail
    b = r.away_from_zero((3, 4))
    q = r.rng.integers(-3, 3, (3, 4)) + r.rng.uniform(0.2, 0.8, (3, 4))
    return [r.case([r.array(b * q), b], diff=(0, 1))]


def _where_tier3(r):
    return [r.case([r.rng.random((3, 4)) > 0.5, r.normal((3, 4)), r.normal((1, 4))], diff=(1, 2))]


def _cast_tier3(r):
    other = "float32" if r.dtype == "float64" else "float64"
    return [
        r.case([r.normal((3, 4))], dict(dtype=D.get(r.dtype)), label="same dtype"),
        r.case([r.normal((3, 4))], dict(dtype=D.get(other)), label=f"to {other}"),
    ]


# ----------------------------------------------------------------------------- VJP helpers
def _max_min_rule(wins):
    """torch's rule: the operand that ``wins`` (is the max/min) gets g; ties split it in half."""

    def rule(g, out, a, b):
        share = g._where(a == b, g * 0.5, g)
        return g._where(wins(a, b), share, 0)

    return rule


def _where_vjp(g, out, c, a, b):
    # A scalar 0, not g * 0: no pass over g (ReLU's backward is this rule), and the branch not
    # taken gets an exact 0 even where g is inf or NaN, as in PyTorch.
    return (
        None,
        unbroadcast(g._where(c, g, 0), a.shape) if needs(a) else None,
        unbroadcast(g._where(c, 0, g), b.shape) if needs(b) else None,
    )


# ----------------------------------------------------------------------------- the records
UNARY = dict(
    group="unary",
    abstract=_same,
    cases=_unary_tier2,
    doc="op(x): elementwise, same shape and dtype. Floating-point functions (exp, log, sin, cos, "
    "tanh, sqrt, reciprocal, erf) follow IEEE-754 (log(0) = -inf, sqrt(-1) = nan).",
)
neg = defprim("neg", **UNARY, dtypes=NUMERIC, grad_cases=_smooth(), vjp=lambda g, out, x: (-g,))
exp = defprim("exp", **UNARY, grad_cases=_smooth(), second_order=True, vjp=lambda g, out, x: (g * out,))
log = defprim("log", **UNARY, grad_cases=_smooth(0.5, 2.0), second_order=True, vjp=lambda g, out, x: (g / x,))
sin = defprim("sin", **UNARY, grad_cases=_smooth(), second_order=True, vjp=lambda g, out, x: (g * x.cos(),))
cos = defprim("cos", **UNARY, grad_cases=_smooth(), second_order=True, vjp=lambda g, out, x: (-g * x.sin(),))
tanh = defprim("tanh", **UNARY, grad_cases=_smooth(), second_order=True, vjp=lambda g, out, x: (g * (1 - out * out),))
sqrt = defprim("sqrt", **UNARY, grad_cases=_smooth(0.5, 2.0), second_order=True, vjp=lambda g, out, x: (g / (2 * out),))
reciprocal = defprim(
    "reciprocal", **UNARY, grad_cases=_smooth(0.5, 2.0), second_order=True, vjp=lambda g, out, x: (-g * out * out,)
)
abs = defprim("abs", **UNARY, dtypes=NUMERIC, grad_cases=_kinked_tier3, vjp=lambda g, out, x: (g * x.sign(),))
sign = defprim(
    "sign",
    **dict(
        UNARY,
        doc="sign(x): -1, 0 or 1 elementwise, same shape and dtype; sign(+-0) = 0 and "
        "sign(NaN) = NaN (as NumPy; PyTorch gives 0).",
    ),
    dtypes=NUMERIC,
    grad_cases=_kinked_tier3,
    vjp=lambda g, out, x: (g * 0,),
)
floor = defprim("floor", **UNARY, grad_cases=_floor_tier3, vjp=lambda g, out, x: (g * 0,))
erf = defprim(
    "erf",
    **UNARY,
    grad_cases=_smooth(),
    second_order=True,
    vjp=lambda g, out, x: (g * (2 / math.sqrt(math.pi)) * (-(x * x)).exp(),),
)
logical_not = defprim(
    "logical_not",
    "unary",
    "logical_not(x): elementwise not; input bool, output bool.",
    _to_bool,
    dtypes=("bool",),
    cases=_unary_tier2,
)

BINARY = dict(
    group="binary",
    abstract=_binary,
    cases=_binary_tier2,
    doc="op(a, b): elementwise with NumPy broadcasting. Both operands have the same dtype, or one "
    "(either) is a Python scalar, which is weak (see the rules above: int32 + 0.5 is float64). "
    "div of integers is not defined (the front end casts to float). maximum/minimum propagate NaN.",
)
add = defprim(
    "add",
    **BINARY,
    dtypes=NUMERIC,
    grad_cases=_binary_tier3(),
    vjp=binary_vjp(lambda g, out, a, b: g, lambda g, out, a, b: g),
)
sub = defprim(
    "sub",
    **BINARY,
    dtypes=NUMERIC,
    grad_cases=_binary_tier3(),
    vjp=binary_vjp(lambda g, out, a, b: g, lambda g, out, a, b: -g),
)
mul = defprim(
    "mul",
    **BINARY,
    dtypes=NUMERIC,
    grad_cases=_binary_tier3(),
    second_order=True,
    vjp=binary_vjp(lambda g, out, a, b: g * b, lambda g, out, a, b: g * a),
)
div = defprim(
    "div",
    **BINARY,
    grad_cases=_binary_tier3("div"),
    second_order=True,
    vjp=binary_vjp(lambda g, out, a, b: g / b, lambda g, out, a, b: -g * out / b),
)
pow = defprim(
    "pow",
    **BINARY,
    grad_cases=_binary_tier3("pow"),
    second_order=True,
    vjp=binary_vjp(
        lambda g, out, a, b: g * b * a ** (b - 1), lambda g, out, a, b: g * out * g._where(a > 0, a, 1).log()
    ),
)
maximum = defprim(
    "maximum",
    **BINARY,
    dtypes=NUMERIC,
    grad_cases=_binary_tier3("cmp"),
    vjp=binary_vjp(_max_min_rule(lambda a, b: a >= b), _max_min_rule(lambda a, b: b >= a)),
)
minimum = defprim(
    "minimum",
    **BINARY,
    dtypes=NUMERIC,
    grad_cases=_binary_tier3("cmp"),
    vjp=binary_vjp(_max_min_rule(lambda a, b: a <= b), _max_min_rule(lambda a, b: b <= a)),
)
remainder = defprim(
    "remainder",
    "binary",
    "remainder(a, b): a - floor(a / b) * b, the sign of b (Python's %, "
    "torch.remainder, NumPy's remainder: -3 % inf is inf, 0 % -2 is -0.0); an integer remainder "
    "by 0 is 0.",
    _binary,
    dtypes=NUMERIC,
    cases=_binary_tier2,
    grad_cases=_remainder_tier3,
    vjp=binary_vjp(lambda g, out, a, b: g, lambda g, out, a, b: -g * (a / b).floor()),
    required=False,
)

COMPARE = dict(
    group="compare",
    abstract=_compare,
    cases=_compare_tier2,
    dtypes=ALL,
    doc="op(a, b): elementwise comparison with broadcasting, in the dtype the operands promote to "
    "(a Python scalar on either side is weak); output bool. NaN compares unequal to everything.",
)
eq = defprim("eq", **COMPARE)
ne = defprim("ne", **COMPARE)
lt = defprim("lt", **COMPARE)
le = defprim("le", **COMPARE)
gt = defprim("gt", **COMPARE)
ge = defprim("ge", **COMPARE)

LOGICAL = dict(
    group="logical",
    abstract=_compare,
    cases=_logical_tier2,
    dtypes=("bool",),
    doc="op(a, b): elementwise on bool operands with broadcasting; output bool.",
)
logical_and = defprim("logical_and", **LOGICAL)
logical_or = defprim("logical_or", **LOGICAL)
logical_xor = defprim("logical_xor", **LOGICAL)

where = defprim(
    "where",
    "select",
    "where(cond, a, b): a where cond else b; cond bool; all three broadcast together; "
    "a or b may be a Python scalar (weak, as for binary ops).",
    _where,
    dtypes=ALL,
    cases=_where_tier2,
    grad_cases=_where_tier3,
    second_order=True,
    vjp=_where_vjp,
)
cast = defprim(
    "cast",
    "cast",
    "cast(x, dtype): convert elementwise; float to int truncates toward zero; to bool is x != 0.",
    _cast,
    dtypes=ALL,
    cases=_cast_tier2,
    grad_cases=_cast_tier3,
    vjp=lambda g, out, x, dtype: (g.to(x.dtype) if x.dtype.is_floating_point else None,),
)

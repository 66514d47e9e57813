"""Tier 3 inputs: for each differentiable primitive, a few fixed cases away from its kinks.

``GRAD_CASES[name](rng, dtype)`` returns a list of :class:`GradCase`. ``args`` holds NumPy
arrays and Python values in the primitive's argument order; ``diff`` says which arguments are
differentiated (the others, such as a condition or indices, are passed as they are). Inputs
stay where the function is smooth (positive for log and sqrt, away from integers for floor,
ties broken for max), so that finite differences are a fair judge.

``SECOND_ORDER`` names the primitives whose gradients are differentiated once more.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import dtypes as D


@dataclass
class GradCase:
    args: list
    params: dict = field(default_factory=dict)
    diff: tuple = (0,)
    label: str = ""


def _n(rng, shape, dt, lo=None, hi=None):
    if lo is None:
        return rng.standard_normal(shape).astype(dt)
    return rng.uniform(lo, hi, shape).astype(dt)


def _away_from_zero(rng, shape, dt):
    return (rng.uniform(0.2, 2.0, shape) * rng.choice([-1.0, 1.0], shape)).astype(dt)


def _unary(lo=None, hi=None):
    def cases(rng, dt):
        return [GradCase([_n(rng, (3, 4), dt, lo, hi)]), GradCase([_n(rng, (), dt, lo, hi)], label="0-d")]
    return cases


def _kinked(rng, dt):
    return [GradCase([_away_from_zero(rng, (3, 4), dt)])]


def _floor(rng, dt):
    x = rng.integers(-3, 3, (3, 4)) + rng.uniform(0.2, 0.8, (3, 4))
    return [GradCase([x.astype(dt)])]


def _binary(kind="any"):
    """Cases for a binary op: same shapes, broadcast shapes, and a Python scalar operand."""
    def cases(rng, dt):
        if kind == "pow":            # positive base: the exponent's gradient needs log(a)
            a, a1 = _n(rng, (3, 4), dt, 0.5, 2.0), _n(rng, (3, 1), dt, 0.5, 2.0)
            b, b1 = _n(rng, (3, 4), dt, -1.5, 1.5), _n(rng, (1, 4), dt, -1.5, 1.5)
        elif kind == "cmp":          # a and b at least 0.2 apart: maximum/minimum have one winner
            a, b1 = _n(rng, (3, 4), dt), _n(rng, (1, 4), dt, -1.0, 1.0)
            b = (a + _away_from_zero(rng, (3, 4), dt)).astype(dt)
            a1 = (np.array([[3.0], [-3.0], [2.5]])).astype(dt)
        else:
            a, a1, b1 = _n(rng, (3, 4), dt), _n(rng, (3, 1), dt), _n(rng, (1, 4), dt)
            b = _away_from_zero(rng, (3, 4), dt) if kind == "div" else _n(rng, (3, 4), dt)
            b1 = _away_from_zero(rng, (1, 4), dt) if kind == "div" else b1
        scalar_a = (np.round(a) + 0.5).astype(dt) if kind == "cmp" else a     # never equal to 0.3
        return [GradCase([a, b], diff=(0, 1), label="same shape"),
                GradCase([a1, b1], diff=(0, 1), label="broadcast"),
                GradCase([scalar_a, 0.3 if kind == "cmp" else 2.5], diff=(0,), label="scalar operand")]
    return cases


def _where(rng, dt):
    cond = rng.random((3, 4)) > 0.5
    return [GradCase([cond, _n(rng, (3, 4), dt), _n(rng, (1, 4), dt)], diff=(1, 2))]


def _cast(rng, dt):
    other = "float32" if dt == "float64" else "float64"
    return [GradCase([_n(rng, (3, 4), dt)], dict(dtype=D.get(dt)), label="same dtype"),
            GradCase([_n(rng, (3, 4), dt)], dict(dtype=D.get(other)), label=f"to {other}")]


def _sum(rng, dt):
    x = _n(rng, (3, 4, 2), dt)
    return [GradCase([x], dict(axes=(0, 2), keepdims=False)), GradCase([x], dict(axes=(1,), keepdims=True)),
            GradCase([x], dict(axes=(), keepdims=False), label="no axes")]


def _extremum(rng, dt):
    # distinct values at least 0.25 apart: one winner per reduction, and finite differences see it
    x = (rng.permutation(24).reshape(2, 3, 4) * 0.25 + rng.uniform(0, 0.05, (2, 3, 4))).astype(dt)
    return [GradCase([x], dict(axes=(1,), keepdims=False)), GradCase([x], dict(axes=(0, 2), keepdims=True))]


def _movement(x_shape=(2, 3, 4), **params):
    def cases(rng, dt):
        return [GradCase([_n(rng, x_shape, dt)], dict(params))]
    return cases


def _concatenate(rng, dt):
    return [GradCase([_n(rng, (2, 1, 3), dt), _n(rng, (2, 4, 3), dt), _n(rng, (2, 2, 3), dt)],
                     dict(axis=1), diff=(0, 1, 2))]


def _take(rng, dt):
    idx = np.array([[0, 3], [3, -1]], dtype=np.int64)       # repeats: the VJP must accumulate
    return [GradCase([_n(rng, (4, 3), dt), idx], dict(axis=0)),
            GradCase([_n(rng, (2, 5), dt), np.array([4, 0, 4], dtype=np.int64)], dict(axis=1))]


def _index_add(rng, dt):
    idx = np.array([0, 2, 0], dtype=np.int64)
    return [GradCase([_n(rng, (4, 3), dt), idx, _n(rng, (3, 3), dt)], dict(axis=0), diff=(0, 2))]


def _matmul(rng, dt):
    return [GradCase([_n(rng, (2, 3, 4), dt), _n(rng, (4, 5), dt)], diff=(0, 1), label="batched"),
            GradCase([_n(rng, (3, 4), dt), _n(rng, (2, 4, 2), dt)], diff=(0, 1), label="broadcast batch")]


CONV = [((2, 4, 5, 5), (6, 2, 3, 3), dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2)),
        ((1, 1, 4, 4), (2, 1, 2, 2), dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1))]


def _conv_out(xs, ws, p):
    return (xs[0], ws[0]) + tuple((xs[2 + i] + 2 * p["padding"][i] - p["dilation"][i] * (ws[2 + i] - 1) - 1)
                                  // p["stride"][i] + 1 for i in range(2))


def _conv2d(rng, dt):
    return [GradCase([_n(rng, xs, dt), _n(rng, ws, dt)], dict(p), diff=(0, 1)) for xs, ws, p in CONV]


def _conv2d_grad_input(rng, dt):
    return [GradCase([_n(rng, _conv_out(xs, ws, p), dt), _n(rng, ws, dt)], dict(p, input_shape=xs), diff=(0, 1))
            for xs, ws, p in CONV]


def _conv2d_grad_weight(rng, dt):
    return [GradCase([_n(rng, xs, dt), _n(rng, _conv_out(xs, ws, p), dt)], dict(p, weight_shape=ws), diff=(0, 1))
            for xs, ws, p in CONV]


WINDOWS = dict(kernel=(2, 3), stride=(2, 1), dilation=(1, 1))


def _windows(rng, dt):
    return [GradCase([_n(rng, (2, 5, 6), dt)], dict(WINDOWS)),
            GradCase([_n(rng, (1, 2, 5, 5), dt)], dict(kernel=(3, 2), stride=(1, 2), dilation=(2, 1)))]


def _windows_grad(rng, dt):
    return [GradCase([_n(rng, (2, 2, 4, 2, 3), dt)], dict(WINDOWS, input_shape=(2, 5, 6)))]


GRAD_CASES = {
    **{op: _unary() for op in ("neg", "exp", "sin", "cos", "tanh", "erf")},
    **{op: _unary(0.5, 2.0) for op in ("log", "sqrt", "reciprocal")},
    "abs": _kinked, "sign": _kinked, "floor": _floor,
    "add": _binary(), "sub": _binary(), "mul": _binary(), "div": _binary("div"), "pow": _binary("pow"),
    "maximum": _binary("cmp"), "minimum": _binary("cmp"),
    "where": _where, "cast": _cast, "sum": _sum, "max": _extremum, "min": _extremum,
    "reshape": _movement(shape=(4, 6)), "permute": _movement(axes=(2, 0, 1)),
    "expand": _movement((3, 1), shape=(2, 3, 4)), "pad": _movement(widths=((1, 0), (2, 1), (0, 2)), value=0.0),
    "slice": _movement((6, 5), starts=(1, 0), stops=(6, 4), steps=(2, 3)),
    "concatenate": _concatenate, "flip": _movement(axes=(0, 2)), "take": _take, "index_add": _index_add,
    "matmul": _matmul, "conv2d": _conv2d, "conv2d_grad_input": _conv2d_grad_input,
    "conv2d_grad_weight": _conv2d_grad_weight, "windows": _windows, "windows_grad": _windows_grad,
}

#: primitives whose gradient is itself differentiated (the VJP rules' own VJPs are exercised)
SECOND_ORDER = ("exp", "log", "tanh", "sin", "cos", "erf", "sqrt", "reciprocal", "mul", "div", "pow",
                "where", "take", "matmul", "conv2d", "conv2d_grad_input", "conv2d_grad_weight", "max")

"""``gelu`` and ``gelu_backward``: elementwise programs (render.py) built from the same arithmetic
as the references, operation for operation and rounded to the tensor's dtype at each step."""

from __future__ import annotations

import math

import numpy as np

from .. import launch
from .common import FLOATS, Builder, _kernel, _reference


def gelu(x, *, approximate="none"):
    if (
        x.dtype not in FLOATS
        or x.size == 0
        or approximate not in ("none", "tanh")
        or not launch.hot(("gelu", x.shape, x.dtype.num))
    ):
        return _reference("gelu", x, approximate=approximate)

    def build():
        b = Builder(x.dtype.name)
        v = b.array()
        if approximate == "tanh":  # (x + x*x*x*0.044715) * sqrt(2/pi); x * 0.5 * (tanh + 1)
            cube = b.op("mul", b.op("mul", b.op("mul", v, v), v), 0.044715)
            inner = b.op("mul", b.op("add", v, cube), math.sqrt(2 / math.pi))
            out = b.op("mul", b.op("mul", v, 0.5), b.op("add", b.op("tanh", inner), 1))
        else:  # x * 0.5 * (erf(x * (1/sqrt(2))) + 1)
            out = b.op("mul", b.op("mul", v, 0.5), b.op("add", b.op("erf", b.op("mul", v, 1 / math.sqrt(2))), 1))
        return b.program([out])

    k = _kernel(("gelu", approximate, x.dtype.name), build)
    return k(np.ascontiguousarray(x), force=True)[0]


def gelu_backward(grad, x, *, approximate="none"):
    if (
        x.dtype not in FLOATS
        or x.size == 0
        or approximate not in ("none", "tanh")
        or grad.dtype != x.dtype
        or grad.shape != x.shape
        or not launch.hot(("gelu_backward", x.shape, x.dtype.num))
    ):
        return _reference("gelu_backward", grad, x, approximate=approximate)

    def build():  # ember.fused.FUSED["gelu_backward"]'s operations, in its order
        b = Builder(x.dtype.name)
        g, v = b.array(), b.array()
        if approximate == "tanh":
            k = math.sqrt(2 / math.pi)
            cube = b.op("mul", b.op("mul", b.op("mul", v, v), v), 0.044715)
            t = b.op("tanh", b.op("mul", b.op("add", v, cube), k))
            slope = b.op("mul", b.op("add", b.op("mul", b.op("mul", v, v), 3 * 0.044715), 1), k)
            left = b.op("mul", b.op("add", t, 1), 0.5)
            right = b.op("mul", b.op("mul", b.op("mul", v, 0.5), b.op("sub", 1, b.op("mul", t, t))), slope)
            d = b.op("add", left, right)
        else:
            cdf = b.op("mul", b.op("add", b.op("erf", b.op("mul", v, 1 / math.sqrt(2))), 1), 0.5)
            pdf = b.op("mul", b.op("exp", b.op("mul", b.op("mul", v, v), -0.5)), 1 / math.sqrt(2 * math.pi))
            d = b.op("add", cdf, b.op("mul", v, pdf))
        return b.program([b.op("mul", g, d)])

    k = _kernel(("gelu_backward", approximate, x.dtype.name), build)
    return k(np.ascontiguousarray(grad), np.ascontiguousarray(x), force=True)[0]

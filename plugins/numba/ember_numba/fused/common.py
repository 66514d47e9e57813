"""What the fused kernels share: the dtypes they cover, numba's options, the fallback to the
reference decomposition, and the elementwise programs' builder and cache (render.py runs them)."""

from __future__ import annotations

import numpy as np

from .. import launch
from ..render import Program

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
JIT = dict(cache=True, nogil=True, error_model="numpy")
REASSOC = {"reassoc"}  # lets LLVM vectorize a float64 sum of float32 values (it reorders the additions)


def _reference(name, *args, **params):
    """Run the reference decomposition of fused op ``name`` on buffers of this backend."""
    from ember.conformance import run_reference

    return run_reference("numba", name, *args, **params)


class Builder:
    """Writes an elementwise Program one operation at a time, in the reference's order.

    >>> b = Builder("float32"); x = b.array(); y = b.op("mul", x, b.scalar())
    >>> b.program([y]).nodes
    [('t0', 'mul', ('x0', 'x1'), {}, 'float32')]
    """

    def __init__(self, dtype):
        self.dtype, self.inputs, self.nodes = dtype, [], []

    def array(self, dtype=None):
        self.inputs.append(("array", dtype or self.dtype))
        return f"x{len(self.inputs) - 1}"

    def scalar(self):
        self.inputs.append(("scalar", self.dtype))
        return f"x{len(self.inputs) - 1}"

    def op(self, op, *args):
        name = f"t{len(self.nodes)}"
        self.nodes.append((name, op, tuple(args), {}, self.dtype))
        return name

    def program(self, outputs):
        return Program(list(self.inputs), list(self.nodes), list(outputs))


_KERNELS: dict = {}


def _kernel(key, build):
    k = _KERNELS.get(key)
    if k is None:
        k = _KERNELS[key] = launch.Kernel(build())
    return k

"""The numba backend: the NumPy reference's table, with numba kernels where they win.

Buffers are NumPy arrays, so the backend inherits host transfer, views and BLAS matrix
products from :class:`~ember.backends.numpy.backend.NumpyBackend` unchanged, and replaces
entries of its ``impls`` table by functions that run a numba kernel when the work is large
enough to pay for it and fall back to the reference below that (:data:`MIN_SIZE`) or for
layouts and dtypes the kernels do not cover (float16, integers, non-contiguous views):
a fallback is the reference itself. The elementwise kernels give the reference's results to
the bit; reductions and convolutions add in another order (docs/numba.md).

>>> import ember
>>> b = ember.get_backend("numba")
>>> (ember.ones(3, backend="numba") * 2).tolist(), b.name
([2.0, 2.0, 2.0], 'numba')
"""

from __future__ import annotations

import importlib
import os

import numpy as np

from ember import dtypes as D
from ember.backend import Capabilities
from ember.backends.numpy import backend as nb, host_memory
from ember.backends.numpy.backend import NumpyBackend
from ember.primitives import GROUPS

from . import __version__, foreach, fused as fused_ops, kernels, launch, rewrites, threads
from .render import Program

#: Elements from which an elementwise primitive runs as a numba kernel rather than a NumPy
#: ufunc: below it NumPy's single pass is as fast and a kernel call only adds overhead (see
#: docs/numba.md for the measurements). ``where`` starts much lower: NumPy's ``where`` with a
#: Python scalar runs a slow casting loop (~10 ns an element, 100x the kernel).
#: ``EMBER_NUMBA_MIN_SIZE`` overrides both (0 sends everything the kernels cover to numba,
#: as the tests do to check the kernels on the conformance suite's small cases).
_ENV_MIN = os.environ.get("EMBER_NUMBA_MIN_SIZE")
MIN_SIZE = int(_ENV_MIN) if _ENV_MIN else 1 << 16
MIN_SIZE_WHERE = int(_ENV_MIN) if _ENV_MIN else 1 << 11

FLOATS = frozenset((np.dtype(np.float32), np.dtype(np.float64)))
SCALARS = (bool, int, float)
COMPARE = frozenset(GROUPS["compare"])
UNARY = frozenset(GROUPS["unary"])


def _program(op, kinds, dtype):
    """The one-node program for primitive ``op`` over inputs of ``kinds`` ("array"/"scalar")."""
    if op == "where":
        inputs = [("array", "bool")] + [(k, dtype) for k in kinds[1:]]
    else:
        inputs = [(k, dtype) for k in kinds]
    out = "bool" if op in COMPARE else dtype
    return Program(inputs, [("t0", op, tuple(f"x{i}" for i in range(len(kinds))), {}, out)], ["t0"])


def elementwise(op):
    """``impls[op]``: a numba kernel for float32/float64 C-contiguous operands of at least
    MIN_SIZE elements, else the reference. Small operands go straight to the reference,
    checked first and cheaply: W4 in benchmarks/ measures what an op costs the framework."""
    ref = nb.IMPLS[op]
    table: dict = {}
    where = op == "where"
    ndarray = np.ndarray

    def general(args):
        dtype = None
        for a in args:
            if isinstance(a, ndarray):
                if a.dtype != np.bool_ or not where:
                    if (dtype is not None and a.dtype != dtype) or not a.flags.c_contiguous:
                        return ref(*args)
                    dtype = a.dtype
                elif not a.flags.c_contiguous:
                    return ref(*args)
            elif not isinstance(a, SCALARS):
                return ref(*args)
        if dtype not in FLOATS:
            return ref(*args)
        key = tuple(type(a) if isinstance(a, SCALARS) else None for a in args) + (dtype,)
        kernel = table.get(key)
        if kernel is None:
            kinds = ["scalar" if isinstance(a, SCALARS) else "array" for a in args]
            kernel = table[key] = launch.Kernel(_program(op, kinds, dtype.name))
        out = kernel(*args)
        return ref(*args) if out is None else out[0]

    if where:

        def impl(c, a, b):
            m = MIN_SIZE_WHERE
            if (
                (type(a) is not ndarray or a.size < m)
                and (type(b) is not ndarray or b.size < m)
                and (type(c) is not ndarray or c.size < m)
            ):
                return ref(c, a, b)
            return general((c, a, b))
    elif op in UNARY:

        def impl(x):
            if type(x) is not ndarray or x.size < MIN_SIZE:
                return ref(x)
            return general((x,))
    else:

        def impl(a, b):
            m = MIN_SIZE
            if (type(a) is not ndarray or a.size < m) and (type(b) is not ndarray or b.size < m):
                return ref(a, b)
            return general((a, b))

    impl.__name__ = f"numba_{op}"
    return impl


#: The primitives that run as kernels. Not the transcendental ones (exp, log, sin, cos, tanh,
#: erf, pow): NumPy evaluates those with SIMD polynomials, numba calls the scalar C library
#: once per element (4-10x slower), more than two threads can win back. Fused kernels still
#: use them, where saving memory passes pays for it.
ELEMENTWISE = [
    "neg",
    "abs",
    "sqrt",
    "reciprocal",
    "floor",
    "add",
    "sub",
    "mul",
    "div",
    "maximum",
    "minimum",
    *sorted(COMPARE),
    "where",
]

#: Kernel modules imported at the first call of one of their primitives, not when the backend
#: loads: an MLP never convolves or sorts, and importing conv.py (with winograd.py) and
#: sorting.py, their numba functions included, is ~20 ms of every start (docs/performance.md,
#: "the first compiled step"). Each lists the primitives of its ``IMPLS``.
LAZY = {
    "conv": ("conv2d", "conv2d_grad_input", "conv2d_grad_weight"),
    "sorting": ("argtopk", "argsort", "cumsum"),
}


def _lazy(module: str, op: str):
    """``impls[op]`` until ``module`` is imported: imports it, puts its kernels in the table
    and runs the call."""
    found: list = []

    def impl(*args, **kwargs):
        if not found:
            table = importlib.import_module(f"{__package__}.{module}").IMPLS
            IMPLS.update(table)
            found.append(table[op])
        return found[0](*args, **kwargs)

    impl.__name__ = f"numba_{op}"
    return impl


IMPLS = dict(nb.IMPLS)
IMPLS.update({op: elementwise(op) for op in ELEMENTWISE})
IMPLS.update(kernels.IMPLS)
IMPLS.update({op: _lazy(module, op) for module, ops in LAZY.items() for op in ops})


class NumbaBackend(NumpyBackend):
    """ember's CPU backend compiled with numba. Buffers are ``numpy.ndarray``."""

    name = "numba"
    version = __version__
    device = "cpu"
    impls = IMPLS
    fused_impls = {**fused_ops.IMPLS, **foreach.IMPLS}  # foreach: multi-tensor optimizer steps
    #: Primitives whose kernels here compute what NumPy's own function does, to the bit:
    #: ember.jit's NumPy-array runner may compute them with NumPy into its planned buffers
    #: (``out=``). Not matmul (NumPy's call would run on one BLAS thread; blas.matmul splits
    #: the product across the plugin's threads) nor the reductions (NumPy's are several times
    #: slower over several axes, and their results are small).
    same_as_numpy = frozenset(ELEMENTWISE)
    #: The NumPy runner's graph rewrites (ember.backends.numpy.rewrites) this backend has kernels
    #: for, each giving its pattern's bits with this backend's ops (rewrites.py here): they
    #: apply although the backend compiles groups.
    rewrite_kernels = rewrites.KERNELS
    rewrite_when = rewrites.WHEN

    def capabilities(self):
        import numba

        return Capabilities(
            ops=frozenset(IMPLS),
            dtypes=frozenset(D.ALL + D.OPTIONAL + tuple(D.STORAGE) + D.TEXT),  # bfloat16, float8, text: numpy's buffers
            devices=("cpu",),
            fused=frozenset(self.fused_impls),
            compiles_groups=True,
            notes={
                "numba": numba.__version__,
                "blas": "numpy",
                "blas_threads": threads.STATE["blas_threads"],
                "threads": threads.get_num_threads(),
                "malloc": host_memory.STATE["malloc"],
                "threading_layer": threads.STATE["layer"],
                "min_size": MIN_SIZE,
            },
        )

    def set_num_threads(self, n: int) -> int:
        """Threads for numba kernels (and BLAS, with threadpoolctl). Returns the count used."""
        return threads.set_num_threads(n)

    def compile(self, group):
        from . import jit

        return jit.compile_group(group)

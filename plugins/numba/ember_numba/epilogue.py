"""Epilogues: a bias, a residual and a ReLU applied to a convolution's output while it is in cache.

A convolution (conv.py, winograd.py) makes its output a block at a time — a chunk of samples,
a band of output rows, a block of the product — and hands each block, once written, to its
:class:`Epilogue` on the thread that wrote it. Applied to the whole output afterwards, the
same sums would read and write it from memory once more, on one thread. ``y`` is the
convolution's contiguous (N, O, OH, OW) output; a block is samples ``n0 .. n1-1``, channels
``o0 .. o1-1`` and output pixels (flat, ``oh * OW + ow``) ``p0 .. p1-1``. Per element, in the
order the graph's nodes compute it (so the bits are theirs):

=========  =========================================  ===================================
what       value                                       the nodes it stands for
=========  =========================================  ===================================
bias       ``v = y + bias[o]``                         ``add(conv2d, reshape(bias))``
residual   ``v = v + r``                               ``add(that, r)``
relu       ``v if v > 0 else 0``                       ``where(gt(v, 0), v, 0)``
=========  =========================================  ===================================

>>> import numpy as np
>>> y = np.array([[[[-2.0, 1.0]], [[3.0, -4.0]]]], np.float32)  # (1, 2, 1, 2)
>>> Epilogue(np.array([1.0, -1.0], np.float32), relu=True).whole(y).tolist()
[[[[0.0, 2.0]], [[2.0, 0.0]]]]
"""

from __future__ import annotations

import numba
import numpy as np
from numba import uint64

from .kernels import JIT


@numba.njit(**JIT)
def _apply(y, O, P, n0, n1, o0, o1, p0, p1, bias, r, relu):
    """The epilogue on a block of contiguous ``y`` (N, O, P), flat; ``r`` the residual of
    ``y``'s shape, flat, or empty. One thread: it runs on the thread that wrote the block."""
    zero = y.dtype.type(0)
    lo, hi = uint64(p0), uint64(p1)
    for n in range(n0, n1):
        for o in range(o0, o1):
            b = bias[o]
            base = uint64((n * O + o) * P)
            if r.size == 0 and relu:
                for k in range(base + lo, base + hi):
                    v = y[k] + b
                    y[k] = v if v > 0 else zero
            elif r.size == 0:
                for k in range(base + lo, base + hi):
                    y[k] += b
            elif relu:
                for k in range(base + lo, base + hi):
                    v = (y[k] + b) + r[k]
                    y[k] = v if v > 0 else zero
            else:
                for k in range(base + lo, base + hi):
                    y[k] = (y[k] + b) + r[k]


class Epilogue:
    """``bias`` (O,), then ``residual`` (the output's shape) if given, then ReLU if ``relu``:
    called as ``epilogue(y, n0, n1, o0, o1, p0, p1)`` on a block of the output ``y``."""

    def __init__(self, bias, residual=None, relu=False):
        self.bias, self.residual, self.relu = np.ascontiguousarray(bias), residual, relu

    def fast(self, y) -> bool:
        """Does :func:`_apply` take output ``y`` (contiguous, of the bias's dtype, and so the
        residual if there is one)? Else NumPy's passes."""
        r = self.residual
        if not (y.flags.c_contiguous and y.dtype == self.bias.dtype):
            return False
        return r is None or (r.shape == y.shape and r.dtype == y.dtype and r.flags.c_contiguous)

    def __call__(self, y, n0, n1, o0, o1, p0, p1):
        r = self.residual
        if self.fast(y):
            flat_r = r.reshape(-1) if r is not None else y.reshape(-1)[:0]
            o, p = y.shape[1], y.shape[2] * y.shape[3]
            _apply(y.reshape(-1), o, p, n0, n1, o0, o1, p0, p1, self.bias, flat_r, self.relu)
            return
        # Another dtype or layout: NumPy's passes, the same bits (a layout that is not
        # contiguous only ever comes whole, from the reference's convolution).
        if y.flags.c_contiguous:
            y, at, shape = (
                y.reshape(y.shape[0], y.shape[1], -1),
                (slice(n0, n1), slice(o0, o1), slice(p0, p1)),
                (1, -1, 1),
            )
        else:
            at, shape = (slice(n0, n1), slice(o0, o1)), (1, -1, 1, 1)
        block = y[at]
        v = np.add(block, self.bias[o0:o1].reshape(shape), dtype=y.dtype)
        if r is not None:
            v = np.add(v, r.reshape(y.shape)[at], dtype=y.dtype)
        block[...] = np.where(v > 0, v, 0) if self.relu else v

    def on(self, y, n):
        """This epilogue on blocks of sample ``n`` of ``y``, as ``then(o0, o1, p0, p1)``
        (a product's blocks: blas.shared_matmul), with its :attr:`Block.native` form."""
        return Block(self, y, n)

    def whole(self, y):
        """The epilogue on all of ``y`` (N, O, OH, OW); returns ``y``."""
        self(y, 0, y.shape[0], 0, y.shape[1], 0, y.shape[2] * y.shape[3])
        return y


class Block:
    """:class:`Epilogue` ``e`` on blocks of sample ``n`` of ``y``: ``block(o0, o1, p0, p1)``.
    ``native`` is the same epilogue for a helper that applies it without the GIL (crew.py's
    native blocks: ``_apply`` on the sample's part of ``y``): (``y`` flat, ``bias``, the
    residual flat or empty, (1, the sample's offset, O, P, relu)); None where ``_apply``
    would not take it."""

    def __init__(self, e, y, n):
        self.e, self.y, self.n = e, y, n
        r, self.native = e.residual, None
        if y.dtype.kind == "f" and e.fast(y):
            o, p = y.shape[1], y.shape[2] * y.shape[3]
            flat = y.reshape(-1)
            self.native = (flat, e.bias, flat[:0] if r is None else r.reshape(-1), (1, n * o * p, o, p, int(e.relu)))

    def __call__(self, o0, o1, p0, p1):
        self.e(self.y, self.n, self.n + 1, o0, o1, p0, p1)

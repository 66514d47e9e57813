"""Tensor's movement and indexing methods (a mixin of :class:`ember.Tensor`), and the
argument helpers every Tensor method shares.

Movement is reshape/permute/expand/pad/slice/flip, indexing is take/index_add and Python's
``x[...]`` (indexing.py); all of them are primitives or short compositions of them.
"""

from __future__ import annotations

import math

from . import dtypes as D, primitives as P
from .dispatch import apply, apply1
from .errors import ShapeError, located
from .primitives import normalize_axis


def _axis(dim, ndim):
    """``normalize_axis`` with its error located at the user's line."""
    try:
        return normalize_axis(dim, ndim)
    except ShapeError as err:
        raise located(ShapeError, str(err)) from None


def _dims(dim, ndim):
    """Normalize a ``dim`` argument (None = all, int, or tuple) to a tuple of axes."""
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, int):
        return (_axis(dim, ndim),)
    return tuple(_axis(d, ndim) for d in dim)


def _shape_arg(shape):
    """Accept ``f(2, 3)`` and ``f((2, 3))`` like PyTorch."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return tuple(int(s) for s in shape)


class TensorShape:
    __slots__ = ()

    # ------------------------------------------------------------------------ movement
    def reshape(self, *shape):
        shape = list(_shape_arg(shape))
        if -1 in shape:
            known = math.prod(s for s in shape if s != -1)
            if shape.count(-1) > 1 or (known and self.numel() % known) or (not known and self.numel()):
                raise located(
                    ShapeError,
                    f"cannot reshape {self.shape} ({self.numel()} elements) into "
                    f"{tuple(shape)}: the -1 has no whole-number size",
                )
            shape[shape.index(-1)] = self.numel() // known if known else 0
        shape = tuple(shape)
        if shape == self.shape:
            return self
        return apply1(P.reshape, self, shape=shape)

    view = reshape

    def view_as(self, other):
        return self.reshape(other.shape)

    def reshape_as(self, other):
        return self.reshape(other.shape)

    def flatten(self, start_dim=0, end_dim=-1):
        shape = self.shape
        if not shape:
            return self.reshape(1)
        s, e = _axis(start_dim, len(shape)), _axis(end_dim, len(shape))
        return self.reshape(shape[:s] + (math.prod(shape[s : e + 1]),) + shape[e + 1 :])

    def unflatten(self, dim, sizes):
        dim = _axis(dim, self.ndim)
        return self.reshape(self.shape[:dim] + tuple(sizes) + self.shape[dim + 1 :])

    def permute(self, *axes):
        axes = tuple(_axis(a, self.ndim) for a in _shape_arg(axes))
        if axes == tuple(range(self.ndim)):
            return self
        return apply1(P.permute, self, axes=axes)

    def transpose(self, dim0, dim1):
        axes = list(range(self.ndim))
        d0, d1 = _axis(dim0, self.ndim), _axis(dim1, self.ndim)
        axes[d0], axes[d1] = axes[d1], axes[d0]
        return self.permute(axes)

    def t(self):
        return self.transpose(0, 1) if self.ndim == 2 else self

    @property
    def T(self):
        return self.permute(tuple(reversed(range(self.ndim))))

    @property
    def mT(self):
        return self.transpose(-2, -1)

    def squeeze(self, dim=None):
        shape = self.shape
        axes = (
            [i for i, s in enumerate(shape) if s == 1]
            if dim is None
            else [a for a in _dims(dim, len(shape)) if shape[a] == 1]
        )
        return self.reshape(tuple(s for i, s in enumerate(shape) if i not in axes))

    def unsqueeze(self, dim):
        shape = self.shape
        dim = _axis(dim, len(shape) + 1)
        return self.reshape(shape[:dim] + (1,) + shape[dim:])

    def expand(self, *shape):
        shape = _shape_arg(shape)
        own = (1,) * (len(shape) - self.ndim) + self.shape
        shape = tuple(o if s == -1 else s for s, o in zip(shape, own))
        if shape == self.shape:
            return self
        return apply1(P.expand, self, shape=shape)

    broadcast_to = expand

    def expand_as(self, other):
        return self.expand(other.shape)

    def flip(self, dims):
        dims = _dims(dims, self.ndim)
        return apply1(P.flip, self, axes=dims) if dims else self

    def pad(self, widths, value=0):
        """Pad with one ``(lo, hi)`` pair per dim (ember's order; see F.pad for PyTorch's)."""
        widths = tuple((int(lo), int(hi)) for lo, hi in widths)
        if not any(lo or hi for lo, hi in widths):
            return self
        return apply1(P.pad, self, widths=widths, value=value)

    def _slice(self, starts, stops, steps):
        return apply1(P.slice, self, starts=tuple(starts), stops=tuple(stops), steps=tuple(steps))

    def narrow(self, dim, start, length):
        dim = _axis(dim, self.ndim)
        start = start + self.shape[dim] if start < 0 else start  # torch counts negative from the end
        starts = [0] * self.ndim
        stops = list(self.shape)
        starts[dim], stops[dim] = start, start + length
        return self._slice(starts, stops, [1] * self.ndim)

    def chunk(self, chunks, dim=0):
        size = -(-self.shape[dim] // chunks)
        return self.split(size, dim)

    def split(self, split_size, dim=0):
        n = self.shape[dim]
        sizes = (
            [split_size] * (n // split_size) + ([n % split_size] if n % split_size else [])
            if isinstance(split_size, int)
            else list(split_size)
        )
        out, start = [], 0
        for s in sizes:
            out.append(self.narrow(dim, start, s))
            start += s
        return tuple(out)

    def repeat(self, *sizes):
        sizes = _shape_arg(sizes)
        x = self.reshape((1,) * (len(sizes) - self.ndim) + self.shape)
        inter = []
        for s in x.shape:
            inter += [1, s]
        big = x.reshape(inter).expand(tuple(v for r, s in zip(sizes, x.shape) for v in (r, s)))
        return big.reshape(tuple(r * s for r, s in zip(sizes, x.shape)))

    def take(self, indices, axis=0):
        indices = self._like(indices, D.int64)
        return apply(P.take, self, indices, axis=_axis(axis, self.ndim))

    def index_add(self, dim, index, source):
        return apply(P.index_add, self, index, source, axis=_axis(dim, self.ndim))

    def gather(self, dim, index):
        """``out[i][j] = self[i][index[i][j]]`` for dim=1 (torch.gather), via one flat take."""
        dim = _axis(dim, self.ndim)
        shape = index.shape
        strides = [math.prod(self.shape[d + 1 :]) for d in range(self.ndim)]
        flat = index.long() * strides[dim]
        for d in range(self.ndim):
            if d != dim:
                flat = (
                    flat
                    + self._arange(shape[d]).reshape([shape[d] if i == d else 1 for i in range(self.ndim)]) * strides[d]
                )
        return self.reshape(-1).take(flat, 0)

    def masked_fill(self, mask, value):
        return self._where(mask, value, self)

    def __getitem__(self, key):
        from .indexing import getitem

        return getitem(self, key)

    def __setitem__(self, key, value):
        from .indexing import setitem

        setitem(self, key, value)

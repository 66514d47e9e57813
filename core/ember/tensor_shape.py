"""Tensor's movement and indexing methods (a mixin of :class:`ember.Tensor`), and the
argument helpers every Tensor method shares.

Movement is reshape/permute/expand/pad/slice/flip, indexing is take/index_add and Python's
``x[...]`` (indexing.py); all of them are primitives or short compositions of them.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Self, TypeAlias

from . import dtypes as D, primitives as P
from .dispatch import apply, apply1
from .errors import ShapeError, located
from .primitives.shapes import normalize_axis

if TYPE_CHECKING:
    from .backend import Backend

#: A Python number where a tensor operand is accepted (``x + 1``, ``x.clamp(0.0)``).
Scalar: TypeAlias = bool | int | float
#: A ``dim`` argument: one axis, several, or None for all of them.
Dims: TypeAlias = int | Sequence[int] | None
#: A shape given as ``f(2, 3)`` or ``f((2, 3))`` (torch accepts both).
ShapeArg: TypeAlias = int | Sequence[int]


def _axis(dim: int, ndim: int) -> int:
    """``normalize_axis`` with its error located at the user's line."""
    try:
        return normalize_axis(dim, ndim)
    except ShapeError as err:
        raise located(ShapeError, str(err)) from None


def _dims(dim: Dims, ndim: int) -> tuple[int, ...]:
    """Normalize a ``dim`` argument (None = all, int, or tuple) to a tuple of axes."""
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, int):
        return (_axis(dim, ndim),)
    return tuple(_axis(d, ndim) for d in dim)


def _shape_arg(shape: Sequence[Any]) -> tuple[int, ...]:
    """Accept ``f(2, 3)`` and ``f((2, 3))`` like PyTorch."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return tuple(int(s) for s in shape)


class TensorShape:
    __slots__ = ()

    if TYPE_CHECKING:  # Tensor's core (tensor.py), which its mixins use but cannot import
        _data: Any
        _backend: Backend
        requires_grad: builtins.bool  # the class's own bool() below shadows the builtin

        @property
        def shape(self) -> tuple[int, ...]: ...
        @property
        def dtype(self) -> D.DType: ...
        @property
        def ndim(self) -> int: ...
        def numel(self) -> int: ...
        def to(self, target: Any, non_blocking: bool = False) -> Self: ...
        def bool(self) -> Self: ...
        def long(self) -> Self: ...
        def double(self) -> Self: ...
        def detach(self) -> Self: ...
        def _like(self, value: Any, dtype: D.DType | None = None) -> Self: ...
        def _full_like(self, value: Scalar, shape: tuple[int, ...] | None = None, dtype: Any = None) -> Self: ...
        def _tensor(self, value: Any, dtype: Any = None) -> Self: ...
        def _arange(self, n: int) -> Any: ...
        @staticmethod
        def _where(cond: Any, a: Any, b: Any) -> Any: ...

    # ------------------------------------------------------------------------ movement
    def reshape(self, *shape: ShapeArg) -> Self:
        dims = list(_shape_arg(shape))
        if -1 in dims:
            known = math.prod(s for s in dims if s != -1)
            if dims.count(-1) > 1 or (known and self.numel() % known) or (not known and self.numel()):
                raise located(
                    ShapeError,
                    f"cannot reshape {self.shape} ({self.numel()} elements) into "
                    f"{tuple(dims)}: the -1 has no whole-number size",
                )
            dims[dims.index(-1)] = self.numel() // known if known else 0
        target = tuple(dims)
        if target == self.shape:
            return self
        return apply1(P.reshape, self, shape=target)

    view = reshape

    def view_as(self, other: TensorShape) -> Self:
        return self.reshape(other.shape)

    def reshape_as(self, other: TensorShape) -> Self:
        return self.reshape(other.shape)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Self:
        shape = self.shape
        if not shape:
            return self.reshape(1)
        s, e = _axis(start_dim, len(shape)), _axis(end_dim, len(shape))
        return self.reshape(shape[:s] + (math.prod(shape[s : e + 1]),) + shape[e + 1 :])

    def unflatten(self, dim: int, sizes: Sequence[int]) -> Self:
        axis = _axis(dim, self.ndim)
        return self.reshape(self.shape[:axis] + tuple(sizes) + self.shape[axis + 1 :])

    def permute(self, *dims: ShapeArg) -> Self:
        axes = tuple(_axis(a, self.ndim) for a in _shape_arg(dims))
        if axes == tuple(range(self.ndim)):
            return self
        return apply1(P.permute, self, axes=axes)

    def transpose(self, dim0: int, dim1: int) -> Self:
        axes = list(range(self.ndim))
        d0, d1 = _axis(dim0, self.ndim), _axis(dim1, self.ndim)
        axes[d0], axes[d1] = axes[d1], axes[d0]
        return self.permute(axes)

    def t(self) -> Self:
        return self.transpose(0, 1) if self.ndim == 2 else self

    @property
    def T(self) -> Self:
        return self.permute(tuple(reversed(range(self.ndim))))

    @property
    def mT(self) -> Self:
        return self.transpose(-2, -1)

    def squeeze(self, dim: Dims = None) -> Self:
        shape = self.shape
        axes = (
            [i for i, s in enumerate(shape) if s == 1]
            if dim is None
            else [a for a in _dims(dim, len(shape)) if shape[a] == 1]
        )
        return self.reshape(tuple(s for i, s in enumerate(shape) if i not in axes))

    def unsqueeze(self, dim: int) -> Self:
        shape = self.shape
        axis = _axis(dim, len(shape) + 1)
        return self.reshape(shape[:axis] + (1,) + shape[axis:])

    def expand(self, *shape: ShapeArg) -> Self:
        sizes = _shape_arg(shape)
        own = (1,) * (len(sizes) - self.ndim) + self.shape
        sizes = tuple(o if s == -1 else s for s, o in zip(sizes, own))
        if sizes == self.shape:
            return self
        return apply1(P.expand, self, shape=sizes)

    broadcast_to = expand

    def expand_as(self, other: TensorShape) -> Self:
        return self.expand(other.shape)

    def flip(self, dims: Dims) -> Self:
        axes = _dims(dims, self.ndim)
        return apply1(P.flip, self, axes=axes) if axes else self

    def pad(self, widths: Sequence[tuple[int, int]], value: Scalar = 0) -> Self:
        """Pad with one ``(lo, hi)`` pair per dim (ember's order; see F.pad for PyTorch's)."""
        pairs = tuple((int(lo), int(hi)) for lo, hi in widths)
        if not any(lo or hi for lo, hi in pairs):
            return self
        return apply1(P.pad, self, widths=pairs, value=value)

    def _slice(self, starts: Sequence[int], stops: Sequence[int], steps: Sequence[int]) -> Self:
        return apply1(P.slice, self, starts=tuple(starts), stops=tuple(stops), steps=tuple(steps))

    def narrow(self, dim: int, start: int, length: int) -> Self:
        axis = _axis(dim, self.ndim)
        start = start + self.shape[axis] if start < 0 else start  # torch counts negative from the end
        starts = [0] * self.ndim
        stops = list(self.shape)
        starts[axis], stops[axis] = start, start + length
        return self._slice(starts, stops, [1] * self.ndim)

    def chunk(self, chunks: int, dim: int = 0) -> tuple[Self, ...]:
        size = -(-self.shape[dim] // chunks)
        return self.split(size, dim)

    def split(self, split_size: int | Sequence[int], dim: int = 0) -> tuple[Self, ...]:
        n = self.shape[dim]
        sizes = (
            [split_size] * (n // split_size) + ([n % split_size] if n % split_size else [])
            if isinstance(split_size, int)
            else list(split_size)
        )
        out: list[Self] = []
        start = 0
        for s in sizes:
            out.append(self.narrow(dim, start, s))
            start += s
        return tuple(out)

    def repeat(self, *sizes: ShapeArg) -> Self:
        reps = _shape_arg(sizes)
        x = self.reshape((1,) * (len(reps) - self.ndim) + self.shape)
        inter: list[int] = []
        for s in x.shape:
            inter += [1, s]
        big = x.reshape(inter).expand(tuple(v for r, s in zip(reps, x.shape) for v in (r, s)))
        return big.reshape(tuple(r * s for r, s in zip(reps, x.shape)))

    def take(self, indices: Any, axis: int = 0) -> Self:
        index = self._like(indices, D.int64)
        out: Self = apply(P.take, self, index, axis=_axis(axis, self.ndim))
        return out

    def index_add(self, dim: int, index: TensorShape, source: TensorShape) -> Self:
        out: Self = apply(P.index_add, self, index, source, axis=_axis(dim, self.ndim))
        return out

    def gather(self, dim: int, index: TensorShape) -> Self:
        """``out[i][j] = self[i][index[i][j]]`` for dim=1 (torch.gather), via one flat take."""
        axis = _axis(dim, self.ndim)
        shape = index.shape
        strides = [math.prod(self.shape[d + 1 :]) for d in range(self.ndim)]
        flat: Any = index.long()  # Any: its arithmetic is TensorMath's, a subclass of this class
        flat = flat * strides[axis]
        for d in range(self.ndim):
            if d != axis:
                flat = (
                    flat
                    + self._arange(shape[d]).reshape([shape[d] if i == d else 1 for i in range(self.ndim)]) * strides[d]
                )
        return self.reshape(-1).take(flat, 0)

    def masked_fill(self, mask: TensorShape, value: Scalar | TensorShape) -> Self:
        out: Self = self._where(mask, value, self)
        return out

    def __getitem__(self, key: Any) -> Self:
        from .indexing import getitem

        out: Self = getitem(self, key)
        return out

    def __setitem__(self, key: Any, value: Any) -> None:
        from .indexing import setitem

        setitem(self, key, value)

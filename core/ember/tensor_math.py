"""Tensor's arithmetic, elementwise math and reductions (a mixin of :class:`ember.Tensor`).

Every method is one primitive (named as an object, ``P.exp``) or a short composition; the
gradients come from the primitives' VJP rules. ``isinstance(x, TensorMath)`` reads "x is a
Tensor": Tensor is the one class made with this mixin, and this module cannot import it.
"""

from __future__ import annotations

import math
from typing import Any, Generic, NamedTuple, Self, TypeAlias, TypeVar, overload

from . import dtypes as D, primitives as P
from .dispatch import apply1, apply2
from .errors import ShapeError, located
from .tensor_shape import Dims, Scalar, TensorShape, _axis, _dims
from .text import refuse

#: the right operand of ``x + o``, ``x < o``, ...: a tensor or a Python number
Operand: TypeAlias = "TensorMath | Scalar"
_T = TypeVar("_T")
_STRING = D.string


class MaxMin(NamedTuple, Generic[_T]):
    """``x.max(dim)``'s result, unpacked as ``values, indices = x.max(1)``."""

    values: _T
    indices: _T


class Sorted(NamedTuple, Generic[_T]):  # torch.return_types.sort
    values: _T
    indices: _T


class TopK(NamedTuple, Generic[_T]):  # torch.return_types.topk
    values: _T
    indices: _T


class TensorMath(TensorShape):
    __slots__ = ()

    # ------------------------------------------------------------------------ promotion
    def _binary(self, name: str, other: Any, reverse: bool = False, _text: D.DType = D.string) -> Self:
        """Promote dtypes like PyTorch, then apply the primitive (scalars pass straight through).
        (``_text`` is bound as a default: a local read, not a global one, on every small op.)"""
        if isinstance(other, TensorMath):
            b: Any  # a Tensor, seen here as the mixin class (Self is self's own class)
            # the backends' dtype() without the property's call: a third of a small add's front end
            da, db = self._backend.dtype(self._data), other._backend.dtype(other._data)
            a = self
            b = other
            if da is not db:
                common = D.promote(da, db)
                a, b = a.to(common), b.to(common)
            elif da is _text and name not in D.TEXT_OPS:  # NumPy would concatenate object arrays of str
                refuse(name)
            return apply2(name, b, a) if reverse else apply2(name, a, b)
        if isinstance(other, (int, float, bool)):
            own = self._backend.dtype(self._data)
            if own is _text:
                refuse(name, other)
            dtype = D.result_with_scalar(own, other)
            a = self if dtype is own else self.to(dtype)
            if reverse:
                return apply2(name, a._full_like(other, shape=()), a)
            return apply2(name, a, other)
        if hasattr(other, "__array__") or isinstance(other, (list, tuple, str)):  # x == "text": a 0-d string tensor
            return self._binary(name, self._tensor(other), reverse)
        return NotImplemented  # type: ignore[no-any-return]  # Python then tries the reflected operator

    def _float(self) -> Self:
        return self if self.dtype.is_floating_point else self.to(D.default_float)

    # ------------------------------------------------------------------------ arithmetic
    def __add__(self, o: Operand) -> Self:
        return self._binary(P.add, o)

    def __radd__(self, o: Operand) -> Self:
        return self._binary(P.add, o, True)

    def __sub__(self, o: Operand) -> Self:
        return self._binary(P.sub, o)

    def __rsub__(self, o: Operand) -> Self:
        return self._binary(P.sub, o, True)

    def __mul__(self, o: Operand) -> Self:
        return self._binary(P.mul, o)

    def __rmul__(self, o: Operand) -> Self:
        return self._binary(P.mul, o, True)

    def __truediv__(self, o: Operand) -> Self:
        if not self.dtype.is_floating_point and not (isinstance(o, TensorMath) and o.dtype.is_floating_point):
            return self._float()._binary(P.div, o)
        return self._binary(P.div, o)

    def __rtruediv__(self, o: Operand) -> Self:
        return self._float()._binary(P.div, o, True)

    def __floordiv__(self, o: Operand) -> Self:
        dtype = D.promote(self.dtype, o.dtype) if isinstance(o, TensorMath) else D.result_with_scalar(self.dtype, o)
        if dtype.is_floating_point:
            return (self / o).floor().to(dtype)
        # Integers divide in float64: exact while |self| < 2**53 (float32 would round above 2**24).
        return (self.double() / o).floor().to(dtype)

    def __mod__(self, o: Operand) -> Self:
        """The sign of the divisor, as Python's % and torch.remainder."""
        return self._binary(P.remainder, o)

    def __rmod__(self, o: Operand) -> Self:
        return self._binary(P.remainder, o, reverse=True)

    remainder = __mod__

    def __pow__(self, o: Operand) -> Self:
        if isinstance(o, (int, float)) and not isinstance(o, bool):
            if o == 2:
                return self * self
            if o == 1:
                return self
            if o == 0.5 and self.dtype.is_floating_point:
                return self.sqrt()
        return self._binary(P.pow, o)

    def __rpow__(self, o: Operand) -> Self:
        return self._binary(P.pow, o, True)

    def __neg__(self) -> Self:
        return apply1(P.neg, self)

    def __pos__(self) -> Self:
        return self

    def __abs__(self) -> Self:
        return apply1(P.abs, self)

    # comparisons and logic (no gradient)
    def __eq__(self, o: Operand) -> Self:  # type: ignore[override]  # elementwise, as in torch
        return self._binary(P.eq, o)

    def __ne__(self, o: Operand) -> Self:  # type: ignore[override]
        return self._binary(P.ne, o)

    def __lt__(self, o: Operand) -> Self:
        return self._binary(P.lt, o)

    def __le__(self, o: Operand) -> Self:
        return self._binary(P.le, o)

    def __gt__(self, o: Operand) -> Self:
        return self._binary(P.gt, o)

    def __ge__(self, o: Operand) -> Self:
        return self._binary(P.ge, o)

    def _bits(self, name: str, logical: str, o: Any, reverse: bool = False) -> Self:
        """& | ^: logical on bool (and, as before, float) operands, bitwise on integers as in torch."""
        if not isinstance(o, (TensorMath, bool, int, float)):
            o = self._tensor(o)
        kinds = {
            self.dtype.kind,
            o.dtype.kind
            if isinstance(o, TensorMath)
            else "b"
            if isinstance(o, bool)
            else "f"
            if isinstance(o, float)
            else "i",
        }
        if kinds == {"b"} or "f" in kinds:
            o = o if isinstance(o, TensorMath) else self._like(o, D.bool_)
            return apply2(logical, self.bool(), o.bool())
        return self._binary(name, o, reverse)

    def __and__(self, o: Operand) -> Self:
        return self._bits(P.bitwise_and, P.logical_and, o)

    def __or__(self, o: Operand) -> Self:
        return self._bits(P.bitwise_or, P.logical_or, o)

    def __xor__(self, o: Operand) -> Self:
        return self._bits(P.bitwise_xor, P.logical_xor, o)

    def __invert__(self) -> Self:
        if self.dtype.kind in "iu":
            return apply1(P.bitwise_not, self)
        return apply1(P.logical_not, self.bool())

    def __lshift__(self, o: Operand) -> Self:
        return self._binary(P.bitwise_left_shift, o)

    def __rshift__(self, o: Operand) -> Self:
        return self._binary(P.bitwise_right_shift, o)

    def __rlshift__(self, o: Operand) -> Self:
        return self._binary(P.bitwise_left_shift, o, reverse=True)

    def __rrshift__(self, o: Operand) -> Self:
        return self._binary(P.bitwise_right_shift, o, reverse=True)

    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__
    eq, ne, lt, le, gt, ge = __eq__, __ne__, __lt__, __le__, __gt__, __ge__
    add, sub, mul, div, pow = __add__, __sub__, __mul__, __truediv__, __pow__
    neg = __neg__
    bitwise_and, bitwise_or, bitwise_xor, bitwise_not = __and__, __or__, __xor__, __invert__
    bitwise_left_shift, bitwise_right_shift = __lshift__, __rshift__

    def logical_not(self) -> Self:
        return apply1(P.logical_not, self.bool())

    def equal(self, other: TensorMath) -> bool:
        return self.shape == other.shape and bool((self == other).all())

    # ------------------------------------------------------------------------ elementwise math
    def exp(self) -> Self:
        return apply1(P.exp, self._float())

    def log(self) -> Self:
        return apply1(P.log, self._float())

    def sin(self) -> Self:
        return apply1(P.sin, self._float())

    def cos(self) -> Self:
        return apply1(P.cos, self._float())

    def tanh(self) -> Self:
        return apply1(P.tanh, self._float())

    def sqrt(self) -> Self:
        return apply1(P.sqrt, self._float())

    def rsqrt(self) -> Self:
        return apply1(P.reciprocal, self.sqrt())

    def reciprocal(self) -> Self:
        return apply1(P.reciprocal, self._float())

    def abs(self) -> Self:
        return apply1(P.abs, self)

    def sign(self) -> Self:
        return apply1(P.sign, self)

    def floor(self) -> Self:
        return apply1(P.floor, self) if self.dtype.is_floating_point else self

    def ceil(self) -> Self:
        return -(-self).floor()

    def round(self) -> Self:
        return (self + 0.5).floor()

    def erf(self) -> Self:
        return apply1(P.erf, self._float())

    def square(self) -> Self:
        return self * self

    def log1p(self) -> Self:
        return (self + 1).log()

    def expm1(self) -> Self:
        return self.exp() - 1

    def sigmoid(self) -> Self:
        # 1 / (1 + e^-x) overflows harmlessly to 0 for very negative x in float; tanh form is exact.
        return (self._float() * 0.5).tanh() * 0.5 + 0.5

    def relu(self) -> Self:
        out: Self = self._where(self > 0, self, 0)
        return out

    def clamp(self, min: Operand | None = None, max: Operand | None = None) -> Self:
        out = self
        if min is not None:
            out = apply2(P.maximum, out, min) if not isinstance(min, TensorMath) else out._binary(P.maximum, min)
        if max is not None:
            out = apply2(P.minimum, out, max) if not isinstance(max, TensorMath) else out._binary(P.minimum, max)
        return out

    clip = clamp

    def maximum(self, other: Operand) -> Self:
        return self._binary(P.maximum, other)

    def minimum(self, other: Operand) -> Self:
        return self._binary(P.minimum, other)

    def isnan(self) -> Self:
        return self != self

    def isinf(self) -> Self:
        return self.abs().eq(math.inf)

    def isfinite(self) -> Self:
        return ~(self.isnan() | self.isinf())

    def lerp(self, end: Operand, weight: Operand) -> Self:
        return self + (end - self) * weight

    # ------------------------------------------------------------------------ reductions
    def sum(self, dim: Dims = None, keepdim: bool = False, dtype: D.DTypeLike | None = None) -> Self:
        # torch's rule: bool and every integer but int64 sum in int64
        dt = self.dtype
        if dt is _STRING:  # NumPy's sum of object arrays of str would concatenate them
            refuse("sum")
        small = dt.kind in "bu" or dt.kind == "i" and dt.itemsize < 8
        x = self.to(dtype) if dtype is not None else (self.long() if small else self)
        return apply1(P.sum, x, axes=_dims(dim, x.ndim), keepdims=keepdim)

    def mean(self, dim: Dims = None, keepdim: bool = False) -> Self:
        x = self._float()
        axes = _dims(dim, x.ndim)
        n = math.prod(x.shape[a] for a in axes)
        return x.sum(axes, keepdim) / max(n, 1) if n else x.sum(axes, keepdim) * math.nan

    def var(self, dim: Dims = None, keepdim: bool = False, correction: int = 1, unbiased: bool | None = None) -> Self:
        if unbiased is not None:
            correction = 1 if unbiased else 0
        x = self._float()
        axes = _dims(dim, x.ndim)
        n = math.prod(x.shape[a] for a in axes)
        centered = x - x.mean(axes, keepdim=True)
        return (centered * centered).sum(axes, keepdim) / max(n - correction, 0)

    def std(self, dim: Dims = None, keepdim: bool = False, correction: int = 1, unbiased: bool | None = None) -> Self:
        return self.var(dim, keepdim, correction, unbiased).sqrt()

    def amax(self, dim: Dims = None, keepdim: bool = False) -> Self:
        if self.dtype is _STRING:  # NumPy would order str
            refuse("max")
        return apply1(P.max, self, axes=_dims(dim, self.ndim), keepdims=keepdim)

    def amin(self, dim: Dims = None, keepdim: bool = False) -> Self:
        if self.dtype is _STRING:
            refuse("min")
        return apply1(P.min, self, axes=_dims(dim, self.ndim), keepdims=keepdim)

    @overload
    def max(self, dim: None = None, keepdim: bool = False) -> Self: ...
    @overload
    def max(self, dim: int, keepdim: bool = False) -> MaxMin[Self]: ...
    @overload
    def max(self, dim: TensorMath, keepdim: bool = False) -> Self: ...
    def max(self, dim: int | TensorMath | None = None, keepdim: bool = False) -> Self | MaxMin[Self]:
        """``x.max()`` is the largest element; ``x.max(dim)`` gives ``(values, indices)``."""
        if isinstance(dim, TensorMath):
            return self.maximum(dim)
        if dim is None:
            return self.amax()
        return MaxMin(self.amax(dim, keepdim), self.argmax(dim, keepdim))

    @overload
    def min(self, dim: None = None, keepdim: bool = False) -> Self: ...
    @overload
    def min(self, dim: int, keepdim: bool = False) -> MaxMin[Self]: ...
    @overload
    def min(self, dim: TensorMath, keepdim: bool = False) -> Self: ...
    def min(self, dim: int | TensorMath | None = None, keepdim: bool = False) -> Self | MaxMin[Self]:
        if isinstance(dim, TensorMath):
            return self.minimum(dim)
        if dim is None:
            return self.amin()
        return MaxMin(self.amin(dim, keepdim), self.argmin(dim, keepdim))

    def argmax(self, dim: int | None = None, keepdim: bool = False) -> Self:
        if dim is None:
            return apply1(P.argmax, self.reshape(-1), axis=0)
        return apply1(P.argmax, self, axis=_axis(dim, self.ndim), keepdims=keepdim)

    def argmin(self, dim: int | None = None, keepdim: bool = False) -> Self:
        # argmax of an order-reversing map: -x for floats, -1 - x for integers (-x overflows at
        # the most negative int64 and wraps for unsigned types, which go through int64 first).
        if self.dtype is D.bool_:
            flipped = ~self
        elif self.dtype.is_floating_point:
            flipped = -self
        else:
            flipped = -1 - (self.long() if self.dtype.kind == "u" else self)
        return flipped.argmax(dim, keepdim)

    def all(self, dim: Dims = None, keepdim: bool = False) -> Self:
        # Counting the False elements works for empty dims too (max/min have no identity).
        return (~self.bool()).long().sum(dim, keepdim).eq(0)

    def any(self, dim: Dims = None, keepdim: bool = False) -> Self:
        return self.bool().long().sum(dim, keepdim) > 0

    def logsumexp(self, dim: Dims = None, keepdim: bool = False) -> Self:
        axes = _dims(dim, self.ndim)
        m = self.amax(axes, keepdim=True).detach()
        m = self._where(m.isfinite(), m, 0)
        out = (self - m).exp().sum(axes, keepdim=True).log() + m
        return out if keepdim else out.squeeze(axes)

    def softmax(self, dim: int = -1) -> Self:
        x = self._float()
        e = (x - x.amax(dim, keepdim=True).detach()).exp()
        return e / e.sum(dim, keepdim=True)

    def log_softmax(self, dim: int = -1) -> Self:
        x = self._float()
        shifted = x - x.amax(dim, keepdim=True).detach()
        return shifted - shifted.exp().sum(dim, keepdim=True).log()

    def norm(self, p: float = 2, dim: Dims = None, keepdim: bool = False) -> Self:
        if p == 2:
            return (self * self).sum(dim, keepdim).sqrt()
        if p == 1:
            return self.abs().sum(dim, keepdim)
        return (self.abs() ** p).sum(dim, keepdim) ** (1.0 / p)

    # ------------------------------------------------------------------------ ordering
    def cumsum(self, dim: int, dtype: D.DTypeLike | None = None) -> Self:
        """Running sum along ``dim``; integers and bool sum in int64, as in torch.

        >>> import ember
        >>> ember.tensor([[1, 2, 3], [4, 5, 6]]).cumsum(1).tolist()
        [[1, 3, 6], [4, 9, 15]]
        """
        x = self.to(dtype) if dtype is not None else self if self.dtype.is_floating_point else self.long()
        return apply1(P.cumsum, x, axis=_axis(dim, self.ndim))

    def argsort(self, dim: int = -1, descending: bool = False, stable: bool = False) -> Self:
        """Indices that sort ``dim`` (always stable; NaN sorts as the largest, as in torch).

        >>> import ember
        >>> ember.tensor([3.0, float("nan"), 1.0, 3.0]).argsort(descending=True).tolist()
        [1, 0, 3, 2]
        """
        return apply1(P.argsort, self, axis=_axis(dim, self.ndim), descending=descending)

    def sort(self, dim: int = -1, descending: bool = False, stable: bool = False) -> Sorted[Self]:
        """``(values, indices)`` sorted along ``dim``; the values' gradient goes back to the
        positions they came from.

        >>> import ember
        >>> values, indices = ember.tensor([[2.0, 0.5, 1.0]]).sort(1)
        >>> values.tolist(), indices.tolist()
        ([[0.5, 1.0, 2.0]], [[1, 2, 0]])
        """
        indices = self.argsort(dim, descending)
        return Sorted(self.gather(dim, indices) if self.ndim else self, indices)

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> TopK[Self]:
        """``(values, indices)`` of the ``k`` largest (or smallest) along ``dim``, in order;
        among equal values the lower index comes first.

        >>> import ember
        >>> ember.tensor([1.0, 5.0, 3.0, 5.0]).topk(2)
        TopK(values=tensor([5., 5.]), indices=tensor([1, 3]))
        """
        params = dict(k=int(k), axis=_axis(dim, self.ndim), largest=largest)
        try:  # a k past the end would silently give fewer values on NumPy
            P.argtopk.abstract((self.shape, self.dtype), **params)
        except ShapeError as err:
            raise located(ShapeError, str(err)) from None
        indices = apply1(P.argtopk, self, **params)
        return TopK(self.gather(dim, indices) if self.ndim else self, indices)

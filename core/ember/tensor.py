"""Tensor: the user-facing array, with PyTorch's names, over any backend.

A Tensor is a backend buffer plus a backend plus (when it needs a gradient) the record of
the primitive that made it. Every method is either one primitive (through dispatch) or a short
composition of them; compositions get their gradients for free from the primitives' VJPs.
This module holds the class's core (buffer, host exchange, autodiff, in-place updates,
conversion) and the module-level functions (``ember.tensor``, ``zeros``, ``where``, ...); the
math and reductions are in tensor_math.py, movement and indexing in tensor_shape.py.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NoReturn, Self, TypeAlias, cast, overload

from . import deferred, devices as _devices, dispatch, dtypes as D, primitives as P
from .backend import Backend
from .dispatch import apply, apply1, apply2
from .errors import DTypeError, GradError, ShapeError, located
from .primitives.shapes import broadcast_shapes
from .registry import get_backend
from .tensor_math import MaxMin, Operand, Sorted, TensorMath, TopK  # noqa: F401 - x.max(dim), sort, topk's types
from .tensor_shape import Scalar, ShapeArg, TensorShape, _axis, _dims, _shape_arg  # noqa: F401
from .text import check_cast, is_text_array, to_object_array

# The class below defines methods named bool, int and float (torch's casts), which shadow the
# builtins in its own annotations; these names are the builtins.
_bool: TypeAlias = builtins.bool
_int: TypeAlias = builtins.int
_float: TypeAlias = builtins.float

#: what a ``backend=`` argument accepts: a name ("numpy"), a Backend, or None for the current one
BackendLike: TypeAlias = "str | Backend | None"


class Tensor(TensorMath, TensorShape):
    """An n-dimensional array that can remember how it was computed.

    >>> import ember
    >>> x = ember.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> y = (x * x).sum()
    >>> y.backward()
    >>> x.grad.tolist()
    [[2.0, 4.0], [6.0, 8.0]]
    """

    __slots__ = ("_data", "_backend", "_ctx", "requires_grad", "_grad", "__weakref__")
    _data: Any  # the backend's buffer (a NumPy array, a Python array, a CuPy array, ...)
    _backend: Backend
    _ctx: tuple[str, tuple[Any, ...], dict[str, Any]] | None  # (primitive, inputs, params) for backward
    requires_grad: _bool
    _grad: Tensor | None  # what the eager interpreter's read_grad returns as .grad
    __array_priority__ = 1000  # numpy scalars/arrays defer to our operators

    @property
    def grad(self) -> Tensor | None:
        """The gradient ``backward()`` accumulated here, or None. Read and written through the
        current interpreter: ember.jit notes what a traced function does with ``.grad``."""
        grad: Tensor | None = dispatch.interpreter().read_grad(self)
        return grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        dispatch.interpreter().write_grad(self, value)

    # ------------------------------------------------------------------------ basic properties
    @property
    def shape(self) -> tuple[_int, ...]:
        return tuple(self._backend.shape(self._data))

    @property
    def dtype(self) -> D.DType:
        return self._backend.dtype(self._data)

    @property
    def ndim(self) -> _int:
        return len(self._backend.shape(self._data))

    def dim(self) -> _int:  # torch spells it as a method
        return self.ndim

    @property
    def backend(self) -> Backend:
        return self._backend

    @property
    def device(self) -> _devices.device:
        return _devices.of_backend(self._backend)

    @property
    def is_leaf(self) -> _bool:
        return self._ctx is None

    @property
    def data(self) -> Tensor:
        return self.detach()

    @overload
    def size(self, dim: None = None) -> tuple[_int, ...]: ...
    @overload
    def size(self, dim: _int) -> _int: ...
    def size(self, dim: _int | None = None) -> tuple[_int, ...] | _int:
        shape = self.shape
        return shape if dim is None else shape[_axis(dim, len(shape))]

    def numel(self) -> _int:
        return math.prod(self.shape)

    def __len__(self) -> _int:
        shape = self.shape
        if not shape:
            raise located(TypeError, "len() of a 0-d tensor")
        return shape[0]

    # ------------------------------------------------------------------------ host exchange
    def numpy(self) -> Any:
        """The values as a NumPy array (shares memory on the numpy backend). Detached."""
        if deferred.PENDING:  # a host read: device-side checks surface here
            deferred.raise_pending(self._backend)
        return self._backend.to_numpy(self._data)  # Any: numpy is optional, so not named here

    def __dlpack__(self, **kwargs: Any) -> Any:  # zero-copy exchange with NumPy, torch, CuPy (dlpack.py)
        from .dlpack import capsule

        return capsule(self, **kwargs)

    def __dlpack_device__(self) -> tuple[_int, _int]:
        from .dlpack import device

        return device(self)

    def __array__(self, dtype: Any = None, copy: _bool | None = None) -> Any:
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def tolist(self) -> Any:
        if deferred.PENDING:
            deferred.raise_pending(self._backend)
        flat = self._backend.to_list(self._data)
        shape = self.shape
        if not shape:
            return flat[0]

        def nest(offset: _int, dims: tuple[_int, ...]) -> list[Any]:
            if len(dims) == 1:
                return flat[offset : offset + dims[0]]
            step = math.prod(dims[1:])
            return [nest(offset + i * step, dims[1:]) for i in range(dims[0])]

        return nest(0, shape)

    def item(self) -> _bool | _int | _float:
        if self.numel() != 1:
            raise located(ShapeError, f"item() needs exactly one element, tensor has shape {self.shape}")
        if deferred.PENDING:
            deferred.raise_pending(self._backend)
        value: _bool | _int | _float = self._backend.to_list(self._data)[0]
        return value

    def __float__(self) -> _float:
        return _float(self.item())

    def __int__(self) -> _int:
        return _int(self.item())

    def __index__(self) -> _int:
        return _int(self.item()) if self.dtype.kind in "iu" else self._no_index()

    def __format__(self, spec: str) -> str:
        # torch's rule: a 0-d tensor formats as its number (f"{loss:.4f}"); others as their repr.
        return format(self.item(), spec) if self.ndim == 0 else object.__format__(self, spec)

    def _no_index(self) -> NoReturn:
        raise located(TypeError, f"only integer tensors can be used as an index, got {self.dtype}")

    def __bool__(self) -> _bool:
        if self.numel() != 1:
            raise located(
                ShapeError,
                f"the truth value of a tensor with {self.numel()} elements is ambiguous; use .any() or .all()",
            )
        return _bool(self.item())

    def __repr__(self) -> str:
        try:
            import numpy as np

            body = np.array2string(
                self.numpy(), separator=", ", prefix="tensor(", threshold=200, suppress_small=True, precision=4
            )
        except ImportError:
            body = repr(self.tolist())
        extras = []
        if self.dtype not in (D.float32, D.int64, D.bool_):
            extras.append(f"dtype={self.dtype}")
        if self._backend.name != "numpy":
            extras.append(f"backend={self._backend.name!r}")
        if self._ctx is not None:
            extras.append(f"grad_fn={self._ctx[0]}")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        return f"tensor({body}{''.join(', ' + e for e in extras)})"

    __hash__ = object.__hash__

    def __iter__(self) -> Iterator[Tensor]:
        for i in range(len(self)):
            yield self[i]

    # ------------------------------------------------------------------------ autodiff
    def backward(self, gradient: Tensor | None = None, create_graph: _bool = False) -> None:
        """Accumulate the gradient of this (scalar) tensor into every leaf's ``.grad``."""
        from .autodiff import backward

        backward(self, gradient, create_graph)

    def detach(self) -> Self:
        """The same values, cut from the graph (shares the buffer)."""
        out: Self = dispatch.wrap(self._data, self._backend)  # the class dispatch builds: Tensor
        return out

    def requires_grad_(self, requires_grad: _bool = True) -> Self:
        if requires_grad and not self.dtype.is_floating_point:
            raise located(GradError, f"only floating-point tensors can require grad, got {self.dtype}")
        if not requires_grad and self._ctx is not None:
            raise located(GradError, "requires_grad_(False) on a non-leaf; use .detach()")
        self.requires_grad = requires_grad
        return self

    def clone(self) -> Self:
        # Through dispatch even without grad, so that ember.jit records the copy when it traces.
        return apply1(P.cast, self, dtype=self.dtype)

    # ------------------------------------------------------------------------ in-place updates
    def copy_(self, src: Tensor | Scalar | Sequence[Any]) -> Self:
        """Overwrite the values in place (no graph). Used by optimizers and load_state_dict."""
        value = src if isinstance(src, Tensor) else self._like(src)
        if value.shape != self.shape:
            value = value.expand(self.shape)
        if value.dtype is not self.dtype:
            value = value.to(self.dtype)
        out: Self = dispatch.interpreter().assign(self, value)  # under ember.jit: part of the graph
        return out

    def zero_(self) -> Self:
        return self.copy_(self._full_like(0))

    def fill_(self, value: Scalar) -> Self:
        return self.copy_(self._full_like(value))

    def add_(self, other: Operand, alpha: Scalar = 1) -> Self:
        from .autodiff import no_grad

        with no_grad():
            return self.copy_(self + (other * alpha if alpha != 1 else other))

    def sub_(self, other: Operand, alpha: Scalar = 1) -> Self:
        from .autodiff import no_grad

        with no_grad():  # not add_(other, -alpha): that costs a pass over `other` to negate it
            return self.copy_(self - (other * alpha if alpha != 1 else other))

    def mul_(self, other: Operand) -> Self:
        from .autodiff import no_grad

        with no_grad():
            return self.copy_(self * other)

    # ------------------------------------------------------------------------ conversion
    def to(self, target: Any, non_blocking: _bool = False) -> Self:
        """``x.to(ember.float64)`` casts; ``x.to("numba")`` or ``x.to("cpu")`` moves (devices.py).
        ``non_blocking`` is torch's; ember's transfers complete before ``to`` returns."""
        if not isinstance(target, (str, Backend, _devices.device)) or target in D.BY_NAME:  # a dtype
            dtype = D.get(target)
            if dtype is self.dtype:
                return self
            if dtype in D.MAY_LACK:
                D.check_backend(self._backend, dtype)
            check_cast(self.dtype, dtype)
            return apply1(P.cast, self, dtype=dtype)
        backend = _devices.backend_for(target, self._backend)
        if backend is self._backend:
            return self
        if deferred.PENDING:
            deferred.raise_pending(self._backend)
        D.check_backend(backend, self.dtype)
        if self.dtype is D.string:  # text has no bytes form: it moves as Python str
            data = backend.from_list(self._backend.to_list(self._data), self.shape, D.string)
        else:
            data = backend.from_bytes(self._backend.to_bytes(self._data), self.shape, self.dtype)
        out: Self = dispatch.wrap(data, backend)
        return out.requires_grad_() if self.requires_grad and self.is_leaf else out

    def cpu(self) -> Self:
        return self.to("cpu")

    def cuda(self, device: str | _devices.device | None = None) -> Self:
        return self.to(device if device is not None else "cuda")

    def float(self) -> Self:
        return self.to(D.float32)

    def double(self) -> Self:
        return self.to(D.float64)

    def half(self) -> Self:
        return self.to(D.float16)

    def long(self) -> Self:
        return self.to(D.int64)

    def int(self) -> Self:
        return self.to(D.int32)

    def bool(self) -> Self:
        return self.to(D.bool_)

    def type_as(self, other: Tensor) -> Self:
        return self.to(other.dtype)

    astype = to

    def contiguous(self) -> Self:
        return self

    # ------------------------------------------------------------------------ helpers
    def _like(self, value: Any, dtype: D.DType | None = None) -> Self:
        """A tensor on this backend from a Python value or a tensor."""
        if isinstance(value, Tensor):
            return cast(Self, value)
        return cast(Self, tensor(value, dtype=dtype or self.dtype, backend=self._backend))

    def _full_like(self, value: Scalar, shape: tuple[_int, ...] | None = None, dtype: Any = None) -> Self:
        out: Self = dispatch.create(
            P.full, self._backend, shape=self.shape if shape is None else shape, value=value, dtype=dtype or self.dtype
        )
        return out

    @staticmethod
    def _ones_like(t: Tensor) -> Tensor:
        return t._full_like(1)

    @staticmethod
    def _zeros_like(t: Tensor) -> Tensor:
        return t._full_like(0)

    @staticmethod
    def _where(cond: Any, a: Any, b: Any) -> Any:
        return where(cond, a, b)

    def _arange(self, n: _int) -> Tensor:
        return arange(n, backend=self._backend)

    def _tensor(self, value: Any, dtype: Any = None) -> Self:
        return cast(Self, tensor(value, dtype=dtype, backend=self._backend))

    # a primitive applied to tensors; the records' __call__ comes here (``P.conv2d(x, w)``)
    _apply = staticmethod(apply)

    def __matmul__(self, o: Tensor) -> Tensor:
        return matmul(self, o)

    def __rmatmul__(self, o: Tensor) -> Tensor:
        return matmul(self._like(o), self)

    matmul = __matmul__


dispatch.register_tensor_class(Tensor)


# ============================================================================== functions
def _infer_from_python(data: Any) -> tuple[list[Any], tuple[_int, ...], D.DType]:
    """Flatten nested lists/tuples of Python numbers; return (flat, shape, dtype)."""
    shape: list[_int] = []
    probe = data
    while isinstance(probe, (list, tuple)):
        shape.append(len(probe))
        if not probe:
            break
        probe = probe[0]
    flat: list[Any] = []

    def walk(x: Any, depth: _int) -> None:
        if isinstance(x, (list, tuple)):
            if depth >= len(shape) or len(x) != shape[depth]:
                raise located(
                    ShapeError,
                    f"ragged nested sequence: expected length {shape[depth] if depth < len(shape) else 'scalar'} "
                    f"at depth {depth}, got {len(x)}",
                )
            for y in x:
                walk(y, depth + 1)
        else:
            if depth != len(shape):
                raise located(
                    ShapeError, f"ragged nested sequence: a scalar at depth {depth}, expected depth {len(shape)}"
                )
            flat.append(x.item() if isinstance(x, Tensor) else x)

    walk(data, 0)
    if all(isinstance(v, bool) for v in flat) and flat:
        dtype = D.bool_
    elif all(isinstance(v, int) for v in flat) and flat:
        dtype = D.default_int
    elif all(isinstance(v, (int, float, bool)) for v in flat):
        dtype = D.default_float
    elif all(isinstance(v, str) for v in flat):
        dtype = D.string
    else:
        bad = next(v for v in flat if not isinstance(v, (int, float, bool)))
        raise located(DTypeError, f"cannot make a tensor from a {type(bad).__name__} ({bad!r})")
    return flat, tuple(shape), dtype


def tensor(
    data: Any, dtype: D.DTypeLike | None = None, backend: BackendLike = None, requires_grad: _bool = False
) -> Tensor:
    """A new tensor from nested lists, a scalar, a NumPy array or another tensor (copied).

    >>> import ember
    >>> ember.tensor([[1, 2], [3, 4]]).dtype
    ember.int64
    """
    be = get_backend(backend)
    if isinstance(data, Tensor):
        out = data.detach().to(be)
        out = out.clone() if out._data is data._data else out
        out = out.to(D.get(dtype)) if dtype is not None else out
    elif hasattr(data, "__array_interface__") or type(data).__module__ == "numpy":
        import numpy as np

        arr = np.asarray(data)
        if is_text_array(arr):  # text: an object array of str (ember.text)
            check_cast(D.string, D.get(dtype or D.string))
            arr = to_object_array(arr)
        elif dtype is not None:
            arr = arr.astype(D.get(dtype).name)
        elif arr.dtype == np.float64 and not isinstance(data, np.ndarray):
            arr = arr.astype(np.float32)
        try:
            D.check_backend(be, D.string if arr.dtype.kind == "O" else D.get(arr.dtype.name))
        except DTypeError as e:
            if "not supported" in str(e):
                raise
            raise located(DTypeError, f"numpy dtype {arr.dtype} has no ember equivalent") from None
        out = dispatch.wrap(be.from_numpy(np.array(arr, copy=True)), be)
    else:
        flat, shape, inferred = _infer_from_python(data)
        dt = D.get(dtype) if dtype is not None else inferred
        if dt in D.MAY_LACK:
            D.check_backend(be, dt)
        if flat:
            check_cast(inferred, dt)
        out = dispatch.wrap(be.from_list(flat, shape, dt), be)
    if requires_grad:
        out.requires_grad_()
    return out


def arange(
    start: _int | _float,
    end: _int | _float | None = None,
    step: _int | _float = 1,
    dtype: D.DTypeLike | None = None,
    backend: BackendLike = None,
) -> Tensor:
    """``arange(5)`` is 0..4; float arguments give float32 like PyTorch.

    >>> import ember
    >>> ember.arange(1, 7, 2).tolist()
    [1, 3, 5]
    """
    if end is None:
        start, end = 0, start
    if dtype is None:
        dtype = D.default_int if all(isinstance(v, int) for v in (start, end, step)) else D.default_float
    if step == 0:
        raise located(ValueError, "arange step must not be zero")
    be, dt = get_backend(backend), D.get(dtype)
    if dt in D.MAY_LACK:
        D.check_backend(be, dt)
    out: Tensor = dispatch.create(P.arange, be, start=start, stop=end, step=step, dtype=dt)
    return out


def where(condition: Tensor, x: Tensor | Scalar, y: Tensor | Scalar) -> Tensor:
    """Elementwise ``x if condition else y``; x and y may be scalars.

    >>> import ember
    >>> ember.where(ember.tensor([True, False]), 1.0, 0.0).tolist()
    [1.0, 0.0]
    """
    if not isinstance(condition, Tensor) or condition.dtype is not D.bool_:
        got = (
            f"a {condition.dtype} tensor of shape {condition.shape}"
            if isinstance(condition, Tensor)
            else type(condition).__name__
        )
        raise located(
            DTypeError,
            f"where: condition must be a bool tensor, got {got}; compare first (x != 0) or cast with .bool()",
        )
    cond = condition
    if isinstance(x, Tensor):
        if isinstance(y, Tensor):
            if x.dtype is not y.dtype:
                common = D.promote(x.dtype, y.dtype)
                x, y = x.to(common), y.to(common)
        else:
            dt = D.result_with_scalar(x.dtype, y)
            x = x.to(dt)
            if dt in D.STORAGE:  # a backend's storage buffer does not mix with a Python number
                y = cond._full_like(y, (), dt)
    elif isinstance(y, Tensor):
        dt = D.result_with_scalar(y.dtype, x)
        y = y.to(dt)
        if dt in D.STORAGE:
            x = cond._full_like(x, (), dt)
    else:
        dt = D.promote(D.scalar_dtype(x), D.scalar_dtype(y))
        x = cond._full_like(x, (), dt)
    out: Tensor = apply(P.where, cond, x, y)
    return out


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """Matrix product with NumPy's rules for 1-d operands and broadcast batch dims.

    >>> import ember
    >>> (ember.ones(2, 3) @ ember.ones(3)).tolist()
    [3.0, 3.0]
    """
    if a.dtype is not b.dtype:
        common = D.promote(a.dtype, b.dtype)
        a, b = a.to(common), b.to(common)
    if a.ndim == 0 or b.ndim == 0:
        raise located(ShapeError, f"matmul: both operands need at least 1 dim, got shapes {a.shape} and {b.shape}")
    va, vb = a.ndim == 1, b.ndim == 1
    a2 = a.unsqueeze(0) if va else a
    b2 = b.unsqueeze(1) if vb else b
    if a2.shape[-1] != b2.shape[-2]:
        raise located(
            ShapeError,
            f"matmul: shapes {a.shape} and {b.shape} do not align: "
            f"{a2.shape[-1]} (last dim of the first) != {b2.shape[-2]} "
            f"({'first' if vb else 'second-to-last'} dim of the second)",
        )
    out = apply2(P.matmul, a2, b2)
    if va:
        out = out.squeeze(-2)
    if vb:
        out = out.squeeze(-1)
    return out


def cat(tensors: Iterable[Tensor], dim: _int = 0) -> Tensor:
    """Join tensors along an existing dim.

    >>> import ember
    >>> ember.cat([ember.zeros(1, 2), ember.ones(2, 2)]).shape
    (3, 2)
    """
    given = list(tensors)
    if not given:
        raise located(ValueError, "cat() needs at least one tensor")
    common = given[0].dtype
    for t in given[1:]:
        common = D.promote(common, t.dtype)
    same = [t.to(common) for t in given]
    if len(same) == 1:
        return same[0]
    out: Tensor = apply(P.concatenate, *same, axis=_axis(dim, same[0].ndim))
    return out


concatenate = cat


def stack(tensors: Iterable[Tensor], dim: _int = 0) -> Tensor:
    """Join tensors along a new dim.

    >>> import ember
    >>> ember.stack([ember.zeros(2), ember.ones(2)]).shape
    (2, 2)
    """
    given = list(tensors)
    shapes = {t.shape for t in given}
    if len(shapes) > 1:
        raise located(ShapeError, f"stack needs equal shapes, got {sorted(shapes)}")
    axis = _axis(dim, given[0].ndim + 1)
    return cat([t.unsqueeze(axis) for t in given], axis)


def broadcast_tensors(*tensors: Tensor) -> tuple[Tensor, ...]:
    shape = broadcast_shapes(*(t.shape for t in tensors))
    return tuple(t.expand(shape) for t in tensors)


# Module-level spellings of the methods users expect (ember.exp(x), ember.sum(x, 1), ...),
# kept in a table rather than in this module's globals, where they would shadow sum/max/all.
def _method(name: str) -> Callable[..., Any]:
    def f(x: Tensor, *args: Any, **kwargs: Any) -> Any:
        return getattr(x, name)(*args, **kwargs)

    f.__name__ = name
    f.__doc__ = f"``ember.{name}(x, ...)`` is ``x.{name}(...)``."
    return f


# fmt: off
_NAMES = (
    "exp", "log", "sin", "cos", "tanh", "sqrt", "rsqrt", "abs", "sign", "floor", "ceil", "round", "erf",
    "sigmoid", "relu", "clamp", "clip", "sum", "mean", "var", "std", "amax", "amin", "max", "min", "argmax",
    "argmin", "all", "any", "logsumexp", "softmax", "log_softmax", "reshape", "flatten", "permute",
    "transpose", "squeeze", "unsqueeze", "flip", "narrow", "chunk", "split", "maximum", "minimum", "isnan",
    "isinf", "isfinite", "square", "log1p", "expm1", "norm", "cumsum", "gather", "masked_fill", "index_add",
    "take", "sort", "argsort", "topk", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
    "bitwise_left_shift", "bitwise_right_shift", "remainder",
)
# fmt: on
FUNCTIONS: dict[str, Callable[..., Any]] = {name: _method(name) for name in _NAMES}

"""Making tensors of a given shape: filled (``zeros``, ``full``, ``eye``), spaced (``linspace``),
shaped like another (``zeros_like``), or sharing a NumPy array's memory (``as_tensor``).

``ember.tensor`` and ``ember.arange`` stay in tensor.py, beside the class that builds with them;
everything here is a short composition of those and the ``full`` primitive.
"""

from __future__ import annotations

from typing import Any

from . import dispatch, dtypes as D, primitives as P
from .registry import get_backend
from .tensor import BackendLike, Tensor, arange, tensor
from .tensor_shape import Scalar, ShapeArg, _shape_arg
from .text import is_text_array


def as_tensor(data: Any, dtype: D.DTypeLike | None = None, backend: BackendLike = None) -> Tensor:
    """Like :func:`tensor` but shares memory with a NumPy array on the numpy backend.

    >>> import numpy as np, ember
    >>> ember.as_tensor(np.zeros(3, dtype=np.float32)).shape
    (3,)
    """
    be = get_backend(backend)
    if isinstance(data, Tensor):
        out = data.to(be)
        return out.to(D.get(dtype)) if dtype is not None else out
    if hasattr(data, "__array_interface__"):
        import numpy as np

        arr = np.asarray(data)
        if is_text_array(arr):  # text is checked element by element and copied (ember.text)
            return tensor(arr, dtype, be)
        if dtype is not None:
            arr = arr.astype(D.get(dtype).name, copy=False)
        D.check_backend(be, D.get(arr.dtype.name))
        shared: Tensor = dispatch.wrap(be.from_numpy(arr), be)
        return shared
    return tensor(data, dtype, be)


from_numpy = as_tensor


def full(
    shape: ShapeArg,
    fill_value: Scalar,
    dtype: D.DTypeLike | None = None,
    backend: BackendLike = None,
    requires_grad: bool = False,
) -> Tensor:
    """A tensor of ``shape`` filled with ``fill_value``.

    >>> import ember
    >>> ember.full((2,), 7.0).tolist()
    [7.0, 7.0]
    """
    size = (shape,) if isinstance(shape, int) else tuple(shape)
    dt = D.get(dtype) if dtype is not None else D.scalar_dtype(fill_value)
    be = get_backend(backend)
    if dt in D.MAY_LACK:
        D.check_backend(be, dt)
    out: Tensor = dispatch.create(P.full, be, shape=size, value=fill_value, dtype=dt)
    return out.requires_grad_() if requires_grad else out


def zeros(
    *shape: ShapeArg, dtype: D.DTypeLike | None = None, backend: BackendLike = None, requires_grad: bool = False
) -> Tensor:
    """A tensor of zeros (float32 unless ``dtype`` says otherwise).

    >>> import ember; ember.zeros(2, 3).shape
    (2, 3)
    """
    return full(_shape_arg(shape), 0.0, dtype or D.default_float, backend, requires_grad)


def ones(
    *shape: ShapeArg, dtype: D.DTypeLike | None = None, backend: BackendLike = None, requires_grad: bool = False
) -> Tensor:
    return full(_shape_arg(shape), 1.0, dtype or D.default_float, backend, requires_grad)


def empty(
    *shape: ShapeArg, dtype: D.DTypeLike | None = None, backend: BackendLike = None, requires_grad: bool = False
) -> Tensor:
    return zeros(*shape, dtype=dtype, backend=backend, requires_grad=requires_grad)


def zeros_like(t: Tensor, dtype: D.DTypeLike | None = None, requires_grad: bool = False) -> Tensor:
    return full(t.shape, 0, dtype or t.dtype, t._backend, requires_grad)


def ones_like(t: Tensor, dtype: D.DTypeLike | None = None, requires_grad: bool = False) -> Tensor:
    return full(t.shape, 1, dtype or t.dtype, t._backend, requires_grad)


def full_like(t: Tensor, fill_value: Scalar, dtype: D.DTypeLike | None = None) -> Tensor:
    return full(t.shape, fill_value, dtype or t.dtype, t._backend)


def linspace(
    start: float, end: float, steps: int, dtype: D.DTypeLike | None = None, backend: BackendLike = None
) -> Tensor:
    if steps == 1:
        return full((1,), float(start), dtype or D.default_float, backend)
    idx = arange(steps, dtype=D.float64, backend=backend)
    return (idx * ((end - start) / (steps - 1)) + start).to(dtype or D.default_float)


def eye(n: int, m: int | None = None, dtype: D.DTypeLike | None = None, backend: BackendLike = None) -> Tensor:
    m = n if m is None else m
    return (arange(n, backend=backend).unsqueeze(1) == arange(m, backend=backend)).to(dtype or D.default_float)

"""``x[key]`` and ``x[key] = v``: NumPy indexing semantics out of slice, flip, take and reshape.

Basic indices (ints, slices, None, ...) become one ``slice`` primitive (plus ``flip`` for
negative steps); integer-array and boolean indices become one ``take`` on the flattened
indexed dims. So indexing is differentiable with no rule of its own.
"""

from __future__ import annotations

import operator
from typing import Any

from . import dispatch, dtypes as D
from .errors import DTypeError, ShapeError, located
from .primitives import broadcast_shapes

# The Tensor class is dispatch's registered one (``dispatch.Tensor``) and index tensors come
# from the indexed tensor's own constructor (``t._tensor``): this module sits below tensor.py,
# whose ``__getitem__`` calls it, so it cannot import tensor.py.


def _to_index_tensor(t, entry):
    if isinstance(entry, dispatch.Tensor):
        return entry
    if isinstance(entry, (list, tuple)) and not entry:
        return t._tensor(entry, dtype=D.int64)  # x[[]] is an empty selection
    return t._tensor(entry)


def _mask_coords(t, k, dim):
    """A k-dim bool mask indexing dims dim.. of ``t`` -> k integer index arrays (its True places)."""
    import itertools

    if t.shape[dim : dim + k.ndim] != k.shape:
        raise located(
            IndexError,
            f"boolean mask of shape {k.shape} does not match the indexed dims "
            f"{t.shape[dim : dim + k.ndim]} (dims {dim}..{dim + k.ndim - 1}) of a tensor of shape {t.shape}",
        )
    coords = [i for i, v in zip(itertools.product(*map(range, k.shape)), k.reshape(-1).tolist()) if v]
    return [_to_index_tensor(t, [c[d] for c in coords]) for d in range(k.ndim)]


def _normalize(t, key):
    """Key -> list of entries, one per dim after None-insertion: int | slice | None | int Tensor."""
    Tensor = dispatch.Tensor
    if not isinstance(key, tuple):
        key = (key,)
    entries = []
    for k in key:
        if isinstance(k, (list, bool)) or (hasattr(k, "__array_interface__") and not isinstance(k, Tensor)):
            k = _to_index_tensor(t, k)
        if isinstance(k, Tensor) and k.dtype.kind not in "iub":
            raise located(
                DTypeError,
                f"tensors used as indices must be integer or bool, got {k.dtype} "
                f"(index of shape {k.shape}); cast it with .long()",
            )
        if isinstance(k, Tensor) and k.dtype is D.bool_ and k.ndim == 0:
            # NumPy: a 0-d mask adds a unit dim indexed by its True coordinates, [0] or [].
            entries.append(_NewAxis(_to_index_tensor(t, [0] if k.item() else [])))
            continue
        entries.append(k)
    if sum(e is Ellipsis for e in entries) > 1:
        raise located(IndexError, "an index can only have a single ellipsis ('...')")
    consumed = sum(
        e.ndim if isinstance(e, Tensor) and e.dtype is D.bool_ else 1
        for e in entries
        if not _new_axis(e) and e is not Ellipsis
    )
    if consumed > t.ndim:
        raise located(IndexError, f"too many indices for a tensor of shape {t.shape}: {consumed} given")
    if any(e is Ellipsis for e in entries):
        i = next(i for i, e in enumerate(entries) if e is Ellipsis)
        entries[i : i + 1] = [slice(None)] * (t.ndim - consumed)
    # A k-dim bool mask is k integer index arrays: the coordinates of its True elements.
    out, dim = [], 0
    for e in entries:
        if isinstance(e, Tensor) and e.dtype is D.bool_:
            out += _mask_coords(t, e, dim)
            dim += e.ndim
        else:
            out.append(e)
            dim += not _new_axis(e)
    return out


class _NewAxis:
    """A unit dim to insert (like None) and then index with ``index`` (a 0-d bool mask)."""

    def __init__(self, index):
        self.index = index


def _new_axis(e):
    return e is None or isinstance(e, _NewAxis)


def _int(e):
    try:
        return operator.index(e)
    except TypeError:
        raise located(
            IndexError,
            f"unsupported index {e!r} of type {type(e).__name__}: use ints, slices, None, ..., integer or bool tensors",
        ) from None


def getitem(t: Any, key: Any) -> Any:
    Tensor = dispatch.Tensor
    entries = _normalize(t, key)
    # None: insert the new unit dims first, then index them with a full slice.
    if any(_new_axis(e) for e in entries):
        shape = list(t.shape)
        for i, e in enumerate(entries):
            if _new_axis(e):
                shape.insert(i, 1)
                entries[i] = slice(None) if e is None else e.index
        t = t.reshape(shape)
    entries += [slice(None)] * (t.ndim - len(entries))
    if any(isinstance(e, Tensor) for e in entries):
        # Beside index arrays an integer is a 0-d index array (NumPy): it counts when deciding
        # whether the advanced indices are adjacent, and so where the result's dims go.
        entries = [e if isinstance(e, (slice, Tensor)) else _to_index_tensor(t, _int(e)) for e in entries]
    shape = t.shape
    starts: list[int] = []
    stops: list[int] = []
    steps: list[int] = []
    flips: list[int] = []
    labels: list[str] = []
    adv: list[tuple[int, Any]] = []
    for d, (e, size) in enumerate(zip(entries, shape)):
        if isinstance(e, slice):
            a, b, c = e.indices(size)
            if c < 0:  # walk backwards = take the mirrored forward slice, then flip
                n = len(range(a, b, c))
                a, b, c = (a + c * (n - 1), a + 1, -c) if n else (0, 0, 1)
                flips.append(d)
            starts.append(a)
            stops.append(max(a, b))
            steps.append(c)
            labels.append("k")
        elif isinstance(e, Tensor):
            starts.append(0)
            stops.append(size)
            steps.append(1)
            labels.append("a")
            adv.append((d, e))
        else:
            i = _int(e)
            if not -size <= i < size:
                raise located(IndexError, f"index {i} is out of bounds for dim {d} with size {size}")
            i %= size
            starts.append(i)
            stops.append(i + 1)
            steps.append(1)
            labels.append("i")
    if any(a or b != s or c != 1 for a, b, c, s in zip(starts, stops, steps, shape)):
        t = t._slice(starts, stops, steps)
    if flips:
        t = t.flip(flips)
    if adv:
        t, labels = _advanced(t, labels, adv)
    squeeze = [d for d, lab in enumerate(labels) if lab == "i"]
    return t.squeeze(squeeze) if squeeze else t


def _advanced(t, labels, adv):
    """Integer-array indexing of dims ``adv`` (NumPy rules) with one take on flattened dims."""
    dims = [d for d, _ in adv]
    try:
        bshape = broadcast_shapes(*(i.shape for _, i in adv))
    except ShapeError as err:
        raise located(IndexError, f"index arrays cannot be broadcast together: {err}") from None
    contiguous = dims == list(range(dims[0], dims[0] + len(dims)))
    pos = dims[0] if contiguous else 0
    rest = [d for d in range(t.ndim) if d not in dims]
    order = rest[:pos] + dims + rest[pos:]
    t = t.permute(order)
    sizes = [t.shape[pos + k] for k in range(len(dims))]
    linear = None
    stride = 1
    for k in reversed(range(len(dims))):
        idx = adv[k][1].long()
        size = sizes[k]
        if idx.numel():
            lo, hi = idx.amin().item(), idx.amax().item()
            if lo < -size or hi >= size:
                raise located(
                    IndexError, f"index {hi if hi >= size else lo} is out of bounds for dim {dims[k]} with size {size}"
                )
        idx = idx + (idx < 0).long() * size
        linear = idx * stride if linear is None else linear + idx * stride
        stride *= size
    linear = linear.expand(bshape) if linear.shape != bshape else linear
    flat = t.reshape(t.shape[:pos] + (stride,) + t.shape[pos + len(dims) :])
    out = flat.take(linear, pos)
    rest_labels = [labels[d] for d in rest]
    labels = rest_labels[:pos] + ["k"] * len(bshape) + rest_labels[pos:]
    return out, labels


def setitem(t: Any, key: Any, value: Any) -> None:
    """In-place assignment through NumPy indexing (no gradient flows through it)."""
    Tensor = dispatch.Tensor
    if t.requires_grad and dispatch.is_grad_enabled():
        raise located(
            RuntimeError,
            "in-place assignment to a tensor that requires grad; "
            "use ember.where / masked_fill, or wrap it in ember.no_grad()",
        )
    host = t.numpy().copy()

    def conv(k):
        return k.numpy() if isinstance(k, Tensor) else k

    key = tuple(conv(k) for k in key) if isinstance(key, tuple) else conv(key)
    host[key] = value.numpy() if isinstance(value, Tensor) else value
    t._backend.assign(t._data, t._backend.from_numpy(host))

"""The sorting, running-sum and bitwise primitives in array-API terms, for NumPy and CuPy.

``make_impls(xp)`` builds the entries over the module ``xp`` (``numpy``, or ``cupy`` for the
CuPy plugin, whose arrays follow the same rules): one definition of the spec's tie and NaN
rules for both. NumPy's stable sort already puts NaN last; a descending stable order is the
ascending one of the reversed axis, reversed, with the positions mapped back, so that ties keep
their order and NaN comes first, as in torch.
"""

from __future__ import annotations

import contextlib


def make_impls(xp, elementwise=lambda f, nargs=1: f) -> dict:
    """The table entries over ``xp``; ``elementwise(f, nargs)`` wraps the ufuncs (NumPy's 0-d
    results must stay arrays)."""
    # NumPy sorts stably only when asked; CuPy always does and accepts no other kind
    stable = {"kind": "stable"} if xp.__name__ == "numpy" else {}
    quiet = (
        (lambda: xp.errstate(invalid="ignore", over="ignore")) if hasattr(xp, "errstate") else contextlib.nullcontext
    )

    def argsort(x, axis, descending=False):
        if x.ndim == 0:
            return xp.zeros((), xp.int64)
        if not descending:
            return xp.argsort(x, axis=axis, **stable)
        n = x.shape[axis]
        return (n - 1) - xp.flip(xp.argsort(xp.flip(x, axis), axis=axis, **stable), axis)

    def argtopk(x, k, axis, largest=True):
        order = argsort(x, axis, largest)
        if x.ndim == 0:
            return order
        return order[(slice(None),) * (axis % x.ndim) + (slice(0, k),)].copy()  # C order, its own memory

    def cumsum(x, axis, reverse=False):
        if x.ndim == 0:
            return x.copy()
        y = xp.flip(x, axis) if reverse else x
        with quiet():  # inf + -inf is nan, by IEEE-754
            out = xp.cumsum(y, axis=axis, dtype=xp.float32 if x.dtype == xp.float16 else x.dtype).astype(x.dtype)
        return xp.flip(out, axis).copy() if reverse else out

    def bitcast(x, dtype):
        target = xp.dtype(dtype.name)
        if target.itemsize != x.itemsize:  # a view would change the shape instead
            raise TypeError(f"bitcast between {x.dtype} and {target} of different sizes")
        return x.copy().view(target)  # ascontiguousarray would make a 0-d array 1-d

    return {
        "argsort": argsort,
        "argtopk": argtopk,
        "cumsum": cumsum,
        "bitcast": bitcast,
        "bitwise_not": elementwise(xp.invert),
        **{
            name: elementwise(f, nargs=2)
            for name, f in [
                ("bitwise_and", xp.bitwise_and),
                ("bitwise_or", xp.bitwise_or),
                ("bitwise_xor", xp.bitwise_xor),
                ("bitwise_left_shift", xp.left_shift),
                ("bitwise_right_shift", xp.right_shift),
            ]
        },
    }

"""String tensors (``ember.string``): how text enters a tensor, and what it may go through.

A string tensor holds one Python ``str`` per element: on the NumPy-array backends an object
array of ``str`` (what ONNX's numpy helpers, onnxruntime and scikit-learn hand over and take
back, on every NumPy version), on the python backend a list of ``str``. Text has no arithmetic
and no gradient; it moves (reshape, permute, slice, concatenate, take, where, ...), compares
with ``==`` and ``!=``, and goes through ember.onnx's string operators, which compute on the
host with Python's ``str`` methods.

>>> import ember
>>> t = ember.tensor([["a", "b"], ["c", "d"]])
>>> t.dtype, t.T.tolist(), (t == "b").tolist()
(ember.string, [['a', 'c'], ['b', 'd']], [[False, True], [False, False]])
"""

from __future__ import annotations

from typing import Any, NoReturn

from . import dtypes as D
from .errors import DTypeError, located


def as_str(value: Any) -> str:
    """One element of a string tensor: a ``str``, or ``bytes`` decoded as UTF-8 (as ONNX stores text).

    >>> as_str(b"caf\\xc3\\xa9"), as_str("x")
    ('café', 'x')
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8")
    raise located(DTypeError, f"a string tensor holds str (or UTF-8 bytes), got a {type(value).__name__} ({value!r})")


def strings(flat: Any) -> list[str]:
    """``flat`` (an iterable of str or bytes) as a list of ``str``.

    >>> strings(["a", b"b"])
    ['a', 'b']
    """
    return [as_str(v) for v in flat]


def to_object_array(arr: Any) -> Any:
    """A NumPy array of text (``str_``, ``bytes_``, StringDType or object of str/bytes) as an
    object array of ``str``: the one form ember's NumPy-array backends hold text in."""
    import numpy as np

    out = np.empty(arr.shape, dtype=object)
    out.reshape(-1)[:] = strings(arr.reshape(-1).tolist()) if arr.size else []
    return out


def is_text_array(arr: Any) -> bool:
    """Whether a NumPy array holds text: str, bytes, StringDType, or object (which must then hold str)."""
    return arr.dtype.kind in "OUST"


def check_cast(source: D.DType, target: D.DType) -> None:
    """A DTypeError when exactly one of ``source`` and ``target`` is text: ember has no cast
    between text and numbers (ONNX's Cast to and from STRING has no official case to hold it to).

    >>> check_cast(D.string, D.string)
    >>> check_cast(D.string, D.float32)
    Traceback (most recent call last):
    ...
    ember.errors.DTypeError: cannot cast string to float32: ember has no cast between text and numbers (at ...)
    """
    if (source is D.string) != (target is D.string):
        raise located(DTypeError, f"cannot cast {source} to {target}: ember has no cast between text and numbers")


def refuse(name: str, other: Any = None) -> NoReturn:
    """The error for primitive or method ``name`` on a string tensor (``other``: the number it
    met, for == and !=), at the user's line.

    >>> import ember
    >>> ember.tensor(["a"]) + ember.tensor(["b"])
    Traceback (most recent call last):
    ...
    ember.errors.DTypeError: add: string tensors have no arithmetic; they move (reshape, cat, ...), compare with == and != and go through ember.onnx's string operators (at ...)
    """
    if name in D.TEXT_OPS:  # == or != with a number
        raise located(DTypeError, f"{name}: a string tensor compares with text only, got a {type(other).__name__}")
    raise located(
        DTypeError,
        f"{name}: string tensors have no arithmetic; they move (reshape, cat, ...), compare with == and != "
        "and go through ember.onnx's string operators",
    )


def guard_abstract(name: str, abstract: Any) -> Any:
    """``abstract`` (a primitive's shape/dtype rule), refusing string operands unless ``name`` is
    one of ``dtypes.TEXT_OPS``: what ember.jit's shape inference and a backend failure's
    explanation see."""
    if name in D.TEXT_OPS:
        return abstract

    def rule(*avals: Any, **params: Any) -> Any:
        if any(isinstance(a, tuple) and len(a) == 2 and a[1] is D.string for a in avals):
            refuse(name)
        return abstract(*avals, **params)

    rule.__name__ = getattr(abstract, "__name__", name)
    rule.__doc__ = abstract.__doc__
    return rule

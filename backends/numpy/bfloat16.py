"""bfloat16 storage for the NumPy-array backends: the top 16 bits of a float32.

A buffer holds the bits in a one-field structured dtype, ``BF16``. NumPy has no arithmetic
for it, so every computing primitive fails on it and dispatch computes on the float32 upcast
instead (ember.dtypes.STORAGE); the primitives that only move values work on it unchanged.
The conversions are integer operations, so no extra package is needed to store bfloat16; the
``ml_dtypes`` package, when installed, is what hands bfloat16 arrays to and from NumPy users.
"""

from __future__ import annotations

import numpy as np

from ember import dtypes as D

STORAGE_NAMES = frozenset(d.name for d in D.STORAGE)

#: the buffer dtype of an ember bfloat16 tensor
BF16 = np.dtype([("bfloat16", "<u2")])


def from_float(x) -> np.ndarray:
    """Round float values to bfloat16 (to nearest, ties to even, as torch and ml_dtypes do);
    NaN stays a quiet NaN.

    >>> to_float(from_float(np.array([1.0, 1.00390625, 3.0e38, np.nan], np.float32))).tolist()
    [1.0, 1.0, 3.00405527047391e+38, nan]
    """
    x = np.asarray(x, dtype=np.float32, order="C")  # (ascontiguousarray makes 0-d 1-d)
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    rounded = np.where(np.isnan(x), (bits >> 16) | 0x40, rounded)
    return rounded.astype("<u2").view(BF16)


def to_float(x) -> np.ndarray:
    """The exact float32 values of a bfloat16 buffer."""
    return (np.asarray(x, order="C").view("<u2").astype(np.uint32) << 16).view(np.float32)


def ml_dtypes_view(x):
    """A bfloat16 (or float8, float8.py) buffer as an ``ml_dtypes`` array (same memory): the
    buffer's one field is named as ml_dtypes names the type."""
    try:
        import ml_dtypes
    except ImportError:
        from ember.errors import DTypeError, internal_root, located

        internal_root(__file__)  # so the error names the user's line, not this backend's
        raise located(
            DTypeError,
            f"a {x.dtype.names[0]} tensor becomes a NumPy array through the ml_dtypes package: "
            "pip install ml_dtypes (or convert it first: t.float().numpy())",
        ) from None
    return x.view(getattr(ml_dtypes, x.dtype.names[0]))


def is_ml_dtypes(array) -> bool:
    """Is ``array`` an ml_dtypes array of one of ember's storage dtypes (not one of ember's buffers)?"""
    return array.dtype.names is None and array.dtype.name in STORAGE_NAMES

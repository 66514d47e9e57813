"""Data types: the names users write (``ember.float32``) and the rules that combine them.

A dtype is a small immutable record; backends map it to their own type (NumPy's ``np.float32``,
a Python ``array`` typecode, a CUDA C type). Nothing here imports numpy. ``bfloat16`` is a
storage dtype (``STORAGE``): tensors hold it, arithmetic on it runs in float32.
"""

from __future__ import annotations

from typing import Any, TypeAlias


class DType:
    """One element type. Compare with ``is`` or ``==``; ``str(dtype)`` is its NumPy name."""

    __slots__ = ("name", "itemsize", "kind", "rank")

    def __init__(self, name: str, itemsize: int, kind: str, rank: int):
        self.name, self.itemsize, self.kind, self.rank = name, itemsize, kind, rank

    @property
    def is_floating_point(self) -> bool:
        return self.kind == "f"

    def __repr__(self) -> str:
        return f"ember.{self.name}"

    def __str__(self) -> str:
        return self.name

    def __reduce__(self) -> tuple[Any, tuple[str]]:  # dtypes are singletons, also across copy/deepcopy
        return (get, (self.name,))


# kind: b(ool) < u(nsigned) < i(nt) < f(loat); rank orders promotion within the lattice below.
bool_ = DType("bool", 1, "b", 0)
uint8 = DType("uint8", 1, "u", 1)
uint32 = DType("uint32", 4, "u", 2)
int32 = DType("int32", 4, "i", 3)
int64 = DType("int64", 8, "i", 4)
float16 = DType("float16", 2, "f", 5)
bfloat16 = DType("bfloat16", 2, "f", 6)
float32 = DType("float32", 4, "f", 7)
float64 = DType("float64", 8, "f", 8)

#: the dtypes primitives compute in (every backend's contract)
ALL = (bool_, uint8, uint32, int32, int64, float16, float32, float64)
FLOATS = (float16, float32, float64)
INTS = (uint8, uint32, int32, int64)

# Storage dtypes: a tensor may hold them (halving the bytes of bf16 weights), and the primitives
# that only move values (KEEPS) keep them; any other primitive computes on its storage operands
# cast to their compute dtype, so its result has that dtype. The NumPy-array backends store
# bfloat16 (capabilities list the compute dtypes, which conformance checks).
STORAGE = {bfloat16: float32}
KEEPS = frozenset(
    {"cast", "reshape", "permute", "expand", "slice", "concatenate", "flip", "pad", "take", "where", "windows"}
)

BY_NAME = {d.name: d for d in ALL + tuple(STORAGE)}
BY_NAME.update({"bool_": bool_, "float": float32, "half": float16, "double": float64, "int": int64, "long": int64})

default_float = float32
default_int = int64

#: what a ``dtype=`` argument accepts: a DType, its name ("float32"), a NumPy dtype or type
DTypeLike: TypeAlias = "DType | str | type | Any"


def get(d: DTypeLike) -> DType:
    """Turn a dtype-like (DType, name, NumPy dtype or type) into an ember DType.

    >>> get("float32") is float32
    True
    """
    if isinstance(d, DType):
        return d
    if d is bool:
        return bool_
    if d is int:
        return default_int
    if d is float:
        return default_float
    name = getattr(d, "name", None) or getattr(d, "__name__", None) or str(d)
    try:
        return BY_NAME[name]
    except KeyError:
        from .errors import DTypeError, located

        raise located(DTypeError, f"unknown dtype {d!r}; ember knows {', '.join(x.name for x in ALL)}") from None


def promote(a: DType, b: DType) -> DType:
    """The dtype of a binary op on ``a`` and ``b``: the larger of the two in
    bool < uint8 < uint32 < int32 < int64 < float16 < bfloat16 < float32 < float64, except
    that float16 with bfloat16 is float32 (neither holds the other).

    It is simpler than NumPy's table on purpose (int32 + uint32 → int32, not int64), and
    matches PyTorch for every pair PyTorch supports.

    >>> promote(int64, float32)
    ember.float32
    >>> promote(float16, bfloat16)
    ember.float32
    """
    if {a, b} == {float16, bfloat16}:
        return float32
    return a if a.rank >= b.rank else b


def storage_upcast(args: tuple[Any, ...]) -> list[Any] | None:
    """``args`` with each tensor of a storage dtype cast to its compute dtype, or None when
    there is none: what a computing primitive runs on (see STORAGE).

    >>> import ember
    >>> storage_upcast([ember.ones(2, dtype=bfloat16), 2.0])[0].dtype
    ember.float32
    """
    if not any(getattr(a, "dtype", None) in STORAGE for a in args):
        return None
    return [a.to(STORAGE[a.dtype]) if getattr(a, "dtype", None) in STORAGE else a for a in args]


def scalar_dtype(value: bool | int | float) -> DType:
    """The dtype a Python scalar takes when it stands alone (``ember.tensor(3)`` is int64)."""
    if isinstance(value, bool):
        return bool_
    if isinstance(value, int):
        return default_int
    return default_float


def result_with_scalar(d: DType, value: bool | int | float) -> DType:
    """Dtype of ``tensor OP scalar``: the tensor's, unless the scalar is of a higher kind
    (int tensor * 0.5 → default float, bool tensor + 1 → int64), as in PyTorch."""
    kind = scalar_dtype(value)
    if d.kind == "f" or kind.rank <= d.rank or (d.kind in "iu" and kind.kind in "iub"):
        return d
    return kind

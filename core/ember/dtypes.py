"""Data types: the names users write (``ember.float32``) and the rules that combine them.

A dtype is a small immutable record; backends map it to their own type (NumPy's ``np.float32``,
a Python ``array`` typecode, a CUDA C type). Nothing here imports numpy. ``bfloat16``, the
float8 formats, float4 and the 4- and 2-bit integers are storage dtypes (``STORAGE``): tensors
hold them, arithmetic on them runs in float32 (the floats) or int32 (the integers). Every
backend computes in ``ALL``; ``OPTIONAL`` (int8, int16, uint16, uint64) and the storage dtypes
are there on the backends whose capabilities list them, and ``check_backend`` names the dtype
and backend otherwise. ``string`` (``TEXT``) holds Python ``str`` values: tensors of it only move,
compare for equality and go through the string operators of ember.onnx; no arithmetic, no gradient.
"""

from __future__ import annotations

import weakref
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


# kind: b(ool), u(nsigned), i(nt), f(loat); rank orders bool < integers < floats (result_with_scalar).
bool_ = DType("bool", 1, "b", 0)
uint8 = DType("uint8", 1, "u", 1)
int8 = DType("int8", 1, "i", 1)
uint16 = DType("uint16", 2, "u", 2)
int16 = DType("int16", 2, "i", 2)
uint32 = DType("uint32", 4, "u", 3)
int32 = DType("int32", 4, "i", 3)
int64 = DType("int64", 8, "i", 4)
uint64 = DType("uint64", 8, "u", 4)
float16 = DType("float16", 2, "f", 5)
bfloat16 = DType("bfloat16", 2, "f", 6)
float8_e4m3fn = DType("float8_e4m3fn", 1, "f", 5)
float8_e4m3fnuz = DType("float8_e4m3fnuz", 1, "f", 5)
float8_e5m2 = DType("float8_e5m2", 1, "f", 5)
float8_e5m2fnuz = DType("float8_e5m2fnuz", 1, "f", 5)
float32 = DType("float32", 4, "f", 7)
# the narrow formats: one value a byte in memory, as ml_dtypes holds them (files pack them)
int4 = DType("int4", 1, "i", 1)
uint4 = DType("uint4", 1, "u", 1)
int2 = DType("int2", 1, "i", 1)
uint2 = DType("uint2", 1, "u", 1)
float4_e2m1fn = DType("float4_e2m1fn", 1, "f", 5)
float8_e8m0fnu = DType("float8_e8m0fnu", 1, "f", 5)
float64 = DType("float64", 8, "f", 8)
# text: each element a Python str (a reference to one, hence 8 bytes); kind "U" as NumPy's str
string = DType("string", 8, "U", -1)

#: the dtypes primitives compute in (every backend's contract)
ALL = (bool_, uint8, uint32, int32, int64, float16, float32, float64)
#: compute dtypes a backend may leave out (its ``capabilities().dtypes`` says which it has)
OPTIONAL = (int8, int16, uint16, uint64)
FLOATS = (float16, float32, float64)
INTS = (uint8, uint32, int32, int64)

# Storage dtypes: a tensor may hold them (halving the bytes of bf16 weights, quartering them in
# float8), and the primitives that only move values (KEEPS) keep them; any other primitive
# computes on its storage operands cast to their compute dtype, so its result has that dtype.
# The NumPy-array backends store all of them (capabilities list the compute dtypes, which
# conformance checks).
FLOAT8 = (float8_e4m3fn, float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz)
#: the integers narrower than a byte, and their width in bits
NARROW_INTS = {int4: 4, uint4: 4, int2: 2, uint2: 2}
STORAGE = {
    bfloat16: float32,
    **dict.fromkeys(FLOAT8, float32),
    float4_e2m1fn: float32,  # OCP MX: 2 exponent bits, 1 mantissa bit, no inf or NaN
    float8_e8m0fnu: float32,  # OCP MX scales: powers of two 2**-127 .. 2**127, and NaN
    **dict.fromkeys(NARROW_INTS, int32),
}
#: the largest finite value of each float8 format (what a saturating cast clamps to)
FLOAT8_MAX = {float8_e4m3fn: 448.0, float8_e4m3fnuz: 240.0, float8_e5m2: 57344.0, float8_e5m2fnuz: 57344.0}
KEEPS = frozenset(
    {"cast", "reshape", "permute", "expand", "slice", "concatenate", "flip", "pad", "take", "where", "windows"}
)

#: the dtypes of text; NumPy-array backends hold them as object arrays of str, python as lists
TEXT = (string,)
#: the primitives a string tensor may go through: movement, equality and selection (no arithmetic)
TEXT_OPS = KEEPS | {"eq", "ne"}

#: every dtype ember knows
KNOWN = ALL + OPTIONAL + tuple(STORAGE) + TEXT
BY_NAME = {d.name: d for d in KNOWN}
BY_NAME.update(
    {"str": string, "bool_": bool_, "float": float32, "half": float16, "double": float64, "int": int64, "long": int64}
)

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

        raise located(DTypeError, f"unknown dtype {d!r}; ember knows {', '.join(BY_NAME)}") from None


# The signed integer that holds every value of an unsigned one and of any signed one no wider:
# NumPy's rule, except that uint32 with int32 stays int32 (ember's lattice predates the wider
# ints, and PyTorch has no such pair), and uint64 meets a signed integer in float64 as in NumPy.
SIGNED_HOLDING = {uint8: int16, uint16: int32, uint32: int32, uint64: float64}


def promote(a: DType, b: DType) -> DType:
    """The dtype of a binary op on ``a`` and ``b``. The rules, in order:

    ============================  ==============================================
    operands                      result
    ============================  ==============================================
    bool with any                 the other
    float with integer            the float
    two floats of one size        float32 (float16 with bfloat16, two float8s)
    same kind                     the wider
    signed with wider unsigned    ``SIGNED_HOLDING[unsigned]`` (uint8 + int8 → int16)
    signed with narrower unsigned the signed
    ============================  ==============================================

    It is simpler than NumPy's table on purpose (int64 + float32 → float32, int32 + uint32 →
    int32), and matches PyTorch for every pair PyTorch supports.

    >>> promote(int64, float32)
    ember.float32
    >>> promote(float16, bfloat16)
    ember.float32
    >>> promote(int8, uint8), promote(uint16, int16), promote(uint64, int64)
    (ember.int16, ember.int32, ember.float64)

    A narrow integer (int4, ...) meets another dtype as int32, the dtype it computes in.

    >>> promote(int4, int8), promote(uint2, float16)
    (ember.int32, ember.float16)
    """
    if a is b:
        return a
    if a is string or b is string:
        from .errors import DTypeError, located

        raise located(DTypeError, f"no common dtype of {a} and {b}: a string tensor meets only strings")
    a, b = (int32 if a in NARROW_INTS else a), (int32 if b in NARROW_INTS else b)
    if a.kind == b.kind:
        if a.kind == "f" and a.itemsize == b.itemsize and a is not b:  # float16 with bfloat16, two float8s
            return float32
        return a if a.itemsize >= b.itemsize else b
    if "b" in (a.kind, b.kind) or "f" in (a.kind, b.kind):
        return a if a.rank > b.rank else b
    signed, unsigned = (a, b) if a.kind == "i" else (b, a)
    if signed.itemsize > unsigned.itemsize:
        return signed
    held = SIGNED_HOLDING[unsigned]
    return held if held.kind == "f" or held.itemsize >= signed.itemsize else signed


def int_range(d: DType) -> tuple[int, int]:
    """The smallest and largest value of integer (or bool) dtype ``d``.

    >>> int_range(int8), int_range(uint16), int_range(int4)
    ((-128, 127), (0, 65535), (-8, 7))
    """
    bits = 1 if d.kind == "b" else NARROW_INTS.get(d) or 8 * d.itemsize
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if d.kind == "i" else (0, (1 << bits) - 1)


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


#: the dtypes a backend may lack: it lists those it has in capabilities().dtypes
MAY_LACK = frozenset(OPTIONAL + tuple(STORAGE) + TEXT)
_LISTED: weakref.WeakKeyDictionary[Any, frozenset[DType]] = weakref.WeakKeyDictionary()


def check_backend(backend: Any, dtype: DType) -> None:
    """Raise a DTypeError naming ``dtype`` and ``backend`` when the backend's capabilities do
    not list ``dtype``. Only an OPTIONAL or a STORAGE dtype can be missing: every backend
    computes ALL.

    >>> import ember
    >>> check_backend(ember.get_backend("numpy"), int8)  # the numpy backend has them all
    """
    if dtype not in MAY_LACK:
        return
    listed = _LISTED.get(backend)
    if listed is None:
        listed = _LISTED[backend] = frozenset(backend.capabilities().dtypes)
    if dtype not in listed:
        from .errors import DTypeError, located

        has = ", ".join(d.name for d in KNOWN if d in listed)
        way_out = (
            "keep it in float32: .float()"
            if dtype in STORAGE
            else "keep string tensors on numpy or python"
            if dtype in TEXT
            else "cast to a wider dtype first"
        )
        raise located(
            DTypeError,
            f"dtype {dtype} is not supported by backend {backend.name!r} (it has {has}); use a backend "
            f"that lists {dtype} (numpy; `ember backends --json` shows each one's dtypes) or {way_out}",
        )

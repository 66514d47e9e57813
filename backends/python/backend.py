"""The pure-Python backend: every primitive with the standard library only.

It runs where NumPy cannot (Pyodide offline, a bare interpreter) and is the default there. Its
results follow the NumPy reference backend: float32 and float16 values are computed in double
and rounded once per primitive, so elementwise add/sub/mul/div/sqrt are bit-identical to NumPy;
reductions, matmul and convolutions accumulate in double (a little *more* accurate than NumPy's
float32 loops, so they agree to float32 rounding, ~1e-6 relative); transcendental functions
agree to an ulp or two. ``random_bits`` is Philox-4x32-10 in Python ints, bit-identical.

The modules: buffer.py (storage, rounding, casts, bytes) → this file (creation, elementwise,
reductions, the table) → layout.py (movement, indexing, windows) → linalg.py (matmul,
convolution) → ordering.py (sorts, cumsum, bits). See docs/backends.md for speed and the exact tolerances.

>>> import ember
>>> x = ember.tensor([[1.0, -2.0], [3.0, 4.0]], backend="python")
>>> (x @ x.T).relu().sum(1).tolist()
[5.0, 25.0]
"""

from __future__ import annotations

import math
import sys
from array import array
from operator import add, and_ as land, eq, ge, gt, index, le, lt, mod, mul, ne, or_ as lor, sub, truediv, xor as lxor

from ember import dtypes as D
from ember.backend import Backend, Capabilities
from ember.primitives import broadcast_shapes
from ember.text import strings

from . import layout as L, linalg as LA, ordering, storage
from .buffer import (
    LITTLE,
    PyBuffer,
    convert,
    fix,
    from_bytes,
    prod,
    round_f32,
    scalar_as,
    scalar_kind,
    scalar_result_dtype,
    to_bytes,
    wrap_int,
)

_INF, _NAN = math.inf, math.nan


def _new(data, shape, dtype):
    return PyBuffer(data, tuple(shape), dtype)


# ----------------------------------------------------------------------------- random bits
_PHILOX_M = (0xD2511F53, 0xCD9E8D57)
_PHILOX_W = (0x9E3779B9, 0xBB67AE85)
_MASK = 0xFFFFFFFF
_CHUNK = 1024  # blocks per pass: big ints of 64 KiB stay in cache


def _pack(values) -> int:
    """Unsigned 64-bit values as the lanes of one big int (lane i at bit 64*i)."""
    lanes = array("Q", values)
    if not LITTLE:
        lanes.byteswap()
    return int.from_bytes(lanes.tobytes(), "little")


def _unpack(lanes: int, n: int) -> list:
    out = array("Q")
    out.frombytes(lanes.to_bytes(8 * n, "little"))
    if not LITTLE:
        out.byteswap()
    return out.tolist()


def _philox_lanes(first, last, seed):
    # Every 32-bit word of every block sits in its own 64-bit lane of one big Python int.
    # Multiplying by a 32-bit constant gives each lane its exact 64-bit product with no carry
    # into the next, so each big-int operation below runs one Philox step for all the blocks
    # at once, in C (about 10x faster than a loop over blocks).
    n = last - first
    ones = int.from_bytes((b"\x01" + bytes(7)) * n, "little")  # 1 in every lane
    low = ones * _MASK  # 0x00000000FFFFFFFF in every lane
    ctr = _pack(range(first, last))
    c0, c1, c2, c3 = ctr & low, (ctr >> 32) & low, 0, 0
    k0, k1 = seed & _MASK, (seed >> 32) & _MASK
    for _ in range(10):
        p0, p1 = c0 * _PHILOX_M[0], c2 * _PHILOX_M[1]
        c0, c1, c2, c3 = (
            ((p1 >> 32) & low) ^ c1 ^ (k0 * ones),
            p1 & low,
            ((p0 >> 32) & low) ^ c3 ^ (k1 * ones),
            p0 & low,
        )
        k0, k1 = (k0 + _PHILOX_W[0]) & _MASK, (k1 + _PHILOX_W[1]) & _MASK
    out = [0] * (4 * n)
    for i, lanes in enumerate((c0, c1, c2, c3)):
        out[i::4] = _unpack(lanes, n)
    return out


def philox4x32(first: int, last: int, seed: int) -> list:
    """Philox-4x32-10 (Salmon et al. 2011) of block counters first..last-1 under the 64-bit
    key ``seed``: 4 uint32 words per block, as the reference backend's ``philox4x32``.

    >>> philox4x32(0, 1, 0)[:2]
    [1713891541, 3781805453]
    """
    out = []
    for start in range(first, last, _CHUNK):
        out += _philox_lanes(start, min(start + _CHUNK, last), seed)
    return out


def random_bits(shape, seed, offset):
    n = prod(shape)
    first, last = offset // 4, (offset + n + 3) // 4
    start = offset - 4 * first
    return _new(philox4x32(first, max(last, first), seed)[start : start + n], shape, D.uint32)


# ----------------------------------------------------------------------------- creation
def full(shape, value, dtype):
    dtype = D.get(dtype)
    return _new([convert([value], scalar_kind(value), dtype)[0]] * prod(shape), shape, dtype)


def arange(start, stop, step, dtype):
    """NumPy's arange to the bit: the first two values, then start + i*delta in the dtype's
    own precision (which is why float32 aranges drift exactly as NumPy's do)."""
    dtype = D.get(dtype)
    if dtype in D.STORAGE:  # made in its compute dtype, then rounded, as the NumPy backend does
        made = arange(start, stop, step, D.STORAGE[dtype])
        return _new(convert(made.data, made.dtype, dtype), made.shape, dtype)
    if all(isinstance(v, int) for v in (start, stop, step)):
        n = max(0, -(-(stop - start) // step))
    else:
        n = max(0, math.ceil((stop - start) / step))
    if n == 0:
        return _new([], (0,), dtype)
    if dtype.kind in "iub":
        if all(isinstance(v, int) for v in (start, step)):
            vals = list(range(start, start + n * step, step))
        else:
            b0, b1 = int(start), int(start + step)
            vals = [b0 + i * (b1 - b0) for i in range(n)]
        return _new(convert(vals, D.int64, dtype), (n,), dtype)
    rnd = lambda v: convert([v], D.float64, dtype)[0]  # noqa: E731
    b0 = rnd(start)
    if n == 1:
        return _new([b0], (1,), dtype)
    b1 = rnd(start + step)
    if dtype is D.float64:
        delta = b1 - b0
        vals = [b0 + i * delta for i in range(2, n)]
    else:  # float32 arithmetic (float16 fills through float32)
        delta = round_f32([b1 - b0])[0]
        vals = round_f32([b0 + x for x in round_f32([i * delta for i in round_f32(range(2, n))])])
    return _new([b0, b1] + fix(dtype, vals), (n,), dtype)


# ----------------------------------------------------------------------------- elementwise math
def _safe(fn, special):
    """fn over a list at C speed; on a domain or range error, element by element with
    ``special(x)`` giving the IEEE answer that Python's math module refuses to."""

    def run(xs):
        try:
            return list(map(fn, xs))
        except (ValueError, OverflowError, ZeroDivisionError):
            out = []
            for x in xs:
                try:
                    out.append(fn(x))
                except (ValueError, OverflowError, ZeroDivisionError):
                    out.append(special(x))
            return out

    return run


def _floor_one(x):
    # copysign keeps floor(-0.0) == -0.0; inf and nan pass through.
    return math.copysign(math.floor(x), x) if x - x == 0 else x


def _floor(xs):
    try:
        out = list(map(float, map(math.floor, xs)))
    except (ValueError, OverflowError):  # nan or inf somewhere
        return list(map(_floor_one, xs))
    if 0.0 in xs:  # floor(+-0.0) is itself: keep -0.0's sign
        out = [x if x == 0 else r for x, r in zip(xs, out)]
    return out


def _erf_approx(x):
    # The reference backend's Abramowitz & Stegun 7.1.26 for float32/16, same operations.
    z = abs(x)
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    sign = 1.0 if x > 0 else -1.0 if x < 0 else 0.0 if x == 0 else x  # np.sign
    return sign * (1.0 - poly * math.exp(-z * z))


_FLOAT_FNS = {
    "exp": _safe(math.exp, lambda x: _INF),
    "log": _safe(math.log, lambda x: -_INF if x == 0 else _NAN),
    "sin": _safe(math.sin, lambda x: _NAN),
    "cos": _safe(math.cos, lambda x: _NAN),
    "tanh": lambda xs: list(map(math.tanh, xs)),
    "sqrt": _safe(math.sqrt, lambda x: _NAN),
    "reciprocal": _safe(lambda x: 1.0 / x, lambda x: math.copysign(_INF, x)),
}


def _float_out(dtype):
    """NumPy's result dtype of a float function of a non-float array."""
    if dtype.kind == "f":
        return dtype
    return D.float16 if dtype.itemsize == 1 else D.float32 if dtype.itemsize == 2 else D.float64


def _float_unary(name):
    fn = _FLOAT_FNS.get(name)

    def impl(x):
        dtype = _float_out(x.dtype)
        xs = x.data if x.dtype.kind == "f" else list(map(float, x.data))
        if name == "erf":
            out = list(map(math.erf if dtype is D.float64 else _erf_approx, xs))
        else:
            out = fn(xs)
        return _new(fix(dtype, out), x.shape, dtype)

    return impl


def _int_reciprocal(x, dtype):
    low = 0 if dtype.kind == "u" else -(1 << (dtype.itemsize * 8 - 1))  # C's 1/0, as NumPy
    return [low if v == 0 else int(1 / v) for v in x]


def _neg(x):
    if x.dtype is D.bool_:
        raise TypeError("neg of a bool tensor is not defined (NumPy refuses it too); use logical_not")
    return _new(fix(x.dtype, [-v for v in x.data]), x.shape, x.dtype)


def _abs(x):
    if x.dtype is D.bool_:
        return _new(list(x.data), x.shape, x.dtype)
    return _new(fix(x.dtype, list(map(abs, x.data))), x.shape, x.dtype)


def _sign(x):
    if x.dtype is D.bool_:
        raise TypeError("sign of a bool tensor is not defined (NumPy refuses it too)")
    one, zero = (1.0, 0.0) if x.dtype.kind == "f" else (1, 0)
    out = [one if v > 0 else -one if v < 0 else zero if v == 0 else v for v in x.data]
    return _new(out, x.shape, x.dtype)


def _floor_impl(x):
    out = _floor(x.data) if x.dtype.kind == "f" else list(x.data)
    return _new(out, x.shape, x.dtype)


def _reciprocal(x):
    if x.dtype.kind in "iu":
        return _new(_int_reciprocal(x.data, x.dtype), x.shape, x.dtype)
    return _float_unary("reciprocal")(x)


def _logical_not(x):
    return _new([not v for v in x.data], x.shape, D.bool_)


# ----------------------------------------------------------------------------- binary ops
def _div_one(a, b):
    try:
        return a / b
    except ZeroDivisionError:
        return _NAN if a == 0 or a != a else math.copysign(_INF, a) * math.copysign(1.0, b)


def _mod_one(a, b):
    return a % b if b else (_NAN if isinstance(a, float) else 0)  # NumPy: x % 0 is nan, or 0 for ints


def _odd(b):
    return b - b == 0 and b == math.floor(b) and b % 2 == 1


def _pow_one(a, b):
    try:
        return math.pow(a, b)
    except OverflowError:
        return -_INF if a < 0 and _odd(b) else _INF
    except ValueError:  # 0 ** negative, or negative ** fraction
        if a == 0:
            return math.copysign(_INF, a) if _odd(b) else _INF
        return _NAN


def _max_kernel(u, v):
    return [p if p > q or p != p else q for p, q in zip(u, v)]


def _min_kernel(u, v):
    return [p if p < q or p != p else q for p, q in zip(u, v)]


def _vv(op):
    return lambda u, v: list(map(op, u, v))


def _try_vv(op, one):
    def run(u, v):
        try:
            return list(map(op, u, v))
        except (ZeroDivisionError, ValueError, OverflowError):
            return list(map(one, u, v))

    return run


_FLOAT_BIN = {
    "add": _vv(add),
    "sub": _vv(sub),
    "mul": _vv(mul),
    "div": _try_vv(truediv, _div_one),
    "pow": _try_vv(math.pow, _pow_one),
    "maximum": _max_kernel,
    "minimum": _min_kernel,
    "remainder": _try_vv(mod, _mod_one),
}


def _int_pow(u, v, dtype):
    if any(q < 0 for q in v):
        raise ValueError("Integers to negative integer powers are not allowed.")
    mod = 1 << (dtype.itemsize * 8)
    return [pow(p, q, mod) for p, q in zip(u, v)]


def _int_kernel(name, dtype):
    if name == "div":
        raise TypeError(f"div of {dtype} tensors is not defined; the front end casts integers to float first")
    if name == "pow":
        return lambda u, v: _int_pow(u, v, dtype)
    return {
        "add": _vv(add),
        "sub": _vv(sub),
        "mul": _vv(mul),
        "remainder": _try_vv(mod, _mod_one),
        "maximum": _max_kernel,
        "minimum": _min_kernel,
    }[name]  # p != p is never true


_BOOL_BIN = {"add": lor, "mul": land, "maximum": lor, "minimum": land}


def _kernel(name, dtype):
    if dtype.kind == "f":
        return _FLOAT_BIN[name]
    if dtype is D.bool_:
        if name not in _BOOL_BIN:
            raise TypeError(f"{name} of bool tensors is not defined (NumPy refuses it too); cast first")
        return _vv(_BOOL_BIN[name])
    return _int_kernel(name, dtype)


def _binary(name):
    def impl(a, b):
        dtype, shape, xs, ys = _prepare(a, b)
        out = _kernel(name, dtype)(xs, ys)
        return _new(out if name in ("maximum", "minimum") else fix(dtype, out), shape, dtype)

    return impl


def _prepare(a, b):
    """(dtype, shape, xs, ys) for a binary op: equal-length element lists of the
    broadcast shape. A Python scalar takes the tensor's dtype (NumPy 2, NEP 50), or the default
    dtype of its kind if that kind is higher (int tensor + 0.5 is float64, as in NumPy)."""
    ta, tb = isinstance(a, PyBuffer), isinstance(b, PyBuffer)
    if ta and tb:
        xs, ys, shape = L.binary_operands(a, b)
        return a.dtype, shape, xs, ys
    t, s = (a, b) if ta else (b, a)
    dtype = scalar_result_dtype(t.dtype, s)
    data = t.data if dtype is t.dtype else convert(t.data, t.dtype, dtype)
    rep = [scalar_as(dtype, s)] * len(data)
    return (dtype, t.shape, data, rep) if ta else (dtype, t.shape, rep, data)


_COMPARE = {"eq": eq, "ne": ne, "lt": lt, "le": le, "gt": gt, "ge": ge}


def _compare(name):
    op = _COMPARE[name]

    def impl(a, b):
        if isinstance(a, PyBuffer) and isinstance(b, PyBuffer):
            xs, ys, shape = L.binary_operands(a, b)
        else:
            # A Python int compares exactly (uint8 == 300 is False); a float in a float
            # tensor's precision (float32 == 0.1 compares with float32(0.1)), as in NumPy 2.
            t, s = (a, b) if isinstance(a, PyBuffer) else (b, a)
            if t.dtype.kind == "f":
                s = scalar_as(t.dtype, s)
            rep = [s] * len(t.data)
            xs, ys = (t.data, rep) if t is a else (rep, t.data)
            shape = t.shape
        return _new(list(map(op, xs, ys)), shape, D.bool_)

    return impl


def _logical(name):
    op = {"logical_and": land, "logical_or": lor, "logical_xor": lxor}[name]

    def impl(a, b):
        a, b = (x if isinstance(x, PyBuffer) else _new([bool(x)], (), D.bool_) for x in (a, b))
        xs, ys, shape = L.binary_operands(a, b)
        if a.dtype is not D.bool_:
            xs = [v != 0 for v in xs]
        if b.dtype is not D.bool_:
            ys = [v != 0 for v in ys]
        return _new(list(map(op, xs, ys)), shape, D.bool_)

    return impl


def where(c, a, b):
    ta, tb = isinstance(a, PyBuffer), isinstance(b, PyBuffer)
    if ta and tb:
        dtype = a.dtype
    elif ta or tb:  # a Python scalar is weak: int32 array and 0.5 give float64, as in NumPy
        t, s = (a, b) if ta else (b, a)
        dtype = scalar_result_dtype(t.dtype, s)
        if dtype is not t.dtype:
            a, b = (_new(convert(x.data, x.dtype, dtype), x.shape, dtype) if x is t else x for x in (a, b))
    else:
        dtype = D.promote(D.get(scalar_kind(a)), D.get(scalar_kind(b)))
    a = a if isinstance(a, PyBuffer) else _new([scalar_as(dtype, a)], (), dtype)
    b = b if isinstance(b, PyBuffer) else _new([scalar_as(dtype, b)], (), dtype)
    shape = broadcast_shapes(c.shape, a.shape, b.shape)
    cs, xs, ys = (t.data if t.shape == shape else L.expand_data(t, shape) for t in (c, a, b))
    return _new([x if k else y for k, x, y in zip(cs, xs, ys)], shape, dtype)


def cast(x, dtype):
    dtype = D.get(dtype)
    data = list(x.data) if dtype is x.dtype else convert(x.data, x.dtype, dtype)
    return _new(data, x.shape, dtype)


# ----------------------------------------------------------------------------- reductions
def _reduce(x, axes, keepdims, empty_ok, name):
    shape = x.shape
    nd = len(shape)
    axes = tuple(sorted({a % nd for a in axes})) if nd else ()
    out_shape = (
        tuple(1 if i in axes else s for i, s in enumerate(shape))
        if keepdims
        else tuple(s for i, s in enumerate(shape) if i not in axes)
    )
    if not prod(shape):
        if not prod(out_shape):
            return out_shape, []
        if not empty_ok:
            raise ValueError(f"zero-size array to reduction operation {name} which has no identity")
        return out_shape, None
    return out_shape, L.reduce_groups(x.data, shape, axes)


def _sum(x, axes, keepdims=False):
    shape, groups = _reduce(x, axes, keepdims, True, "sum")
    dtype = x.dtype
    if groups is None:
        n = prod(shape)
        zero = 0.0 if dtype.kind == "f" else False if dtype is D.bool_ else 0
        return _new(list(x.data) if len(x.data) == n else [zero] * n, shape, dtype)
    if dtype is D.bool_:
        return _new(list(map(any, groups)), shape, dtype)  # NumPy's bool sum is "or"
    if dtype.kind == "f":
        return _new(fix(dtype, [sum(g, 0.0) for g in groups]), shape, dtype)
    return _new(fix(dtype, list(map(sum, groups))), shape, dtype)


def _has_nan(values):
    s = sum(values, 0.0)  # nan iff a nan is in (or inf - inf); then look
    return s != s and any(v != v for v in values)


def _extremum(pick, name):
    def impl(x, axes, keepdims=False):
        shape, groups = _reduce(x, axes, keepdims, False, name)
        if groups is None:
            return _new(list(x.data), shape, x.dtype)
        out = list(map(pick, groups))
        if x.dtype.kind == "f" and _has_nan(x.data):
            out = [_NAN if _has_nan(g) else v for g, v in zip(groups, out)]
        return _new(out, shape, x.dtype)

    return impl


def _first_nan(g):
    return next(i for i, v in enumerate(g) if v != v)


def argmax(x, axis, keepdims=False):
    shape, groups = _reduce(x, (axis,), keepdims, False, "argmax")
    if groups is None:
        return _new([0] * prod(shape), shape, D.int64)
    if x.dtype.kind == "f" and _has_nan(x.data):  # the first NaN wins, as in NumPy
        return _new([_first_nan(g) if _has_nan(g) else g.index(max(g)) for g in groups], shape, D.int64)
    return _new([g.index(max(g)) for g in groups], shape, D.int64)


# ----------------------------------------------------------------------------- the table
IMPLS = {
    "full": full,
    "arange": arange,
    "random_bits": random_bits,
    "neg": _neg,
    "abs": _abs,
    "sign": _sign,
    "floor": _floor_impl,
    "reciprocal": _reciprocal,
    "logical_not": _logical_not,
    **{n: _float_unary(n) for n in ("exp", "log", "sin", "cos", "tanh", "sqrt", "erf")},
    **{n: _binary(n) for n in ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "remainder")},
    **{n: _compare(n) for n in _COMPARE},
    **{n: _logical(n) for n in ("logical_and", "logical_or", "logical_xor")},
    "where": where,
    "cast": cast,
    "sum": _sum,
    "max": _extremum(max, "maximum"),
    "min": _extremum(min, "minimum"),
    "argmax": argmax,
    "reshape": L.reshape,
    "permute": L.permute,
    "expand": L.expand,
    "pad": L.pad,
    "slice": L.slice_,
    "concatenate": L.concatenate,
    "flip": L.flip,
    "take": L.take,
    "index_add": L.index_add,
    "matmul": LA.matmul,
    "conv2d": LA.conv2d,
    "conv2d_grad_input": LA.conv2d_grad_input,
    "conv2d_grad_weight": LA.conv2d_grad_weight,
    "windows": L.windows,
    "windows_grad": L.windows_grad,
    **ordering.IMPLS,
}


class PythonBackend(Backend):
    """Pure Python: buffers are :class:`PyBuffer` (a flat list, a shape, a dtype).

    >>> be = PythonBackend()
    >>> be.to_list(be.impls["add"](be.from_list([1, 2], (2,), D.int64), 40))
    [41, 42]
    """

    name = "python"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    device = "cpu"
    impls = IMPLS

    def capabilities(self):
        return Capabilities(
            ops=frozenset(IMPLS),
            dtypes=frozenset(D.ALL + D.OPTIONAL + tuple(D.STORAGE) + D.TEXT),  # text: lists of str
            devices=("cpu",),
            notes={
                "float32": "computed in float64, rounded once per primitive",
                "dot": "math.sumprod" if LA._sumprod else "sum(map(mul))",
            },
        )

    def shape(self, buf):
        return buf.shape

    def dtype(self, buf):
        return buf.dtype

    def from_list(self, flat, shape, dtype):
        dtype, shape = D.get(dtype), tuple(shape)
        flat = list(flat)
        if len(flat) != prod(shape):
            raise ValueError(f"{len(flat)} values do not fill shape {shape}")
        if dtype is D.bool_:
            return PyBuffer(list(map(bool, flat)), shape, dtype)
        if dtype in D.STORAGE:  # ints stay ints (int4 keeps their low bits), floats round
            return PyBuffer(storage.encode(flat, dtype), shape, dtype)
        if dtype is D.string:
            return PyBuffer(strings(flat), shape, dtype)
        if dtype.kind == "f":
            return PyBuffer(
                convert(flat, D.float64, dtype)
                if dtype is D.float32
                else convert(list(map(float, flat)), D.float64, dtype),
                shape,
                dtype,
            )
        try:
            ints = list(map(index, flat))  # ints, bools, NumPy integers
        except TypeError:  # floats truncate, as a cast does
            return PyBuffer(convert(list(map(float, flat)), D.float64, dtype), shape, dtype)
        data = wrap_int(dtype, ints)
        if data is not ints:  # NumPy 2 refuses to wrap a literal, so do we
            bad = next(q for p, q in zip(data, ints) if p != q)
            raise OverflowError(f"Python integer {bad} out of bounds for {dtype}")
        return PyBuffer(data, shape, dtype)

    def to_list(self, buf):
        return list(buf.data)

    def from_bytes(self, data, shape, dtype):
        dtype, shape = D.get(dtype), tuple(shape)
        return PyBuffer(from_bytes(bytes(data), prod(shape), dtype), shape, dtype)

    def to_bytes(self, buf):
        if buf.dtype is D.string:
            raise TypeError("string tensors have no bytes form (safetensors has no string dtype)")
        return to_bytes(buf.data, buf.dtype)

    def from_numpy(self, array):
        # NumPy's tolist gives exact Python numbers of the right kind (no numpy import here:
        # a caller that has an array has numpy).
        name = array.dtype.names[0] if array.dtype.names else array.dtype.name  # a NumPy backend's buffer
        dtype = D.string if array.dtype.kind == "O" else D.get(name)  # object: str (ember.text)
        if dtype in D.STORAGE:  # an ml_dtypes array, or the NumPy backend's record: read the codes
            codes = array.view("<u2" if dtype.itemsize == 2 else "u1").reshape(-1).tolist()
            return PyBuffer(storage.from_codes(codes, dtype), tuple(array.shape), dtype)
        return PyBuffer(array.reshape(-1).tolist(), tuple(array.shape), dtype)

    def to_numpy(self, buf):
        if buf.dtype not in D.STORAGE:
            return super().to_numpy(buf)
        import numpy as np

        from ember.backends.numpy.bfloat16 import ml_dtypes_view  # the NumPy backend's way out, and its error

        record = np.dtype([(buf.dtype.name, "<u2" if buf.dtype.itemsize == 2 else "u1")])
        return ml_dtypes_view(np.frombuffer(self.to_bytes(buf), dtype=record).reshape(buf.shape))

    def assign(self, dst, src):
        data = src.data
        if len(data) != len(dst.data):
            raise ValueError(f"assign: shapes {dst.shape} and {src.shape} differ")
        dst.data[:] = data if src.dtype is dst.dtype else convert(data, src.dtype, dst.dtype)

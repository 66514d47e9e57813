"""The pure-Python backend against the NumPy reference, primitive by primitive.

Every primitive runs on both backends with the same inputs (seeded), over 0-d, empty and
broadcast shapes, every dtype the primitive takes, and inputs that are pending permutes
(non-trivial strides). Exact where the spec makes it exact (movement, integers, casts, IEEE
add/sub/mul/div/sqrt), else within float32 rounding of the reference.
"""

import json
import math
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import ember
from ember import dtypes as D
from ember.backends.numpy.backend import NP
from ember.backends.python import backend as PB

PY = ember.get_backend("python")
NPB = ember.get_backend("numpy")

FLOATS = (D.float16, D.float32, D.float64)
INTS = (D.uint8, D.uint32, D.int32, D.int64)
SHAPES = [(), (0,), (5,), (3, 4), (2, 3, 4), (2, 0, 3)]
# Pairs that broadcast: equal, trailing, both sides, scalar-like, empty.
PAIRS = [
    ((3, 4), (3, 4)),
    ((3, 4), (4,)),
    ((3, 1), (1, 4)),
    ((), (2, 3)),
    ((2, 3), (1, 1)),
    ((2, 0, 3), (3,)),
    ((2, 3, 1, 5), (3, 4, 1)),
    ((1,), (4,)),
]
# rtol for results that accumulate or call libm (NumPy's float32 loops round at every step).
RTOL = {D.float16: 2e-3, D.float32: 2e-6, D.float64: 1e-12}


# ----------------------------------------------------------------------------- helpers
def sample(rng, shape, dtype, special=False, low=-3, high=3):
    """A NumPy array of ``dtype``; with ``special``, some NaN/inf/-0.0 sprinkled in."""
    if dtype is D.bool_:
        return rng.random(shape) > 0.5
    if dtype.kind in "iu":
        lo = 0 if dtype.kind == "u" else low * 10
        return rng.integers(lo, high * 10 + 1, size=shape).astype(NP[dtype])
    a = rng.uniform(low, high, size=shape)
    if special and a.size:
        flat = a.reshape(-1)
        for i, v in zip(rng.choice(a.size, size=min(a.size, 4), replace=False), [np.nan, np.inf, -np.inf, -0.0]):
            flat[i] = v
    return a.astype(NP[dtype])


def to_py(a):
    """A python-backend buffer holding NumPy array ``a``."""
    return PY.from_list(a.reshape(-1).tolist(), a.shape, D.get(a.dtype.name))


def run_both(name, *args, **params):
    """Run primitive ``name`` on both backends; NumPy arrays in ``args`` become buffers."""
    args = [np.asarray(a) if isinstance(a, np.generic) else a for a in args]
    py_args = [to_py(a) if isinstance(a, np.ndarray) else a for a in args]
    return NPB.impls[name](*args, **params), PY.impls[name](*py_args, **params)


def as_numpy(buf):
    return np.array(PY.to_list(buf), dtype=NP[buf.dtype]).reshape(buf.shape)


def same(ref, buf, rtol=None, atol=0.0):
    """Shape, dtype and values of a python buffer equal the NumPy result (NaN == NaN)."""
    ref = np.asarray(ref)
    assert tuple(buf.shape) == ref.shape, (buf.shape, ref.shape)
    assert buf.dtype is D.get(ref.dtype.name), (buf.dtype, ref.dtype)
    got = as_numpy(buf)
    if rtol is None or ref.dtype.kind not in "f":
        np.testing.assert_array_equal(got, ref)
    else:
        np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol)


def check(name, *args, rtol=None, atol=0.0, **params):
    ref, got = run_both(name, *args, **params)
    same(ref, got, rtol, atol)
    return got


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# ----------------------------------------------------------------------------- registration
def test_registered_through_the_hook_and_declares_every_primitive():
    assert PY.name == "python" and isinstance(PY, PB.PythonBackend)
    caps = PY.capabilities()
    assert caps.ops == frozenset(ember.primitives.PRIMITIVES)
    assert caps.dtypes == frozenset(D.ALL + D.OPTIONAL + tuple(D.STORAGE) + D.TEXT)  # text: lists of str
    row = next(r for r in ember.registry.backends() if r["name"] == "python")
    assert row["status"] == "ok" and row["origin"] == "python (ember.backends.python)"


def test_module_imports_only_the_standard_library():
    folder = os.path.dirname(PB.__file__)
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".py"):
            continue
        for line in open(os.path.join(folder, name)).read().splitlines():
            if line.startswith(("import ", "from ")):
                top = line.split()[1].split(".")[0]
                assert top in sys.stdlib_module_names or top in {"ember", ""}, f"{name} imports {line!r}"


# ----------------------------------------------------------------------------- creation
@pytest.mark.parametrize("dtype", D.ALL)
@pytest.mark.parametrize("value", [0, 1, 2.5, -1.75, True])
def test_full(dtype, value):
    for shape in [(), (0,), (2, 3)]:
        check("full", shape=shape, value=value, dtype=dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy warns about these values
def test_full_special_values(dtype):
    for value in (math.inf, -math.inf, math.nan, 1e-30, 70000.0):
        check("full", shape=(3,), value=value, dtype=dtype)


@pytest.mark.parametrize(
    "args",
    [
        (0, 10, 1),
        (3, -7, -2),
        (5, 5, 1),
        (0, 1, 0.1),
        (0.3, 2.1, 0.1),
        (-1.5, 7.25, 0.37),
        (10, 0, -1 / 3),
        (0.5, 5, 1),
    ],
)
@pytest.mark.parametrize("dtype", (D.int64, D.int32, D.uint8, D.float16, D.float32, D.float64))
def test_arange_matches_numpy_bit_for_bit(args, dtype):
    if dtype is D.uint8 and (args[1] < 0 or args[0] < 0):
        return
    check("arange", start=args[0], stop=args[1], step=args[2], dtype=dtype)


@pytest.mark.parametrize(
    "shape,seed,offset",
    [
        ((), 0, 0),
        ((0,), 3, 5),
        ((7,), 1, 0),
        ((3, 5), 42, 3),
        ((1000,), 2**64 - 1, 2**35 + 1),
        ((2, 2, 3), 0x1234_5678_9ABC, 7),
    ],
)
def test_random_bits_bit_identical(shape, seed, offset):
    check("random_bits", shape=shape, seed=seed, offset=offset)


def test_philox_known_answer_vector():
    # Random123's kat_vectors: counter 0, key 0 (the only one in ember's (i, 0, 0) counter layout).
    assert PB.philox4x32(0, 1, 0) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    # many blocks at once (several big-int chunks) equal the blocks one at a time
    assert PB.philox4x32(5, 2500, 99)[-8:] == PB.philox4x32(2498, 2499, 99) + PB.philox4x32(2499, 2500, 99)


def test_generators_draw_the_same_numbers_on_both_backends():
    for fn in (ember.rand, ember.randn):
        a = fn(4, 5, generator=ember.Generator(7), backend="numpy")
        b = fn(4, 5, generator=ember.Generator(7), backend="python")
        np.testing.assert_allclose(np.array(b.tolist()), a.numpy(), rtol=1e-6, atol=1e-7)


# ----------------------------------------------------------------------------- unary
EXACT_UNARY = ("neg", "abs", "sign", "floor", "sqrt", "reciprocal")


@pytest.mark.parametrize(
    "name", ["neg", "exp", "log", "sin", "cos", "tanh", "sqrt", "reciprocal", "abs", "sign", "floor", "erf"]
)
@pytest.mark.parametrize("dtype", FLOATS)
def test_unary_float(rng, name, dtype):
    for shape in SHAPES:
        x = sample(rng, shape, dtype, special=True)
        if name == "log":
            x = np.abs(x) if rng.random() < 0.5 else x  # both domains: log(-x) is nan
        with np.errstate(all="ignore"):
            check(name, x, rtol=None if name in EXACT_UNARY else RTOL[dtype], atol=1e-7 if dtype is D.float32 else 0)


@pytest.mark.parametrize("name", ["neg", "abs", "sign", "floor", "reciprocal"])
@pytest.mark.parametrize("dtype", INTS)
def test_unary_int(rng, name, dtype):
    for shape in SHAPES:
        x = sample(rng, shape, dtype)
        if name == "reciprocal":
            x = np.where(x == 0, 1, x).astype(x.dtype)
        check(name, x)


def test_unary_int_wraps_like_numpy():
    check("neg", np.array([0, 1, 255], dtype=np.uint8))
    check("abs", np.array([-(2**63), 5], dtype=np.int64))
    check("neg", np.array([-(2**31), 7], dtype=np.int32))


def test_float_function_of_integers_gets_numpys_dtype():
    check("sqrt", np.array([0, 1, 2, 9], dtype=np.int64), rtol=1e-15)
    check("exp", np.array([0, 1, 2], dtype=np.uint8), rtol=1e-3)


def test_logical_not(rng):
    for shape in SHAPES:
        check("logical_not", sample(rng, shape, D.bool_))


# ----------------------------------------------------------------------------- binary
ARITH = ("add", "sub", "mul", "div", "pow", "maximum", "minimum")


@pytest.mark.parametrize("name", ARITH)
@pytest.mark.parametrize("dtype", FLOATS)
def test_binary_float(rng, name, dtype):
    exact = name in ("add", "sub", "mul", "div", "maximum", "minimum")
    for sa, sb in PAIRS:
        a, b = sample(rng, sa, dtype, special=True), sample(rng, sb, dtype, special=True)
        if name == "pow" and a.size:
            a.reshape(-1)[::3] = 0.0  # 0 ** negative, negative ** fraction, 0 ** 0
        with np.errstate(all="ignore"):
            check(name, a, b, rtol=None if exact else RTOL[dtype])
            check(name, b, a, rtol=None if exact else RTOL[dtype])


@pytest.mark.parametrize("name", ARITH)
@pytest.mark.parametrize("dtype", FLOATS)
def test_binary_float_with_python_scalar(rng, name, dtype):
    x = sample(rng, (3, 4), dtype, special=True)
    for s in (0.1, -2, 3.0, 0.0, 2, math.inf):
        with np.errstate(all="ignore"):
            check(name, x, s, rtol=None if name != "pow" else RTOL[dtype])


@pytest.mark.parametrize("name", ("add", "sub", "mul", "maximum", "minimum", "pow"))
@pytest.mark.parametrize("dtype", INTS)
def test_binary_int_wraps(rng, name, dtype):
    for sa, sb in PAIRS:
        a, b = sample(rng, sa, dtype), sample(rng, sb, dtype)
        if name == "pow":
            b = np.abs(b) % 7
        with np.errstate(all="ignore"):
            check(name, a, b)
            check(name, a, 3)
    big = (
        np.array([2**31 - 1, -(2**31) + 5], dtype=np.int32)
        if dtype is D.int32
        else np.array([np.iinfo(NP[dtype]).max, np.iinfo(NP[dtype]).min], dtype=NP[dtype])
    )
    with np.errstate(all="ignore"):
        check(name, big, big if name != "pow" else np.array([3, 2], dtype=NP[dtype]))


def test_integer_errors_like_numpy():
    with pytest.raises(TypeError):
        PY.impls["div"](to_py(np.array([1, 2])), to_py(np.array([1, 2])))
    with pytest.raises(ValueError):
        PY.impls["pow"](to_py(np.array([1, 2])), to_py(np.array([1, -2])))


def test_bool_add_and_mul_are_or_and():
    a, b = np.array([True, True, False, False]), np.array([True, False, True, False])
    for name in ("add", "mul", "maximum", "minimum"):
        check(name, a, b)


def test_int_tensor_with_float_scalar_promotes_to_float64():
    check("mul", np.array([1, 2, 3]), 0.5)
    check("add", np.array([True, False]), 2)


@pytest.mark.parametrize("name", ("eq", "ne", "lt", "le", "gt", "ge"))
@pytest.mark.parametrize("dtype", D.ALL)
def test_compare(rng, name, dtype):
    for sa, sb in PAIRS:
        a, b = sample(rng, sa, dtype, special=True), sample(rng, sb, dtype, special=True)
        if a.size and b.size and dtype is not D.bool_:
            b = np.where(rng.random(b.shape) < 0.3, b.reshape(-1)[0], b).astype(b.dtype)
        check(name, a, b)
    x = sample(rng, (4,), dtype)
    for s in (0.1, 1, True, 300):
        check(name, x, s)
        check(name, s, x)


@pytest.mark.parametrize("name", ("logical_and", "logical_or", "logical_xor"))
def test_logical(rng, name):
    for sa, sb in PAIRS:
        check(name, sample(rng, sa, D.bool_), sample(rng, sb, D.bool_))


@pytest.mark.parametrize("dtype", D.ALL)
def test_where(rng, dtype):
    for sc, sa, sb in [((3, 4), (3, 4), (3, 4)), ((3, 1), (4,), ()), ((), (2, 3), (2, 1)), ((2, 0), (2, 1), (0,))]:
        check("where", sample(rng, sc, D.bool_), sample(rng, sa, dtype), sample(rng, sb, dtype))
    c, x = sample(rng, (3, 4), D.bool_), sample(rng, (3, 4), dtype)
    if dtype is not D.bool_:
        check("where", c, x, 0)
        check("where", c, 1, x)


@pytest.mark.parametrize("src", D.ALL)
@pytest.mark.parametrize("dst", D.ALL)
def test_cast(rng, src, dst):
    for shape in SHAPES:
        x = sample(rng, shape, src, low=0 if dst.kind == "u" else -3)
        check("cast", x, dtype=dst)
    if src.kind == "f":
        x = np.array([-0.0, 0.5, -2.7, 1e-8, np.nan, np.inf], dtype=NP[src])
        if dst.kind in "fb":
            check("cast", x, dtype=dst)
        else:
            check("cast", x[:4] if dst.kind == "i" else np.abs(x[:4]), dtype=dst)  # in range: exact truncation


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy warns about these values
def test_cast_out_of_range_wraps_as_numpy_on_x86():
    check("cast", np.array([300.0, -1.0, -3.7, 1e10, np.nan]), dtype=D.uint8)
    check("cast", np.array([1e10, -1e10, np.nan, np.inf]), dtype=D.int32)
    check("cast", np.array([1e19, np.nan, -np.inf]), dtype=D.int64)
    check("cast", np.array([70000.0, -1e9, 1e-9]), dtype=D.float16)
    check("cast", np.array([2**40 + 3, -1], dtype=np.int64), dtype=D.int32)


# ----------------------------------------------------------------------------- reductions
AXES = [
    ((), ()),
    ((5,), (0,)),
    ((3, 4), (0,)),
    ((3, 4), (1,)),
    ((3, 4), (0, 1)),
    ((2, 3, 4), (1,)),
    ((2, 3, 4), (0, 2)),
    ((2, 3, 4), (2, 0)),
    ((2, 1, 4), (1,)),
    ((2, 3, 4), ()),
    ((0, 3), (0,)),
    ((2, 0, 3), (2,)),
    ((4, 1, 3, 2), (0, 2)),
    ((3, 4), (-1,)),
]


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("keepdims", [False, True])
def test_sum(rng, dtype, keepdims):
    for shape, axes in AXES:
        x = sample(rng, shape, dtype)
        check("sum", x, axes=axes, keepdims=keepdims, rtol=RTOL.get(dtype, 0) * 4 or None, atol=1e-5)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy warns about these values
def test_sum_special_values():
    check("sum", np.array([[1.0, np.nan], [np.inf, 2.0], [np.inf, -np.inf]], dtype=np.float32), axes=(1,))
    check("sum", np.array([2**62, 2**62, 2**62], dtype=np.int64), axes=(0,))


@pytest.mark.parametrize("name", ("max", "min"))
@pytest.mark.parametrize("dtype", FLOATS + INTS + (D.bool_,))
@pytest.mark.parametrize("keepdims", [False, True])
def test_max_min(rng, name, dtype, keepdims):
    for shape, axes in AXES:
        if any(shape[a] == 0 for a in axes):
            continue  # no identity: tested below
        x = sample(rng, shape, dtype, special=dtype.kind == "f")
        check(name, x, axes=axes, keepdims=keepdims)


def test_max_of_empty_is_an_error():
    with pytest.raises(ValueError):
        PY.impls["max"](to_py(np.zeros((0, 3))), axes=(0,))


@pytest.mark.parametrize("dtype", FLOATS + INTS + (D.bool_,))
def test_argmax(rng, dtype):
    for shape, axis in [((5,), 0), ((3, 4), 0), ((3, 4), 1), ((2, 3, 4), 1), ((2, 3, 4), -1), ((), 0), ((3, 0), 0)]:
        for keepdims in (False, True):
            x = sample(rng, shape, dtype)
            if x.size and dtype is not D.bool_:
                x.reshape(-1)[::2] = x.reshape(-1)[0]  # ties: the first one wins
            check("argmax", x, axis=axis, keepdims=keepdims)
    check("argmax", np.array([[1.0, np.nan, 3.0, np.nan], [0.0, -1.0, 5.0, 5.0]], dtype=np.float32), axis=1)


# ----------------------------------------------------------------------------- movement
def test_reshape_shares_storage_like_numpy(rng):
    x = to_py(sample(rng, (2, 6), D.float32))
    y = PY.impls["reshape"](x, shape=(3, 4))
    PY.assign(x, to_py(np.ones((2, 6), dtype=np.float32)))
    assert PY.to_list(y) == [1.0] * 12
    check("reshape", sample(rng, (2, 3, 4), D.int32), shape=(4, 6))
    check("reshape", sample(rng, (), D.int32), shape=(1, 1))
    check("reshape", sample(rng, (0, 3), D.int32), shape=(3, 0))


@pytest.mark.parametrize(
    "shape,axes",
    [
        ((), ()),
        ((3, 4), (1, 0)),
        ((2, 3, 4), (2, 0, 1)),
        ((2, 3, 4, 5), (0, 2, 3, 1)),
        ((2, 1, 4), (1, 2, 0)),
        ((0, 3), (1, 0)),
        ((2, 3, 4), (0, 1, 2)),
    ],
)
@pytest.mark.parametrize("dtype", (D.float32, D.int64, D.bool_))
def test_permute(rng, shape, axes, dtype):
    check("permute", sample(rng, shape, dtype), axes=axes)


def test_permute_of_permute_and_ops_on_strided_inputs(rng):
    """Inputs that are pending permutes (non-trivial strides) behave as their values."""
    a = sample(rng, (2, 3, 4), D.float32)
    pa = PY.impls["permute"](to_py(a), axes=(2, 0, 1))
    ppa = PY.impls["permute"](pa, axes=(1, 2, 0))  # back to the identity: shares a's list
    same(a, ppa)
    na = np.transpose(a, (2, 0, 1))
    for name in ("exp", "neg", "floor"):
        same(NPB.impls[name](na), PY.impls[name](PY.impls["permute"](to_py(a), axes=(2, 0, 1))), rtol=RTOL[D.float32])
    b = sample(rng, (4, 2, 3), D.float32)
    same(np.add(na, b), PY.impls["add"](pa, to_py(b)))
    same(np.sum(na, axis=(0, 2)), PY.impls["sum"](pa, axes=(0, 2)), rtol=1e-6)
    same(na[1:3, :, ::2], PY.impls["slice"](pa, starts=(1, 0, 0), stops=(3, 2, 3), steps=(1, 1, 2)))
    m = sample(rng, (5, 3), D.float32)
    same(np.matmul(m, m.T), PY.impls["matmul"](to_py(m), PY.impls["permute"](to_py(m), axes=(1, 0))), rtol=1e-6)
    same(np.matmul(m.T, m), PY.impls["matmul"](PY.impls["permute"](to_py(m), axes=(1, 0)), to_py(m)), rtol=1e-6)


@pytest.mark.parametrize(
    "src,dst",
    [
        ((), (2, 3)),
        ((3,), (2, 3)),
        ((3, 1), (3, 4)),
        ((1, 4), (3, 4)),
        ((2, 1, 3), (2, 5, 3)),
        ((1,), (0,)),
        ((3, 4), (3, 4)),
        ((1, 1), (2, 3, 1, 1)),
    ],
)
def test_expand(rng, src, dst):
    check("expand", sample(rng, src, D.float64), shape=dst)


@pytest.mark.parametrize(
    "shape,widths",
    [
        ((3,), ((1, 2),)),
        ((2, 3), ((0, 0), (2, 1))),
        ((2, 3), ((1, 0), (0, 0))),
        ((1, 2, 3, 3), ((0, 0), (0, 0), (1, 1), (2, 2))),
        ((0, 2), ((1, 1), (0, 1))),
    ],
)
@pytest.mark.parametrize("value", [0, -math.inf, 2.5])
def test_pad(rng, shape, widths, value):
    check("pad", sample(rng, shape, D.float32), widths=widths, value=value)
    if value != -math.inf:
        check("pad", sample(rng, shape, D.int32), widths=widths, value=value)


@pytest.mark.parametrize(
    "shape,starts,stops,steps",
    [
        ((10,), (1,), (9,), (3,)),
        ((4, 5), (0, 1), (4, 5), (2, 2)),
        ((4, 5), (1, 0), (3, 5), (1, 1)),
        ((2, 3, 4), (0, 1, 0), (2, 3, 4), (1, 1, 3)),
        ((5,), (2,), (2,), (1,)),
        ((3, 4), (3, 0), (3, 4), (1, 1)),
        ((6, 6), (5, 5), (6, 6), (4, 4)),
        ((), (), (), ()),
    ],
)
def test_slice(rng, shape, starts, stops, steps):
    check("slice", sample(rng, shape, D.int64), starts=starts, stops=stops, steps=steps)


@pytest.mark.parametrize(
    "shapes,axis",
    [
        ([(2, 3), (4, 3), (1, 3)], 0),
        ([(2, 3), (2, 1), (2, 0)], 1),
        ([(2, 3, 4), (2, 3, 1)], -1),
        ([(3,), (0,)], 0),
        ([(2, 2, 2), (2, 3, 2)], 1),
    ],
)
def test_concatenate(rng, shapes, axis):
    xs = [sample(rng, s, D.float32) for s in shapes]
    check("concatenate", *xs, axis=axis)


@pytest.mark.parametrize(
    "shape,axes",
    [
        ((5,), (0,)),
        ((3, 4), (0,)),
        ((3, 4), (1,)),
        ((2, 3, 4), (0, 2)),
        ((2, 3, 4), ()),
        ((), ()),
        ((0, 3), (1,)),
        ((3, 4), (-1,)),
    ],
)
def test_flip(rng, shape, axes):
    check("flip", sample(rng, shape, D.uint8), axes=axes)


# ----------------------------------------------------------------------------- indexing
@pytest.mark.parametrize(
    "shape,ishape,axis",
    [
        ((5,), (3,), 0),
        ((4, 3), (2, 2), 0),
        ((4, 3), (5,), 1),
        ((2, 3, 4), (3,), 1),
        ((2, 3, 4), (), 2),
        ((3, 2), (0,), 0),
    ],
)
def test_take_and_index_add(rng, shape, ishape, axis):
    n = shape[axis]
    idx = rng.integers(-n, n, size=ishape)
    x = sample(rng, shape, D.float32)
    out = check("take", x, idx, axis=axis)
    vals = sample(rng, out.shape, D.float32)
    check("index_add", x, idx, vals, axis=axis, rtol=1e-6)
    xi, vi = sample(rng, shape, D.int64), sample(rng, out.shape, D.int64)
    check("index_add", xi, idx.astype(np.int32), vi, axis=axis)


def test_index_add_accumulates_repeats_and_take_checks_bounds():
    x = np.zeros((4, 2), dtype=np.float64)
    check("index_add", x, np.array([1, 1, -1, 1]), np.ones((4, 2)), axis=0)
    with pytest.raises(IndexError):
        PY.impls["take"](to_py(x), to_py(np.array([4])), axis=0)
    with pytest.raises(IndexError):
        PY.impls["take"](to_py(x), to_py(np.array([-5])), axis=0)


# ----------------------------------------------------------------------------- linalg
@pytest.mark.parametrize(
    "sa,sb",
    [
        ((2, 3), (3, 4)),
        ((1, 5), (5, 1)),
        ((2, 1, 3, 4), (5, 4, 2)),
        ((3, 0), (0, 2)),
        ((0, 3), (3, 2)),
        ((2, 2, 3), (3, 3)),
        ((4, 4), (2, 4, 4)),
    ],
)
@pytest.mark.parametrize("dtype", (D.float16, D.float32, D.float64, D.int32, D.int64, D.uint8))
def test_matmul(rng, sa, sb, dtype):
    with np.errstate(all="ignore"):
        check(
            "matmul",
            sample(rng, sa, dtype),
            sample(rng, sb, dtype),
            rtol=RTOL.get(dtype, 0) * 5 or None,
            atol=1e-5 if dtype is not D.float16 else 1e-2,
        )


CONVS = [  # x shape, w shape, stride, padding, dilation, groups
    ((1, 1, 6, 6), (2, 1, 3, 3), (1, 1), (0, 0), (1, 1), 1),
    ((2, 3, 7, 5), (4, 3, 3, 2), (2, 1), (1, 2), (1, 1), 1),
    ((2, 4, 8, 8), (6, 2, 3, 3), (1, 2), (1, 1), (2, 1), 2),
    ((1, 2, 5, 5), (2, 1, 1, 1), (1, 1), (0, 0), (1, 1), 2),
    ((0, 2, 5, 5), (3, 2, 2, 2), (1, 1), (0, 0), (1, 1), 1),
]


@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups", CONVS)
@pytest.mark.parametrize("dtype", (D.float32, D.float64))
def test_conv2d_and_its_gradients(rng, xs, ws, stride, padding, dilation, groups, dtype):
    p = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    x, w = sample(rng, xs, dtype), sample(rng, ws, dtype)
    out = check("conv2d", x, w, rtol=RTOL[dtype], atol=1e-5, **p)
    g = sample(rng, out.shape, dtype)
    check("conv2d_grad_input", g, w, input_shape=xs, rtol=RTOL[dtype], atol=1e-5, **p)
    check("conv2d_grad_weight", x, g, weight_shape=ws, rtol=RTOL[dtype], atol=1e-5, **p)


@pytest.mark.parametrize(
    "shape,kernel,stride,dilation",
    [
        ((1, 1, 4, 4), (2, 2), (2, 2), (1, 1)),
        ((2, 3, 7, 6), (3, 2), (1, 2), (1, 1)),
        ((5, 5), (2, 3), (1, 1), (2, 1)),
        ((2, 6, 6), (3, 3), (2, 2), (1, 1)),
    ],
)
def test_windows_and_windows_grad(rng, shape, kernel, stride, dilation):
    p = dict(kernel=kernel, stride=stride, dilation=dilation)
    out = check("windows", sample(rng, shape, D.float32), **p)
    check("windows_grad", sample(rng, out.shape, D.float32), input_shape=shape, rtol=1e-6, **p)
    check("windows", sample(rng, shape, D.int64), **p)


# ----------------------------------------------------------------------------- host transfer
@pytest.mark.parametrize("dtype", D.ALL)
def test_bytes_round_trip_matches_numpy_layout(rng, dtype):
    for shape in SHAPES:
        a = sample(rng, shape, dtype, special=dtype.kind == "f")
        raw = NPB.to_bytes(a)
        buf = PY.from_bytes(raw, shape, dtype)
        same(a, buf)
        assert PY.to_bytes(buf) == raw
    with pytest.raises(ValueError):
        PY.from_bytes(b"\x00" * (dtype.itemsize + 1), (1,), dtype)


@pytest.mark.parametrize("dtype", D.ALL)
def test_numpy_and_list_exchange(rng, dtype):
    a = sample(rng, (2, 3), dtype)
    buf = PY.from_numpy(a)
    back = PY.to_numpy(buf)
    assert back.dtype == a.dtype
    np.testing.assert_array_equal(back, a)
    lst = PY.to_list(buf)
    assert lst == a.reshape(-1).tolist() and [type(v) for v in lst] == [type(v) for v in a.reshape(-1).tolist()]
    same(a.T, PY.from_numpy(a.T))  # a strided array
    same(a, PY.from_numpy(a.astype(a.dtype.newbyteorder(">"))))  # a big-endian one


def test_from_list_rounds_and_refuses_out_of_range_ints():
    assert PY.to_list(PY.from_list([0.1], (1,), D.float32)) == [float(np.float32(0.1))]
    assert PY.to_list(PY.from_list([1.9, -1.9], (2,), D.int32)) == [1, -1]
    ints = PY.to_list(PY.from_list([True, 2, np.int64(3)], (3,), D.int64))
    assert ints == [1, 2, 3] and all(type(v) is int for v in ints)
    assert PY.to_list(PY.from_list([np.float32(1.5), 0, math.nan], (3,), D.bool_)) == [True, False, True]
    with pytest.raises(OverflowError):
        PY.from_list([300], (1,), D.uint8)
    with pytest.raises(ValueError):
        PY.from_list([1, 2], (3,), D.int64)


def test_assign_in_place():
    dst = PY.from_list([1.0, 2.0], (2,), D.float32)
    PY.assign(dst, PY.from_list([5.0, 6.0], (2,), D.float32))
    assert PY.to_list(dst) == [5.0, 6.0]


# ----------------------------------------------------------------------------- models
def _mlp_params(backend, seed=0):
    r = np.random.default_rng(seed)
    shapes = {"w1": (128, 784), "b1": (128,), "w2": (10, 128), "b2": (10,)}
    return {k: ember.tensor(r.normal(0, 0.05, s).astype(np.float32), backend=backend) for k, s in shapes.items()}


def _mlp(p, x):
    return (x @ p["w1"].T + p["b1"]).relu() @ p["w2"].T + p["b2"]


def _timed(fn, repeat):
    best = math.inf
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return out, best


@pytest.mark.parametrize("batch", [1, 32])
def test_mlp_forward_matches_numpy(batch, record_property):
    xs = np.random.default_rng(5).random((batch, 784), dtype=np.float32)
    ref = _mlp(_mlp_params("numpy"), ember.tensor(xs, backend="numpy")).numpy()
    params, x = _mlp_params("python"), ember.tensor(xs, backend="python")
    out, seconds = _timed(lambda: _mlp(params, x), 3 if batch == 1 else 1)
    np.testing.assert_allclose(np.array(out.tolist(), dtype=np.float32), ref, rtol=1e-5, atol=1e-5)
    record_property(f"mlp_forward_b{batch}_ms", round(seconds * 1e3, 2))


def test_sgd_training_matches_numpy():
    """Gradients are generic (the VJP table), so training runs on the python backend too."""
    r = np.random.default_rng(4)
    xs, ys = r.random((16, 20), dtype=np.float32), r.integers(0, 3, size=16)
    w0, w1 = r.normal(0, 0.3, (20, 8)).astype(np.float32), r.normal(0, 0.3, (8, 3)).astype(np.float32)
    losses = {}
    for be in ("numpy", "python"):
        w = [ember.tensor(a, backend=be, requires_grad=True) for a in (w0, w1)]
        x, y = ember.tensor(xs, backend=be), ember.tensor(ys, backend=be)
        losses[be] = []
        for _ in range(5):
            logp = ((x @ w[0]).tanh() @ w[1]).log_softmax(-1)
            loss = -logp.gather(1, y.unsqueeze(1)).mean()
            for t in w:
                t.grad = None
            loss.backward()
            with ember.no_grad():
                for t in w:
                    t.sub_(t.grad * 0.5)
            losses[be].append(loss.item())
    assert losses["python"][-1] < losses["python"][0] - 0.05
    np.testing.assert_allclose(losses["python"], losses["numpy"], rtol=1e-5)


def _lenet_params(backend):
    r = np.random.default_rng(1)
    shapes = {"c1": (6, 1, 5, 5), "c2": (16, 6, 5, 5), "f1": (120, 400), "f2": (84, 120), "f3": (10, 84)}
    return {k: ember.tensor(r.normal(0, 0.1, s).astype(np.float32), backend=backend) for k, s in shapes.items()}


def _conv(x, w, padding=(0, 0)):
    from ember.dispatch import apply

    return apply("conv2d", x, w, stride=(1, 1), padding=padding, dilation=(1, 1), groups=1)


def _pool(x):
    from ember.dispatch import apply

    return apply("windows", x, kernel=(2, 2), stride=(2, 2), dilation=(1, 1)).amax((-2, -1))


def _lenet(p, x):
    h = _pool(_conv(x, p["c1"], (2, 2)).relu())
    h = _pool(_conv(h, p["c2"]).relu()).reshape(x.shape[0], 400)
    return ((h @ p["f1"].T).relu() @ p["f2"].T).relu() @ p["f3"].T


def test_lenet_forward_and_backward_match_numpy(record_property):
    xs = np.random.default_rng(2).random((2, 1, 28, 28), dtype=np.float32)
    grads = {}
    for be in ("numpy", "python"):
        p = _lenet_params(be)
        for t in p.values():
            t.requires_grad_()
        out = _lenet(p, ember.tensor(xs, backend=be))
        out.log_softmax(-1).sum().backward()
        grads[be] = (np.array(out.tolist()), {k: np.array(t.grad.tolist()) for k, t in p.items()})
    np.testing.assert_allclose(grads["python"][0], grads["numpy"][0], rtol=1e-5, atol=1e-5)
    for k in grads["numpy"][1]:
        np.testing.assert_allclose(grads["python"][1][k], grads["numpy"][1][k], rtol=1e-4, atol=1e-5)
    p, x1 = _lenet_params("python"), ember.tensor(xs[:1], backend="python")
    _, seconds = _timed(lambda: _lenet(p, x1), 2)
    record_property("lenet_forward_b1_ms", round(seconds * 1e3, 2))


# ----------------------------------------------------------------------------- without numpy
_NO_NUMPY = r"""
import sys, json
sys.modules["numpy"] = None          # `import numpy` now raises ImportError, as in bare Pyodide
import ember
assert not [m for m, mod in sys.modules.items() if mod is not None and m.split(".")[0] == "numpy"]
x = ember.tensor(json.loads(sys.argv[1]))
w = ember.tensor(json.loads(sys.argv[2]), requires_grad=True)
loss = (x @ w).tanh().log_softmax(-1).sum()
loss.backward()
print(json.dumps({"backend": ember.get_backend().name, "x_backend": x.backend.name,
                  "loss": loss.item(), "grad": w.grad.tolist()}))
"""


@pytest.mark.slow
def test_import_and_train_without_numpy():
    r = np.random.default_rng(3)
    x, w = r.normal(size=(4, 3)).astype(np.float32), r.normal(size=(3, 5)).astype(np.float32)
    env = dict(os.environ, EMBER_STRICT_PLUGINS="0")
    env.pop("EMBER_BACKEND", None)
    proc = subprocess.run(
        [sys.executable, "-c", _NO_NUMPY, json.dumps(x.tolist()), json.dumps(w.tolist())],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr, proc.stderr  # no complaint about the missing numpy
    got = json.loads(proc.stdout)
    assert got["backend"] == "python" and got["x_backend"] == "python"
    tw = ember.tensor(w, backend="numpy", requires_grad=True)
    loss = (ember.tensor(x, backend="numpy") @ tw).tanh().log_softmax(-1).sum()
    loss.backward()
    assert math.isclose(got["loss"], loss.item(), rel_tol=1e-5)
    np.testing.assert_allclose(np.array(got["grad"]), tw.grad.numpy(), rtol=1e-4, atol=1e-6)

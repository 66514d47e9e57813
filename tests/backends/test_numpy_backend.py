"""The NumPy reference backend: its Philox core against published answers, its buffers, and
the properties of the primitives that the front end relies on."""

import math
import warnings

import numpy as np
import pytest

import ember
from ember import dtypes as D
from ember.backends.numpy import backend as nb
from ember.primitives import PRIMITIVES, REQUIRED, abstract_eval

BACKEND = ember.get_backend("numpy")

# Random123's kat_vectors, philox4x32 with 10 rounds: counter words, key words, output words.
KAT = [
    (
        (0x00000000, 0x00000000, 0x00000000, 0x00000000),
        (0x00000000, 0x00000000),
        (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8),
    ),
    (
        (0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF),
        (0xFFFFFFFF, 0xFFFFFFFF),
        (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD),
    ),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


@pytest.mark.parametrize("counter,key,expected", KAT)
def test_philox_known_answer_vectors(counter, key, expected):
    words = [np.array([c], dtype=np.uint64) for c in counter]
    out = nb.philox4x32_10(*words, *key)
    assert out.dtype == np.uint32 and out.shape == (1, 4)
    assert [int(w) for w in out[0]] == list(expected)


def test_philox_is_vectorized_over_counters():
    counters = [np.array([KAT[i][0][w] for i in (0, 2)], dtype=np.uint64) for w in range(4)]
    # one key for the whole batch: recompute KAT 2's key with both counters
    out = nb.philox4x32_10(*counters, *KAT[2][1])
    assert [int(w) for w in out[1]] == list(KAT[2][2])
    single = nb.philox4x32_10(*[np.array([KAT[0][0][w]], np.uint64) for w in range(4)], *KAT[2][1])
    np.testing.assert_array_equal(out[0], single[0])


def test_stream_counters_put_the_block_index_in_the_first_two_words():
    blocks = np.array([0, 1, 2**32 + 5], dtype=np.uint64)
    out = nb.philox4x32(blocks, seed=(7 << 32) | 9)
    for row, b in zip(out, [0, 1, 2**32 + 5]):
        ref = nb.philox4x32_10(*[np.array([w], np.uint64) for w in (b & 0xFFFFFFFF, b >> 32, 0, 0)], 9, 7)
        np.testing.assert_array_equal(row, ref[0])


@pytest.mark.parametrize("offset,n", [(0, 0), (0, 5), (3, 1), (6, 9), (4 * 2**32 - 2, 7)])
def test_random_bits_slices_the_block_stream(offset, n):
    seed = 0xDEADBEEF12345678
    first = offset // 4
    stream = nb.philox4x32(np.arange(first, first + (n + 8) // 4 + 2, dtype=np.uint64), seed).reshape(-1)
    got = nb.random_bits((n,), seed, offset)
    assert got.dtype == np.uint32
    np.testing.assert_array_equal(got, stream[offset - 4 * first : offset - 4 * first + n])


def test_every_required_primitive_is_implemented_and_declared():
    assert not [n for n in REQUIRED if n not in BACKEND.impls]
    caps = BACKEND.capabilities()
    assert set(REQUIRED) <= caps.ops and set(D.ALL) <= caps.dtypes


# One sample call per primitive on small inputs, for the checks below.
def _samples():
    f = np.arange(1.0, 7.0, dtype=np.float32).reshape(2, 3)
    x4 = np.arange(32.0, dtype=np.float32).reshape(1, 2, 4, 4)
    w4 = np.ones((3, 2, 2, 2), np.float32)
    yield "full", (), dict(shape=(2,), value=1.5, dtype=D.float32)
    yield "arange", (), dict(start=0, stop=5, step=2, dtype=D.int64)
    yield "random_bits", (), dict(shape=(3,), seed=1, offset=2)
    for name in ["neg", "exp", "log", "sin", "cos", "tanh", "sqrt", "reciprocal", "abs", "sign", "floor", "erf"]:
        yield name, (f,), {}
    yield "logical_not", (f > 2,), {}
    for name in [
        "add",
        "sub",
        "mul",
        "div",
        "pow",
        "maximum",
        "minimum",
        "remainder",
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
    ]:
        yield name, (f, f[:1]), {}
    for name in ["logical_and", "logical_or", "logical_xor"]:
        yield name, (f > 2, f < 5), {}
    yield "where", (f > 2, f, f[0]), {}
    yield "cast", (f,), dict(dtype=D.int32)
    yield "sum", (f,), dict(axes=(1,), keepdims=True)
    yield "max", (f,), dict(axes=(0,))
    yield "min", (f,), dict(axes=(0, 1))
    yield "argmax", (f,), dict(axis=1)
    yield "reshape", (f,), dict(shape=(3, 2))
    yield "permute", (f,), dict(axes=(1, 0))
    yield "expand", (f[:1],), dict(shape=(4, 2, 3))
    yield "pad", (f,), dict(widths=((1, 0), (0, 2)), value=-1.0)
    yield "slice", (f,), dict(starts=(0, 2), stops=(2, 0 + 3), steps=(1, 2))
    yield "concatenate", (f, f), dict(axis=0)
    yield "flip", (f,), dict(axes=(1,))
    yield "take", (f, np.array([[2, -1]])), dict(axis=1)
    yield "index_add", (f, np.array([0, 0]), np.ones((2, 2), np.float32)), dict(axis=1)
    yield "matmul", (f, f.T.copy()), {}
    yield "conv2d", (x4, w4), dict(stride=(1, 2), padding=(1, 0))
    yield (
        "conv2d_grad_input",
        (np.ones((1, 3, 5, 2), np.float32), w4),
        dict(input_shape=(1, 2, 4, 4), stride=(1, 2), padding=(1, 0)),
    )
    yield (
        "conv2d_grad_weight",
        (x4, np.ones((1, 3, 5, 2), np.float32)),
        dict(weight_shape=(3, 2, 2, 2), stride=(1, 2), padding=(1, 0)),
    )
    yield "windows", (x4,), dict(kernel=(2, 3), stride=(2, 1))
    yield (
        "windows_grad",
        (np.ones((1, 2, 2, 2, 2, 3), np.float32),),
        dict(input_shape=(1, 2, 4, 4), kernel=(2, 3), stride=(2, 1)),
    )
    yield "argsort", (f,), dict(axis=0, descending=True)
    yield "argtopk", (f,), dict(k=2, axis=1, largest=False)
    yield "cumsum", (f,), dict(axis=1, reverse=True)
    i = np.arange(6, dtype=np.int32).reshape(2, 3)
    for name in ["bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift"]:
        yield name, (i, i[:1]), {}
    yield "bitwise_not", (i,), {}
    yield "bitcast", (f,), dict(dtype=D.uint32)


SAMPLES = list(_samples())


def test_samples_cover_every_primitive():
    assert sorted(n for n, _, _ in SAMPLES) == sorted(PRIMITIVES)


@pytest.mark.parametrize("name,args,params", SAMPLES, ids=[s[0] for s in SAMPLES])
def test_output_agrees_with_the_abstract_rule(name, args, params):
    out = BACKEND.impls[name](*args, **params)
    avals = [(a.shape, D.get(a.dtype.name)) for a in args]
    shape, dtype = abstract_eval(name, *avals, **params)
    assert type(out) is np.ndarray and out.shape == shape and BACKEND.dtype(out) is dtype


ZERO_D_PARAMS = {
    "sum": dict(axes=()),
    "max": dict(axes=()),
    "min": dict(axes=()),
    "permute": dict(axes=()),
    "flip": dict(axes=()),
    "reshape": dict(shape=()),
    "expand": dict(shape=()),
    "slice": dict(starts=(), stops=(), steps=()),
    "cast": dict(dtype=D.float64),
    "argsort": dict(axis=0),
    "argtopk": dict(k=1, axis=0),
    "cumsum": dict(axis=0),
    "bitcast": dict(dtype=D.uint32),
}
ZERO_D = [
    n
    for n, args, _ in SAMPLES
    if args
    and n
    not in (
        "argmax",
        "concatenate",
        "pad",
        "take",
        "index_add",
        "matmul",
        "conv2d",
        "conv2d_grad_input",
        "conv2d_grad_weight",
        "windows",
        "windows_grad",
    )
]


@pytest.mark.parametrize("name", ZERO_D)
def test_zero_dim_inputs_give_arrays_not_scalars(name):
    """NumPy returns scalars from ufuncs (and x[()]) on 0-d input; a buffer must stay an array,
    because assign() writes into it in place."""
    args = next(a for n, a, _ in SAMPLES if n == name)
    zero_d = tuple(np.asarray(a.reshape(-1)[0]) for a in args)
    out = BACKEND.impls[name](*zero_d, **ZERO_D_PARAMS.get(name, {}))
    assert type(out) is np.ndarray and out.shape == ()
    out = BACKEND.impls["take"](np.arange(3.0), np.asarray(1), axis=0)
    assert type(out) is np.ndarray and out.shape == ()


def test_zero_dim_results_can_be_updated_in_place():
    t = ember.tensor(1.0) * 2
    t.add_(1)
    assert t.item() == 3.0 and isinstance(t.numpy(), np.ndarray)


@pytest.mark.parametrize("dtype", D.ALL, ids=str)
def test_host_round_trips(dtype):
    values = [0, 1, 1, 0, 1, 0] if dtype is D.bool_ else [0, 1, 2, 3, 250, 7]
    buf = BACKEND.from_list(values, (2, 3), dtype)
    assert BACKEND.shape(buf) == (2, 3) and BACKEND.dtype(buf) is dtype
    assert BACKEND.to_list(buf) == [type(BACKEND.to_list(buf)[0])(v) for v in values]
    raw = BACKEND.to_bytes(buf)
    assert raw == np.asarray(values, dtype=np.dtype(dtype.name).newbyteorder("<")).tobytes()
    back = BACKEND.from_bytes(raw, (2, 3), dtype)
    np.testing.assert_array_equal(back, buf)
    dst = BACKEND.from_list([0] * 6, (2, 3), dtype)
    BACKEND.assign(dst, buf)
    np.testing.assert_array_equal(dst, buf)


def test_float16_sum_accumulates_in_float32():
    x = np.full(4096, 0.1, dtype=np.float16)
    got = float(BACKEND.impls["sum"](x, axes=(0,)))
    assert abs(got - 4096 * float(np.float16(0.1))) < 0.5  # a float16 running sum stalls near 256


def test_erf_accuracy():
    xs = np.linspace(-4, 4, 2001)
    ref = np.array([math.erf(v) for v in xs])
    np.testing.assert_allclose(BACKEND.impls["erf"](xs), ref, rtol=0, atol=1e-15)
    assert np.abs(BACKEND.impls["erf"](xs.astype(np.float32)) - ref).max() < 3e-7


def test_windows_grad_is_the_adjoint_of_windows(rng):
    x = rng.standard_normal((2, 3, 7, 6))
    p = dict(kernel=(3, 2), stride=(2, 1), dilation=(2, 1))
    win = BACKEND.impls["windows"](x, **p)
    g = rng.standard_normal(win.shape)
    back = BACKEND.impls["windows_grad"](g, input_shape=x.shape, **p)
    assert np.isclose((win * g).sum(), (x * back).sum(), rtol=1e-12)


def test_conv2d_matches_a_direct_loop(rng):
    x, w = rng.standard_normal((2, 4, 6, 5)), rng.standard_normal((6, 2, 3, 2))
    stride, padding, dilation, groups = (2, 1), (1, 1), (1, 2), 2
    out = BACKEND.impls["conv2d"](x, w, stride, padding, dilation, groups)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros(out.shape)
    for n, o, i, j in np.ndindex(*out.shape):
        gi = o // 3
        for c, a, b in np.ndindex(2, 3, 2):
            ref[n, o, i, j] += xp[n, gi * 2 + c, i * 2 + a, j + 2 * b] * w[o, c, a, b]
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)


def test_ieee_results_come_without_numpy_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert BACKEND.impls["log"](np.zeros(1))[0] == -np.inf
        assert np.isnan(BACKEND.impls["sqrt"](-np.ones(1))[0])
        assert BACKEND.impls["div"](np.ones(1), np.zeros(1))[0] == np.inf
        assert BACKEND.impls["reciprocal"](np.zeros(1))[0] == np.inf


def test_the_old_module_name_still_works_with_a_warning():
    import importlib
    import sys

    sys.modules.pop("ember.backends.numpy_backend", None)
    with pytest.warns(DeprecationWarning, match="moved to ember.backends.numpy.backend"):
        old = importlib.import_module("ember.backends.numpy_backend")
    assert old is nb and old.NumpyBackend is nb.NumpyBackend

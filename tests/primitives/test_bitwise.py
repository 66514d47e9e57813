"""& | ^ ~ << >> on integer tensors (the bitwise primitives, primitives/bitwise.py) against
torch's answers (stored in tests/references), and bitcast against NumPy's view."""

import numpy as np
import pytest
from references import known

import ember

BACKENDS = ["numpy", "python"]
OPS = {
    "and": lambda a, b: a & b,
    "or": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b,
    "lshift": lambda a, b: a << b,
    "rshift": lambda a, b: a >> b,
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
@pytest.mark.parametrize("op", sorted(OPS))
def test_bitwise_operators_match_torch(torch, rng, backend, dtype, op):
    lo = 0 if dtype == "uint8" else -1000
    a = rng.integers(lo, 200, (3, 4)).astype(dtype)
    b = rng.integers(0, 7, (4,)).astype(dtype) if "shift" in op else rng.integers(lo, 200, (4,)).astype(dtype)
    ea, eb = ember.tensor(a, backend=backend), ember.tensor(b, backend=backend)
    ta, tb = torch.tensor(a), torch.tensor(b)
    for got, want in [(OPS[op](ea, eb), OPS[op](ta, tb)), (OPS[op](ea, 3), OPS[op](ta, 3))]:
        want = known(want)
        assert got.dtype.name == want.dtype.name
        np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_invert_is_bitwise_on_integers_and_logical_on_bool(torch, backend):
    for values, dtype in [([0, 5, -7], "int32"), ([0, 5, 255], "uint8"), ([True, False], "bool")]:
        x = np.array(values, dtype=dtype)
        np.testing.assert_array_equal((~ember.tensor(x, backend=backend)).numpy(), known(~torch.tensor(x)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_shift_counts_past_the_width_give_zero_or_the_sign(backend):
    a = ember.tensor([1, -8, 5, -1], dtype=ember.int32, backend=backend)
    b = ember.tensor([31, 32, -1, 40], dtype=ember.int32, backend=backend)
    assert (a << b).tolist() == [-2147483648, 0, 0, 0]
    assert (a >> b).tolist() == [0, -1, 0, -1]


def test_mixed_integer_dtypes_promote_like_torch(torch):
    a, b = np.array([12, 10], np.uint8), np.array([6, 3], np.int32)
    got, want = ember.tensor(a) & ember.tensor(b), known(torch.tensor(a) & torch.tensor(b))
    assert got.dtype.name == want.dtype.name and got.tolist() == want.tolist()


def test_float_operands_have_no_bitwise_shift():
    with pytest.raises(ember.DTypeError, match="needs integer operands, got float32") as err:
        ember.ones(2) << 1
    assert "test_bitwise.py" in str(err.value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bitcast_reads_the_same_bytes(backend):
    from ember import primitives as P

    x = np.array([1.0, -0.0, np.inf, 3.5], np.float32)
    got = P.bitcast(ember.tensor(x, backend=backend), dtype=ember.int32)
    np.testing.assert_array_equal(got.numpy(), x.view(np.int32))
    back = P.bitcast(got, dtype=ember.float32)
    np.testing.assert_array_equal(back.numpy(), x)
    with pytest.raises(ember.DTypeError, match="differ in size"):
        P.bitcast(ember.tensor(x, backend=backend), dtype=ember.int64)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32"])
def test_remainder_takes_the_divisor_sign_like_torch(torch, backend, dtype):
    if dtype.startswith("float"):
        a = np.array([-3, 3, -1, 1, 0, -0.0, 5.5, -5.5, 7, np.nan], dtype)
        b = np.array([np.inf, np.inf, -np.inf, -np.inf, -2, 2, 2, 2, -2.5, 1], dtype)
    else:
        a, b = np.array([7, -7, 7, -7, 0], dtype), np.array([3, 3, -3, -3, 5], dtype)
    got = ember.tensor(a, backend=backend) % ember.tensor(b, backend=backend)
    want = known(torch.remainder(torch.tensor(a), torch.tensor(b)))
    np.testing.assert_array_equal(got.numpy(), want)
    # a zero result takes the divisor's sign (Python's and NumPy's rule; torch keeps the dividend's)
    np.testing.assert_array_equal(np.signbit(got.numpy()), np.signbit(np.remainder(a, b)))
    np.testing.assert_array_equal(
        (7 % ember.tensor(b[:4], backend=backend)).numpy(),
        known(torch.remainder(torch.tensor(7, dtype=torch.tensor(b).dtype), torch.tensor(b[:4]))),
    )

"""The Tensor surface, checked against NumPy (values) and PyTorch (names, dtype rules).

Every check compares shape, dtype and values with a reference library's answer for the same
call; nothing here hard-codes an expected result that the reference could compute. PyTorch's
answers are stored in tests/references (see there); with torch installed they are recomputed.
"""

import math

import numpy as np
import pytest
from references import known

import ember

# torch's dtypes by ember name (uint32 is left out: torch does not promote it).
DTYPES = ["bool", "uint8", "int32", "int64", "float16", "float32", "float64"]


def same(e, ref, rtol=1e-6, atol=1e-7):
    """Assert an ember tensor equals a reference (NumPy array or torch tensor) in shape, dtype
    and values; floats to rtol/atol, everything else exactly."""
    assert isinstance(e, ember.Tensor), type(e)
    ref_np = np.asarray(known(ref))  # torch's dtype names are NumPy's
    assert e.shape == tuple(ref_np.shape), (e.shape, ref_np.shape)
    assert str(e.dtype) == str(ref_np.dtype), (e.dtype, ref_np.dtype)
    got = e.numpy()
    if ref_np.dtype.kind == "f":
        np.testing.assert_allclose(got, ref_np, rtol=rtol, atol=atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, ref_np)


def pair(torch, data, dtype=None):
    """The same values as an ember and a torch tensor."""
    arr = np.asarray(data, dtype=dtype)
    return ember.tensor(arr), torch.tensor(arr)


# ============================================================================== creation
@pytest.mark.parametrize(
    "data",
    [
        [1, 2, 3],
        [[1.0, 2.0], [3.0, 4.0]],
        [True, False],
        [1, 2.5],
        [True, 2],
        [[]],
        [],
        3,
        2.5,
        True,
        [[[1], [2]], [[3], [4]]],
        (1, (2.0,))[:1],
    ],
)
def test_tensor_from_python_matches_torch(torch, data):
    same(ember.tensor(data), torch.tensor(data))


def test_tensor_from_numpy_keeps_dtype_and_copies(torch):
    for np_dtype in ("float64", "float32", "float16", "int32", "int64", "uint8", "bool"):
        arr = (np.arange(6).reshape(2, 3) % 3).astype(np_dtype)
        t = ember.tensor(arr)
        same(t, torch.tensor(arr))
        arr[0, 0] = 1
        assert t.numpy()[0, 0] == 0, "tensor() must copy its input"


def test_tensor_from_tensor_copies_and_casts():
    a = ember.tensor([1.0, 2.0])
    b = ember.tensor(a)
    b.add_(1)
    assert a.tolist() == [1.0, 2.0]
    assert ember.tensor(a, dtype=ember.int32).dtype is ember.int32


def test_as_tensor_shares_memory():
    arr = np.zeros(3, dtype=np.float32)
    t = ember.as_tensor(arr)
    arr[1] = 5
    assert t.tolist() == [0.0, 5.0, 0.0]


def test_ragged_list_is_a_shape_error():
    with pytest.raises(ember.ShapeError, match="ragged"):
        ember.tensor([[1, 2], [3]])


@pytest.mark.parametrize(
    "fn,args,kwargs",
    [
        ("zeros", (2, 3), {}),
        ("zeros", ((2, 3),), {}),
        ("ones", (4,), {}),
        ("ones", (2, 2), {"dtype": "int32"}),
        ("full", ((2, 2), 7), {}),
        ("full", ((3,), 7.5), {}),
        ("full", ((2,), True), {}),
        ("zeros", (0, 3), {}),
        ("ones", ((),), {}),
    ],
)
def test_constant_creation_matches_torch(torch, fn, args, kwargs):
    tkw = {k: getattr(torch, v) for k, v in kwargs.items()}
    same(
        getattr(ember, fn)(*args, **{k: getattr(ember, v) for k, v in kwargs.items()}), getattr(torch, fn)(*args, **tkw)
    )


@pytest.mark.parametrize("args", [(5,), (1, 7, 2), (5, 0, -1), (0, 1, 0.25), (-1.5, 2.0, 0.5), (3, 3), (0.0, 1.0)])
def test_arange_matches_torch(torch, args):
    same(ember.arange(*args), torch.arange(*args))


@pytest.mark.parametrize("args", [(0, 1, 5), (-1, 1, 7), (2, -3, 4), (3, 3, 1), (0, 10, 101)])
def test_linspace_matches_torch(torch, args):
    same(ember.linspace(*args), torch.linspace(*args), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("args", [(3,), (2, 4), (4, 2), (0,)])
def test_eye_matches_torch(torch, args):
    same(ember.eye(*args), torch.eye(*args))


def test_random_creation_is_seeded():
    for fn, args, kwargs in [
        (ember.rand, (2, 3), {}),
        (ember.randn, (4,), {}),
        (ember.randint, (0, 10), {"size": (5,)}),
        (ember.rand, (3,), {"dtype": ember.float64}),
    ]:
        ember.manual_seed(123)
        a = fn(*args, **kwargs)
        ember.manual_seed(123)
        b = fn(*args, **kwargs)
        ember.manual_seed(124)
        c = fn(*args, **kwargs)
        assert a.equal(b), fn
        assert not a.equal(c), fn
    ember.manual_seed(0)
    assert ember.rand(2, 3).dtype is ember.float32 and ember.randn(2, 3).shape == (2, 3)
    r = ember.randint(-3, 4, size=(1000,))
    assert r.dtype is ember.int64 and sorted(set(r.tolist())) == list(range(-3, 4))
    u = ember.rand(1000)
    assert u.amin().item() >= 0 and u.amax().item() < 1


# ============================================================================== dtype promotion
@pytest.mark.parametrize("a", DTYPES)
@pytest.mark.parametrize("b", DTYPES)
def test_binary_promotion_matches_torch(torch, a, b):
    expected = known(lambda: str(torch.promote_types(getattr(torch, a), getattr(torch, b)))).replace("torch.", "")
    assert ember.promote_types(ember.dtypes.get(a), ember.dtypes.get(b)).name == expected
    x, y = ember.ones(2, dtype=a), ember.ones(2, dtype=b)
    tx, ty = torch.ones(2, dtype=getattr(torch, a)), torch.ones(2, dtype=getattr(torch, b))
    same(x * y, tx * ty)
    same(x == y, tx == ty)
    if "bool" not in (a, b):  # torch refuses to subtract bools
        same(x - y, tx - ty)
    same(x / y, tx / ty)


@pytest.mark.parametrize("a", DTYPES)
@pytest.mark.parametrize("scalar", [True, 3, 2.5])
def test_scalar_promotion_matches_torch(torch, a, scalar):
    x = ember.tensor(np.array([0, 1, 1], dtype=a))
    tx = torch.tensor(np.array([0, 1, 1], dtype=a))
    same(x + scalar, tx + scalar, rtol=1e-3)
    same(scalar + x, scalar + tx, rtol=1e-3)
    same(x * scalar, tx * scalar, rtol=1e-3)
    same(scalar * x, scalar * tx, rtol=1e-3)
    same(x / scalar, tx / scalar, rtol=1e-3)
    same(x > scalar, tx > scalar)


# ============================================================================== arithmetic
SHAPE_PAIRS = [((3,), (2, 3)), ((2, 1, 4), (3, 1)), ((), (2, 2)), ((1,), (5,)), ((0, 3), (1, 3)), ((4, 1), (1, 5))]
OPS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "pow": lambda a, b: a**b,
    "maximum": lambda a, b: a.maximum(b),
    "minimum": lambda a, b: a.minimum(b),
    "lt": lambda a, b: a < b,
    "ge": lambda a, b: a >= b,
    "eq": lambda a, b: a == b,
}


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shapes", SHAPE_PAIRS)
def test_broadcasting_binary_ops_match_torch(torch, rng, op, shapes):
    a_np = rng.uniform(0.5, 2, shapes[0]).astype(np.float32)
    b_np = rng.uniform(0.5, 2, shapes[1]).astype(np.float32)
    f = OPS[op]
    same(f(ember.tensor(a_np), ember.tensor(b_np)), f(torch.tensor(a_np), torch.tensor(b_np)), rtol=1e-6)
    same(f(ember.tensor(b_np), ember.tensor(a_np)), f(torch.tensor(b_np), torch.tensor(a_np)), rtol=1e-6)


@pytest.mark.parametrize(
    "expr",
    [
        lambda x: 2 - x,
        lambda x: 2 / x,
        lambda x: 2**x,
        lambda x: 3 * x,
        lambda x: 1 + x,
        lambda x: x**2,
        lambda x: x**0.5,
        lambda x: x**-1,
        lambda x: -x,
        lambda x: abs(x - 1.5),
        lambda x: x // 0.7,
        lambda x: x % 0.7,
        lambda x: (-x) // 0.7,
        lambda x: (-x) % 0.7,
        lambda x: x < 1.5,
        lambda x: x.maximum(x * 0 + 1),
    ],
)
def test_scalar_and_reversed_ops_match_torch(torch, rng, expr):
    a = rng.uniform(0.5, 3, (2, 3)).astype(np.float32)
    same(expr(ember.tensor(a)), expr(torch.tensor(a)), rtol=1e-6)


INT_EXPRS = {  # name -> (expression, valid for unsigned types: no negation)
    "mul_float": (lambda x: x * 0.5, True),
    "div_int": (lambda x: x / 2, True),
    "rdiv": (lambda x: 7 / x, True),
    "floordiv": (lambda x: x // 3, True),
    "mod": (lambda x: x % 3, True),
    "neg_floordiv": (lambda x: (-x) // 3, False),
    "neg_mod": (lambda x: (-x) % 3, False),
    "add_bool": (lambda x: x + True, True),
    "square": (lambda x: x**2, True),
    "rpow": (lambda x: 2**x, True),
    "mul_float_tensor": (lambda x: x * x.float(), True),
    "float_minus_int": (lambda x: x.float() - x, True),
    "add_double": (lambda x: x + x.double(), True),
    "neg": (lambda x: -x, False),
    "floordiv_tensor": (lambda x: (x * 7) // (x + 1), True),
    "mod_neg_divisor": (lambda x: x % -4, False),
    "big_floordiv": (lambda x: (x + 2**40) // 3, False),
}


@pytest.mark.parametrize(
    "name,dtype",
    [
        (n, d)
        for n, (_, unsigned_ok) in INT_EXPRS.items()
        for d in ("int64", "int32", "uint8")
        if (unsigned_ok or d != "uint8") and (n != "big_floordiv" or d == "int64")
    ],
)
def test_integer_arithmetic_matches_torch(torch, name, dtype):
    expr, _ = INT_EXPRS[name]
    a = np.array([[1, 2, 3], [4, 5, 7]], dtype=dtype)
    same(expr(ember.tensor(a)), expr(torch.tensor(a)))


def test_bool_arithmetic_and_logic_match_torch(torch):
    a, ta = pair(torch, [True, False, True, False])
    b, tb = pair(torch, [True, True, False, False])
    same(a + b, ta + tb)
    same(a * b, ta * tb)
    same(a & b, ta & tb)
    same(a | b, ta | tb)
    same(a ^ b, ta ^ tb)
    same(~a, ~ta)
    same(a + 1, ta + 1)
    same(a * 2.5, ta * 2.5)
    same(a.sum(), ta.sum())


def test_elementwise_functions_match_torch(torch, rng):
    a = rng.uniform(-2, 2, (3, 4)).astype(np.float32)
    x, tx = ember.tensor(a), torch.tensor(a)
    for name in [
        "exp",
        "sin",
        "cos",
        "tanh",
        "abs",
        "sign",
        "floor",
        "ceil",
        "round",
        "erf",
        "sigmoid",
        "relu",
        "square",
        "expm1",
        "neg",
    ]:
        same(getattr(x, name)(), getattr(tx, name)(), rtol=2e-6, atol=2e-6)
    p, tp = x.abs() + 0.1, tx.abs() + 0.1
    for name in ["log", "sqrt", "rsqrt", "reciprocal", "log1p"]:
        same(getattr(p, name)(), getattr(tp, name)(), rtol=2e-6, atol=1e-6)
    same(x.clamp(-1, 0.5), tx.clamp(-1, 0.5))
    same(x.clamp(min=0), tx.clamp(min=0))
    same(ember.exp(x), torch.exp(tx))
    n, tn = ember.tensor([1.0, math.inf, -math.inf, math.nan]), torch.tensor([1.0, math.inf, -math.inf, math.nan])
    same(n.isnan(), tn.isnan())
    same(n.isinf(), tn.isinf())
    same(n.isfinite(), tn.isfinite())


# ============================================================================== reductions
RED_DIMS = [None, 0, 1, -1, (0, 2), (-1, 0)]


@pytest.mark.parametrize("dim", RED_DIMS)
@pytest.mark.parametrize("keepdim", [False, True])
def test_float_reductions_match_torch(torch, rng, dim, keepdim):
    a = rng.standard_normal((3, 4, 5)).astype(np.float32)
    x, tx = ember.tensor(a), torch.tensor(a)
    kw = {} if dim is None else {"dim": dim, "keepdim": keepdim}
    for name in ("sum", "mean", "var", "std", "amax", "amin", "logsumexp"):
        tkw = dict(kw) if kw or name != "logsumexp" else {"dim": (0, 1, 2)}
        same(getattr(x, name)(**kw), getattr(tx, name)(**tkw), rtol=1e-5, atol=1e-6)
    same(x.var(**kw, correction=0), tx.var(**kw, correction=0), rtol=1e-5, atol=1e-6)
    same(x.norm(**kw), tx.norm(**kw), rtol=1e-5, atol=1e-6)
    same(x.norm(p=1, **kw), tx.norm(p=1, **kw), rtol=1e-5, atol=1e-6)
    same(x.norm(p=3, **kw), tx.norm(p=3, **kw), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "int64", "int32", "uint8", "bool"])
def test_integer_reductions_match_torch(torch, dtype):
    a = np.array([[3, 1, 3, 0], [2, 2, 0, 5], [0, 4, 4, 1]]).astype(dtype)
    x, tx = ember.tensor(a), torch.tensor(a)
    same(x.sum(), tx.sum())
    same(x.sum(1), tx.sum(1))
    for d in (0, 1, -1):
        if dtype != "bool":
            v, i = x.max(d)
            tv, ti = known(tx.max(d))
            same(v, tv)
            same(i, ti)
            v, i = x.min(d, keepdim=True)
            tv, ti = known(tx.min(d, keepdim=True))
            same(v, tv)
            same(i, ti)
        if dtype == "bool":  # torch has no argmax of bools; ours must agree with the int64 answer
            tx = torch.tensor(a.astype(np.int64))
        same(x.argmax(d), tx.argmax(d))
        same(x.argmin(d), tx.argmin(d))
        same(x.argmax(d, keepdim=True), tx.argmax(d, keepdim=True))
        tx = torch.tensor(a)
        same(x.all(d), tx.all(d).bool())  # torch keeps uint8 here (a legacy quirk); NumPy says bool
        same(x.any(d), tx.any(d).bool())
    ti = torch.tensor(a.astype(np.int64))
    same(x.argmax(), ti.argmax())
    same(x.argmin(), ti.argmin())
    same(x.all(), tx.all().bool())
    same(x.any(), tx.any().bool())
    if dtype != "bool":
        same(x.max(), tx.max())
        same(x.min(), tx.min())


def test_argmin_argmax_extreme_integers(torch):
    big = np.iinfo(np.int64)
    for a in (
        np.array([5, big.min, big.max, 0]),
        np.array([0, 255, 1], dtype=np.uint8),
        np.array([3.0, -np.inf, np.inf, 1.0], dtype=np.float32),
    ):
        x, tx = ember.tensor(a), torch.tensor(a)
        same(x.argmin(), tx.argmin())
        same(x.argmax(), tx.argmax())


def test_all_any_on_empty_dims(torch):
    for shape, dim in [((0,), None), ((0, 3), 0), ((3, 0), 1), ((3, 0), 0), ((2, 0, 2), -2)]:
        x, tx = ember.zeros(shape), torch.zeros(shape)
        kw = {} if dim is None else {"dim": dim}
        same(x.all(**kw), tx.all(**kw))
        same(x.any(**kw), tx.any(**kw))
        same(x.sum(**kw), tx.sum(**kw))


def test_logsumexp_softmax_extremes_match_torch(torch):
    a = np.array([[1000.0, 1000.0, -1000.0], [-np.inf, -np.inf, -np.inf], [0.0, -np.inf, 1.0]], dtype=np.float32)
    x, tx = ember.tensor(a), torch.tensor(a)
    same(x.logsumexp(1), tx.logsumexp(1))
    same(x[[0, 2]].softmax(1), tx[[0, 2]].softmax(1))
    same(x[[0, 2]].log_softmax(-1), tx[[0, 2]].log_softmax(-1))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_cumsum_match_torch(torch, rng, dim):
    a = rng.standard_normal((3, 4, 5)).astype(np.float32)
    x, tx = ember.tensor(a), torch.tensor(a)
    same(x.softmax(dim), tx.softmax(dim), rtol=1e-5, atol=1e-6)
    same(x.log_softmax(dim), tx.log_softmax(dim), rtol=1e-5, atol=1e-6)
    same(x.cumsum(dim), tx.cumsum(dim), rtol=1e-5, atol=1e-5)
    i = np.arange(60).reshape(3, 4, 5)
    same(ember.tensor(i).cumsum(dim), torch.tensor(i).cumsum(dim))


# ============================================================================== movement
MOVES = [
    lambda x: x.reshape(4, -1),
    lambda x: x.reshape(-1),
    lambda x: x.view(2, 2, 15),
    lambda x: x.reshape((5, -1, 3)),
    lambda x: x.permute(2, 0, 1),
    lambda x: x.permute((1, 2, 0)),
    lambda x: x.transpose(0, 2),
    lambda x: x.transpose(-1, -2),
    lambda x: x.unsqueeze(0),
    lambda x: x.unsqueeze(-1),
    lambda x: x.unsqueeze(2),
    lambda x: x[:, :1].squeeze(),
    lambda x: x[:, :1].squeeze(1),
    lambda x: x[:, :1].squeeze(0),
    lambda x: x[:1, :, :1].squeeze((0, 2)),
    lambda x: x[:, :1].expand(3, 4, 5),
    lambda x: x[:, :1].expand(2, -1, 4, -1),
    lambda x: x.flatten(),
    lambda x: x.flatten(1),
    lambda x: x.flatten(0, 1),
    lambda x: x.flatten(-2, -1),
    lambda x: x.flip(0),
    lambda x: x.flip((0, 2)),
    lambda x: x.flip(-1),
    lambda x: x.narrow(1, 1, 2),
    lambda x: x.narrow(-1, 3, 2),
    lambda x: x.narrow(0, -2, 2),
    lambda x: x.repeat(2, 1, 3),
    lambda x: x.repeat(2, 1, 1, 2),
    lambda x: x.mT,
    lambda x: x.reshape(12, 5).T,
    lambda x: x.reshape(12, 5).t(),
    lambda x: x[:, :1].expand_as(x),
    lambda x: x[:, None, :1].expand(3, 2, 4, 5),
]


@pytest.mark.parametrize("move", MOVES)
def test_movement_matches_torch(torch, move):
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    same(move(ember.tensor(a)), move(torch.tensor(a)))


@pytest.mark.parametrize("args", [(2, 0), (3, 1), (2, -1), (5, 2), (4, 0)])
def test_chunk_matches_torch(torch, args):
    a = np.arange(60).reshape(3, 4, 5)
    got, ref = ember.tensor(a).chunk(*args), known(torch.tensor(a).chunk(*args))
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        same(g, r)


@pytest.mark.parametrize("args", [(2, 0), (3, 1), (2, -1), ([1, 3, 1], 2), ([4], 1)])
def test_split_matches_torch(torch, args):
    a = np.arange(60).reshape(3, 4, 5)
    got, ref = ember.tensor(a).split(*args), known(torch.tensor(a).split(*args))
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        same(g, r)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_and_stack_match_torch(torch, dim):
    parts = [np.arange(6).reshape(2, 3), np.ones((2, 3), dtype=np.float32), np.zeros((2, 3), dtype=np.int32)]
    same(ember.cat([ember.tensor(p) for p in parts], dim), torch.cat([torch.tensor(p) for p in parts], dim))
    same(ember.stack([ember.tensor(p) for p in parts], dim), torch.stack([torch.tensor(p) for p in parts], dim))
    same(
        ember.cat([ember.tensor(parts[0]), ember.zeros(2, 0)], 1),
        torch.cat([torch.tensor(parts[0]), torch.zeros(2, 0)], 1),
    )


# ============================================================================== matmul, where, casts
@pytest.mark.parametrize(
    "sa,sb",
    [
        ((3,), (3,)),
        ((2, 3), (3,)),
        ((3,), (3, 4)),
        ((2, 3), (3, 4)),
        ((2, 1, 3, 4), (5, 4, 2)),
        ((4,), (2, 4, 5)),
        ((2, 3, 4), (4,)),
        ((1, 2, 3), (6, 3, 1)),
        ((0, 3), (3, 2)),
        ((2, 0), (0, 3)),
    ],
)
def test_matmul_matches_torch(torch, rng, sa, sb):
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
    same(ember.tensor(a) @ ember.tensor(b), torch.tensor(a) @ torch.tensor(b), rtol=1e-5, atol=1e-6)
    same(
        ember.matmul(ember.tensor(a), ember.tensor(b)),
        torch.matmul(torch.tensor(a), torch.tensor(b)),
        rtol=1e-5,
        atol=1e-6,
    )


def test_integer_matmul_matches_torch(torch):
    a, b = np.arange(6).reshape(2, 3), np.arange(12).reshape(3, 4)
    same(ember.tensor(a) @ ember.tensor(b), torch.tensor(a) @ torch.tensor(b))


@pytest.mark.parametrize(
    "x,y",
    [
        (np.arange(4.0), -1.0),
        (2, np.arange(4)),
        (np.arange(4), 2.5),
        (np.arange(4, dtype=np.float64), np.ones((3, 1), np.float32)),
        (np.arange(4), np.ones(4, np.int32)),
        (1.0, 0.0),
        (np.array(True), np.array([False, False, True, True])),
    ],
)
def test_where_matches_torch(torch, x, y):
    cond = np.array([True, False, False, True])
    conv = lambda lib, v: lib.tensor(v) if isinstance(v, np.ndarray) else v  # noqa: E731
    same(
        ember.where(ember.tensor(cond), conv(ember, x), conv(ember, y)),
        torch.where(torch.tensor(cond), conv(torch, x), conv(torch, y)),
    )


@pytest.mark.parametrize("src", ["float32", "float64", "int64", "int32", "uint8", "bool", "float16"])
@pytest.mark.parametrize("dst", ["float32", "float64", "int64", "int32", "uint8", "bool", "float16"])
def test_casts_match_torch(torch, src, dst):
    a = np.array([-1.7, -0.5, 0.0, 0.5, 1.7, 2.0, 200.3]).astype(src)
    if src in ("uint8", "bool") or dst == "uint8":
        a = np.abs(a).astype(src)  # negative floats to uint8 are undefined behaviour in C
    same(ember.tensor(a).to(getattr(ember, dst if dst != "bool" else "bool_")), torch.tensor(a).to(getattr(torch, dst)))


def test_cast_method_spellings():
    x = ember.tensor([1.5, -2.5])
    assert x.float().dtype is ember.float32 and x.double().dtype is ember.float64
    assert x.half().dtype is ember.float16 and x.long().dtype is ember.int64
    assert x.int().dtype is ember.int32 and x.bool().dtype is ember.bool_
    assert x.long().tolist() == [1, -2]
    assert x.type_as(ember.tensor([1])).dtype is ember.int64
    assert x.to("float64").dtype is ember.float64 and x.to(ember.float32) is x


# ============================================================================== host exchange
def test_numpy_and_array_protocol():
    x = ember.tensor([[1, 2], [3, 4]], dtype=ember.int32)
    arr = x.numpy()
    assert isinstance(arr, np.ndarray) and arr.dtype == np.int32 and arr.tolist() == [[1, 2], [3, 4]]
    np.testing.assert_array_equal(np.asarray(x), arr)
    assert np.asarray(x, dtype=np.float64).dtype == np.float64
    assert (np.add(x, 1) == arr + 1).all()


@pytest.mark.parametrize("shape", [(), (0,), (2, 0), (0, 3), (3, 0, 2), (1,), (2, 3), (1, 1, 1)])
def test_tolist_matches_numpy(shape):
    a = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    assert ember.tensor(a).tolist() == a.tolist()
    assert ember.tensor(a.astype(np.float32)).tolist() == a.astype(np.float32).tolist()
    assert ember.tensor(a > 0).tolist() == (a > 0).tolist()


def test_item_and_python_conversions():
    assert ember.tensor(2.5).item() == 2.5 and isinstance(ember.tensor(2.5).item(), float)
    assert ember.tensor([7]).item() == 7 and isinstance(ember.tensor([7]).item(), int)
    assert ember.tensor(True).item() is True
    assert float(ember.tensor([[1.5]])) == 1.5 and int(ember.tensor(3)) == 3
    assert [1, 2, 3][ember.tensor(1)] == 2
    with pytest.raises(ember.ShapeError, match=r"\(2,\)"):
        ember.tensor([1, 2]).item()
    with pytest.raises(ember.ShapeError):
        bool(ember.tensor([1, 2]))
    assert len(ember.zeros(4, 2)) == 4 and [t.shape for t in ember.zeros(2, 3)] == [(3,), (3,)]


def test_repr_shows_values_dtype_and_grad():
    assert repr(ember.tensor([1.0, 2.5])) == "tensor([1. , 2.5])"
    assert repr(ember.tensor([1, 2])) == "tensor([1, 2])"
    assert "dtype=float64" in repr(ember.tensor([1.0], dtype=ember.float64))
    assert "dtype=" not in repr(ember.tensor([True]))
    w = ember.ones(2, requires_grad=True)
    assert "requires_grad=True" in repr(w)
    assert "grad_fn=mul" in repr(w * 2)
    assert repr(ember.zeros(0, 3)).startswith("tensor([]")
    assert "..." in repr(ember.zeros(1000))


def test_size_numel_dim_properties():
    x = ember.zeros(2, 3, 4)
    assert x.size() == (2, 3, 4) and x.size(-1) == 4 and x.numel() == 24 and x.dim() == 3 == x.ndim
    assert x.device == "cpu" and x.backend.name == "numpy" and x.is_leaf


def test_T_reverses_all_dims_like_numpy():
    a = np.arange(24.0, dtype=np.float32).reshape(2, 3, 4)
    same(ember.tensor(a).T, a.T)


def test_a_0d_tensor_formats_as_its_number():
    assert f"{ember.tensor(2.5):6.2f}" == "  2.50" and f"{ember.tensor(3):d}" == "3"
    assert f"{ember.tensor([1.0, 2.0])}" == repr(ember.tensor([1.0, 2.0]))
    with pytest.raises(TypeError):
        f"{ember.tensor([1.0]):.2f}"  # as torch: only 0-d tensors take a format

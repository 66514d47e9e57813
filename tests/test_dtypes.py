"""dtypes: the names users write and the promotion rules, against NumPy and PyTorch."""

import copy
import pickle

import numpy as np
import pytest
from references import known

import ember
from ember import dtypes as D
from ember.backend import BackendInfo, Capabilities

# torch cannot promote uint16, uint32 or uint64
TORCH_NAMES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"]
INTEGERS = [d for d in D.ALL + D.OPTIONAL if d.kind in "iu"]


@pytest.mark.parametrize("dtype", D.ALL + D.OPTIONAL, ids=str)
def test_every_dtype_matches_numpy(dtype):
    ref = np.dtype(dtype.name)
    assert dtype.itemsize == ref.itemsize
    assert dtype.is_floating_point == (ref.kind == "f")
    assert dtype.kind == ref.kind
    assert str(dtype) == ref.name and repr(dtype) == f"ember.{dtype.name}"
    for spelling in (dtype, dtype.name, ref, ref.type):
        assert D.get(spelling) is dtype
    assert copy.deepcopy(dtype) is dtype and pickle.loads(pickle.dumps(dtype)) is dtype


def test_python_types_and_torch_aliases():
    assert D.get(bool) is ember.bool and D.get(int) is ember.int64 and D.get(float) is ember.float32
    for alias, dtype in [
        ("float", ember.float32),
        ("double", ember.float64),
        ("half", ember.float16),
        ("long", ember.int64),
        ("int", ember.int64),
        ("bool_", ember.bool_),
    ]:
        assert D.get(alias) is dtype
    assert ember.bool is ember.bool_
    with pytest.raises(ember.DTypeError, match="complex128"):
        D.get("complex128")


@pytest.mark.parametrize("a", TORCH_NAMES)
@pytest.mark.parametrize("b", TORCH_NAMES)
def test_promotion_matches_torch(torch, a, b):
    expected = known(lambda: str(torch.promote_types(getattr(torch, a), getattr(torch, b)))).replace("torch.", "")
    assert D.promote(D.get(a), D.get(b)).name == expected
    assert D.promote(D.get(b), D.get(a)).name == expected


def test_promotion_lattice_properties():
    known = D.ALL + D.OPTIONAL + (D.bfloat16,)
    for a in known:
        assert D.promote(a, a) is a
        for b in known:
            assert D.promote(a, b) is D.promote(b, a)
            for c in known:
                if {ember.uint64, ember.float16, ember.bfloat16, ember.float32} & {a, b, c} > {ember.uint64}:
                    continue  # NumPy's uint64 + signed -> float64 is not associative with the narrower floats
                assert D.promote(D.promote(a, b), c) is D.promote(a, D.promote(b, c)), (a, b, c)
    assert D.promote(ember.uint32, ember.int32) is ember.int32  # documented: simpler than NumPy


@pytest.mark.parametrize("a", INTEGERS, ids=str)
@pytest.mark.parametrize("b", INTEGERS, ids=str)
def test_integer_promotion_matches_numpy_but_for_uint32_with_signed(a, b):
    expected = np.promote_types(a.name, b.name).name
    if {a.kind, b.kind} == {"u", "i"} and ember.uint32 in (a, b) and max(a.itemsize, b.itemsize) == 4:
        expected = "int32"  # ember's documented exception (SIGNED_HOLDING)
    assert D.promote(a, b).name == expected


@pytest.mark.parametrize("dtype", D.OPTIONAL, ids=str)
def test_optional_dtypes_compute_on_numpy_and_python_alike(dtype):
    info = np.iinfo(dtype.name)
    values = [info.min, info.max, 0, 1, 7, info.max // 3]
    got = {}
    for backend in ("numpy", "python"):
        x = ember.tensor(values, dtype=dtype, backend=backend)
        y = ember.tensor(np.array(values[::-1], dtype=dtype.name)).to(backend)
        got[backend] = [
            (x + y).tolist(), (x * 3).tolist(), (x > y).tolist(), ember.maximum(x, y).tolist(),
            x.clamp(0, 100).tolist(), (x & y).tolist(), (x << 1).tolist(), x.sum().item(),
            x.amax().item(), ember.where(x > 1, x, y).tolist(), x[1:4].tolist(), x.to(ember.float64).tolist(),
        ]  # fmt: skip
        assert (x + y).dtype is dtype and (x == y).dtype is ember.bool
    assert got["numpy"] == got["python"]
    a = np.array(values, dtype=dtype.name)
    with np.errstate(over="ignore"):
        assert got["numpy"][0] == (a + a[::-1]).tolist()
    assert got["numpy"][7] == int(a.sum(dtype=np.int64))  # torch's rule: every integer dtype sums in int64


class ContractOnly(type(ember.get_backend("numpy"))):
    """The numpy backend's code, declaring only the dtypes every backend must compute."""

    name = "contract_only"

    def capabilities(self):
        return Capabilities(ops=frozenset(self.impls), dtypes=frozenset(D.ALL))


@pytest.fixture
def contract_only():
    from ember.registry import REGISTRY

    ember.register_backend(BackendInfo(ContractOnly.name, ContractOnly))
    yield
    for table in (REGISTRY.infos, REGISTRY.origin, REGISTRY.loaded):
        table.pop(ContractOnly.name, None)


def test_a_backend_without_an_optional_dtype_names_it_at_the_users_line(contract_only):
    small = ember.tensor([1, 2], dtype=ember.int8)
    attempts = [
        lambda: ember.tensor([1, 2], dtype=ember.int8, backend="contract_only"),
        lambda: ember.tensor(np.zeros(2, np.uint16), backend="contract_only"),
        lambda: ember.zeros(2, dtype=ember.int16, backend="contract_only"),
        lambda: ember.arange(3, dtype=ember.uint64, backend="contract_only"),
        lambda: small.to("contract_only"),
        lambda: ember.ones(2, backend="contract_only").to(ember.int8),
        lambda: ember.ones(2, backend="contract_only").to(ember.bfloat16),
    ]
    for attempt in attempts:
        with pytest.raises(
            ember.DTypeError, match=r"dtype \w+ is not supported by backend 'contract_only'.*test_dtypes"
        ):
            attempt()
    assert small.to(ember.int32).to("contract_only").tolist() == [1, 2]  # the way out the message names


@pytest.mark.parametrize("a", TORCH_NAMES)
@pytest.mark.parametrize("scalar", [False, 7, -2.5])
def test_tensor_scalar_result_dtype_matches_torch(torch, a, scalar):
    expected = known(lambda: str(torch.result_type(torch.zeros(1, dtype=getattr(torch, a)), scalar))).replace(
        "torch.", ""
    )
    assert D.result_with_scalar(D.get(a), scalar).name == expected


def test_scalar_dtypes_match_torch(torch):
    for value in (True, 3, 2.5):
        assert D.scalar_dtype(value).name == known(lambda: str(torch.tensor(value).dtype)).replace("torch.", "")


@pytest.mark.parametrize("spelling", ["float64", ember.float64, np.float64, np.dtype("float64"), "double"])
def test_creation_accepts_every_spelling(spelling):
    assert ember.zeros(2, dtype=spelling).dtype is ember.float64
    assert ember.tensor([1, 2], dtype=spelling).dtype is ember.float64
    assert ember.ones(1).to(spelling).dtype is ember.float64

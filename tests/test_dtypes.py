"""dtypes: the names users write and the promotion rules, against NumPy and PyTorch."""

import copy
import pickle

import numpy as np
import pytest
from references import known

import ember
from ember import dtypes as D

TORCH_NAMES = ["bool", "uint8", "int32", "int64", "float16", "float32", "float64"]  # torch cannot promote uint32


@pytest.mark.parametrize("dtype", D.ALL, ids=str)
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
    for a in D.ALL:
        assert D.promote(a, a) is a
        for b in D.ALL:
            for c in D.ALL:
                assert D.promote(D.promote(a, b), c) is D.promote(a, D.promote(b, c))
    assert D.promote(ember.uint32, ember.int32) is ember.int32  # documented: simpler than NumPy


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

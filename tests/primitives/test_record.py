"""The primitive record: a str equal to its name that carries spec, rules and cases."""

import copy
import json
import pickle

import pytest

import ember
from ember import primitives as P
from ember.primitives import GROUPS, NON_DIFFERENTIABLE, PRIMITIVES


def test_a_record_is_its_name_for_name_keyed_tables():
    assert P.add == "add" and hash(P.add) == hash("add") and str(P.add) == "add" == P.add.name
    assert {"add": 1}[P.add] == 1 and P.add in {"add"} and f"{P.add}" == "add"
    assert json.dumps({P.add: [P.mul]}) == '{"add": ["mul"]}'
    assert ember.get_backend("numpy").impls[P.matmul] is ember.get_backend("numpy").impls["matmul"]


def test_copies_and_pickles_name_the_registered_record():
    assert copy.deepcopy(P.conv2d) is P.conv2d
    assert pickle.loads(pickle.dumps(P.sum)) is P.sum


def test_every_record_is_an_attribute_and_tables_follow_the_records():
    assert all(getattr(P, name) is p for name, p in PRIMITIVES.items())
    assert [p for ps in GROUPS.values() for p in ps] == list(PRIMITIVES.values())
    assert {p for p in PRIMITIVES.values() if p.vjp is None} == NON_DIFFERENTIABLE
    with pytest.raises(AttributeError, match="addd"):
        P.addd  # noqa: B018 - a misspelt primitive fails where it is written


def test_the_groups_export_exactly_their_records():
    import importlib

    exported = []
    for group in ("creation", "elementwise", "reduce", "movement", "indexing", "linalg", "sorting", "bitwise"):
        module = importlib.import_module(f"ember.primitives.{group}")
        exported += [getattr(module, name) for name in module.__all__]
    assert exported == list(PRIMITIVES.values())  # each once, in docs/primitives.md's order


def test_a_record_applies_to_tensors_and_records_itself():
    x = ember.tensor([[1.0, -2.0]], requires_grad=True)
    y = P.exp(x)
    assert y._ctx[0] is P.exp and y.tolist() == x.exp().tolist()
    assert P.permute(x, axes=(1, 0)).shape == (2, 1)
    with pytest.raises(TypeError, match="needs a Tensor argument"):
        P.full(shape=(2,), value=0.0, dtype=ember.float32)

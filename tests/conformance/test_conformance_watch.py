"""The watch (ember.conformance.watch) and the root-cause triage, on their own: what a watched
computation records, what breaks the dtype discipline, how two runs are compared, and how
failures group under their root causes."""

import os

import numpy as np
import pytest

import ember
from ember import dispatch, errors
from ember.backends.numpy.backend import IMPLS, NumpyBackend
from ember.conformance import triage as T
from ember.conformance.watch import (
    DisciplineError,
    Nondeterminism,
    Watch,
    first_difference,
    run_twice,
)


class Widening(NumpyBackend):
    name = "widening_for_watch"
    impls = {**IMPLS, "exp": lambda x: np.exp(x.astype(np.float64))}


def test_watch_records_the_primitives_and_their_dtypes():
    backend = ember.get_backend("numpy")
    watch = Watch(backend)
    with dispatch.interpreting(watch):
        x = ember.tensor([[1.0, 2.0]], requires_grad=True)
        (x.exp() * 2).sum().backward()
    assert {"exp", "mul", "sum"} <= set(watch.used) and watch.used["exp"] == {"float32"}
    assert "expand" in watch.used or "full" in watch.used  # the backward pass is watched too
    assert watch.culprit is None and watch.failing is None


def test_a_widened_output_fails_at_the_primitive_that_widened_it():
    backend = Widening()
    watch = Watch(backend)
    x = dispatch.wrap(backend.from_list([0.0, 1.0], (2,), ember.float32), backend)
    with dispatch.interpreting(watch), pytest.raises(DisciplineError) as info:
        (x * 2).exp().sum()
    assert str(info.value) == (
        "dtype discipline: exp(float32[2]) returned float64[2] on backend "
        "'widening_for_watch'; the primitive's rule says float32[2]"
    )
    assert info.value.primitive == watch.culprit == "exp"


def test_assign_keeps_the_destination_dtype():
    # copy_ casts first (the front end); the watch guards the interpreter's own in-place write
    watch = Watch(ember.get_backend("numpy"))
    p = ember.zeros(3)
    with pytest.raises(DisciplineError, match="float64\\[3\\] value into a float32"):
        watch.assign(p, ember.ones(3, dtype=ember.float64))
    assert watch.assign(p, ember.ones(3)) is p and p.tolist() == [1.0, 1.0, 1.0]


def test_ops_on_other_backends_are_not_watched():
    watch = Watch(Widening())
    with dispatch.interpreting(watch):
        ember.ones(2).exp()
    assert watch.used == {}


def test_first_difference_names_the_call():
    a = [("exp(float32[2])", np.ones(2, np.float32)), ("sum(float32[2])", np.float32(2.0) * np.ones((), np.float32))]
    b = [a[0], ("sum(float32[2])", np.full((), 2.5, np.float32))]
    index, text = first_difference(a, b)
    assert index == 1 and text.startswith("sum(float32[2]) (call 2 of 2): 1 of 1 elements differ")
    nan = [("log(float32[1])", np.array([np.nan], np.float32))]
    assert first_difference(nan, nan) is None  # NaN equals NaN, bit for bit
    assert "applied 2 primitives, the other 1" in first_difference(a, a[:1])[1]


def test_run_twice_names_the_first_differing_primitive():
    backend = ember.get_backend("numpy")
    draws = iter([1.0, 2.0])

    def computation():
        noisy = ember.tensor([next(draws)]) + 0  # a different input each run: the add differs
        return (noisy * 3).tolist()

    with pytest.raises(Nondeterminism, match=r"differ first at add\(float32\[1\], 0\) \(call 1 of 2\)"):
        run_twice(computation, backend)
    assert run_twice(lambda: (ember.ones(2) * 3).tolist(), backend) == [3.0, 3.0]


def test_conformance_tests_are_user_code_for_error_locations():
    root = os.path.dirname(ember.conformance.__file__)
    assert not errors._internal(os.path.join(root, "test_tier5_layers.py"))
    assert errors._internal(os.path.join(root, "watch.py")) and errors._internal(os.path.join(root, "plugin.py"))
    assert errors._internal(ember.dispatch.__file__)


def test_triage_assigns_each_failure_to_one_root_cause():
    fails = [
        {"tier": 2, "op": "sum", "dtype": "float32", "test": "test_primitive", "message": "sum wrong"},
        {"tier": 2, "op": "exp", "dtype": "float16", "test": "test_primitive", "message": "exp wrong"},
        {"tier": 3, "op": "add", "dtype": None, "order": 1, "test": "test_gradient", "message": "m", "culprit": "sum"},
        {"tier": 5, "op": "Linear", "dtype": None, "test": "test_layer", "message": "m", "primitives": ["exp", "mul"]},
        {"tier": 5, "op": "Conv2d", "dtype": None, "test": "test_layer", "message": "m", "primitives": ["exp", "sum"]},
        {
            "tier": 6,
            "op": None,
            "dtype": None,
            "test": "test_mnist_mlp",
            "message": "m",
            "culprit": "log",
            "primitives": ["log"],
        },
        {
            "tier": 6,
            "op": None,
            "dtype": None,
            "test": "test_training_deterministic",
            "message": "m",
            "primitives": ["log"],
        },
    ]
    t = T.triage(fails)
    roots = {r["primitive"]: r for r in t["root_causes"]}
    assert list(roots) == ["sum", "exp", "log"]  # tier 2 first, then what tier 6 named
    # one root each: the one named, else the first root cause (in order) among those applied
    assert [c["label"] for c in roots["sum"]["consequences"]] == [
        "tier 3 add order 1 (test_gradient)",
        "tier 5 Conv2d (test_layer)",
    ]
    assert [c["label"] for c in roots["exp"]["consequences"]] == ["tier 5 Linear (test_layer)"]
    assert roots["log"]["found_in"] == ["tier 6 test_mnist_mlp"] and roots["log"]["cells"] == []
    assert [c["label"] for c in roots["log"]["consequences"]] == ["tier 6 test_training_deterministic"]
    assert t["independent"] == []

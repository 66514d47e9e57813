"""The suite's own parts: coverage of the primitive table, the comparison, the input layouts."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import find, strategies as st

import ember
from ember import dtypes as D
from ember.backends.numpy.backend import IMPLS, NumpyBackend
from ember.conformance import cases, fused_ops, structure, test_tier2_primitives as tier2, tolerances
from ember.primitives import PRIMITIVES, defprim

FUSED = fused_ops()


def test_every_record_has_cases_and_dtypes():
    names = {d.name for d in D.ALL + D.OPTIONAL}
    for name, p in PRIMITIVES.items():
        assert p.dtypes and set(p.dtypes) <= names, name
        assert callable(p.cases), name
        assert (p.grad_cases is not None) == p.differentiable, name
        assert p.differentiable or not p.second_order, name


def test_defprim_refuses_an_incomplete_record():
    same = lambda x: x  # noqa: E731
    cases_ = lambda d, dtype: d.case([d.array(d.shape(), dtype)])  # noqa: E731
    with pytest.raises(TypeError, match="vjp and grad_cases go together"):
        defprim("test_nope", "unary", "no gradient cases", same, cases=cases_, vjp=lambda g, out, x: (g,))
    with pytest.raises(TypeError, match="case generator"):
        defprim("test_nope", "unary", "no tier-2 cases", same, cases=None)
    with pytest.raises(ValueError, match="'add' is already defined"):
        defprim("add", "binary", "twice", same, cases=cases_)
    assert "test_nope" not in PRIMITIVES and PRIMITIVES["add"].doc != "twice"


def test_every_fused_op_has_tier4_cases():
    from ember.conformance import test_tier4_fused

    assert set(test_tier4_fused.CASES) == set(FUSED)


def test_mismatch_rules():
    nan, inf = math.nan, math.inf
    same = np.array([1.0, nan, inf, -inf, -0.0], dtype=np.float32)
    assert tolerances.mismatch(same, same.copy(), 0, 0) is None
    assert tolerances.mismatch(np.array([0.0], np.float32), np.array([-0.0], np.float32), 0, 0) is None
    assert "got inf" in tolerances.mismatch(np.array([inf, 1.0]), np.array([1e308, 1.0]), 1e-5, 0)
    assert "got nan" in tolerances.mismatch(np.array([nan]), np.array([1.0]), 1.0, 1.0)
    assert tolerances.mismatch(np.zeros(1, np.float32), np.zeros(1), 0, 0) == "dtype float32, expected float64"
    assert tolerances.mismatch(np.zeros(2), np.zeros((1, 2)), 0, 0) == "shape (2,), expected (1, 2)"
    assert tolerances.mismatch(np.array([1.00001]), np.array([1.0]), 1e-4, 0) is None
    assert tolerances.mismatch(np.array([3], np.int64), np.array([4], np.int64), 1.0, 1.0) is not None


def test_tolerance_grows_with_accumulation():
    rtol, atol = tolerances.tolerance("float32", terms=100, scale=10.0)
    assert rtol == 1e-5 and atol > 100 * 10 * 2.0**-23
    assert tolerances.tolerance("uint8", terms=100) == (0.0, 0.0)


@pytest.mark.parametrize("layout", cases.LAYOUTS)
def test_layouts_give_the_same_values_through_views(layout):
    backend = ember.get_backend("numpy")
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    buf = cases.upload(backend, a, layout)
    assert np.array_equal(backend.to_numpy(buf), a)
    if layout != "contiguous":
        assert not buf.flags.c_contiguous or buf.base is not None, f"{layout} should be a view"
    assert np.array_equal(backend.to_numpy(cases.upload(backend, np.float32(3.0) * np.ones(()), layout)), 3.0)


def test_first_example_is_not_trivial():
    # hypothesis tries the simplest example first; with few examples it must still test something
    @st.composite
    def arrays(draw):
        return cases.array(draw, cases.shape(draw), "float32", special=True)

    simplest = find(arrays(), lambda a: True)
    assert simplest.shape == (3, 4) and np.count_nonzero(simplest) >= 10


@pytest.mark.parametrize(
    "name",
    [
        "ember.fused",
        "ember.conformance",
        "ember.conformance.optimizers",
        "ember.conformance.structure",
        "ember.conformance.tolerances",
        "ember.conformance.certify",
    ],
)
def test_docstring_examples(name):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0


# ----------------------------------------------------------------------------- structure (tier 2's enumeration)
CTX = SimpleNamespace(dtype_names=frozenset(d.name for d in D.ALL))
BINARY = [op for op, p in PRIMITIVES.items() if p.group in ("binary", "compare")]


def _structure(op, dtype):
    return structure.structural_cases(PRIMITIVES[op].cases, dtype, CTX)


def _kinds(case):
    return tuple(type(a).__name__ if not isinstance(a, np.ndarray) else "array" for a in case.args)


@pytest.mark.parametrize("op", BINARY)
def test_every_binary_op_meets_every_broadcast_pattern_and_scalar_kind_on_each_side(op):
    dtype = PRIMITIVES[op].dtypes[-1]
    cases_ = _structure(op, dtype)
    pairs = {tuple(a.shape for a in c.args) for c in cases_ if _kinds(c) == ("array", "array")}
    assert set(structure.broadcast_patterns(2)) <= pairs
    assert {((3, 1), (1, 4)), ((1, 4), (3, 1)), ((4,), (2, 3, 4)), ((), (2, 1, 4))} <= pairs
    sides = {_kinds(c) for c in cases_}
    assert {("array", k) for k in ("bool", "int", "float")} <= sides
    assert {(k, "array") for k in ("bool", "int", "float")} <= sides


def test_where_meets_scalars_in_both_value_positions_and_three_way_broadcasts():
    cases_ = _structure("where", "int32")
    kinds = {_kinds(c) for c in cases_}
    assert {("array", k, "array") for k in ("bool", "int", "float")} <= kinds
    assert {("array", "array", k) for k in ("bool", "int", "float")} <= kinds
    shapes = {tuple(a.shape for a in c.args) for c in cases_ if _kinds(c) == ("array",) * 3}
    assert ((3, 1), (1, 4), (3, 4)) in shapes or ((3, 1), (1, 4), (1, 1)) in shapes


@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_reductions_meet_every_axis_spelling_keepdims_and_empty_dims(op):
    cases_ = _structure(op, "float32")
    seen = {(c.args[0].shape, c.params["axes"], c.params["keepdims"]) for c in cases_}
    assert ((2, 3, 4), (0, 1, 2), True) in seen and ((2, 3, 4), (-3, -2, -1), False) in seen
    assert ((2, 3, 4), (-1,), True) in seen and ((3, 4), (), False) in seen
    empty = {(s, a) for s, a, _ in seen if 0 in s}
    assert empty and (op != "sum" or ((2, 0, 3), (1,)) in empty)
    # max/min never reduce an empty dim (an error by the spec), sum does (giving 0)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_argmax_meets_ties_in_floats_and_integers_and_negative_axes(dtype):
    cases_ = _structure("argmax", dtype)
    tied = [
        c
        for c in cases_
        if c.args[0].size
        and (
            np.moveaxis(c.args[0], c.params["axis"], -1)
            == np.moveaxis(c.args[0], c.params["axis"], -1).max(-1, keepdims=True)
        )
        .sum(-1)
        .max()
        > 1
    ]
    assert len(tied) >= len(cases_) // 8, len(tied)  # size-1 and empty axes cannot tie
    assert {c.params["axis"] for c in cases_} >= {-3, -2, -1, 0, 1, 2}


def test_structural_float_arrays_hold_every_special_value():
    x = _structure("exp", "float32")[0].args[0]
    assert np.isnan(x).any() and np.isposinf(x).any() and np.isneginf(x).any()
    assert (np.signbit(x) & (x == 0)).any() and (~np.signbit(x) & (x == 0)).any()


def test_the_reference_follows_the_weak_scalar_rule_the_spec_states():
    from ember.primitives.record import RULES

    numpy = ember.get_backend("numpy")
    assert "`add(int32[2], 0.5)` is float64" in RULES[0]
    assert numpy.impls["add"](np.array([1, 2], np.int32), 0.5).dtype == np.float64
    assert numpy.impls["add"](np.array([1, 2], np.uint8), 3).dtype == np.uint8
    assert numpy.impls["mul"](True, np.array([1, 2], np.float16)).dtype == np.float16
    assert numpy.impls["lt"](np.array([0, 1], np.int32), 0.5).tolist() == [True, False]


class _Planted(NumpyBackend):
    """The reference with ``impls`` replaced per test (a planted bug, for run_case itself)."""


def _run(op, impl, case, layouts):
    backend = _Planted()
    backend.impls = {**IMPLS, op: impl}
    tier2.run_case(SimpleNamespace(backend=backend), op, case, layouts)


def test_run_case_names_a_second_result_that_differs_nondeterministic():
    calls = []

    def flaky(a, b):
        calls.append(1)
        return np.matmul(a, b) + (len(calls) == 2)

    case = cases.Case([np.ones((2, 3)), np.ones((3, 2))])
    with pytest.raises(AssertionError, match=r"^nondeterministic: matmul\(float64\[2, 3\]"):
        _run("matmul", flaky, case, ["contiguous", "contiguous"])


def test_run_case_catches_a_write_into_an_input_even_through_a_view():
    case = cases.Case([np.arange(6.0).reshape(2, 3)])
    with pytest.raises(AssertionError, match=r"exp\(float64\[2, 3\]\(permuted\)\): wrote into its input 0"):
        _run("exp", lambda x: np.exp(x, out=x), case, ["permuted"])
    _run(
        "reshape", lambda x, shape: x.reshape(shape), cases.Case([np.arange(6.0)], dict(shape=(2, 3))), ["sliced"]
    )  # returning a view of the input is allowed


def test_a_wrong_view_is_charged_to_permute_not_to_the_primitive_under_test():
    backend = _Planted()
    backend.impls = {**IMPLS, "permute": lambda x, axes: np.ascontiguousarray(x)}  # ignores axes
    case = cases.Case([np.arange(6.0).reshape(2, 3), np.ones((2, 3))])
    tier2.run_case(SimpleNamespace(backend=backend), "add", case, ["permuted", "contiguous"])
    with pytest.raises(AssertionError, match="the permuted view of input 0 that the backend's own permute made"):
        tier2.run_case(
            SimpleNamespace(backend=backend),
            "permute",
            cases.Case([np.arange(6.0).reshape(2, 3)], dict(axes=(1, 0))),
            ["permuted"],
        )

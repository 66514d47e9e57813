"""The suite's own parts: coverage of the primitive table, the comparison, the input layouts."""
import math

import numpy as np
import pytest
from hypothesis import find
from hypothesis import strategies as st

import ember
from ember.conformance import cases, tolerances
from ember import dtypes as D
from ember.conformance import fused_ops
from ember.primitives import PRIMITIVES, defprim

FUSED = fused_ops()


def test_every_record_has_cases_and_dtypes():
    names = {d.name for d in D.ALL}
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
    assert "dtype float32, expected float64" == tolerances.mismatch(np.zeros(1, np.float32), np.zeros(1), 0, 0)
    assert "shape (2,), expected (1, 2)" == tolerances.mismatch(np.zeros(2), np.zeros((1, 2)), 0, 0)
    assert tolerances.mismatch(np.array([1.00001]), np.array([1.0]), 1e-4, 0) is None
    assert tolerances.mismatch(np.array([3], np.int64), np.array([4], np.int64), 1.0, 1.0) is not None


def test_tolerance_grows_with_accumulation():
    rtol, atol = tolerances.tolerance("float32", terms=100, scale=10.0)
    assert rtol == 1e-5 and atol > 100 * 10 * 2.0 ** -23
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


@pytest.mark.parametrize("name", ["ember.fused", "ember.conformance", "ember.conformance.optimizers",
                                  "ember.conformance.tolerances", "ember.conformance.certify"])
def test_docstring_examples(name):
    import doctest
    import importlib
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0

"""Errors a user can cause: the right ember class, a message naming the shapes or dtypes, and
the user's own file and line (this file's), not a line inside ember."""

import os

import pytest

import ember


def assert_located(info, *needles):
    """The message names every needle and ends at the test line that raised (found from the
    traceback, so the check does not depend on how this file is laid out)."""
    here = os.path.abspath(__file__)
    line = [e for e in info.traceback if os.path.abspath(str(e.path)) == here][-1].lineno + 1
    msg = str(info.value)
    for needle in needles:
        assert needle in msg, (needle, msg)
    assert f"test_errors.py:{line}" in msg, (line, msg)
    assert "tensor.py" not in msg and "dispatch.py" not in msg and "indexing.py" not in msg, msg


def test_matmul_shape_mismatch():
    a, b = ember.ones(2, 3), ember.ones(4, 5)
    with pytest.raises(ember.ShapeError) as info:
        a @ b
    assert_located(info, "(2, 3)", "(4, 5)")
    with pytest.raises(ember.ShapeError) as info:
        ember.ones(2, 3, 4) @ ember.ones(5)
    assert_located(info, "(2, 3, 4)", "(5,)")


def test_broadcasting_failure():
    a, b = ember.ones(2, 3), ember.ones(4)
    with pytest.raises(ember.ShapeError) as info:
        a + b
    assert_located(info, "(2, 3)", "(4,)")
    with pytest.raises(ember.ShapeError) as info:
        ember.where(ember.ones(5).bool(), a, 0.0)
    assert_located(info, "(5,)", "(2, 3)")


def test_reshape_size_mismatch():
    x = ember.ones(2, 3)
    with pytest.raises(ember.ShapeError) as info:
        x.reshape(4, 2)
    assert_located(info, "(2, 3)", "(4, 2)", "6")
    with pytest.raises(ember.ShapeError) as info:
        x.view(-1, 4)
    assert_located(info, "(2, 3)", "(-1, 4)")


def test_float_index_tensor():
    x, idx = ember.ones(3, 4), ember.tensor([0.0, 2.0])
    with pytest.raises(ember.DTypeError) as info:
        x[idx]
    assert_located(info, "float32")


def test_where_with_non_bool_condition():
    cond, x = ember.tensor([1, 0, 1]), ember.ones(3)
    with pytest.raises(ember.DTypeError) as info:
        ember.where(cond, x, 0.0)
    assert_located(info, "int64", "bool")


def test_unknown_backend():
    with pytest.raises(ember.BackendError) as info:
        ember.use("nope")
    assert_located(info, "'nope'", "numpy")
    with pytest.raises(ember.BackendError) as info:
        ember.ones(2, backend="nope")
    assert_located(info, "'nope'")
    assert ember.get_backend().name == "numpy", "a failed use() must leave the current backend alone"


def test_more_user_errors_are_located():
    cases = [
        (ember.ShapeError, lambda: ember.cat([ember.ones(2, 3), ember.ones(3, 2)]), ("(2, 3)", "(3, 2)")),
        (ember.ShapeError, lambda: ember.ones(2, 3).sum(2), ("dim 2",)),
        (ember.ShapeError, lambda: ember.ones(2, 3).expand(4, 3, 2), ("(2, 3)", "(4, 3, 2)")),
        (ember.ShapeError, lambda: ember.stack([ember.ones(2), ember.ones(3)]), ("(2,)", "(3,)")),
        (ember.GradError, lambda: ember.ones(2, requires_grad=True).mul(2).backward(), ("(2,)",)),
        (ember.DTypeError, lambda: ember.zeros(2, dtype="complex64"), ("complex64",)),
    ]
    for cls, fn, needles in cases:
        with pytest.raises(cls) as info:
            fn()
        msg = str(info.value)
        assert all(n in msg for n in needles), (needles, msg)
        assert "(at test_errors.py:" in msg, msg


def test_errors_keep_their_builtin_bases():
    """Code written for plain Python/NumPy errors still catches ember's."""
    assert issubclass(ember.ShapeError, ValueError) and issubclass(ember.DTypeError, TypeError)
    assert issubclass(ember.BackendError, RuntimeError) and issubclass(ember.GradError, RuntimeError)
    with pytest.raises(ValueError):
        ember.ones(2) + ember.ones(3)

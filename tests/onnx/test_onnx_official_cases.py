"""The official ONNX backend test cases on the NumPy backend, with the known-failure list.

Every case of the pinned onnx (1,884 node cases built in memory, and the pytorch-converted,
pytorch-operator and simple model sets) runs; a case in ``known_failures.EXPECTED`` must fail
(the test fails when it passes, so the list only shrinks) and every other case must pass. The
117 float32 models of the model sets run on the numba backend too, and (slow: about a minute)
on the pure-Python one; the 181 cases of the storage dtypes (bfloat16, float8, ...) run on the
pure-Python backend as well, whose storage of them is its own.
"""

import pytest

onnx = pytest.importorskip("onnx")
pytestmark = pytest.mark.onnx

from ember.onnx import known_failures, suite
from ember.onnx.known_failures import EXPECTED

NODE = suite.node_cases()
MODELS = suite.model_cases()


def check(case, backend="numpy"):
    reason = suite.run_case(case, backend)
    if case.name in EXPECTED:
        assert reason is not None, (
            f"{case.name} now passes: remove it from ember/onnx/known_failures.py (the list only shrinks)"
        )
        pytest.xfail(EXPECTED[case.name])
    assert reason is None, reason


@pytest.mark.parametrize("case", NODE, ids=[c.name for c in NODE])
def test_node_case(case):
    check(case)


@pytest.mark.parametrize("case", MODELS, ids=[c.name for c in MODELS])
def test_model_set(case):
    check(case)


def test_counts_reach_the_goal():
    # 1,884 node cases in onnx 1.23.2, 1,524 with plain tensors of ember's dtypes.
    assert len(NODE) == 1884
    plain = [c for c in NODE if c.plain]
    assert len(plain) == 1524
    known_plain = sum(c.name in EXPECTED for c in plain)
    assert len(plain) - known_plain >= 1400  # the goal


def test_every_known_failure_names_a_real_case():
    names = {c.name for c in NODE + MODELS}
    assert set(EXPECTED) <= names, sorted(set(EXPECTED) - names)[:5]


def test_float32_models_all_pass():
    # The goal: every float32 model of the three shipped sets passes on numpy.
    f32 = [c for c in MODELS if c.plain and all(v.type.tensor_type.elem_type == 1 for v in c.model.graph.input)]
    assert len(f32) == 117
    assert [c.name for c in f32 if c.name in EXPECTED] == []


F32_MODELS = [c for c in MODELS if c.plain and all(v.type.tensor_type.elem_type == 1 for v in c.model.graph.input)]


@pytest.mark.parametrize("case", F32_MODELS, ids=[c.name for c in F32_MODELS])
def test_float32_model_on_numba(case):
    pytest.importorskip("ember_numba", reason="ember-numba is not installed: pip install ./plugins/numba")
    check(case, "numba")


@pytest.mark.slow
@pytest.mark.parametrize("case", F32_MODELS, ids=[c.name for c in F32_MODELS])
def test_float32_model_on_python(case):
    check(case, "python")


STORED = set((known_failures.STORED_CASES + known_failures.NARROW_CASES).split())
STORED_NODE = [c for c in NODE if c.name in STORED]


@pytest.mark.parametrize("case", STORED_NODE, ids=[c.name for c in STORED_NODE])
def test_storage_dtype_case_on_python(case):
    """The bfloat16, float8, float4 and 4- and 2-bit cases on the pure-Python backend, whose
    storage is its own (backends/python/storage.py), not NumPy's."""
    assert len(STORED_NODE) == 181
    check(case, "python")

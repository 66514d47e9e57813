"""The random operators (ember/onnx/ops/random.py): ember's generator, so the checks are the
distributions the operators specify, seeds, dtypes and shapes, with onnxruntime's samples as the
second opinion where it runs the operator."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytestmark = pytest.mark.onnx
from onnx import TensorProto as T, helper  # noqa: E402

import ember  # noqa: E402
import ember.onnx  # noqa: E402


def model(nodes, inputs=(), outputs=("y",), types=(T.FLOAT,)):
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(name, elem, shape) for name, elem, shape in inputs],
        [helper.make_tensor_value_info(name, elem, None) for name, elem in zip(outputs, types)],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


def onnxruntime_run(m, feeds=None):
    ort = pytest.importorskip("onnxruntime")
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds or {})


@pytest.mark.parametrize("backend", ["numpy", "python"])
def test_uniform_and_normal_have_their_moments_and_dtypes(backend):
    m = model(
        [
            helper.make_node("RandomNormal", [], ["y"], shape=[200, 100], mean=2.0, scale=3.0, seed=1.0),
            helper.make_node("RandomUniform", [], ["u"], shape=[200, 100], low=-1.0, high=3.0, dtype=T.DOUBLE),
        ],
        outputs=("y", "u"),
        types=(T.FLOAT, T.DOUBLE),
    )
    with ember.backend(backend):
        y, u = ember.onnx.load(m)()
    assert y.dtype is ember.float32 and u.dtype is ember.float64 and y.shape == u.shape == (200, 100)
    y, u = y.numpy(), u.numpy()
    # 20,000 draws: the mean within 5 standard errors
    assert abs(y.mean() - 2.0) < 5 * 3 / np.sqrt(y.size) and abs(y.std() - 3.0) < 0.1
    assert u.min() >= -1 and u.max() < 3 and abs(u.mean() - 1.0) < 5 * (4 / np.sqrt(12)) / np.sqrt(u.size)
    want_y, want_u = onnxruntime_run(m)  # onnxruntime's own draws, the same moments
    assert abs(want_y.mean() - 2.0) < 5 * 3 / np.sqrt(y.size) and abs(want_u.mean() - 1.0) < 0.05


def test_a_seeded_node_repeats_across_loads_and_not_across_calls():
    m = model([helper.make_node("RandomUniformLike", ["x"], ["y"], seed=7.0)], [("x", T.FLOAT, [4, 5])])
    x = ember.zeros(4, 5)
    first = ember.onnx.load(m)
    a, b = first(x), first(x)
    assert a.shape == (4, 5) and not bool((a == b).all())
    assert bool((ember.onnx.load(m)(x) == a).all())
    unseeded = model([helper.make_node("RandomNormalLike", ["x"], ["y"])], [("x", T.FLOAT, [4, 5])])
    ember.manual_seed(3)
    c = ember.onnx.load(unseeded)(x)
    ember.manual_seed(3)
    assert bool((ember.onnx.load(unseeded)(x) == c).all())  # the default generator, ember.manual_seed


def test_bernoulli_and_multinomial_follow_their_probabilities():
    m = model(
        [helper.make_node("Bernoulli", ["p"], ["b"]), helper.make_node("Multinomial", ["l"], ["c"], sample_size=20000)],
        [("p", T.FLOAT, [None]), ("l", T.FLOAT, [2, 3])],
        outputs=("b", "c"),
        types=(T.FLOAT, T.INT32),
    )
    p = np.tile(np.float32([0.0, 0.3, 1.0]), 4000)
    logits = np.float32([[0.0, 1.0, 2.0], [5.0, 0.0, -5.0]])
    b, c = ember.onnx.load(m)(ember.tensor(p), ember.tensor(logits))
    assert b.dtype is ember.float32 and c.dtype is ember.int32 and c.shape == (2, 20000)
    b = b.numpy().reshape(-1, 3)
    assert (b[:, 0] == 0).all() and (b[:, 2] == 1).all() and abs(b[:, 1].mean() - 0.3) < 5 * np.sqrt(0.21 / 4000)
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    for row, want in zip(c.numpy(), probs):
        counts = np.bincount(row, minlength=3) / row.size
        np.testing.assert_allclose(counts, want, atol=5 * np.sqrt(0.25 / row.size))
    _, want_c = onnxruntime_run(m, {"p": p, "l": logits})
    assert want_c.shape == (2, 20000)


def test_a_non_float_dtype_names_the_node():
    m = model([helper.make_node("RandomUniform", [], ["y"], shape=[2], dtype=T.INT32, name="draw")], types=(T.INT32,))
    with pytest.raises(ember.onnx.OnnxError, match="draw.*RandomUniform.*int32 is not one"):
        ember.onnx.load(m)()

"""ember/onnx/ops/ml.py beyond the official cases, against ONNX's reference evaluator: random
forests with every comparison mode, NaN routing and each aggregate; LabelEncoder's numeric maps (against onnxruntime)."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytestmark = pytest.mark.onnx
from one_node import model, outputs
from onnx import TensorProto, helper, numpy_helper

import ember
import ember.onnx


def forest(rng, n_trees, depth, n_features, n_targets, modes):
    """Random full trees: node arrays, leaf arrays and roots as TreeEnsemble wants them."""
    nodes = {k: [] for k in ("modes", "features", "splits", "true", "false", "true_leaf", "false_leaf", "missing")}
    leaf_w, leaf_t, roots = [], [], []

    def grow(level):
        if level == depth:
            leaf_w.append(float(rng.normal()))
            leaf_t.append(int(rng.integers(n_targets)))
            return len(leaf_w) - 1, 1
        i = len(nodes["modes"])
        for k, v in (
            ("modes", int(rng.choice(modes))),
            ("features", int(rng.integers(n_features))),
            ("splits", float(np.round(rng.normal(), 1))),
            ("missing", int(rng.integers(2))),
        ):
            nodes[k].append(v)
        for k in ("true", "false", "true_leaf", "false_leaf"):
            nodes[k].append(0)
        for side in ("true", "false"):
            child, is_leaf = grow(level + 1)
            nodes[side][i], nodes[side + "_leaf"][i] = child, is_leaf
        return i, 0

    for _ in range(n_trees):
        roots.append(grow(0)[0])
    return nodes, leaf_w, leaf_t, roots


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
def test_tree_ensemble_matches_the_reference(aggregate):
    rng = np.random.default_rng(aggregate)
    nodes, leaf_w, leaf_t, roots = forest(rng, n_trees=4, depth=3, n_features=3, n_targets=3, modes=range(6))
    node = helper.make_node(
        "TreeEnsemble",
        ["x"],
        ["y"],
        domain="ai.onnx.ml",
        n_targets=3,
        aggregate_function=aggregate,
        tree_roots=roots,
        nodes_modes=numpy_helper.from_array(np.array(nodes["modes"], np.uint8)),
        nodes_featureids=nodes["features"],
        nodes_splits=numpy_helper.from_array(np.array(nodes["splits"], np.float32)),
        nodes_truenodeids=nodes["true"],
        nodes_falsenodeids=nodes["false"],
        nodes_trueleafs=nodes["true_leaf"],
        nodes_falseleafs=nodes["false_leaf"],
        nodes_missing_value_tracks_true=nodes["missing"],
        leaf_targetids=leaf_t,
        leaf_weights=numpy_helper.from_array(np.array(leaf_w, np.float32)),
    )
    m = model(node, ["x"], {"": 21, "ai.onnx.ml": 5})
    x = np.round(rng.normal(size=(40, 3)), 1).astype(np.float32)  # rounded: EQ and NEQ meet ties
    x[::7, 1] = np.nan
    got, want = outputs(m, x)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_tree_ensemble_probit_is_refused_naming_the_node():
    node = helper.make_node(
        "TreeEnsemble",
        ["x"],
        ["y"],
        name="forest",
        domain="ai.onnx.ml",
        n_targets=1,
        post_transform=4,
        tree_roots=[0],
        nodes_modes=numpy_helper.from_array(np.array([0], np.uint8)),
        nodes_featureids=[0],
        nodes_splits=numpy_helper.from_array(np.array([0.5], np.float32)),
        nodes_truenodeids=[0],
        nodes_falsenodeids=[1],
        nodes_trueleafs=[1],
        nodes_falseleafs=[1],
        leaf_targetids=[0, 0],
        leaf_weights=numpy_helper.from_array(np.array([1.0, 2.0], np.float32)),
    )
    m = ember.onnx.load(model(node, ["x"], {"": 21, "ai.onnx.ml": 5}).SerializeToString())
    with pytest.raises(
        ember.onnx.OnnxError, match=r"node 'forest' \(TreeEnsemble, opset 5\): post_transform PROBIT is not supported"
    ):
        m(ember.tensor(np.zeros((2, 1), np.float32)))


@pytest.mark.parametrize(
    "attrs,x,out",
    [
        ({"keys_floats": [1.5, float("nan"), -2.0], "values_int64s": [7, 8, 9]}, [1.5, np.nan, 3.0, -2.0], "INT64"),
        ({"keys_int64s": [3, 1], "values_floats": [0.5, -1.0], "default_float": 4.0}, [1, 2, 3], "FLOAT"),
        (
            {
                "keys_tensor": numpy_helper.from_array(np.array([2, 4], np.int64)),
                "values_tensor": numpy_helper.from_array(np.array([20.5, 40.0], np.float32)),
                "default_tensor": numpy_helper.from_array(np.array([-3.0], np.float32)),
            },
            [4, 5, 2],
            "FLOAT",
        ),
    ],
)
def test_label_encoder_matches_the_reference(attrs, x, out):
    x = np.array(x, np.float32 if "keys_floats" in attrs else np.int64)
    code = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64}[x.dtype]
    g = helper.make_graph(
        [helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", **attrs)],
        "g",
        [helper.make_tensor_value_info("x", code, None)],
        [helper.make_tensor_value_info("y", getattr(TensorProto, out), None)],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 4)])
    # onnxruntime, not ONNX's reference: the spec matches NaN keys bit-wise, the reference never does
    ort = pytest.importorskip("onnxruntime")
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ember.onnx.load(m.SerializeToString())(ember.tensor(x)).numpy()
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)

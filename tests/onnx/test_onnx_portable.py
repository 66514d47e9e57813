"""``ember.onnx.portable``: a loaded model as ember's JSON graph + safetensors and back, body
graphs (If, Loop) with their own constants and the enclosing graph's values included."""

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytestmark = pytest.mark.onnx
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import ember  # noqa: E402
import ember.onnx  # noqa: E402
from ember.onnx import portable  # noqa: E402

F, B, I64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64


def model_with_bodies():
    """y = Loop(trip, cond, x): each turn v + step (a body constant), scanning v * scale (the
    enclosing graph's parameter); then If(flag): y + one (a then-branch constant), else -y."""
    step = numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "step")
    one = numpy_helper.from_array(np.array([1.0], np.float32), "one")
    body = helper.make_graph(
        [
            helper.make_node("Add", ["v", "step"], ["v2"]),
            helper.make_node("Identity", ["c"], ["c2"]),
            helper.make_node("Mul", ["v2", "scale"], ["scanned"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("c", B, []),
            helper.make_tensor_value_info("v", F, [2]),
        ],
        [
            helper.make_tensor_value_info("c2", B, []),
            helper.make_tensor_value_info("v2", F, [2]),
            helper.make_tensor_value_info("scanned", F, [2]),
        ],
        [step],
    )
    then_branch = helper.make_graph(
        [helper.make_node("Add", ["looped", "one"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", F, [2])],
        [one],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Neg", ["looped"], ["e"])], "else", [], [helper.make_tensor_value_info("e", F, [2])]
    )
    g = helper.make_graph(
        [
            helper.make_node("Loop", ["trip", "cond", "x"], ["looped", "scans"], body=body),
            helper.make_node("If", ["flag"], ["y"], then_branch=then_branch, else_branch=else_branch),
        ],
        "g",
        [
            helper.make_tensor_value_info("trip", I64, []),
            helper.make_tensor_value_info("cond", B, []),
            helper.make_tensor_value_info("x", F, [2]),
            helper.make_tensor_value_info("flag", B, []),
        ],
        [helper.make_tensor_value_info("y", F, [2]), helper.make_tensor_value_info("scans", F, [None, 2])],
        [numpy_helper.from_array(np.array([0.5, -1.0], np.float32), "scale")],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("flag", [True, False])
def test_body_graphs_travel_with_their_node(flag):
    model = model_with_bodies()
    graph, blob = portable.save(model)
    graph = json.loads(json.dumps(graph))  # what the browser reads: plain JSON
    assert [n["op_type"] for n in graph["nodes"]] == ["Loop", "If"]
    assert graph["nodes"][0]["graphs"]["body"]["constants"] == {"step": "body/0/body/step"}
    restored = portable.restore(graph, blob, "python")
    args = [ember.tensor(np.int64(3)), ember.tensor(True), ember.tensor([1.0, 1.0]), ember.tensor(flag)]
    want = ember.onnx.load(model)(*args)
    got = restored(*[a.to("python") for a in args])
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g.numpy(), w.numpy())
    looped = np.array([4.0, 7.0], np.float32)
    np.testing.assert_array_equal(got[0].numpy(), looped + 1 if flag else -looped)
    np.testing.assert_array_equal(got[1].numpy()[-1], looped * np.array([0.5, -1.0], np.float32))


def test_weights_safetensors_has_no_code_for_travel_recast():
    """int4 weights (no safetensors code) and an odd count of float4 values (F4 packs two a
    byte) are written as wider values and cast back on restore: the quantized model runs the
    same on the python backend, the browser's."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    q = numpy_helper.from_array(np.array([[-8, 7, 3], [1, -2, 0]], dtype=ml_dtypes.int4), "q")
    f4 = numpy_helper.from_array(np.array([0.5, -6.0, 1.5], dtype=ml_dtypes.float4_e2m1fn), "f4")
    scale = numpy_helper.from_array(np.array(0.25, np.float32), "scale")
    g = helper.make_graph(
        [
            helper.make_node("DequantizeLinear", ["q", "scale"], ["w"]),
            helper.make_node("Cast", ["f4"], ["f"], to=F),
            helper.make_node("MatMul", ["x", "w"], ["xw"]),
            helper.make_node("Add", ["xw", "f"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", F, [1, 2])],
        [helper.make_tensor_value_info("y", F, [1, 3])],
        [q, f4, scale],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    graph, blob = portable.save(model)
    tensors = portable.load_tensors(blob, "python")
    assert {t.dtype for t in tensors.values()} >= {ember.int4, ember.float4_e2m1fn}
    x = np.array([[1.0, 2.0]], np.float32)
    got = portable.restore(json.loads(json.dumps(graph)), blob, "python")(ember.tensor(x, backend="python"))
    want = x @ (np.array([[-8, 7, 3], [1, -2, 0]], np.float32) * 0.25) + np.array([0.5, -6.0, 1.5], np.float32)
    np.testing.assert_array_equal(got.numpy(), want)


_NO_NUMPY_TEXT = r"""
import sys, json
sys.modules["numpy"] = None
import ember
from ember.onnx import portable
from ember.io import load_bytes  # noqa: F401 - the blob reader the browser uses
graph = json.loads(sys.argv[1])
blob = bytes.fromhex(sys.argv[2])
m = portable.restore(graph, blob, "python")
print(json.dumps(m(ember.tensor(["b", "z", "a"])).tolist()))
"""


def test_string_tensors_travel_as_lists_and_restore_without_numpy():
    """A LabelEncoder with a string keys_tensor and a string initializer: safetensors has no string
    code, so text goes into the blob's metadata, and the python backend restores it without numpy."""
    import os
    import subprocess
    import sys

    keys = helper.make_tensor("keys", TensorProto.STRING, [2], [b"a", b"b"])
    g = helper.make_graph(
        [
            helper.make_node("StringConcat", ["x", "suffix"], ["xs"]),
            helper.make_node(
                "LabelEncoder",
                ["xs"],
                ["y"],
                domain="ai.onnx.ml",
                keys_tensor=keys,
                values_tensor=helper.make_tensor("v", I64, [2], [10, 20]),
            ),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.STRING, [None])],
        [helper.make_tensor_value_info("y", I64, [None])],
        [helper.make_tensor("suffix", TensorProto.STRING, [], [b""])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 4)])
    graph, blob = portable.save(m)
    texts = portable.load_tensors(blob, "python")
    assert (
        texts["attribute/1/keys_tensor"].tolist() == ["a", "b"]
        and texts["attribute/1/keys_tensor"].dtype is ember.string
    )
    assert texts["constant/suffix"].shape == () and texts["constant/suffix"].tolist() == ""
    env = dict(os.environ, EMBER_STRICT_PLUGINS="0")
    env.pop("EMBER_BACKEND", None)
    proc = subprocess.run(
        [sys.executable, "-c", _NO_NUMPY_TEXT, json.dumps(graph), bytes(blob).hex()],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [20, -1, 10] == ember.onnx.load(m)(ember.tensor(["b", "z", "a"])).tolist()

"""ember.onnx.load: a Module with trainable initializers, folded constants, clear errors."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytestmark = pytest.mark.onnx
from onnx import TensorProto, helper, numpy_helper

import ember
import ember.onnx
from ember.onnx import OnnxError


def linear_model(opset=17):
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(3, 2) / 10, "fc.weight")
    b = numpy_helper.from_array(np.array([0.5, -0.5], dtype=np.float32), "fc.bias")
    shape = numpy_helper.from_array(np.array([2, 3], dtype=np.int64), "shape")
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["x2"]),
        helper.make_node("MatMul", ["x2", "fc.weight"], ["h"]),
        helper.make_node("Add", ["h", "fc.bias"], ["y"]),
        helper.make_node("Relu", ["y"], ["r"]),
    ]
    g = helper.make_graph(
        nodes,
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2]),
            helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, 2]),
        ],
        [w, b, shape],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_forward_matches_numpy_and_returns_a_tuple_for_two_outputs():
    m = ember.onnx.load(linear_model().SerializeToString())
    x = np.linspace(-1, 1, 6).astype(np.float32)
    y, r = m(ember.tensor(x))
    want = x.reshape(2, 3) @ (np.arange(6, dtype=np.float32).reshape(3, 2) / 10) + [0.5, -0.5]
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(r.numpy(), np.maximum(want, 0), rtol=1e-6)


def test_initializers_are_trainable_parameters_and_save_as_safetensors(tmp_path):
    m = ember.onnx.load(linear_model())
    assert sorted(n for n, _ in m.named_parameters()) == ["fc.bias", "fc.weight"]
    assert "shape" not in m.state_dict()  # integer initializers are constants
    x = ember.tensor(np.ones(6, dtype=np.float32))
    y, _ = m(x)
    (y * y).sum().backward()
    assert m.get_parameter("fc.weight").grad.shape == (3, 2)
    opt = ember.optim.SGD(m.parameters(), lr=0.01)
    before = (m(x)[0] ** 2).sum().item()
    opt.step()
    assert (m(x)[0] ** 2).sum().item() < before
    from ember.io import as_tensor_bytes, load_file, save_file, to_numpy

    save_file({k: as_tensor_bytes(v) for k, v in m.state_dict().items()}, tmp_path / "m.safetensors")
    back, _ = load_file(tmp_path / "m.safetensors")
    assert sorted(back) == ["fc.bias", "fc.weight"]
    fresh = ember.onnx.load(linear_model())
    fresh.load_state_dict({k: ember.tensor(to_numpy(v)) for k, v in back.items()})
    np.testing.assert_array_equal(fresh(x)[0].numpy(), m(x)[0].numpy())


def test_constant_subgraphs_fold_at_load():
    nodes = [
        helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.array([2.0], np.float32))),
        helper.make_node("Mul", ["c", "c"], ["c2"]),
        helper.make_node("Add", ["x", "c2"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    m = ember.onnx.load(helper.make_model(g))
    assert [n.op_type for n in m.program.nodes] == ["Add"]
    assert m(ember.tensor([1.0])).tolist() == [5.0]


def graph_of(*nodes, dtype=TensorProto.FLOAT, opset=17):
    g = helper.make_graph(
        list(nodes),
        "g",
        [helper.make_tensor_value_info("x", dtype, [2])],
        [helper.make_tensor_value_info(nodes[-1].output[0], dtype, [2])],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_every_unsupported_operator_is_named_at_once():
    model = graph_of(
        helper.make_node("Frobnicate", ["x"], ["a"], name="first"),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Wibble", ["b"], ["c"], name="second"),
    )
    with pytest.raises(OnnxError) as e:
        ember.onnx.load(model)
    msg = str(e.value)
    assert "2 node(s)" in msg and "'first' (Frobnicate, opset 17)" in msg and "'second' (Wibble, opset 17)" in msg


def test_unsupported_opset_names_the_node():
    with pytest.raises(
        OnnxError,
        match=r"'g1' \(Gelu, opset 17\): opset 17 is outside the range ember "
        r"honours for Gelu \(20 to 28\)",
    ):
        ember.onnx.load(graph_of(helper.make_node("Gelu", ["x"], ["y"], name="g1"), opset=17))


def test_unsupported_dtype_names_the_value():
    with pytest.raises(OnnxError, match="graph value 'x': element type complex64 is not an ember dtype"):
        ember.onnx.load(graph_of(helper.make_node("Relu", ["x"], ["y"]), dtype=TensorProto.COMPLEX64))


def test_cast_to_a_missing_dtype_names_the_node():
    with pytest.raises(OnnxError, match=r"node 'c' \(Cast, opset 17\).*complex128"):
        ember.onnx.load(graph_of(helper.make_node("Cast", ["x"], ["y"], name="c", to=TensorProto.COMPLEX128)))


def test_runtime_failure_names_the_node():
    m = ember.onnx.load(graph_of(helper.make_node("Reshape", ["x", "x"], ["y"], name="r")))
    with pytest.raises(OnnxError, match=r"node 'r' \(Reshape, opset 17\)"):
        m(ember.tensor([3.0, 5.0]))


def test_malformed_files_give_one_clear_error(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage\xff\xff\xff")
    with pytest.raises(OnnxError, match="is not an ONNX model"):
        ember.onnx.load(bad)
    with pytest.raises(OnnxError, match="cannot read ONNX model"):
        ember.onnx.load(tmp_path / "missing.onnx")
    with pytest.raises(OnnxError, match="is not an ONNX model"):
        ember.onnx.load(b"")


def test_wrong_number_of_inputs():
    m = ember.onnx.load(linear_model())
    with pytest.raises(OnnxError, match=r"takes 1 input\(s\) \(x\), got 2"):
        m(ember.ones(6), ember.ones(6))


def test_import_ember_does_not_import_onnx():
    import subprocess
    import sys

    code = (
        "import sys, ember; ember.ones(2); import ember.nn; print('onnx' in sys.modules, 'onnxruntime' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.stdout.strip() == "False False", out.stderr


def test_an_imported_model_compiles_under_jit():
    model = ember.onnx.load(linear_model())
    step = ember.jit(lambda x: model(x)[1])
    x = ember.tensor(np.linspace(-1, 1, 6).astype(np.float32))
    with ember.no_grad():
        np.testing.assert_allclose(step(x).numpy(), model(x)[1].numpy(), rtol=1e-6)
        step(x)
    assert step.trace_count == 1
    assert step.stats(x)["nodes"] <= 6  # constants folded away: reshape, matmul, add, relu


def test_runs_on_the_python_backend():
    model = ember.onnx.load(linear_model())
    with ember.no_grad():
        want = model(ember.tensor([0.5] * 6))[1].numpy()
    with ember.backend("python"):
        model.to("python")
        _, r = model(ember.tensor([0.5] * 6))
        assert r.backend.name == "python"
    np.testing.assert_allclose(np.array(r.tolist()), want, rtol=1e-6)


def test_without_the_onnx_package_the_error_says_how_to_install_it():
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['onnx'] = None\n"  # as if the extra were not installed
        "import ember.onnx\n"
        "try:\n    ember.onnx.load(b'')\nexcept ember.onnx.OnnxError as e:\n    print(e)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.stdout.strip() == "ember.onnx needs the onnx package: pip install 'ember[onnx]'", out.stderr


def test_initializer_names_may_shadow_the_modules_own_attributes():
    w = numpy_helper.from_array(np.full((2,), 2.0, np.float32), "program")
    s = numpy_helper.from_array(np.array([2], np.int64), "input_names")
    nodes = [
        helper.make_node("Mul", ["x", "program"], ["y0"]),
        helper.make_node("Reshape", ["y0", "input_names"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [w, s],
    )
    m = ember.onnx.load(helper.make_model(g))
    assert m(ember.tensor([3.0, 4.0])).tolist() == [6.0, 8.0]
    assert list(m.state_dict()) == ["program"] and m.input_names == ["x"]


def test_dropout_in_training_mode_uses_embers_random_numbers():
    ratio = numpy_helper.from_array(np.array(0.25, np.float32), "ratio")
    mode = numpy_helper.from_array(np.array(True), "training_mode")
    g = helper.make_graph(
        [helper.make_node("Dropout", ["x", "ratio", "training_mode"], ["y", "mask"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4000])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [4000]),
            helper.make_tensor_value_info("mask", TensorProto.BOOL, [4000]),
        ],
        [ratio, mode],
    )
    m = ember.onnx.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
    ember.manual_seed(0)
    y, mask = (t.numpy() for t in m(ember.ones(4000)))
    assert set(np.unique(y)) == {0.0, np.float32(1 / 0.75)}
    assert ((y != 0) == mask).all() and 0.2 < 1 - mask.mean() < 0.3

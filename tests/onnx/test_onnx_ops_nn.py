"""ember/onnx/ops/nn.py's Conv paths against onnxruntime: even pads go to conv2d itself, an
uneven remainder is padded first, and 1x1 stride-1 convolutions run as a matrix product. Then
DeformConv (strides, dilation, groups, offset groups, mask, bias) against ONNX's reference
evaluator, and 3-d ConvTranspose against onnxruntime."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.onnx
from one_node import model, outputs
from onnx import TensorProto, helper, numpy_helper

import ember
import ember.onnx


def conv_model(w, bias, **attrs):
    inits = [numpy_helper.from_array(w, "w")]
    if bias is not None:
        inits.append(numpy_helper.from_array(bias, "b"))
    node = helper.make_node("Conv", ["x", "w"] + (["b"] if bias is not None else []), ["y"], **attrs)
    g = helper.make_graph(
        [node],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


CASES = {
    "1x1 (a matrix product)": ((2, 6, 5, 7), (4, 6, 1, 1), {}),
    "1x1 with bias": ((1, 3, 4, 4), (5, 3, 1, 1), {"bias": True}),
    "1x1 strided (stays a convolution)": ((1, 6, 7, 7), (4, 6, 1, 1), {"strides": [2, 2]}),
    "1x1 grouped": ((1, 6, 4, 4), (4, 3, 1, 1), {"group": 2}),
    "3x3 even pads": ((2, 3, 8, 9), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    "uneven pads": ((1, 3, 8, 9), (4, 3, 3, 2), {"pads": [0, 1, 2, 1]}),
    "SAME_UPPER, stride 2": ((1, 3, 8, 9), (4, 3, 4, 4), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    "SAME_LOWER": ((1, 3, 7, 6), (2, 3, 2, 3), {"auto_pad": "SAME_LOWER"}),
    "dilated, padded": ((1, 2, 9, 9), (3, 2, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
}


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("case", CASES)
def test_conv_matches_onnxruntime(case, backend):
    if backend == "numba":
        pytest.importorskip("ember_numba")
    xs, ws, attrs = CASES[case]
    attrs = dict(attrs)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32) if attrs.pop("bias", False) else None
    data = conv_model(w, b, **attrs)
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with ember.backend(backend):
        model = ember.onnx.load(data).to(backend)
        got = model(ember.tensor(x)).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_1x1_convolution_trains_through_the_matrix_product():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 6, 1, 1)).astype(np.float32)
    x = rng.standard_normal((2, 6, 3, 3)).astype(np.float32)
    model = ember.onnx.load(conv_model(w, None))
    model(ember.tensor(x)).sum().backward()
    # d(sum y)/dW[o, c] = sum over images and pixels of x[:, c]: the same for every o
    want = np.broadcast_to(x.sum((0, 2, 3)), (4, 6)).reshape(4, 6, 1, 1)
    np.testing.assert_allclose(model.w.grad.numpy(), want, rtol=1e-5)


@pytest.mark.parametrize(
    "attrs,group,og,mask,bias",
    [
        ({"strides": [2, 2], "pads": [1, 1, 1, 1]}, 1, 1, False, True),
        ({"dilations": [2, 1]}, 2, 2, True, False),
        ({"strides": [1, 2], "pads": [0, 1, 2, 0]}, 2, 1, True, True),
    ],
)
def test_deform_conv_matches_the_reference(attrs, group, og, mask, bias):
    rng = np.random.default_rng(0)
    n, c, oc, k = 2, 4, 6, (3, 2)
    x = rng.normal(size=(n, c, 7, 8)).astype(np.float32)
    w = rng.normal(size=(oc, c // group, *k)).astype(np.float32)
    sh, sw = attrs.get("strides", [1, 1])
    dh, dw = attrs.get("dilations", [1, 1])
    p = attrs.get("pads", [0, 0, 0, 0])
    oh = (7 + p[0] + p[2] - (k[0] - 1) * dh - 1) // sh + 1
    ow = (8 + p[1] + p[3] - (k[1] - 1) * dw - 1) // sw + 1
    offset = (2 * rng.normal(size=(n, og * k[0] * k[1] * 2, oh, ow))).astype(np.float32)
    arrays, names = [x, w, offset], ["x", "w", "offset"]
    if bias:
        arrays.append(rng.normal(size=oc).astype(np.float32))
    names.append("b" if bias else "")
    if mask:
        arrays.append(rng.uniform(size=(n, og * k[0] * k[1], oh, ow)).astype(np.float32))
        names.append("m")
    node = helper.make_node("DeformConv", names, ["y"], kernel_shape=list(k), group=group, offset_group=og, **attrs)
    got, want = outputs(model(node, [nm for nm in names if nm], {"": 19}), *arrays)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "attrs",
    [
        {},
        {"strides": [2, 1, 2], "pads": [1, 0, 0, 1, 1, 0]},
        {"dilations": [2, 1, 1], "output_padding": [1, 0, 0], "strides": [2, 2, 1]},
    ],
)
def test_conv_transpose_3d_matches_the_reference(attrs):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 4, 3, 4, 5)).astype(np.float32)
    w = rng.normal(size=(4, 3, 3, 2, 3)).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], group=2, **attrs)
    # onnxruntime: ONNX's reference ignores ConvTranspose's group
    got, want = outputs(model(node, ["x", "w"], {"": 17}), x, w, runtime="onnxruntime")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

"""ember/onnx/ops/image.py's ImageDecoder beyond the official cases: an RGBA PNG decodes to its
RGB pixels in each pixel format, and bytes that are no image are refused naming the node."""

import io

import numpy as np
import pytest

pytest.importorskip("onnx")
PIL = pytest.importorskip("PIL.Image")
pytestmark = pytest.mark.onnx
from onnx import TensorProto, helper

import ember
import ember.onnx


def decoder(fmt):
    node = helper.make_node("ImageDecoder", ["bytes"], ["pixels"], name="decode", pixel_format=fmt)
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("bytes", TensorProto.UINT8, [None])],
        [helper.make_tensor_value_info("pixels", TensorProto.UINT8, None)],
    )
    return ember.onnx.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString())


@pytest.mark.parametrize("fmt", ["RGB", "BGR", "Grayscale"])
def test_an_rgba_png_decodes_to_its_pixels(fmt):
    rgba = np.random.default_rng(0).integers(0, 256, (5, 7, 4), dtype=np.uint8)
    buf = io.BytesIO()
    PIL.fromarray(rgba, "RGBA").save(buf, format="PNG")
    got = decoder(fmt)(ember.tensor(np.frombuffer(buf.getvalue(), np.uint8))).numpy()
    image = PIL.open(io.BytesIO(buf.getvalue()))
    want = np.array(image.convert("L"))[:, :, None] if fmt == "Grayscale" else np.array(image.convert("RGB"))
    np.testing.assert_array_equal(got, want[:, :, ::-1] if fmt == "BGR" else want)


def test_bytes_that_are_no_image_are_refused_naming_the_node():
    with pytest.raises(
        ember.onnx.OnnxError, match=r"node 'decode' \(ImageDecoder, opset 20\): the bytes are not an image"
    ):
        decoder("RGB")(ember.tensor(np.arange(40, dtype=np.uint8)))

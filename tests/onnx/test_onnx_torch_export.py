"""Models exported by PyTorch (``torch.onnx.export(..., dynamo=False)``) load and match torch.

A ResNet-18 (torchvision is not a dependency: the blocks come from benchmarks/workloads.py) and
a small transformer encoder, both with random weights, in eval mode.
"""

import io
import pathlib
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.onnx, pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")]

import ember
import ember.onnx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))  # `benchmarks` is not installed
from benchmarks import workloads

nn = torch.nn


def resnet18():
    """ImageNet's ResNet-18: the benchmarks' blocks (written once for ember and torch) behind
    the 7x7 stride-2 stem and max pool of the ImageNet variant."""
    model = workloads.resnet18(nn)
    model.stem = nn.Sequential(
        nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
    )
    return model


def export(model, *args, **kw):
    model.eval()
    buf = io.BytesIO()
    torch.onnx.export(model, args, buf, dynamo=False, **kw)
    return buf.getvalue()


def randomize_batch_norms(model):
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)


def test_resnet18_matches_torch():
    torch.manual_seed(0)
    model = resnet18()
    randomize_batch_norms(model)
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        want = model.eval()(x).numpy()
    m = ember.onnx.load(
        export(
            model,
            x,
            input_names=["image"],
            opset_version=17,
            dynamic_axes={"image": {0: "batch", 2: "height", 3: "width"}},
        )
    )
    assert m.num_parameters() > 11_000_000  # the initializers are its parameters (BN folded in)
    assert {n.op_type for n in m.program.nodes} >= {"Conv", "MaxPool", "Relu", "Add", "Gemm"}
    with ember.no_grad():
        got = m(ember.tensor(x.numpy())).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # the exported axes are dynamic: another batch and image size run too
    x = torch.randn(2, 3, 64, 96)
    with torch.no_grad(), ember.no_grad():
        np.testing.assert_allclose(m(ember.tensor(x.numpy())).numpy(), model(x).numpy(), rtol=1e-4, atol=1e-4)


def test_transformer_encoder_matches_torch():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
    model = nn.Sequential()
    model.enc = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    model.head = nn.Linear(32, 5)
    x = torch.randn(2, 7, 32)
    with torch.no_grad():
        want = model.eval()(x).numpy()
    m = ember.onnx.load(export(model, x, opset_version=17))
    with ember.no_grad():
        got = m(ember.tensor(x.numpy())).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

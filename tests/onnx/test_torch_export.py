"""Models exported by PyTorch (``torch.onnx.export(..., dynamo=False)``) load and match torch.

A ResNet-18 (written out here: torchvision is not a dependency) and a small transformer
encoder, both with random weights, in eval mode.
"""
import io

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.onnx, pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")]

import ember
import ember.onnx

nn = torch.nn


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (self.down(x) if self.down is not None else x))


class ResNet18(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


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
    model = ResNet18()
    randomize_batch_norms(model)
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        want = model.eval()(x).numpy()
    m = ember.onnx.load(export(model, x, input_names=["image"], opset_version=17))
    assert m.num_parameters() > 11_000_000       # the initializers are its parameters (BN folded in)
    with ember.no_grad():
        got = m(ember.tensor(x.numpy())).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


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

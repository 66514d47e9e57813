"""Models exported by PyTorch's two ONNX exporters load and match torch.

``torch.onnx.export`` has two exporters: the TorchScript one (``dynamo=False``), and the one
on ``torch.export`` (``dynamo=True``, the default since PyTorch 2.9, which needs the
``onnxscript`` package and writes opset 18 and up). A ResNet-18 (torchvision is not a
dependency: the blocks come from benchmarks/workloads.py) and a small transformer encoder go
through both; a table of smaller models (recurrent layers, attention, normalizations,
resizing, indexing ops) through the default one. All have random weights, in eval mode.
"""

import io
import os
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


#: The exporters, as ``torch.onnx.export``'s ``dynamo`` flag.
EXPORTERS = {"torchscript": False, "dynamo": True}


def export(model, *args, exporter="torchscript", dynamic=None, tmp=None, **kw):
    """The ONNX bytes of ``model`` on ``args``; ``dynamic``: {input index: {axis: name}}.
    The TorchScript exporter writes opset 17, the dynamo one its own default (20 here)."""
    model.eval()
    if not EXPORTERS[exporter]:
        buf = io.BytesIO()
        kw.setdefault("opset_version", 17)
        if dynamic:
            names = kw.setdefault("input_names", [f"input{i}" for i in range(len(args))])
            kw["dynamic_axes"] = {names[i]: axes for i, axes in dynamic.items()}
        torch.onnx.export(model, args, buf, dynamo=False, **kw)
        return buf.getvalue()
    pytest.importorskip("onnxscript")  # the dynamo exporter writes its graphs with it
    if dynamic:  # a batch axis by name (its example may be 1); the others' ranges as export infers them
        kw["dynamic_shapes"] = tuple(
            {axis: torch.export.Dim(name) if axis == 0 else torch.export.Dim.AUTO for axis, name in axes.items()}
            for axes in (dynamic.get(i, {}) for i in range(len(args)))
        )
    program = torch.onnx.export(model, args, dynamo=True, verbose=False, **kw)
    path = os.path.join(tmp, "model.onnx")  # the program saves to a file; read it back as bytes
    program.save(path)
    return pathlib.Path(path).read_bytes()


def randomize_batch_norms(model):
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_resnet18_matches_torch(exporter, tmp_path):
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
            exporter=exporter,
            tmp=tmp_path,
            input_names=["image"],
            dynamic={0: {0: "batch", 2: "height", 3: "width"}},
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


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_transformer_encoder_matches_torch(exporter, tmp_path):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
    model = nn.Sequential()
    model.enc = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    model.head = nn.Linear(32, 5)
    x = torch.randn(2, 7, 32)
    with torch.no_grad():
        want = model.eval()(x).numpy()
    m = ember.onnx.load(export(model, x, exporter=exporter, tmp=tmp_path))
    with ember.no_grad():
        got = m(ember.tensor(x.numpy())).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


class CausalAttention(nn.Module):
    """Self-attention through ``scaled_dot_product_attention`` with a causal mask."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(16, 48)

    def forward(self, x):
        n, t, _ = x.shape
        q, k, v = self.qkv(x).reshape(n, t, 3, 2, 8).permute(2, 0, 3, 1, 4)
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).reshape(n, t, 16)


class Indexing(nn.Module):
    """Running sums, a select, top-k, argmax, a clip, a reduction and a bilinear resize."""

    def forward(self, x):
        b = torch.where(x > 0, x, torch.cumsum(x, 1) * 0.5)
        top = torch.topk(b, 3, dim=1).values
        image = nn.functional.interpolate(x.reshape(2, 1, 2, 6), scale_factor=2, mode="bilinear")
        return top.argmax(1), torch.clamp(b, -1, 1).amax(1), image


class SqueezeExcite(nn.Module):
    """A MobileNetV3-like block: relu6, depthwise convolution, batch norm, hardswish, a
    squeeze-and-excite gate (hardsigmoid), a 1x1 convolution, SiLU and global pooling."""

    def __init__(self):
        super().__init__()
        self.stem, self.dw = nn.Conv2d(3, 16, 3, 2, 1), nn.Conv2d(16, 16, 3, 1, 1, groups=16)
        self.bn, self.squeeze, self.excite = nn.BatchNorm2d(16), nn.Linear(16, 4), nn.Linear(4, 16)
        self.pw = nn.Conv2d(16, 24, 1)

    def forward(self, x):
        f = nn.functional
        y = f.hardswish(self.bn(self.dw(f.relu6(self.stem(x)))))
        gate = f.hardsigmoid(self.excite(f.relu(self.squeeze(y.mean((2, 3))))))
        return f.silu(self.pw(y * gate[:, :, None, None])).mean((2, 3))


class TinyViT(nn.Module):
    """Patches by a strided convolution, a class token expanded to the batch, learned
    positions, two pre-norm GELU encoder layers: Shape, Expand and Concat on a dynamic batch."""

    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, 32, 8, 8)
        self.cls, self.pos = nn.Parameter(torch.randn(1, 1, 32)), nn.Parameter(torch.randn(1, 17, 32))
        layer = nn.TransformerEncoderLayer(32, 4, 64, 0.0, batch_first=True, activation="gelu", norm_first=True)
        self.enc, self.head = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False), nn.Linear(32, 10)

    def forward(self, x):
        tokens = self.patch(x).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls.expand(x.shape[0], -1, -1), tokens], 1) + self.pos
        return self.head(self.enc(tokens)[:, 0])


class TokenModel(nn.Module):
    """Token ids through an embedding, a GRU and log-softmax, batch and length dynamic."""

    def __init__(self):
        super().__init__()
        self.embed, self.rnn, self.out = nn.Embedding(50, 16), nn.GRU(16, 16, batch_first=True), nn.Linear(16, 50)

    def forward(self, ids):
        return nn.functional.log_softmax(self.out(self.rnn(self.embed(ids))[0]), -1)


class DepthwiseBlock(nn.Module):
    """A depthwise convolution, group norm (exported as InstanceNormalization), pooling, hardswish."""

    def __init__(self):
        super().__init__()
        self.conv, self.norm = nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.GroupNorm(2, 8)

    def forward(self, x):
        return nn.functional.hardswish(nn.functional.avg_pool2d(self.norm(self.conv(x)), 2))


#: name -> (model, example inputs, dynamic axes or None, other inputs through those axes or
#: None), for the default (dynamo) exporter.
DYNAMO_MODELS = {
    "lstm": (lambda: nn.LSTM(8, 16, batch_first=True), lambda: (torch.randn(2, 5, 8),), None, None),
    "gru": (lambda: nn.GRU(8, 16, num_layers=2), lambda: (torch.randn(5, 2, 8),), None, None),
    "multihead_attention": (
        lambda: nn.MultiheadAttention(16, 2, batch_first=True),
        lambda: (torch.randn(2, 5, 16), torch.randn(2, 5, 16), torch.randn(2, 5, 16)),
        None,
        None,
    ),
    "causal_attention": (CausalAttention, lambda: (torch.randn(2, 5, 16),), None, None),
    "indexing": (Indexing, lambda: (torch.randn(2, 12),), None, None),
    "depthwise": (DepthwiseBlock, lambda: (torch.randn(2, 8, 8, 8),), None, None),
    "squeeze_excite": (
        SqueezeExcite,
        lambda: (torch.randn(2, 3, 32, 32),),
        {0: {0: "batch"}},
        lambda: (torch.randn(3, 3, 32, 32),),
    ),
    "vit_dynamic_batch": (
        TinyViT,
        lambda: (torch.randn(2, 3, 32, 32),),
        {0: {0: "batch"}},
        lambda: (torch.randn(3, 3, 32, 32),),
    ),
    "tokens_dynamic_length": (
        TokenModel,
        lambda: (torch.randint(0, 50, (2, 7)),),
        {0: {0: "batch", 1: "length"}},
        lambda: (torch.randint(0, 50, (3, 5)),),
    ),
    "mlp_dynamic_batch": (
        lambda: nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 3), nn.Softmax(-1)),
        lambda: (torch.randn(3, 8),),
        {0: {0: "batch"}},
        lambda: (torch.randn(5, 8),),
    ),
}


def flat(values):
    """The tensors of a (nested) output, in order: an LSTM returns (y, (h, c))."""
    if isinstance(values, torch.Tensor):
        return [values]
    return [t for v in values for t in flat(v)]


@pytest.mark.parametrize("name", DYNAMO_MODELS)
def test_dynamo_exported_models_match_torch(name, tmp_path):
    make, inputs, dynamic, others = DYNAMO_MODELS[name]
    torch.manual_seed(0)
    model, args = make().eval(), inputs()
    m = ember.onnx.load(export(model, *args, exporter="dynamo", dynamic=dynamic, tmp=tmp_path))
    for a in [args, others()] if others else [args]:
        with torch.no_grad():
            want = [t.numpy() for t in flat(model(*a))]
        with ember.no_grad():
            got = m(*(ember.tensor(t.numpy()) for t in a))
        got = [t.numpy() for t in (got if isinstance(got, tuple) else (got,))]
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)

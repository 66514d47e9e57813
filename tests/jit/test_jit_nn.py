"""Every ember.nn layer and loss: jitted output and gradients equal eager ones (float32 tolerance);
the newer layers also on the numba backend against numpy."""

import copy

import numpy as np
import pytest

import ember
from ember import nn

RTOL, ATOL = 1e-5, 1e-6


def close(a, b):
    assert a.shape == b.shape, (a.shape, b.shape)
    np.testing.assert_allclose(
        np.asarray(a.numpy(), dtype=np.float64), np.asarray(b.numpy(), dtype=np.float64), rtol=RTOL, atol=ATOL
    )


def randn(*shape, seed=0):
    return ember.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


class SelfAttention(nn.Module):
    def __init__(self, causal=False):
        super().__init__()
        self.mha, self.causal = nn.MultiheadAttention(8, 2, batch_first=True), causal

    def forward(self, x):
        t = x.shape[1]
        mask = ember.arange(t).unsqueeze(1) < ember.arange(t) if self.causal else None
        return self.mha(x, x, x, attn_mask=mask)[0]


class Decoder(nn.Module):
    """A decoder layer over (tgt, memory), memory a fixed function of the input."""

    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True)

    def forward(self, x):
        return self.layer(x, x[:, :3] * 0.5, tgt_is_causal=True)


class GRUSteps(nn.Module):
    """A GRUCell stepped over the time dim of (N, T, 5)."""

    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(5, 4)

    def forward(self, x):
        h = None
        for t in range(x.shape[1]):
            h = self.cell(x[:, t], h)
        return h


LAYERS = {
    "linear": (lambda: nn.Linear(6, 4), lambda: randn(3, 6)),
    "linear-3d-nobias": (lambda: nn.Linear(6, 4, bias=False), lambda: randn(2, 3, 6)),
    "conv2d": (lambda: nn.Conv2d(3, 4, 3, padding=1), lambda: randn(2, 3, 6, 6)),
    "conv2d-stride-dilation-groups": (
        lambda: nn.Conv2d(4, 6, 3, stride=2, dilation=2, groups=2, padding=2),
        lambda: randn(2, 4, 9, 9),
    ),
    "maxpool": (lambda: nn.MaxPool2d(2), lambda: randn(2, 3, 6, 6)),
    "maxpool-pad-stride": (lambda: nn.MaxPool2d(3, stride=2, padding=1), lambda: randn(1, 2, 7, 7)),
    "avgpool": (lambda: nn.AvgPool2d(2, padding=1), lambda: randn(2, 3, 6, 6)),
    "adaptive-avgpool": (lambda: nn.AdaptiveAvgPool2d(1), lambda: randn(2, 3, 5, 5)),
    "batchnorm1d": (lambda: nn.BatchNorm1d(5), lambda: randn(8, 5)),
    "batchnorm2d": (lambda: nn.BatchNorm2d(3), lambda: randn(4, 3, 5, 5)),
    "layernorm": (lambda: nn.LayerNorm(6), lambda: randn(2, 3, 6)),
    "rmsnorm": (lambda: nn.RMSNorm(6), lambda: randn(2, 3, 6)),
    "relu": (nn.ReLU, lambda: randn(4, 5)),
    "leaky-relu": (lambda: nn.LeakyReLU(0.2), lambda: randn(4, 5)),
    "gelu": (nn.GELU, lambda: randn(4, 5)),
    "gelu-tanh": (lambda: nn.GELU("tanh"), lambda: randn(4, 5)),
    "silu": (nn.SiLU, lambda: randn(4, 5)),
    "tanh": (nn.Tanh, lambda: randn(4, 5)),
    "sigmoid": (nn.Sigmoid, lambda: randn(4, 5)),
    "softmax": (lambda: nn.Softmax(1), lambda: randn(4, 5)),
    "log-softmax": (lambda: nn.LogSoftmax(0), lambda: randn(4, 5)),
    "dropout": (lambda: nn.Dropout(0.3), lambda: randn(6, 7)),
    "flatten-unflatten": (
        lambda: nn.Sequential(nn.Flatten(), nn.Unflatten(1, (2, 6)), nn.Identity()),
        lambda: randn(3, 4, 3),
    ),
    "lstm": (lambda: nn.LSTM(5, 4, num_layers=2, batch_first=True), lambda: randn(2, 3, 5)),
    "multihead-attention": (SelfAttention, lambda: randn(2, 4, 8)),
    "multihead-attention-causal": (lambda: SelfAttention(causal=True), lambda: randn(2, 4, 8)),
    "conv1d": (lambda: nn.Conv1d(4, 6, 3, stride=2, padding="valid", dilation=2), lambda: randn(2, 4, 11)),
    "conv1d-same-groups": (lambda: nn.Conv1d(4, 6, 4, padding="same", groups=2), lambda: randn(2, 4, 9)),
    "conv-transpose2d": (
        lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1),
        lambda: randn(2, 4, 5, 5),
    ),
    "conv-transpose2d-dilated": (
        lambda: nn.ConvTranspose2d(4, 2, 3, stride=2, dilation=3, output_padding=2, groups=2),
        lambda: randn(1, 4, 3, 4),
    ),
    "group-norm": (lambda: nn.GroupNorm(2, 6), lambda: randn(3, 6, 4, 4)),
    "upsample-nearest": (lambda: nn.Upsample(scale_factor=2), lambda: randn(2, 3, 4, 5)),
    "upsample-bilinear": (
        lambda: nn.Upsample(size=(7, 9), mode="bilinear", align_corners=True),
        lambda: randn(2, 3, 4, 5),
    ),
    "gru": (lambda: nn.GRU(5, 4, num_layers=2, bidirectional=True, batch_first=True), lambda: randn(2, 3, 5)),
    "gru-cell": (GRUSteps, lambda: randn(2, 3, 5)),
    "transformer-encoder": (
        lambda: nn.TransformerEncoder(
            nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, norm_first=True), 2
        ),
        lambda: randn(2, 5, 8),
    ),
    "transformer-decoder-layer": (Decoder, lambda: randn(2, 4, 8)),
}
#: the layers also compared across backends (numba against numpy), eager and jitted
ON_NUMBA = [
    "conv1d",
    "conv1d-same-groups",
    "conv-transpose2d",
    "conv-transpose2d-dilated",
    "group-norm",
    "upsample-nearest",
    "upsample-bilinear",
    "gru",
    "gru-cell",
    "transformer-encoder",
    "transformer-decoder-layer",
]


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def _step(model, x):
    out = _first(model(x))
    weights = ember.arange(out.numel(), backend=out.backend).reshape(out.shape).float().sin()  # weighs each output
    (out * weights).sum().backward()
    return out


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_forward_and_gradients_match_eager(name):
    make, data = LAYERS[name]
    ember.manual_seed(0)
    eager = make()
    jitted = copy.deepcopy(eager)
    x1, x2 = data().requires_grad_(), data().requires_grad_()
    step = ember.jit(_step)
    for _ in range(2):  # twice: the second call runs the cached program
        for m in (eager, jitted):
            m.zero_grad()
        x1.grad = x2.grad = None
        state = ember.random.default_generator.get_state()
        out1 = _step(eager, x1)
        ember.random.default_generator.set_state(state)
        out2 = step(jitted, x2)
        close(out2, out1)
        close(x2.grad, x1.grad)
        for (_n, p1), p2 in zip(eager.named_parameters(), jitted.parameters()):
            close(p2.grad, p1.grad)
        for b1, b2 in zip(eager.buffers(), jitted.buffers()):  # BatchNorm's running statistics
            close(b2, b1)
    assert step.trace_count <= 2


@pytest.mark.parametrize("name", ON_NUMBA)
def test_layer_on_numba_matches_numpy(name):
    pytest.importorskip("ember_numba", reason="ember-numba is not installed: pip install ./plugins/numba")
    make, data = LAYERS[name]
    ember.manual_seed(0)
    ref = make()
    with ember.backend("numba"):
        model = make()
    model.load_state_dict(ref.state_dict())
    assert all(p.backend.name == "numba" for p in model.parameters())
    x1 = data().requires_grad_()
    x2 = data().to("numba").detach().requires_grad_()
    for step in (_step, ember.jit(_step)):
        for m in (ref, model):
            m.zero_grad()
        x1.grad = x2.grad = None
        out = step(model, x2)
        assert out.backend.name == "numba"
        for a, b in [(out, _step(ref, x1)), (x2.grad, x1.grad)] + [
            (p2.grad, p1.grad) for p1, p2 in zip(ref.parameters(), model.parameters())
        ]:
            assert a.shape == b.shape
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5)


def test_embedding_with_padding_idx_matches_eager():
    ember.manual_seed(0)
    eager = nn.Embedding(10, 4, padding_idx=0)
    jitted = copy.deepcopy(eager)
    idx = ember.tensor([[0, 3, 3], [9, 0, 1]])
    step = ember.jit(_step)
    close(step(jitted, idx), _step(eager, idx))
    close(jitted.weight.grad, eager.weight.grad)


def test_layers_in_eval_mode_match_eager():
    ember.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Dropout(0.5), nn.ReLU())
    x = randn(2, 3, 6, 6)
    for _ in range(2):
        model(x)  # move the running statistics
    model.eval()
    f = ember.jit(lambda m, x: m(x))
    with ember.no_grad():
        close(f(model, x), model(x))


LOSSES = {
    "cross-entropy": (lambda: nn.CrossEntropyLoss(), lambda: ember.tensor([0, 3, 1, 4])),
    "cross-entropy-weights-smoothing": (
        lambda: nn.CrossEntropyLoss(weight=ember.tensor([1.0, 2.0, 0.5, 1.0, 3.0]), label_smoothing=0.1),
        lambda: ember.tensor([0, 3, 1, 4]),
    ),
    "cross-entropy-ignore-sum": (
        lambda: nn.CrossEntropyLoss(ignore_index=1, reduction="sum"),
        lambda: ember.tensor([0, 1, 1, 4]),
    ),
    "cross-entropy-probabilities": (lambda: nn.CrossEntropyLoss(), lambda: randn(4, 5, seed=3).softmax(1)),
    "nll": (lambda: nn.NLLLoss(), lambda: ember.tensor([2, 0, 1, 1])),
    "mse": (lambda: nn.MSELoss(), lambda: randn(4, 5, seed=3)),
    "l1-none": (lambda: nn.L1Loss(reduction="none"), lambda: randn(4, 5, seed=3)),
    "huber": (lambda: nn.HuberLoss(delta=0.5), lambda: randn(4, 5, seed=3)),
    "smooth-l1": (lambda: nn.SmoothL1Loss(beta=0.5), lambda: randn(4, 5, seed=3)),
    "bce-with-logits": (
        lambda: nn.BCEWithLogitsLoss(pos_weight=ember.full((5,), 2.0)),
        lambda: (randn(4, 5, seed=3) > 0).float(),
    ),
    "bce": (lambda: nn.BCELoss(), lambda: (randn(4, 5, seed=3) > 0).float()),
}


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_loss_value_and_gradient_match_eager(name):
    make, target = LOSSES[name]
    loss_fn, t = make(), target()
    raw = randn(4, 5)
    prepare = (lambda x: x.sigmoid()) if name == "bce" else (lambda x: x)

    def step(x, t):
        loss = loss_fn(prepare(x), t)
        loss.sum().backward()
        return loss

    x1, x2 = raw.detach().requires_grad_(), raw.detach().requires_grad_()
    jstep = ember.jit(step)
    close(jstep(x2, t), step(x1, t))
    close(x2.grad, x1.grad)

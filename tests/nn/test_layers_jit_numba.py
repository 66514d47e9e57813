"""Conv1d, ConvTranspose2d, GroupNorm, Upsample, GRU, GRUCell and the Transformer layers under
ember.jit (forward and backward equal eager) and on the numba backend (equal to numpy)."""
import copy

import numpy as np
import pytest

import ember
from ember import nn

RTOL, ATOL = 1e-5, 1e-6


def randn(*shape, seed=0):
    return ember.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


class Decoder(nn.Module):
    """A decoder layer over (tgt, memory) where memory is a fixed function of the input."""

    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True)

    def forward(self, x):
        return self.layer(x, x[:, :3] * 0.5, tgt_is_causal=True)


class Cell(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(5, 4)

    def forward(self, x):
        h = None
        for t in range(x.shape[1]):
            h = self.cell(x[:, t], h)
        return h


LAYERS = {
    "conv1d": (lambda: nn.Conv1d(4, 6, 3, stride=2, padding="valid", dilation=2), lambda: randn(2, 4, 11)),
    "conv1d-same-groups": (lambda: nn.Conv1d(4, 6, 4, padding="same", groups=2), lambda: randn(2, 4, 9)),
    "conv-transpose2d": (lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1),
                         lambda: randn(2, 4, 5, 5)),
    "conv-transpose2d-dilated": (lambda: nn.ConvTranspose2d(4, 2, 3, stride=2, dilation=3, output_padding=2,
                                                            groups=2), lambda: randn(1, 4, 3, 4)),
    "group-norm": (lambda: nn.GroupNorm(2, 6), lambda: randn(3, 6, 4, 4)),
    "upsample-nearest": (lambda: nn.Upsample(scale_factor=2), lambda: randn(2, 3, 4, 5)),
    "upsample-bilinear": (lambda: nn.Upsample(size=(7, 9), mode="bilinear", align_corners=True),
                          lambda: randn(2, 3, 4, 5)),
    "gru": (lambda: nn.GRU(5, 4, num_layers=2, bidirectional=True, batch_first=True), lambda: randn(2, 3, 5)),
    "gru-cell": (Cell, lambda: randn(2, 3, 5)),
    "transformer-encoder": (lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(
        8, 2, 16, dropout=0.0, batch_first=True, norm_first=True), 2), lambda: randn(2, 5, 8)),
    "transformer-decoder-layer": (Decoder, lambda: randn(2, 4, 8)),
}


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def _step(model, x):
    out = _first(model(x))
    weights = ember.arange(out.numel(), backend=out.backend).reshape(out.shape).float().sin()   # weighs each output
    (out * weights).sum().backward()
    return out


def close(a, b, rtol=RTOL, atol=ATOL):
    assert a.shape == b.shape, (a.shape, b.shape)
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_forward_and_gradients_under_jit_match_eager(name):
    make, data = LAYERS[name]
    ember.manual_seed(0)
    eager = make()
    jitted = copy.deepcopy(eager)
    x1, x2 = data().requires_grad_(), data().requires_grad_()
    step = ember.jit(_step)
    for _ in range(2):                       # twice: the second call runs the cached program
        for m in (eager, jitted):
            m.zero_grad()
        x1.grad = x2.grad = None
        close(step(jitted, x2), _step(eager, x1))
        close(x2.grad, x1.grad)
        for p1, p2 in zip(eager.parameters(), jitted.parameters()):
            close(p2.grad, p1.grad)
    assert step.trace_count <= 2


@pytest.mark.parametrize("name", sorted(LAYERS))
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
    for use_jit in (False, True):
        step = ember.jit(_step) if use_jit else _step
        for m in (ref, model):
            m.zero_grad()
        x1.grad = x2.grad = None
        out = step(model, x2)
        assert out.backend.name == "numba"
        close(out, _step(ref, x1), rtol=1e-4, atol=1e-5)
        close(x2.grad, x1.grad, rtol=1e-4, atol=1e-5)
        for p1, p2 in zip(ref.parameters(), model.parameters()):
            close(p2.grad, p1.grad, rtol=1e-4, atol=1e-5)

"""GRU and GRUCell against torch with copied weights: outputs, final states, names and every
gradient."""

import numpy as np
import pytest
from references import known

import ember
from ember import nn


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def gru_outputs(out):
    y, h = out
    return [y, h]


@pytest.mark.parametrize(
    "kw,shape",
    [
        (dict(), (6, 3, 5)),
        (dict(batch_first=True), (3, 6, 5)),
        (dict(num_layers=2), (7, 2, 5)),
        (dict(num_layers=2, bidirectional=True, batch_first=True), (2, 5, 5)),
        (dict(bidirectional=True), (4, 3, 5)),
        (dict(bias=False), (4, 2, 5)),
        (dict(), (6, 5)),  # unbatched
    ],
    ids=str,
)
def test_gru_matches_torch(twin, torch, rng, kw, shape):
    e, t = nn.GRU(5, 4, **kw), torch.nn.GRU(5, 4, **kw)
    twin.module(e, t, f32(rng, *shape), outputs=gru_outputs)
    assert repr(e) == known(lambda: repr(t))


def test_gru_initial_state(twin, torch, rng):
    e, t = nn.GRU(3, 4, num_layers=2, bidirectional=True), torch.nn.GRU(3, 4, num_layers=2, bidirectional=True)
    twin.load(e, t)
    x, h0 = f32(rng, 5, 2, 3), f32(rng, 4, 2, 4)
    twin.check(e, t, x, h0, outputs=gru_outputs, emod=e, tmod=t)
    with pytest.raises(ember.ShapeError, match=r"h0 of shape \(4, 2, 4\)"):
        e(ember.tensor(x), ember.tensor(h0[:1]))
    twin.check(e, t, f32(rng, 5, 3), f32(rng, 4, 4), outputs=gru_outputs)  # unbatched with h0


def test_gru_state_dict_keys_are_torchs(torch):
    e, t = nn.GRU(3, 4, num_layers=2, bidirectional=True), torch.nn.GRU(3, 4, num_layers=2, bidirectional=True)
    assert list(e.state_dict()) == known(lambda: list(t.state_dict()))
    assert {k: tuple(v.shape) for k, v in e.state_dict().items()} == known(
        lambda: {k: tuple(v.shape) for k, v in t.state_dict().items()}
    )


@pytest.mark.parametrize("kw", [dict(), dict(bias=False)], ids=str)
def test_gru_cell_matches_torch(twin, torch, rng, kw):
    e, t = nn.GRUCell(5, 4, **kw), torch.nn.GRUCell(5, 4, **kw)
    twin.module(e, t, f32(rng, 3, 5), f32(rng, 3, 4))
    twin.check(e, t, f32(rng, 3, 5), emod=e, tmod=t)  # h defaults to zeros
    twin.check(e, t, f32(rng, 5), f32(rng, 4))  # unbatched
    assert repr(e) == known(lambda: repr(t))


def test_gru_cell_steps_equal_the_gru(rng):
    gru, cell = nn.GRU(3, 4), nn.GRUCell(3, 4)
    cell.load_state_dict({k[:-3]: v for k, v in gru.state_dict().items()})
    x = ember.tensor(f32(rng, 5, 2, 3))
    out, h_n = gru(x)
    h = None
    for t in range(5):
        h = cell(x[t], h)
        np.testing.assert_allclose(h.numpy(), out[t].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h.numpy(), h_n[0].numpy(), rtol=1e-5, atol=1e-6)


def test_gru_long_sequence_gradient_is_exact(twin, torch, rng):
    e, t = nn.GRU(3, 8, batch_first=True), torch.nn.GRU(3, 8, batch_first=True)
    twin.module(e, t, f32(rng, 2, 48, 3), outputs=gru_outputs, rtol=1e-4, atol=2e-5)

"""LSTM and MultiheadAttention against torch with copied weights: outputs, states, weights and
every gradient."""

import numpy as np
import pytest
from references import known

import ember
from ember import nn


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def lstm_outputs(out):
    y, (h, c) = out
    return [y, h, c]


@pytest.mark.parametrize(
    "kw,shape",
    [
        (dict(), (6, 3, 5)),
        (dict(batch_first=True), (3, 6, 5)),
        (dict(num_layers=2), (7, 2, 5)),
        (dict(num_layers=2, bidirectional=True, batch_first=True), (2, 5, 5)),
        (dict(bias=False), (4, 2, 5)),
        (dict(), (6, 5)),  # unbatched
    ],
)
def test_lstm_matches_torch(twin, torch, rng, kw, shape):
    e, t = nn.LSTM(5, 4, **kw), torch.nn.LSTM(5, 4, **kw)
    (y, h, c), _ = twin.module(e, t, f32(rng, *shape), outputs=lstm_outputs)
    assert repr(e) == known(lambda: repr(t))


def test_lstm_initial_state(twin, torch, rng):
    e, t = nn.LSTM(3, 4, num_layers=2), torch.nn.LSTM(3, 4, num_layers=2)
    twin.load(e, t)
    x, h0, c0 = f32(rng, 5, 2, 3), f32(rng, 2, 2, 4), f32(rng, 2, 2, 4)
    twin.check(
        lambda x, h, c: e(x, (h, c)), lambda x, h, c: t(x, (h, c)), x, h0, c0, outputs=lstm_outputs, emod=e, tmod=t
    )
    with pytest.raises(ember.ShapeError, match=r"\(2, 2, 4\)"):
        e(ember.tensor(x), (ember.tensor(h0[:1]), ember.tensor(c0[:1])))


def test_lstm_long_sequence_gradient_is_exact(twin, torch, rng):
    # 64 steps: the halving split must route every step's gradient to the right place.
    e, t = nn.LSTM(3, 8, batch_first=True), torch.nn.LSTM(3, 8, batch_first=True)
    twin.module(e, t, f32(rng, 2, 64, 3), outputs=lstm_outputs, rtol=1e-4, atol=2e-5)


def test_lstm_dropout_between_layers_only_in_training():
    lstm = nn.LSTM(3, 4, num_layers=2, dropout=0.5)
    x = ember.randn(5, 2, 3)
    lstm.eval()
    a, _ = lstm(x)
    b, _ = lstm(x)
    assert a.equal(b)
    lstm.train()
    ember.manual_seed(1)
    c, _ = lstm(x)
    assert not c.equal(a)


def mha_pair(torch, **kw):
    return nn.MultiheadAttention(8, 2, **kw), torch.nn.MultiheadAttention(8, 2, **kw)


@pytest.mark.parametrize("kw", [dict(), dict(batch_first=True), dict(bias=False)])
def test_mha_self_attention(twin, torch, rng, kw):
    e, t = mha_pair(torch, **kw)
    twin.load(e, t)
    x = f32(rng, 5, 3, 8)
    (out, w), _ = twin.check(lambda x: e(x, x, x), lambda x: t(x, x, x), x, outputs=lambda o: list(o), emod=e, tmod=t)
    assert w.shape == ((5, 3, 3) if kw.get("batch_first") else (3, 5, 5))  # (N, L, S)
    assert [n for n, _ in e.named_parameters()] == known(lambda: [n for n, _ in t.named_parameters()])
    assert e.num_parameters() == known(lambda: sum(p.numel() for p in t.parameters()))
    assert repr(e) == known(lambda: repr(t)).replace("NonDynamicallyQuantizableLinear", "Linear")


def test_mha_cross_attention_with_masks(twin, torch, rng):
    e, t = mha_pair(torch, batch_first=True)
    twin.load(e, t)
    q, k, v = f32(rng, 2, 4, 8), f32(rng, 2, 6, 8), f32(rng, 2, 6, 8)
    attn_mask = np.triu(np.ones((4, 6), dtype=bool), k=3)
    kpm = np.zeros((2, 6), dtype=bool)
    kpm[1, -2:] = True
    em, ek = ember.tensor(attn_mask), ember.tensor(kpm)
    tm, tk = torch.tensor(attn_mask), torch.tensor(kpm)
    twin.check(
        lambda q, k, v: e(q, k, v, key_padding_mask=ek, attn_mask=em, average_attn_weights=False),
        lambda q, k, v: t(q, k, v, key_padding_mask=tk, attn_mask=tm, average_attn_weights=False),
        q,
        k,
        v,
        outputs=lambda o: list(o),
        emod=e,
        tmod=t,
    )
    # float masks are added to the scores; a per-head (N*H, L, S) mask too
    fm = f32(rng, 4, 4, 6)
    twin.check(
        lambda q, k, v: e(q, k, v, attn_mask=ember.tensor(fm), need_weights=False)[0],
        lambda q, k, v: t(q, k, v, attn_mask=torch.tensor(fm), need_weights=False)[0],
        q,
        k,
        v,
    )
    out, w = e(ember.tensor(q), ember.tensor(k), ember.tensor(v), need_weights=False)
    assert w is None and out.shape == (2, 4, 8)


def test_mha_kdim_vdim_and_unbatched(twin, torch, rng):
    e, t = nn.MultiheadAttention(8, 4, kdim=5, vdim=3), torch.nn.MultiheadAttention(8, 4, kdim=5, vdim=3)
    twin.load(e, t)
    assert list(e.state_dict()) == known(lambda: list(t.state_dict()))
    twin.check(e, t, f32(rng, 4, 2, 8), f32(rng, 7, 2, 5), f32(rng, 7, 2, 3), outputs=lambda o: list(o), emod=e, tmod=t)
    e, t = mha_pair(torch)
    twin.load(e, t)
    x = f32(rng, 5, 8)
    twin.check(lambda x: e(x, x, x), lambda x: t(x, x, x), x, outputs=lambda o: list(o))


def test_mha_causal_flag_equals_explicit_mask(rng):
    e = nn.MultiheadAttention(8, 2, batch_first=True)
    x = ember.tensor(f32(rng, 2, 5, 8))
    mask = ember.tensor(np.triu(np.ones((5, 5), dtype=bool), k=1))
    a, wa = e(x, x, x, attn_mask=mask)
    b, wb = e(x, x, x, is_causal=True)
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
    assert float(wb.numpy()[:, 0, 1:].sum()) == 0.0  # the first query sees only itself


def test_mha_shape_errors():
    e = nn.MultiheadAttention(8, 2)
    with pytest.raises(ember.ShapeError, match=r"\(L, N, 8\)"):
        e(ember.zeros(3, 2, 6), ember.zeros(3, 2, 6), ember.zeros(3, 2, 6))
    with pytest.raises(ValueError, match="divisible"):
        nn.MultiheadAttention(10, 3)


def test_sdpa_matches_torch(twin, torch, rng):
    import ember.nn.functional as F

    q, k, v = f32(rng, 2, 3, 4, 8), f32(rng, 2, 3, 6, 8), f32(rng, 2, 3, 6, 8)
    twin.check(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
        lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v),
        q,
        k,
        v,
    )
    qq = f32(rng, 2, 3, 6, 8)
    twin.check(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3),
        lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3),
        qq,
        k,
        v,
    )
    allowed = rng.random((6, 6)) > 0.3
    np.fill_diagonal(allowed, True)
    twin.check(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=ember.tensor(allowed)),
        lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=torch.tensor(allowed)),
        qq,
        k,
        v,
    )

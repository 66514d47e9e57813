"""TransformerEncoderLayer / TransformerDecoderLayer and their stacks against torch (eval mode,
dropout 0) with torch's state_dict loaded: outputs, input gradients and every parameter's."""

import numpy as np
import pytest
from references import known

import ember
from ember import nn

TOL = dict(rtol=2e-4, atol=2e-5)


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def pair(torch, cls, *args, **kw):
    e, t = getattr(nn, cls)(*args, dropout=0.0, **kw), getattr(torch.nn, cls)(*args, dropout=0.0, **kw)
    t.eval()
    return e, t


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(batch_first=True),
        dict(norm_first=True),
        dict(activation="gelu"),
        dict(layer_norm_eps=1e-3, bias=False),
    ],
    ids=str,
)
def test_encoder_layer_matches_torch(twin, torch, rng, kw):
    e, t = pair(torch, "TransformerEncoderLayer", 8, 2, 16, **kw)
    twin.module(e, t, f32(rng, 5, 3, 8), **TOL)


def test_encoder_layer_masks(twin, torch, rng):
    e, t = pair(torch, "TransformerEncoderLayer", 8, 2, 16, batch_first=True)
    twin.load(e, t)
    x = f32(rng, 2, 5, 8)
    causal = np.triu(np.ones((5, 5), dtype=bool), k=1)
    pad = np.zeros((2, 5), dtype=bool)
    pad[1, -2:] = True
    em, ep, tm, tp = ember.tensor(causal), ember.tensor(pad), torch.tensor(causal), torch.tensor(pad)
    twin.check(
        lambda x: e(x, src_mask=em, src_key_padding_mask=ep),
        lambda x: t(x, src_mask=tm, src_key_padding_mask=tp),
        x,
        emod=e,
        tmod=t,
        **TOL,
    )
    twin.check(lambda x: e(x, src_mask=em, is_causal=True), lambda x: t(x, src_mask=tm, is_causal=True), x, **TOL)
    fm = f32(rng, 5, 5)
    twin.check(lambda x: e(x, src_mask=ember.tensor(fm)), lambda x: t(x, src_mask=torch.tensor(fm)), x, **TOL)
    # is_causal alone (torch needs the mask too) equals the explicit causal mask
    np.testing.assert_allclose(
        e(ember.tensor(x), is_causal=True).numpy(), e(ember.tensor(x), src_mask=em).numpy(), rtol=1e-6
    )


@pytest.mark.parametrize("kw", [dict(), dict(batch_first=True, norm_first=True), dict(activation="gelu")], ids=str)
def test_decoder_layer_matches_torch(twin, torch, rng, kw):
    e, t = pair(torch, "TransformerDecoderLayer", 8, 2, 16, **kw)
    assert list(e.state_dict()) == known(lambda: list(t.state_dict()))
    twin.load(e, t)
    bf = kw.get("batch_first", False)
    tgt, mem = f32(rng, *((3, 4, 8) if bf else (4, 3, 8))), f32(rng, *((3, 6, 8) if bf else (6, 3, 8)))
    twin.check(e, t, tgt, mem, emod=e, tmod=t, **TOL)


def test_decoder_layer_masks(twin, torch, rng):
    e, t = pair(torch, "TransformerDecoderLayer", 8, 2, 16)
    twin.load(e, t)
    tgt, mem = f32(rng, 4, 2, 8), f32(rng, 6, 2, 8)
    causal = np.triu(np.ones((4, 4), dtype=bool), k=1)
    mmask = rng.random((4, 6)) > 0.7
    mmask[:, 2] = False  # no query loses every key (that row would be nan)
    tpad, mpad = np.zeros((2, 4), dtype=bool), np.zeros((2, 6), dtype=bool)
    tpad[0, -1], mpad[1, :2] = True, True
    E, T = ember.tensor, torch.tensor
    twin.check(
        lambda a, b: e(
            a,
            b,
            tgt_mask=E(causal),
            memory_mask=E(mmask),
            tgt_key_padding_mask=E(tpad),
            memory_key_padding_mask=E(mpad),
            tgt_is_causal=True,
        ),
        lambda a, b: t(
            a,
            b,
            tgt_mask=T(causal),
            memory_mask=T(mmask),
            tgt_key_padding_mask=T(tpad),
            memory_key_padding_mask=T(mpad),
            tgt_is_causal=True,
        ),
        tgt,
        mem,
        emod=e,
        tmod=t,
        **TOL,
    )


def test_stacks_match_torch(twin, torch, rng):
    el, tl = pair(torch, "TransformerEncoderLayer", 8, 2, 16, batch_first=True)
    e = nn.TransformerEncoder(el, 2, norm=nn.LayerNorm(8))
    t = torch.nn.TransformerEncoder(tl, 2, norm=torch.nn.LayerNorm(8), enable_nested_tensor=False)
    t.eval()
    x = f32(rng, 2, 5, 8)
    twin.module(e, t, x, **TOL)
    causal = np.triu(np.ones((5, 5), dtype=bool), k=1)
    twin.check(
        lambda x: e(x, mask=ember.tensor(causal), is_causal=True),
        lambda x: t(x, mask=torch.tensor(causal), is_causal=True),
        x,
        **TOL,
    )

    dl, tdl = pair(torch, "TransformerDecoderLayer", 8, 2, 16, batch_first=True)
    d, td = nn.TransformerDecoder(dl, 2), torch.nn.TransformerDecoder(tdl, 2)
    td.eval()
    assert list(d.state_dict()) == known(lambda: list(td.state_dict()))
    twin.load(d, td)
    twin.check(d, td, f32(rng, 2, 4, 8), x, emod=d, tmod=td, **TOL)


def test_activation_and_errors():
    layer = nn.TransformerEncoderLayer(8, 2, 16, activation=nn.GELU())
    assert isinstance(layer.activation, nn.GELU)
    with pytest.raises(ValueError, match="relu/gelu"):
        nn.TransformerEncoderLayer(8, 2, activation="swish")
    with pytest.raises(ValueError, match="divisible"):
        nn.TransformerDecoderLayer(10, 3)

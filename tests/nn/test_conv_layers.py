"""Conv1d and ConvTranspose2d (and F.conv1d, F.conv_transpose2d) against torch with copied
weights: names, shapes, outputs, input and parameter gradients."""

import numpy as np
import pytest
from references import known

import ember
import ember.nn.functional as F
from ember import nn


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


CONV1D = [
    (dict(), (2, 4, 11)),
    (dict(stride=2, padding=2), (2, 4, 11)),
    (dict(padding="same", dilation=2), (3, 4, 9)),
    (dict(padding="same"), (1, 4, 8)),  # even kernel 4: the odd extra pads the end
    (dict(groups=2, bias=False), (2, 4, 10)),
    (dict(padding="valid", stride=3), (4, 10)),  # unbatched
    (dict(padding=2, padding_mode="reflect"), (2, 4, 9)),
    (dict(padding=1, padding_mode="circular", stride=2), (2, 4, 9)),
]


@pytest.mark.parametrize("kw,shape", CONV1D, ids=str)
def test_conv1d_matches_torch(twin, torch, rng, kw, shape):
    k = 4 if kw == dict(padding="same") else 3
    e, t = nn.Conv1d(4, 6, k, **kw), torch.nn.Conv1d(4, 6, k, **kw)
    twin.module(e, t, f32(rng, *shape))
    assert repr(e) == known(lambda: repr(t))
    assert e.weight.shape == (6, 4 // kw.get("groups", 1), k)


def test_functional_conv1d(twin, torch, rng):
    x, w, b = f32(rng, 2, 3, 12), f32(rng, 5, 3, 3), f32(rng, 5)
    twin.check(
        lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1, dilation=2),
        lambda x, w, b: torch.nn.functional.conv1d(x, w, b, stride=2, padding=1, dilation=2),
        x,
        w,
        b,
    )


CONVT = [
    (dict(), (2, 4, 5, 5)),
    (dict(stride=2), (2, 4, 5, 6)),
    (dict(stride=2, padding=1, output_padding=1), (2, 4, 5, 5)),
    (dict(stride=(3, 2), padding=(2, 0), output_padding=(2, 1)), (1, 4, 4, 5)),  # output_padding > padding
    (dict(stride=2, dilation=2, padding=1), (2, 4, 4, 4)),
    (dict(dilation=3, output_padding=2, stride=2), (1, 4, 3, 3)),  # output_padding < dilation
    (dict(groups=2, stride=2, bias=False), (2, 4, 3, 4)),
    (dict(stride=2, padding=1), (4, 5, 5)),  # unbatched
]


@pytest.mark.parametrize("kw,shape", CONVT, ids=str)
def test_conv_transpose2d_matches_torch(twin, torch, rng, kw, shape):
    e, t = nn.ConvTranspose2d(4, 6, 3, **kw), torch.nn.ConvTranspose2d(4, 6, 3, **kw)
    twin.module(e, t, f32(rng, *shape))
    assert repr(e) == known(lambda: repr(t))
    assert e.weight.shape == (4, 6 // kw.get("groups", 1), 3, 3)


def test_conv_transpose2d_output_size(twin, torch, rng):
    e, t = nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1), torch.nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1)
    twin.load(e, t)
    x = f32(rng, 1, 3, 4, 4)
    for size in [(7, 7), (8, 7), (1, 2, 8, 8)]:
        twin.check(lambda x: e(x, output_size=size), lambda x: t(x, output_size=size), x)
    with pytest.raises(ValueError, match=r"\[7, 8\]"):
        e(ember.tensor(x), output_size=(9, 9))


def test_functional_conv_transpose2d(twin, torch, rng):
    x, w, b = f32(rng, 2, 4, 4, 3), f32(rng, 4, 3, 2, 3), f32(rng, 6)
    twin.check(
        lambda x, w, b: F.conv_transpose2d(
            x, w, b, stride=(2, 1), padding=(0, 1), output_padding=(1, 0), groups=2, dilation=(1, 2)
        ),
        lambda x, w, b: torch.nn.functional.conv_transpose2d(
            x, w, b, stride=(2, 1), padding=(0, 1), output_padding=(1, 0), groups=2, dilation=(1, 2)
        ),
        x,
        w,
        b,
    )


def test_conv_transpose2d_inverts_conv2d_shapes():
    # the layer is the adjoint of Conv2d: <conv(x), y> == <x, conv_t(y)> with the same weight
    rng = np.random.default_rng(1)
    w = ember.tensor(f32(rng, 5, 3, 3, 3))
    x, y = ember.tensor(f32(rng, 2, 3, 7, 7)), ember.tensor(f32(rng, 2, 5, 4, 4))
    lhs = (F.conv2d(x, w, stride=2, padding=1) * y).sum().item()
    rhs = (x * F.conv_transpose2d(y, w, stride=2, padding=1, output_padding=0)).sum().item()
    assert abs(lhs - rhs) < 1e-3 * max(1.0, abs(lhs))


def test_conv_errors_name_the_cause():
    with pytest.raises(ember.ShapeError, match=r"expected input \(N, 4, L\)"):
        nn.Conv1d(4, 2, 3)(ember.ones(2, 3, 10))
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.ConvTranspose2d(4, 6, 3, groups=4)
    with pytest.raises(ValueError, match="output_padding"):
        F.conv_transpose2d(ember.ones(1, 2, 3, 3), ember.ones(2, 2, 3, 3), stride=1, output_padding=1)
    with pytest.raises(ember.ShapeError, match="expects 2"):
        F.conv_transpose2d(ember.ones(1, 3, 3, 3), ember.ones(2, 2, 3, 3))
    with pytest.raises(ValueError, match="padding_mode"):
        nn.ConvTranspose2d(2, 2, 3, padding_mode="reflect")

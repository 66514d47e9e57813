"""GroupNorm and Upsample / F.interpolate against torch: outputs, input and parameter gradients."""

import numpy as np
import pytest
from references import known

import ember
import ember.nn.functional as F
from ember import nn


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize(
    "groups,channels,kw,shape",
    [
        (2, 6, dict(), (3, 6, 4, 5)),
        (3, 6, dict(eps=1e-3), (2, 6, 7)),
        (1, 4, dict(), (2, 4, 3, 3)),  # one group: layer norm over (C, H, W)
        (4, 4, dict(affine=False), (2, 4, 5, 5)),  # instance norm
        (2, 4, dict(), (3, 4)),  # no spatial dims
        (2, 4, dict(bias=False), (2, 4, 3)),
    ],
    ids=str,
)
def test_group_norm_matches_torch(twin, torch, rng, groups, channels, kw, shape):
    e, t = nn.GroupNorm(groups, channels, **kw), torch.nn.GroupNorm(groups, channels, **kw)
    if kw.get("affine", True):  # torch starts at ones/zeros: move them so the affine part shows
        t.weight.data.normal_()
        if t.bias is not None:
            t.bias.data.normal_()
    twin.module(e, t, f32(rng, *shape) * 3 + 1)
    assert repr(e) == known(lambda: repr(t))


def test_functional_group_norm(twin, torch, rng):
    x, w, b = f32(rng, 2, 6, 3, 3), f32(rng, 6), f32(rng, 6)
    twin.check(
        lambda x, w, b: F.group_norm(x, 3, w, b, eps=1e-4),
        lambda x, w, b: torch.nn.functional.group_norm(x, 3, w, b, eps=1e-4),
        x,
        w,
        b,
    )


def test_group_norm_errors():
    with pytest.raises(ValueError, match="divisible"):
        nn.GroupNorm(4, 6)
    with pytest.raises(ember.ShapeError, match=r"\(N, 6, \.\.\.\)"):
        nn.GroupNorm(3, 6)(ember.ones(2, 4, 3))


INTERP = [
    (dict(scale_factor=2), (2, 3, 4, 5)),
    (dict(scale_factor=3), (1, 2, 3, 4)),
    (dict(size=(7, 3)), (1, 2, 4, 5)),  # nearest, up one dim and down the other
    (dict(scale_factor=(1.5, 0.5)), (1, 2, 4, 6)),
    (dict(scale_factor=2, mode="bilinear"), (2, 3, 4, 5)),
    (dict(scale_factor=2, mode="bilinear", align_corners=True), (2, 3, 4, 5)),
    (dict(size=(5, 9), mode="bilinear"), (1, 2, 3, 4)),
    (dict(size=(2, 3), mode="bilinear"), (1, 2, 5, 7)),  # downsampling
    (dict(size=(5, 1), mode="bilinear", align_corners=True), (1, 2, 3, 4)),
    (dict(scale_factor=1.7, mode="bilinear"), (1, 1, 5, 4)),
    (dict(scale_factor=1.7, mode="bilinear", recompute_scale_factor=True), (1, 1, 5, 4)),
    (dict(scale_factor=2.5), (2, 3, 6)),  # 1-d nearest
    (dict(size=11, mode="linear", align_corners=False), (2, 3, 6)),
    (dict(size=11, mode="linear", align_corners=True), (2, 3, 6)),
]


@pytest.mark.parametrize("kw,shape", INTERP, ids=str)
def test_interpolate_matches_torch(twin, torch, rng, kw, shape):
    twin.check(lambda x: F.interpolate(x, **kw), lambda x: torch.nn.functional.interpolate(x, **kw), f32(rng, *shape))


@pytest.mark.parametrize(
    "kw",
    [
        dict(scale_factor=2),
        dict(size=(6, 9), mode="bilinear", align_corners=True),
        dict(scale_factor=(2.0, 3.0), mode="bilinear"),
    ],
    ids=str,
)
def test_upsample_layer_matches_torch(twin, torch, rng, kw):
    e, t = nn.Upsample(**kw), torch.nn.Upsample(**kw)
    twin.module(e, t, f32(rng, 2, 3, 3, 4))
    assert repr(e) == known(lambda: repr(t))


def test_interpolate_errors():
    x = ember.ones(1, 2, 3, 3)
    with pytest.raises(ValueError, match="exactly one of size and scale_factor"):
        F.interpolate(x)
    with pytest.raises(NotImplementedError, match="bicubic"):
        F.interpolate(x, scale_factor=2, mode="bicubic")
    with pytest.raises(ember.ShapeError, match="'bilinear' needs input of 4 dims"):
        F.interpolate(ember.ones(1, 2, 3), scale_factor=2, mode="bilinear")
    with pytest.raises(ValueError, match="align_corners"):
        F.interpolate(x, scale_factor=2, align_corners=True)
    with pytest.raises(ember.DTypeError, match="needs a float input, got int64"):
        F.interpolate(ember.ones(1, 1, 2, 2, dtype=ember.int64), scale_factor=2, mode="bilinear")
    assert F.interpolate(ember.tensor([[[1, 2]]]), scale_factor=2).tolist() == [[[1, 1, 2, 2]]]

"""Every loss against torch: values and input gradients, for each reduction, with class
weights, label smoothing, ignore_index, probability targets and (N, C, d1, d2) inputs."""

import numpy as np
import pytest

import ember
import ember.nn.functional as F
from ember import nn

REDUCTIONS = ["mean", "sum", "none"]


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [False, True])
def test_cross_entropy_class_targets(twin, torch, rng, reduction, smoothing, weighted, ignore):
    logits = f32(rng, 6, 5) * 3
    target = rng.integers(0, 5, size=6)
    if ignore:
        target[[1, 4]] = -100
    w = rng.random(5).astype(np.float32) + 0.5 if weighted else None
    kw = dict(reduction=reduction, label_smoothing=smoothing)
    e = nn.CrossEntropyLoss(weight=None if w is None else ember.tensor(w), **kw)
    t = torch.nn.CrossEntropyLoss(weight=None if w is None else torch.tensor(w), **kw)
    twin.check(lambda x: e(x, ember.tensor(target)), lambda x: t(x, torch.tensor(target)), logits)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_spatial_and_custom_ignore(twin, torch, rng, reduction):
    logits = f32(rng, 2, 4, 3, 5)
    target = rng.integers(0, 4, size=(2, 3, 5))
    target[0, 1, :2] = 3
    kw = dict(reduction=reduction, ignore_index=3, label_smoothing=0.1)
    twin.check(
        lambda x: F.cross_entropy(x, ember.tensor(target), **kw),
        lambda x: torch.nn.functional.cross_entropy(x, torch.tensor(target), **kw),
        logits,
    )


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.3])
def test_cross_entropy_probability_targets(twin, torch, rng, reduction, smoothing):
    logits = f32(rng, 4, 6)
    probs = rng.dirichlet(np.ones(6), size=4).astype(np.float32)
    w = rng.random(6).astype(np.float32) + 0.5
    kw = dict(reduction=reduction, label_smoothing=smoothing)
    for weight in (None, w):
        ew, tw = (None, None) if weight is None else (ember.tensor(weight), torch.tensor(weight))
        twin.check(
            lambda x: F.cross_entropy(x, ember.tensor(probs), ew, **kw),
            lambda x: torch.nn.functional.cross_entropy(x, torch.tensor(probs), tw, **kw),
            logits,
        )


def test_cross_entropy_is_stable_for_huge_logits():
    x = ember.tensor([[1000.0, -1000.0, 0.0], [-5e4, 5e4, 0.0]], requires_grad=True)
    loss = F.cross_entropy(x, ember.tensor([0, 0]))
    loss.backward()
    assert np.isfinite(loss.item()) and abs(loss.item() - 5e4) < 1
    assert np.isfinite(x.grad.numpy()).all()


def test_cross_entropy_bad_targets():
    with pytest.raises(ValueError, match="out of range for 3 classes"):
        F.cross_entropy(ember.zeros(2, 3), ember.tensor([0, 3]))
    with pytest.raises(ember.ShapeError, match=r"targets of shape \(2,\)"):
        F.cross_entropy(ember.zeros(2, 3), ember.tensor([0, 1, 2]))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_nll_loss(twin, torch, rng, reduction):
    logp = np.log(rng.dirichlet(np.ones(4), size=5)).astype(np.float32)
    target = np.array([0, 3, -100, 2, 1])
    w = np.array([1.0, 2.0, 0.5, 1.5], dtype=np.float32)
    twin.check(
        lambda x: nn.NLLLoss(ember.tensor(w), reduction=reduction)(x, ember.tensor(target)),
        lambda x: torch.nn.NLLLoss(torch.tensor(w), reduction=reduction)(x, torch.tensor(target)),
        logp,
    )


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize(
    "name,kw",
    [
        ("MSELoss", {}),
        ("L1Loss", {}),
        ("HuberLoss", {"delta": 0.7}),
        ("SmoothL1Loss", {"beta": 0.5}),
        ("SmoothL1Loss", {"beta": 0.0}),
        ("HuberLoss", {}),
    ],
)
def test_regression_losses(twin, torch, rng, reduction, name, kw):
    x, y = f32(rng, 4, 5), f32(rng, 4, 5)
    twin.check(getattr(nn, name)(reduction=reduction, **kw), getattr(torch.nn, name)(reduction=reduction, **kw), x, y)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_bce_with_logits(twin, torch, rng, reduction):
    x = f32(rng, 4, 3) * 5
    y = (rng.random((4, 3)) > 0.5).astype(np.float32)
    pw = np.array([0.5, 2.0, 3.0], dtype=np.float32)
    w = rng.random((4, 3)).astype(np.float32)
    for kw_e, kw_t in [
        ({}, {}),
        ({"pos_weight": ember.tensor(pw)}, {"pos_weight": torch.tensor(pw)}),
        (
            {"weight": ember.tensor(w), "pos_weight": ember.tensor(pw)},
            {"weight": torch.tensor(w), "pos_weight": torch.tensor(pw)},
        ),
    ]:
        twin.check(
            nn.BCEWithLogitsLoss(reduction=reduction, **kw_e),
            torch.nn.BCEWithLogitsLoss(reduction=reduction, **kw_t),
            x,
            y,
        )


def test_bce_with_logits_is_stable():
    x = ember.tensor([200.0, -200.0, 0.0])
    loss = F.binary_cross_entropy_with_logits(x, ember.tensor([0.0, 1.0, 1.0]), reduction="none")
    np.testing.assert_allclose(loss.numpy(), [200.0, 200.0, np.log(2)], rtol=1e-6)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_bce(twin, torch, rng, reduction):
    p = rng.uniform(0.05, 0.95, size=(4, 3)).astype(np.float32)
    y = rng.random((4, 3)).astype(np.float32)
    w = rng.random((4, 3)).astype(np.float32)
    twin.check(nn.BCELoss(reduction=reduction), torch.nn.BCELoss(reduction=reduction), p, y)
    twin.check(
        nn.BCELoss(ember.tensor(w), reduction=reduction), torch.nn.BCELoss(torch.tensor(w), reduction=reduction), p, y
    )
    # log(0) is clamped at -100, as in torch
    assert F.binary_cross_entropy(ember.tensor([0.0]), ember.tensor([1.0])).item() == 100.0


def test_loss_shape_and_reduction_errors():
    with pytest.raises(ember.ShapeError, match=r"\(2, 3\).*\(3, 2\)"):
        F.mse_loss(ember.zeros(2, 3), ember.zeros(3, 2))
    with pytest.raises(ValueError, match="reduction"):
        F.l1_loss(ember.zeros(2), ember.zeros(2), reduction="avg")
    assert list(nn.CrossEntropyLoss(weight=ember.ones(3)).state_dict()) == ["weight"]

"""clip_grad_norm_ and clip_grad_value_ against torch.nn.utils."""

import math

import numpy as np
import pytest
from references import known, load_torch

import ember
from ember.optim import clip_grad_norm_, clip_grad_value_

torch = load_torch()  # without torch, a stand-in: its answers come from tests/references


def _with_grads(lib, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    params = []
    for shape in [(3, 4), (5,), (2, 2, 2)]:
        p = lib.zeros(*shape, requires_grad=True)
        p.grad = lib.tensor((rng.standard_normal(shape) * scale).astype("float32"))
        params.append(p)
    return params


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.5, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 1e3])
def test_clip_grad_norm_matches_torch(norm_type, max_norm):
    mine, theirs = _with_grads(ember), _with_grads(torch)
    total = clip_grad_norm_(mine, max_norm, norm_type)
    want = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type)
    assert isinstance(total, ember.Tensor) and total.shape == ()
    np.testing.assert_allclose(total.item(), known(want), rtol=1e-6)
    for p, q in zip(mine, theirs):
        np.testing.assert_allclose(p.grad.numpy(), known(q.grad), rtol=1e-6, atol=1e-7)
    clipped = (
        sum(float((p.grad.abs() ** norm_type).sum()) for p in mine) ** (1 / norm_type)
        if norm_type != math.inf
        else max(p.grad.abs().amax().item() for p in mine)
    )
    assert clipped <= max_norm * (1 + 1e-5)


def test_a_gradient_shared_by_two_leaves_is_clipped_once():
    """Clipping rebinds .grad, so a gradient tensor assigned to two leaves is scaled once."""
    a = ember.tensor([3.0, 0.0], requires_grad=True)
    b = ember.tensor([0.0, 4.0], requires_grad=True)
    a.grad = b.grad = ember.tensor([3.0, 4.0])
    total = clip_grad_norm_([a, b], max_norm=1.0)
    assert total.item() == pytest.approx(math.sqrt(2) * 5.0)
    assert a.grad.tolist() == pytest.approx([0.6 / math.sqrt(2), 0.8 / math.sqrt(2)], rel=1e-5)
    assert b.grad.tolist() == pytest.approx(a.grad.tolist())


def test_clip_grad_norm_skips_missing_grads_and_accepts_one_tensor():
    w = ember.ones(3, requires_grad=True)
    assert clip_grad_norm_([w], 1.0).item() == 0.0
    w.grad = ember.full((3,), 2.0)
    assert clip_grad_norm_(w, 100.0).item() == pytest.approx(math.sqrt(12), rel=1e-6)
    assert w.grad.tolist() == pytest.approx([2.0] * 3, rel=1e-6)


def test_nonfinite_norm():
    params = _with_grads(ember)
    params[1].grad = ember.tensor([1.0, math.nan, 0.0, 0.0, 0.0])
    with pytest.raises(ember.optim.OptimizerError, match="is nan; a loss or gradient went non-finite") as info:
        clip_grad_norm_(params, 1.0, error_if_nonfinite=True)
    assert "test_optim_clip.py:" in str(info.value)
    assert math.isnan(clip_grad_norm_(params, 1.0).item())


@pytest.mark.parametrize("bad", [dict(max_norm=-1.0), dict(max_norm=1.0, norm_type=0.0), dict(max_norm="1")])
def test_clip_grad_norm_bad_arguments(bad):
    with pytest.raises(ember.optim.OptimizerError):
        clip_grad_norm_(_with_grads(ember), **bad)


def test_clip_grad_value_matches_torch():
    mine, theirs = _with_grads(ember, scale=2.0), _with_grads(torch, scale=2.0)
    assert clip_grad_value_(mine, 0.7) is None
    torch.nn.utils.clip_grad_value_(theirs, 0.7)
    for p, q in zip(mine, theirs):
        np.testing.assert_array_equal(p.grad.numpy(), known(q.grad))
    assert max(p.grad.abs().amax().item() for p in mine) == pytest.approx(0.7)
    with pytest.raises(ember.optim.OptimizerError, match="clip_value must be"):
        clip_grad_value_(mine, -1)

"""ember.checkpoint: the same gradients as without it, and the memory it saves."""

import gc
import tracemalloc

import numpy as np
import pytest

import ember
import ember.nn.functional as F
from ember import nn


def _grads(model):
    return [p.grad.numpy().copy() for p in model.parameters()]


def _deep_mlp():
    ember.manual_seed(0)
    return nn.Sequential(
        *[
            nn.Sequential(nn.Linear(256, 256), nn.Tanh(), nn.Dropout(0.2), nn.Linear(256, 256), nn.GELU())
            for _ in range(8)
        ]
    )


def _loss(model, x, ckpt):
    for block in model:
        x = ember.checkpoint(block, x) if ckpt else block(x)
    return (x * x).mean()


def _step(model, x, ckpt):
    model.zero_grad()
    ember.manual_seed(7)  # dropout draws the same masks in both runs
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    loss = _loss(model, x, ckpt)
    loss.backward()
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return loss.item(), _grads(model), peak


def test_same_loss_and_gradients_dropout_included():
    model = _deep_mlp()
    x = ember.randn(64, 256, requires_grad=True)
    plain = _step(model, x, False)
    gx = x.grad.numpy().copy()
    x.grad = None
    ckpt = _step(model, x, True)
    assert plain[0] == ckpt[0]
    assert all(np.array_equal(a, b) for a, b in zip(plain[1], ckpt[1]))
    np.testing.assert_array_equal(gx, x.grad.numpy())


def test_peak_memory_of_a_deep_stack_drops():
    model = _deep_mlp()
    x = ember.randn(512, 256)
    _, _, plain = _step(model, x, False)
    _, _, ckpt = _step(model, x, True)
    assert ckpt < 0.7 * plain, f"peak {ckpt / 2**20:.1f} MiB with checkpoint vs {plain / 2**20:.1f} MiB without"


def test_works_with_functional_grad_and_second_order():
    w = ember.tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)

    def f(x):
        return (x @ w).tanh()

    x = ember.tensor([[1.0, 2.0]], requires_grad=True)
    g_plain = ember.autograd.grad(f(x).sum(), [x, w], create_graph=True)
    g_ckpt = ember.autograd.grad(ember.checkpoint(f, x).sum(), [x, w], create_graph=True)
    for a, b in zip(g_plain, g_ckpt):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
    h_plain = ember.autograd.grad(g_plain[0].sum(), [w])[0]
    h_ckpt = ember.autograd.grad(g_ckpt[0].sum(), [w])[0]
    np.testing.assert_allclose(h_plain.numpy(), h_ckpt.numpy(), rtol=1e-6)


def test_batchnorm_statistics_are_updated_once():
    ember.manual_seed(0)
    a, b = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)), nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    b.load_state_dict(a.state_dict())
    x = ember.randn(2, 3, 6, 6)
    a(x).sum().backward()
    ember.checkpoint(b, x).sum().backward()
    for (k, u), v in zip(a.state_dict().items(), b.state_dict().values()):
        np.testing.assert_array_equal(u.numpy(), v.numpy(), err_msg=k)
    assert ember.utils.checkpoint.checkpoint is ember.checkpoint


def test_no_grad_and_bad_outputs():
    lin = nn.Linear(2, 2)
    with ember.no_grad():
        assert ember.checkpoint(lin, ember.ones(1, 2))._ctx is None
    with pytest.raises(TypeError, match="fn must return one Tensor"):
        ember.checkpoint(lambda t: (t, t), ember.ones(1, requires_grad=True))


def _resnet_forward(model, x, ckpt):
    x = model.bn1(model.conv1(x)).relu()
    for layer in (model.layer1, model.layer2, model.layer3, model.layer4):
        for block in layer:
            x = ember.checkpoint(block, x) if ckpt else block(x)
    return model.fc(x.mean((2, 3)))


@pytest.mark.slow
def test_resnet18_training_peak_memory_down_30_percent_at_equal_results():
    runs = []
    for ckpt in (False, True):
        ember.manual_seed(0)
        model = ember.models.resnet18()
        x, y = ember.randn(16, 3, 32, 32), ember.randint(0, 10, (16,))
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        loss = F.cross_entropy(_resnet_forward(model, x, ckpt), y)
        loss.backward()
        peak = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
        runs.append((peak, loss.item(), _grads(model)))
    (plain, loss_a, grads_a), (ckpt, loss_b, grads_b) = runs
    assert loss_a == loss_b and all(np.array_equal(a, b) for a, b in zip(grads_a, grads_b))
    assert ckpt <= 0.7 * plain, f"{ckpt / 2**20:.0f} MiB vs {plain / 2**20:.0f} MiB"

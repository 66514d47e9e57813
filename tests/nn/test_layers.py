"""Every layer against its torch twin: shape, parameter names and count, forward, gradients of
inputs and parameters (float32, weights copied torch -> ember through state_dict), and a
state_dict round trip."""

import numpy as np
import pytest
from references import known

import ember
from ember import nn

pytestmark = pytest.mark.filterwarnings("ignore:Using padding=.same. with even kernel")


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def roundtrip(make, emod, x):
    """A fresh module loaded from emod.state_dict() gives the same output."""
    other = make()
    other.load_state_dict(emod.state_dict())
    emod.eval(), other.eval()
    np.testing.assert_array_equal(emod(ember.tensor(x)).numpy(), other(ember.tensor(x)).numpy())


@pytest.mark.parametrize("bias", [True, False])
def test_linear(twin, torch, rng, bias):
    e, t = nn.Linear(7, 5, bias=bias), torch.nn.Linear(7, 5, bias=bias)
    x = f32(rng, 4, 3, 7)
    (out,), _ = twin.module(e, t, x)
    assert out.shape == (4, 3, 5)
    roundtrip(lambda: nn.Linear(7, 5, bias=bias), e, x)
    assert repr(e) == known(lambda: repr(t))


def test_linear_wrong_in_features_names_shapes_and_line():
    layer = nn.Linear(784, 10)
    with pytest.raises(ember.ShapeError) as err:
        layer(ember.zeros(32, 100))  # the line the error must point at
    msg = str(err.value)
    assert "784" in msg and "(32, 100)" in msg
    assert "test_layers.py" in msg and "layer(ember.zeros(32, 100))" in msg


def test_linear_1d_and_3d_inputs(twin, torch, rng):
    e, t = nn.Linear(6, 2), torch.nn.Linear(6, 2)
    twin.module(e, t, f32(rng, 6))
    e.zero_grad(), t.zero_grad()
    twin.module(e, t, f32(rng, 2, 3, 4, 6))


@pytest.mark.parametrize(
    "kw",
    [
        dict(kernel_size=3),
        dict(kernel_size=3, stride=2, padding=1),
        dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), dilation=(2, 1)),
        dict(kernel_size=3, padding="same", dilation=2),
        dict(kernel_size=4, padding="same"),  # even kernel: asymmetric padding
        dict(kernel_size=3, padding="valid", bias=False),
        dict(kernel_size=3, groups=2, padding=1),
        dict(kernel_size=3, padding=1, padding_mode="reflect"),
        dict(kernel_size=3, padding=2, padding_mode="circular"),
        dict(kernel_size=3, padding=1, padding_mode="replicate"),
    ],
)
def test_conv2d(twin, torch, rng, kw):
    e, t = nn.Conv2d(4, 6, **kw), torch.nn.Conv2d(4, 6, **kw)
    x = f32(rng, 2, 4, 9, 8)
    twin.module(e, t, x)
    assert repr(e) == known(lambda: repr(t))
    roundtrip(lambda: nn.Conv2d(4, 6, **kw), e, x)


def test_conv2d_unbatched_and_channel_error(twin, torch, rng):
    e, t = nn.Conv2d(3, 2, 3), torch.nn.Conv2d(3, 2, 3)
    twin.module(e, t, f32(rng, 3, 6, 6))
    with pytest.raises(ember.ShapeError, match=r"\(N, 3, H, W\).*\(1, 5, 6, 6\)"):
        e(ember.zeros(1, 5, 6, 6))


@pytest.mark.parametrize(
    "kw",
    [
        dict(kernel_size=2),
        dict(kernel_size=3, stride=2, padding=1),
        dict(kernel_size=3, stride=2, ceil_mode=True),
        dict(kernel_size=(2, 3), stride=(1, 2), dilation=(2, 1)),
    ],
)
def test_maxpool2d(twin, torch, rng, kw):
    x = rng.permutation(2 * 3 * 9 * 11).reshape(2, 3, 9, 11).astype(np.float32)  # distinct: no ties
    (out,), _ = twin.check(nn.MaxPool2d(**kw), torch.nn.MaxPool2d(**kw), x)


@pytest.mark.parametrize(
    "kw",
    [
        dict(kernel_size=2),
        dict(kernel_size=3, stride=2, padding=1),
        dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
        dict(kernel_size=3, stride=2, ceil_mode=True),
        dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
        dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
        dict(kernel_size=2, divisor_override=3),
    ],
)
def test_avgpool2d(twin, torch, rng, kw):
    twin.check(nn.AvgPool2d(**kw), torch.nn.AvgPool2d(**kw), f32(rng, 2, 3, 9, 10))


@pytest.mark.parametrize("size", [1, 3, (2, 5), (None, 2), 4])
def test_adaptive_avgpool2d(twin, torch, rng, size):
    twin.check(nn.AdaptiveAvgPool2d(size), torch.nn.AdaptiveAvgPool2d(size), f32(rng, 2, 3, 8, 10))


@pytest.mark.parametrize(
    "name,args",
    [
        ("ReLU", ()),
        ("LeakyReLU", (0.2,)),
        ("GELU", ()),
        ("GELU", ("tanh",)),
        ("SiLU", ()),
        ("Tanh", ()),
        ("Sigmoid", ()),
        ("Softmax", (1,)),
        ("LogSoftmax", (-1,)),
        ("Identity", ()),
        ("Flatten", ()),
    ],
)
def test_activations_and_shape_layers(twin, torch, rng, name, args):
    e, t = getattr(nn, name)(*args), getattr(torch.nn, name)(*args)
    x = f32(rng, 3, 4, 5) * 3
    twin.check(e, t, x)
    assert e.num_parameters() == 0


def test_embedding(twin, torch, rng):
    e, t = nn.Embedding(10, 4, padding_idx=2), torch.nn.Embedding(10, 4, padding_idx=2)
    assert float(e.weight[2].abs().sum()) == 0.0  # the padding row starts at zero
    idx = ember.tensor([[1, 2, 3], [2, 2, 9]])
    twin.load(e, t)
    out = e(idx)
    tout = t(torch.tensor(idx.numpy()))
    cot = rng.standard_normal((2, 3, 4)).astype(np.float32)
    (out * ember.tensor(cot)).sum().backward()
    (tout * torch.tensor(cot)).sum().backward()
    twin.close(out, tout, "embedding forward")
    twin.close(e.weight.grad, t.weight.grad, "embedding weight grad")  # row 2 gets none
    assert float(e.weight.grad[2].abs().sum()) == 0.0
    assert e.num_parameters() == 40 and repr(e) == known(lambda: repr(t))


@pytest.mark.parametrize("affine", [True, False])
def test_layernorm_and_rmsnorm(twin, torch, rng, affine):
    x = f32(rng, 2, 5, 6) * 2 + 1
    e, t = nn.LayerNorm((5, 6), elementwise_affine=affine), torch.nn.LayerNorm((5, 6), elementwise_affine=affine)
    if affine:
        t.weight.data.normal_(), t.bias.data.normal_()
    twin.module(e, t, x)
    e, t = nn.RMSNorm(6, elementwise_affine=affine), torch.nn.RMSNorm(6, elementwise_affine=affine)
    if affine:
        t.weight.data.normal_()
    twin.module(e, t, x)
    e, t = nn.RMSNorm(6, eps=1e-3), torch.nn.RMSNorm(6, eps=1e-3)
    twin.module(e, t, x * 1e-2)


@pytest.mark.parametrize(
    "cls,shape", [("BatchNorm1d", (8, 5)), ("BatchNorm1d", (8, 5, 3)), ("BatchNorm2d", (4, 5, 3, 3))]
)
@pytest.mark.parametrize("momentum", [0.1, None])
def test_batchnorm_running_stats_and_eval(twin, torch, rng, cls, shape, momentum):
    e, t = getattr(nn, cls)(5, momentum=momentum), getattr(torch.nn, cls)(5, momentum=momentum)
    t.weight.data.normal_(), t.bias.data.normal_()
    twin.load(e, t)
    for step in range(3):  # training: batch statistics
        x = f32(rng, *shape) * (step + 1) + step
        e.zero_grad(), t.zero_grad()
        twin.check(e, t, x, emod=e, tmod=t, seed=step)
        for name in ("running_mean", "running_var"):
            twin.close(getattr(e, name), getattr(t, name), name)
    assert e.num_batches_tracked.item() == 3 and e.num_batches_tracked.dtype is ember.int64
    e.eval(), t.eval()  # eval: running statistics
    twin.check(e, t, f32(rng, *shape), emod=e, tmod=t)
    assert list(e.state_dict()) == known(lambda: list(t.state_dict()))
    twin.close(e.running_mean, t.running_mean, "eval leaves running_mean alone")


def test_batchnorm_options(twin, torch, rng):
    x = f32(rng, 6, 3, 4, 4)
    for kw in (dict(affine=False), dict(track_running_stats=False)):
        e, t = nn.BatchNorm2d(3, **kw), torch.nn.BatchNorm2d(3, **kw)
        twin.module(e, t, x)
        e.eval(), t.eval()
        twin.check(e, t, x)
    with pytest.raises(ember.ShapeError, match=r"\(N, 3, H, W\)"):
        nn.BatchNorm2d(3)(ember.zeros(2, 4, 2, 2))


def test_dropout_statistics_and_determinism():
    x = ember.ones(200_000)
    drop = nn.Dropout(0.3)
    ember.manual_seed(5)
    a = drop(x)
    kept = (a != 0).float().mean().item()
    assert abs(kept - 0.7) < 0.005  # 4 sigma of a binomial mean
    assert abs(a.mean().item() - 1.0) < 0.01  # scaled by 1/(1-p): mean preserved
    np.testing.assert_allclose(np.unique(a.numpy()), [0.0, 1 / 0.7], rtol=1e-6)
    ember.manual_seed(5)
    assert drop(x).equal(a)  # same seed, same mask
    assert not drop(x).equal(a)  # the stream moves on
    g = ember.Generator(1)
    b = nn.Dropout(0.3, generator=g)(x)
    g.manual_seed(1)
    assert nn.Dropout(0.3, generator=g)(x).equal(b)
    assert drop.eval()(x).equal(x)
    assert nn.Dropout(1.0)(x).abs().sum().item() == 0 and nn.Dropout(0.0)(x).equal(x)


def test_dropout_gradient_uses_the_mask():
    x = ember.ones(1000, requires_grad=True)
    ember.manual_seed(0)
    y = nn.Dropout(0.5)(x)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), y.detach().numpy())


def test_sequential_chain_matches_torch(twin, torch, rng):
    e = nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(4 * 3 * 3, 5),
        nn.GELU(),
        nn.LayerNorm(5),
    )
    t = torch.nn.Sequential(
        torch.nn.Conv2d(2, 4, 3, padding=1),
        torch.nn.BatchNorm2d(4),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * 3 * 3, 5),
        torch.nn.GELU(),
        torch.nn.LayerNorm(5),
    )
    twin.module(e, t, f32(rng, 3, 2, 6, 6))
    assert repr(e) == known(lambda: repr(t))

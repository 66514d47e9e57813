"""ember.nn.functional against torch.nn.functional: pad, one_hot, embedding, norms,
activations over a wide range, pooling edge cases; plus the functional dropout contract."""

import numpy as np
import pytest
from references import known

import ember
import ember.nn.functional as F


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


PADS = [(1, 2), (1, 0, 2, 1), (0, 1, 1, 0, 2, 2), (-1, 2, 1, -2)]
# torch pads non-constantly only the last 1-2 dims here, and never negatively
PAD_CASES = [(p, "constant") for p in PADS] + [
    (p, m) for m in ("reflect", "replicate", "circular") for p in PADS if len(p) <= 4 and min(p) >= 0
]


@pytest.mark.parametrize("pad,mode", PAD_CASES)
def test_pad(twin, torch, rng, pad, mode):
    x = f32(rng, 2, 3, 5, 6)
    if mode != "constant":  # torch wants exactly one or two extra leading dims here
        x = x[0] if len(pad) == 2 else x
    kw = {"value": 1.5} if mode == "constant" else {}
    twin.check(lambda x: F.pad(x, pad, mode, **kw), lambda x: torch.nn.functional.pad(x, pad, mode, **kw), x)


def test_one_hot(torch):
    idx = np.array([[0, 3], [2, 1]])
    np.testing.assert_array_equal(
        F.one_hot(ember.tensor(idx)).numpy(), known(torch.nn.functional.one_hot(torch.tensor(idx)))
    )
    assert F.one_hot(ember.tensor([1]), 5).shape == (1, 5) and F.one_hot(ember.tensor([1])).dtype is ember.int64
    with pytest.raises(ember.DTypeError):
        F.one_hot(ember.tensor([1.0]))


def test_embedding_repeated_indices_accumulate(twin, torch, rng):
    w = f32(rng, 6, 3)
    idx = np.array([[1, 1, 5], [1, 0, 5]])
    twin.check(
        lambda w: F.embedding(ember.tensor(idx), w), lambda w: torch.nn.functional.embedding(torch.tensor(idx), w), w
    )


@pytest.mark.parametrize(
    "name,kw",
    [
        ("relu", {}),
        ("leaky_relu", {"negative_slope": 0.1}),
        ("gelu", {}),
        ("gelu", {"approximate": "tanh"}),
        ("silu", {}),
        ("sigmoid", {}),
        ("tanh", {}),
        ("softmax", {"dim": 0}),
        ("log_softmax", {"dim": 1}),
    ],
)
def test_activations_over_a_wide_range(twin, torch, name, kw):
    x = np.linspace(-12, 12, 97, dtype=np.float32).reshape(1, 97)
    x = np.concatenate([x, -x], 0)
    tfn = getattr(torch, name) if name in ("sigmoid", "tanh") else getattr(torch.nn.functional, name)
    twin.check(lambda x: getattr(F, name)(x, **kw), lambda x: tfn(x, **kw), x, atol=2e-5)


def test_functional_batch_norm(twin, torch, rng):
    x, w, b = f32(rng, 6, 4, 3), f32(rng, 4), f32(rng, 4)
    rm, rv = np.zeros(4, np.float32), np.ones(4, np.float32)
    erm, erv, trm, trv = ember.tensor(rm), ember.tensor(rv), torch.tensor(rm), torch.tensor(rv)
    twin.check(
        lambda x, w, b: F.batch_norm(x, erm, erv, w, b, training=True, momentum=0.3),
        lambda x, w, b: torch.nn.functional.batch_norm(x, trm, trv, w, b, training=True, momentum=0.3),
        x,
        w,
        b,
    )
    twin.close(erm, trm, "running mean"), twin.close(erv, trv, "running var")
    twin.check(
        lambda x: F.batch_norm(x, erm, erv, eps=1e-3),
        lambda x: torch.nn.functional.batch_norm(x, trm, trv, eps=1e-3),
        x,
    )
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        F.batch_norm(ember.zeros(1, 3), None, None, training=True)


@pytest.mark.parametrize("shape", [(4, 3, 5, 5), (7, 3), (1, 3, 1, 2)])
def test_functional_batch_norm_training_through_the_fused_op(twin, torch, rng, shape):
    """Training mode is ember.fused's batch_norm: output, gradients (with and without the affine
    parameters) and the running statistics (momentum, unbiased variance) as torch's."""
    x, w, b = f32(rng, *shape), f32(rng, 3), f32(rng, 3)
    for momentum in (0.1, 1.0):
        erm, erv = ember.tensor(np.full(3, 0.5, np.float32)), ember.tensor(np.full(3, 2.0, np.float32))
        trm, trv = torch.full((3,), 0.5), torch.full((3,), 2.0)
        twin.check(
            lambda x, w, b: F.batch_norm(x, erm, erv, w, b, training=True, momentum=momentum, eps=1e-3),
            lambda x, w, b: torch.nn.functional.batch_norm(
                x, trm, trv, w, b, training=True, momentum=momentum, eps=1e-3
            ),
            x,
            w,
            b,
        )
        twin.close(erm, trm, "running mean"), twin.close(erv, trv, "running var")
    twin.check(
        lambda x: F.batch_norm(x, None, None, training=True),
        lambda x: torch.nn.functional.batch_norm(x, None, None, training=True),
        x,
    )


def test_functional_norms(twin, torch, rng):
    x, w, b = f32(rng, 3, 4, 5), f32(rng, 5), f32(rng, 5)
    twin.check(
        lambda x, w, b: F.layer_norm(x, (5,), w, b),
        lambda x, w, b: torch.nn.functional.layer_norm(x, (5,), w, b),
        x,
        w,
        b,
    )
    twin.check(lambda x, w: F.rms_norm(x, (5,), w), lambda x, w: torch.nn.functional.rms_norm(x, (5,), w), x, w)
    with pytest.raises(ember.ShapeError, match=r"normalized_shape \(4,\)"):
        F.layer_norm(ember.zeros(2, 5), (4,))


def test_max_pool_with_padding_never_picks_the_padding(rng):
    x = -np.abs(f32(rng, 1, 1, 4, 4)) - 10  # all below zero: zero padding would win
    out = F.max_pool2d(ember.tensor(x), 3, 1, 1)
    assert out.numpy().max() < -10


@pytest.mark.parametrize(
    "kw",
    [
        dict(kernel_size=2),
        dict(kernel_size=3, stride=1, padding=1),
        dict(kernel_size=3, stride=2, dilation=2, ceil_mode=True),
    ],
)
def test_max_pool_ties_and_nan_like_torch(twin, torch, rng, kw):
    # Many ties (small integers, zeros after a ReLU): the whole gradient goes to the first
    # maximum of each window, exactly as in torch.
    x = np.maximum(rng.integers(-2, 3, size=(2, 3, 9, 9)), 0).astype(np.float32)
    twin.check(lambda x: F.max_pool2d(x, **kw), lambda x: torch.nn.functional.max_pool2d(x, **kw), x)
    x[0, 0, 1, 1] = np.nan
    with ember.no_grad():  # both code paths propagate NaN
        a = F.max_pool2d(ember.tensor(x), **kw).numpy()
    b = F.max_pool2d(ember.tensor(x, requires_grad=True), **kw).detach().numpy()
    t = known(torch.nn.functional.max_pool2d(torch.tensor(x), **kw))
    np.testing.assert_array_equal(a, t), np.testing.assert_array_equal(b, t)


def test_pool_errors():
    with pytest.raises(ember.ShapeError, match="larger than"):
        F.max_pool2d(ember.zeros(1, 1, 2, 2), 3)
    with pytest.raises(ValueError, match="at most half"):
        F.avg_pool2d(ember.zeros(1, 1, 8, 8), 2, padding=2)


def test_functional_dropout_generator_and_p():
    g = ember.Generator(3)
    a = F.dropout(ember.ones(1000), 0.25, generator=g)
    g.manual_seed(3)
    assert F.dropout(ember.ones(1000), 0.25, generator=g).equal(a)
    with pytest.raises(ValueError):
        F.dropout(ember.ones(3), 1.5)


@pytest.mark.filterwarnings("ignore:Using padding=.same. with even kernel")  # torch's warning
def test_conv2d_same_even_kernel_with_dilation(twin, torch, rng):
    x, w, b = f32(rng, 1, 2, 7, 6), f32(rng, 3, 2, 2, 4), f32(rng, 3)
    twin.check(
        lambda x, w, b: F.conv2d(x, w, b, padding="same", dilation=(3, 1)),
        lambda x, w, b: torch.nn.functional.conv2d(x, w, b, padding="same", dilation=(3, 1)),
        x,
        w,
        b,
    )


def test_linear_functional_errors():
    with pytest.raises(ember.ShapeError, match=r"expected input shape \(\.\.\., 4\)"):
        F.linear(ember.zeros(2, 3), ember.zeros(5, 4))


@pytest.mark.parametrize(
    "module",
    [
        "ember.nn.functional",
        "ember.nn.functional.linear",
        "ember.nn.functional.pooling",
        "ember.nn.functional.activation",
        "ember.nn.functional.normalization",
        "ember.nn.functional.shape",
        "ember.nn.functional.loss",
    ],
)
def test_docstring_examples(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0

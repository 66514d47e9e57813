"""ember-numba's pooling and batch-norm kernels (fused/pooling.py, fused/channels.py): against the reference
decompositions on shapes large enough for the parallel loops, in an eager CNN training step
(the kernels run forward and backward, the step computes what NumPy computes), and under a
second derivative (the decompositions take over)."""

import numpy as np
import pytest

pytest.importorskip("numba", reason="numba is not installed: pip install ./plugins/numba")
pytest.importorskip("ember_numba", reason="ember-numba is not installed: pip install ./plugins/numba")

from numba_helpers import close, reference  # noqa: E402

import ember  # noqa: E402
import ember.nn.functional as F  # noqa: E402

pytestmark = pytest.mark.usefixtures("compile_at_once")


POOLS = [
    dict(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1), ceil_mode=False),
    dict(kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), dilation=(1, 1), ceil_mode=True),
    dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 1), dilation=(2, 1), ceil_mode=False),
    dict(kernel_size=(3, 2), stride=(1, 3), padding=(1, 1), dilation=(1, 1), ceil_mode=True),
    dict(kernel_size=2, stride=None, padding=0, dilation=1, ceil_mode=True),
    # column stride 2, four columns a window, two of padding: the row's halves at even and odd offsets
    dict(kernel_size=(3, 4), stride=(2, 2), padding=(1, 2), dilation=(1, 1), ceil_mode=False),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("params", POOLS)
def test_max_pool_kernels_match_the_reference(backend, rng, dtype, params):
    ties = np.maximum(rng.integers(-2, 3, (16, 8, 13, 15)), 0).astype(dtype)
    ties[0, 0, :2, :2] = np.nan
    ties[3, 1, 5, 4:7] = np.nan
    neg = (-np.abs(rng.standard_normal(ties.shape)) - 10).astype(dtype)
    for x in (ties, neg):
        out = backend.fused_impls["max_pool2d"](x, **params)
        close(out, reference("max_pool2d", x, **params), rtol=0, atol=0)
        g = rng.standard_normal(out.shape).astype(dtype)
        close(
            backend.fused_impls["max_pool2d_backward"](g, x, **params), reference("max_pool2d_backward", g, x, **params)
        )


@pytest.mark.parametrize("params", POOLS[:3])
@pytest.mark.parametrize("one", [True, False])
def test_a_samples_pool_on_blocks_of_planes_matches_the_reference(backend, rng, monkeypatch, params, one):
    """Batch 1, large enough for threads: blocks of planes on the plugin's threads, or all on one."""
    from ember_numba.fused import pooling

    x = rng.standard_normal((1, 67, 64, 64)).astype(np.float32)  # 67 planes: blocks of unequal sizes
    x[0, 66, 3, 3] = np.nan
    seen = []
    choose = pooling.SAMPLE_THREADS.choose

    def forced(key, watch=False):
        seen.append(key)
        return one, False, choose(key)[2]

    monkeypatch.setattr(pooling.SAMPLE_THREADS, "choose", forced)
    out = backend.fused_impls["max_pool2d"](x, **params)
    close(out, reference("max_pool2d", x, **params), rtol=0, atol=0)
    from ember_numba import launch

    assert seen or launch.threads() == 1


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(
    "shape", [(32, 16, 12, 12), (64, 96, 2, 2), (300, 40), (8, 6, 50), (1, 5, 1, 2), (16, 40, 8, 8)]
)
def test_batch_norm_kernels_match_the_reference(backend, rng, dtype, shape):
    """(N, C, H, W); small planes, several channels a task; (N, C); (N, C, L); 2 values a
    channel; 8x8 planes."""
    x = (rng.standard_normal(shape) * 3 + 2).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    w, b = rng.standard_normal(shape[1]).astype(dtype), rng.standard_normal(shape[1]).astype(dtype)
    n = x.size // shape[1]
    # float32: sums over n values (the kernel in float64, NumPy pairwise in float32)
    tol = dict(rtol=1e-4, atol=2e-6 * n**0.5 * 10) if dtype == "float32" else dict(rtol=1e-10, atol=1e-11)
    for weight, bias in ((w, b), (None, None), (None, b)):
        got = backend.fused_impls["batch_norm"](x, weight, bias, eps=1e-5)
        want = reference("batch_norm", x, weight, bias, eps=1e-5)
        for gv, wv in zip(got, want):
            close(gv, wv, **tol)
        mean, var = want[1:]
        got = backend.fused_impls["batch_norm_backward"](g, x, weight, bias, mean, var, eps=1e-5)
        want = reference("batch_norm_backward", g, x, weight, bias, mean, var, eps=1e-5)
        for gv, wv in zip(got, want):
            assert (gv is None) == (wv is None)
            if gv is not None:
                close(gv, wv, rtol=tol["rtol"], atol=tol["atol"] * 10)


def test_other_dtypes_take_the_reference(backend):
    x = np.arange(2 * 3 * 4 * 4).reshape(2, 3, 4, 4).astype(np.float16)
    close(backend.fused_impls["max_pool2d"](x, kernel_size=2), reference("max_pool2d", x, kernel_size=2))
    close(
        backend.fused_impls["batch_norm"](x, None, None)[0],
        reference("batch_norm", x, None, None)[0],
        rtol=2e-3,
        atol=2e-3,
    )


def _cnn(nn):
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1, ceil_mode=True),
        nn.Flatten(),
        nn.Linear(8 * 3 * 3, 10),
    )


def test_eager_cnn_training_runs_the_kernels(launches, rng):
    """Each step: two batch-norm and two max-pool kernels forward (the 2x2 one and the general
    one), their backward kernels;
    losses, gradients and running statistics are the NumPy reference's."""
    import ember.nn as nn
    from ember import optim
    from ember_numba.fused import channels as bn_kernels, pooling as pool_kernels

    x = rng.standard_normal((16, 3, 12, 12)).astype(np.float32)
    y = rng.integers(0, 10, 16)
    results = {}
    for name in ("numpy", "numba"):
        ember.manual_seed(0)
        with ember.backend(name):
            model = _cnn(nn)
            opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        xt, yt = ember.tensor(x, backend=name), ember.tensor(y, backend=name)
        losses = []
        for _ in range(3):
            loss = F.cross_entropy(model(xt), yt)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        results[name] = (
            losses,
            [p.grad.numpy() for p in model.parameters()],
            [b.numpy() for b in model.buffers() if b.dtype.is_floating_point],
        )
    for kernel in (bn_kernels.batch_norm_channels, bn_kernels.batch_norm_backward_channels):
        assert launches.count(kernel) == 6, kernel
    for kernel in (
        pool_kernels.max_pool_2x2_planes,
        pool_kernels.max_pool_2x2_backward_planes,  # MaxPool2d(2)
        pool_kernels.max_pool_rows_planes,  # MaxPool2d(3, 2, 1)
        pool_kernels.max_pool_backward_planes,
    ):
        assert launches.count(kernel) == 3, kernel
    (want_l, want_g, want_b), (got_l, got_g, got_b) = results["numpy"], results["numba"]
    np.testing.assert_allclose(got_l, want_l, rtol=1e-5)
    for got, want in zip(got_g + got_b, want_g + want_b):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5)


def test_second_derivatives_through_batch_norm_and_pooling(rng):
    x, w = rng.standard_normal((4, 3, 6, 6)), rng.standard_normal(3)

    def f(x, w):
        h = F.batch_norm(x, None, None, w, None, training=True)
        return (F.max_pool2d(h.tanh(), 3, 2, 1) ** 3).sum()

    def curvature(x, w):
        gx, gw = ember.grad(f, argnums=(0, 1))(x, w)
        return (gx**2).sum() + (gw**2).sum()

    got = ember.grad(curvature, argnums=(0, 1))(*(ember.tensor(a, backend="numba") for a in (x, w)))
    want = ember.grad(curvature, argnums=(0, 1))(*(ember.tensor(a, backend="numpy") for a in (x, w)))
    for g, r in zip(got, want):
        close(g.numpy(), r.numpy(), rtol=1e-9, atol=1e-11)

"""The hand-written kernels on the CPU (host harness) against NumPy and ember's references:
Philox, GELU, the softmax / cross-entropy / layer-norm rows and their backward kernels, the
optimizer steps (single- and multi-tensor) and the col2im gather."""

import math

import numpy as np
import pytest

import ember
from ember.backends.numpy import backend as nb
from ember.conformance import fused_ops

FUSED = fused_ops()
from ember.conformance.optimizers import fused_mismatches
from ember_cupy import kernels, multi_tensor

NUMPY = ember.get_backend("numpy")

# Random123's known-answer vectors (philox4x32, 10 rounds): counter words, key words, output.
KAT = [
    (
        (0x00000000, 0x00000000, 0x00000000, 0x00000000),
        (0x00000000, 0x00000000),
        (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8),
    ),
    (
        (0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF),
        (0xFFFFFFFF, 0xFFFFFFFF),
        (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD),
    ),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


def test_philox_device_function_known_answers(host):
    body = (
        kernels.guarded("ember_philox", kernels.PHILOX)
        + r"""
__host__ __device__ inline void kat_thread(long long t, const unsigned int* in, unsigned int* out) {
  unsigned int c[4] = {in[6 * t], in[6 * t + 1], in[6 * t + 2], in[6 * t + 3]};
  ember_philox4x32_10(c, in[6 * t + 4], in[6 * t + 5]);
  for (int w = 0; w < 4; ++w) out[4 * t + w] = c[w];
}
"""
    )
    k = kernels.threads_kernel("kat", [("const unsigned int*", "in"), ("unsigned int*", "out")], body)
    words = np.array([w for c, key, _ in KAT for w in (*c, *key)], dtype=np.uint32)
    out = np.zeros(4 * len(KAT), dtype=np.uint32)
    host.rt.launch(k, len(KAT), words, out)
    assert out.reshape(-1, 4).tolist() == [list(e) for _, _, e in KAT]


@pytest.mark.parametrize(
    "shape,seed,offset",
    [
        ((7,), 0, 0),
        ((3, 5), 123, 7),
        ((2, 3, 4), 2**40 + 5, 2**33 + 3),
        ((1,), 2**64 - 1, 2**63 + 1),
        ((), 9, 2),
        ((0,), 1, 1),
        ((1000,), 42, 4 * 10**9 + 2),
    ],
)
def test_random_bits_match_the_reference_bit_for_bit(host, shape, seed, offset):
    got = host.impls["random_bits"](shape, seed, offset)
    want = nb.random_bits(shape, seed, offset)
    assert got.dtype == np.uint32 and got.shape == tuple(shape)
    np.testing.assert_array_equal(got, want)


def test_same_seed_same_numbers_across_backends(host):
    a = ember.randn(50, generator=ember.Generator(3), backend="numpy")
    b = ember.randn(50, generator=ember.Generator(3), backend="cupy-host")
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def _fused(name, backend, *args, **params):
    ts = [None if a is None else ember.tensor(a, backend=backend) for a in args]
    with ember.no_grad():
        return FUSED[name](*ts, **params)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_body(host, rng, dtype, approximate):
    x = np.concatenate([rng.standard_normal(200) * 4, [0.0, -0.0, 30.0, -30.0, 1e-20]]).astype(dtype)
    got = host.fused_impls["gelu"](x, approximate=approximate)
    want = _fused("gelu", "numpy", x, approximate=approximate).numpy()
    tol = 3e-7 if dtype == "float32" else 1e-15
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softmax_rows(host, rng, dtype):
    x = (rng.standard_normal((5, 33)) * 5).astype(dtype)
    x[0] += 1000.0  # an unshifted exp would overflow
    x[1, 3] = -np.inf
    tol = 2e-6 if dtype == "float32" else 1e-13
    for name in ("softmax", "log_softmax"):
        for dim in (-1, 0):
            got = host.fused_impls[name](x, dim=dim)
            want = _fused(name, "numpy", x, dim=dim).numpy()
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"{name} dim={dim}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("target_dtype", ["int32", "int64"])
def test_cross_entropy_rows(host, rng, dtype, target_dtype):
    logits = (rng.standard_normal((9, 7)) * 3).astype(dtype)
    target = rng.integers(0, 7, 9).astype(target_dtype)
    got = host.fused_impls["cross_entropy"](logits, target)
    want = _fused("cross_entropy", "numpy", logits, target.astype(np.int64)).numpy()
    assert got.shape == () and got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == "float32" else 1e-14)


def test_cross_entropy_out_of_range_target_is_nan_not_a_crash(host):
    logits = np.zeros((2, 3), np.float32)
    got = host.fused_impls["cross_entropy"](logits, np.array([1, 3]))
    assert np.isnan(got)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_layer_norm_rows(host, rng, dtype):
    x = (rng.standard_normal((3, 4, 5)) * 2 + 1.5).astype(dtype)
    w, b = rng.standard_normal(5).astype(dtype), rng.standard_normal(5).astype(dtype)
    w2 = rng.standard_normal((4, 5)).astype(dtype)
    tol = 2e-6 if dtype == "float32" else 1e-13
    for args, params in [
        ((x, w, b), dict(normalized_shape=(5,))),
        ((x, None, None), dict(normalized_shape=(4, 5), eps=1e-3)),
        ((x, w2, None), dict(normalized_shape=(4, 5))),
        ((x, None, b), dict(normalized_shape=(5,))),
    ]:
        got = host.fused_impls["layer_norm"](*args, **params)
        want = _fused("layer_norm", "numpy", *args, **params).numpy()
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_backward_rows(host, rng, dtype):
    x = (rng.standard_normal((6, 33)) * 5).astype(dtype)
    x[0] += 1000.0
    g = rng.standard_normal(x.shape).astype(dtype)
    tol = 2e-6 if dtype == "float32" else 1e-13
    for name in ("softmax", "log_softmax"):
        for dim in (-1, 0):
            y = _fused(name, "numpy", x, dim=dim).numpy()
            got = host.fused_impls[name + "_backward"](g, y, dim=dim)
            want = _fused(name + "_backward", "numpy", g, y, dim=dim).numpy()
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"{name} dim={dim}")
    for approximate in ("none", "tanh"):
        got = host.fused_impls["gelu_backward"](g, x, approximate=approximate)
        want = _fused("gelu_backward", "numpy", g, x, approximate=approximate).numpy()
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 10, err_msg=approximate)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("target_dtype", ["int32", "int64"])
def test_cross_entropy_with_ignored_rows_and_its_backward(host, rng, dtype, target_dtype):
    logits = (rng.standard_normal((9, 7)) * 3).astype(dtype)
    g = np.array(0.8, dtype)
    tol = 1e-6 if dtype == "float32" else 1e-14
    for ignore_index in (-100, 4):
        target = rng.integers(0, 7, 9).astype(target_dtype)
        target[[2, 5]] = ignore_index
        for tgt in (target, np.full(9, ignore_index, target_dtype)):  # the second: nothing counts
            want = _fused("cross_entropy", "numpy", logits, tgt.astype(np.int64), ignore_index=ignore_index).numpy()
            with np.errstate(invalid="ignore"):
                got = host.fused_impls["cross_entropy"](logits, tgt, ignore_index=ignore_index)
            np.testing.assert_allclose(got, want, rtol=tol)
            got = host.fused_impls["cross_entropy_backward"](g, logits, tgt, ignore_index=ignore_index)
            want = _fused(
                "cross_entropy_backward", "numpy", g, logits, tgt.astype(np.int64), ignore_index=ignore_index
            ).numpy()
            assert got.dtype == np.dtype(dtype)
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_layer_norm_backward_rows(host, rng, dtype):
    x = (rng.standard_normal((3, 4, 5)) * 2 + 1.5).astype(dtype)
    g = rng.standard_normal(x.shape).astype(dtype)
    w, b = rng.standard_normal(5).astype(dtype), rng.standard_normal(5).astype(dtype)
    w2 = rng.standard_normal((4, 5)).astype(dtype)
    tol = 1e-5 if dtype == "float32" else 1e-13
    for args, params in [
        ((g, x, w, b), dict(normalized_shape=(5,))),
        ((g, x, None, None), dict(normalized_shape=(4, 5), eps=1e-3)),
        ((g, x, w2, None), dict(normalized_shape=(4, 5))),
        ((g, x, None, b), dict(normalized_shape=(5,))),
    ]:
        got = host.fused_impls["layer_norm_backward"](*args, **params)
        want = _fused("layer_norm_backward", "numpy", *args, **params)
        for gv, wv in zip(got, want):
            assert (gv is None) == (wv is None)
            if gv is not None:
                np.testing.assert_allclose(gv, wv.numpy(), rtol=tol, atol=tol)


def test_eager_training_runs_the_cross_entropy_kernels(host, rng):
    """F.cross_entropy in an eager step launches the fused kernels forward and backward, and
    the gradients are the NumPy reference's."""
    import ember.nn.functional as F

    x = rng.standard_normal((8, 6)).astype(np.float32)
    y = rng.integers(0, 3, 8)
    grads = {}
    for backend in ("numpy", "cupy-host"):
        model = _twin_models(backend)
        F.cross_entropy(model(ember.tensor(x, backend=backend)), ember.tensor(y, backend=backend)).backward()
        grads[backend] = [p.grad.numpy() for p in model.parameters()]
    forward, backward = kernels.cross_entropy_kernel("float32"), kernels.cross_entropy_backward_kernel("float32")
    calls = host.rt.calls
    before = (calls.get(forward.key, 0), calls.get(backward.key, 0))
    model = _twin_models("cupy-host")
    F.cross_entropy(model(ember.tensor(x, backend="cupy-host")), ember.tensor(y, backend="cupy-host")).backward()
    assert (calls.get(forward.key, 0), calls.get(backward.key, 0)) == (before[0] + 1, before[1] + 1)
    for gh, gn in zip(grads["cupy-host"], grads["numpy"]):
        np.testing.assert_allclose(gh, gn, rtol=1e-5, atol=1e-7)


def test_float16_runs_on_float32_kernels(host, rng):
    x = rng.standard_normal((4, 6)).astype(np.float16)
    got = host.fused_impls["softmax"](x, dim=-1)
    want = _fused("softmax", "numpy", x.astype(np.float32), dim=-1).numpy()
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-3, atol=1e-3)


def test_optimizer_steps_match_the_reference_rules(host):
    # every option set of ember.conformance.optimizers.CASES, float32 and float64
    assert fused_mismatches(host) == []


def test_optimizer_step_updates_in_place(host, rng):
    p, g = rng.standard_normal(10).astype(np.float32), rng.standard_normal(10).astype(np.float32)
    m, v = np.zeros(10, np.float32), np.zeros(10, np.float32)
    out = host.fused_impls["adam_step"](p, g, m, v, None, step=1, lr=0.1)
    assert out[0] is p and out[1] is m and out[2] is v and out[3] is None
    transposed = rng.standard_normal((3, 4)).astype(np.float32).T  # not contiguous: copies
    out = host.fused_impls["sgd_step"](transposed, np.ones((4, 3), np.float32), None, lr=0.5)
    assert out[0] is not transposed
    np.testing.assert_allclose(out[0], transposed - 0.5)


def _twin_models(backend):
    import ember.nn as nn

    with ember.backend(backend):
        ember.manual_seed(1)
        return nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3))


@pytest.mark.parametrize(
    "make",
    [
        lambda ps: ember.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
        lambda ps: ember.optim.SGD(ps, lr=0.1),
        lambda ps: ember.optim.Adam(ps, lr=0.01, amsgrad=True),
        lambda ps: ember.optim.AdamW(ps, lr=0.01, weight_decay=0.1),
        lambda ps: ember.optim.RMSprop(ps, lr=0.01, centered=True, momentum=0.5),
    ],
    ids=["sgd-nesterov", "sgd", "adam-amsgrad", "adamw", "rmsprop"],
)
def test_multi_tensor_step_matches_per_parameter_steps(host, rng, make):
    import ember.nn.functional as F

    x = rng.standard_normal((8, 6)).astype(np.float32)
    y = rng.integers(0, 3, 8)
    results = []
    for backend, multi in (("numpy", False), ("cupy-host", True)):
        model = _twin_models(backend)
        opt = make(model.parameters())
        xs, ys = ember.tensor(x, backend=backend), ember.tensor(y, backend=backend)
        launches = []
        for _ in range(3):
            # The loss as a decomposition on both sides (not the fused cross-entropy kernels,
            # whose rounding differs from NumPy's and centered RMSprop amplifies), so that what
            # is compared is the optimizer step.
            loss = F.nll_loss(model(xs).log_softmax(-1), ys)
            opt.zero_grad()
            loss.backward()
            if multi:
                before = host.rt.launches
                multi_tensor.step(opt)
                launches.append(host.rt.launches - before)
            else:
                opt.step()
        results.append(([p.numpy() for p in model.parameters()], launches, opt))
    (want, _, ref_opt), (got, launches, opt) = results
    assert launches == [1, 1, 1]  # six tensors, one launch per step
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=2e-6, atol=2e-7)
    for p_ref, p in zip(ref_opt.param_groups[0]["params"], opt.param_groups[0]["params"]):
        s_ref, s = ref_opt.state[p_ref], opt.state[p]
        assert sorted(s_ref) == sorted(s)
        for k in s_ref:
            if isinstance(s_ref[k], ember.Tensor):
                np.testing.assert_allclose(s[k].numpy(), s_ref[k].numpy(), rtol=2e-6, atol=2e-7)
            else:
                assert s[k] == s_ref[k]


@pytest.mark.parametrize(
    "kernel,stride,dilation",
    [((3, 3), (1, 1), (1, 1)), ((3, 2), (2, 1), (1, 2)), ((2, 2), (2, 2), (1, 1)), ((1, 1), (3, 2), (1, 1))],
)
def test_col2im_is_the_adjoint_of_windows(host, rng, kernel, stride, dilation):
    x_shape = (2, 3, 9, 8)
    win = NUMPY.impls["windows"](np.zeros(x_shape, np.float32), kernel, stride, dilation)
    g = rng.standard_normal(win.shape).astype(np.float32)
    got = host.impls["windows_grad"](g, x_shape, kernel, stride, dilation)
    want = NUMPY.impls["windows_grad"](g, x_shape, kernel, stride, dilation)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    gi = rng.integers(-5, 5, win.shape).astype(np.uint8)  # integers wrap like NumPy's
    np.testing.assert_array_equal(
        host.impls["windows_grad"](gi, x_shape, kernel, stride, dilation),
        NUMPY.impls["windows_grad"](gi, x_shape, kernel, stride, dilation),
    )


def test_transfers_are_counted(host):
    before = dict(host.transfers)
    t = ember.tensor(np.ones((4, 4), np.float32), backend="cupy-host")
    (t * 2).sum().item()
    assert host.transfers["to_device"] == before["to_device"] + 1
    assert host.transfers["to_host"] == before["to_host"] + 1
    assert host.transfers["bytes_to_device"] - before["bytes_to_device"] == 64
    assert math.isclose(float((t * 3).sum().numpy()), 48.0)


POOLS = [
    dict(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1), ceil_mode=False),
    dict(kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), dilation=(1, 1), ceil_mode=False),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), dilation=(2, 1), ceil_mode=True),
    dict(kernel_size=3, stride=None, padding=1, dilation=1, ceil_mode=True),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("params", POOLS)
def test_max_pool_kernels(host, rng, dtype, params):
    """Ties and NaNs (two in a window): the kernels pick the reference's element, and the
    backward gather adds overlapping windows' gradients in the reference's order."""
    x = np.maximum(rng.integers(-2, 3, (2, 3, 9, 8)), 0).astype(dtype)
    x[0, 0, 1, 1] = x[1, 2, 4, 4] = x[1, 2, 4, 5] = np.nan
    neg = (-np.abs(rng.standard_normal((3, 7, 7))) - 10).astype(dtype)  # (C, H, W)
    for xx in (x, neg):
        got = host.fused_impls["max_pool2d"](xx, **params)
        want = _fused("max_pool2d", "numpy", xx, **params).numpy()
        np.testing.assert_array_equal(got, want)
        g = rng.standard_normal(want.shape).astype(dtype)
        got = host.fused_impls["max_pool2d_backward"](g, xx, **params)
        want = _fused("max_pool2d_backward", "numpy", g, xx, **params).numpy()
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(3, 4, 5, 6), (9, 4), (4, 4, 3), (1, 4, 1, 2)])
def test_batch_norm_kernels(host, rng, dtype, shape):
    x = (rng.standard_normal(shape) * 2 + 1.5).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    w, b = rng.standard_normal(4).astype(dtype), rng.standard_normal(4).astype(dtype)
    tol = 2e-5 if dtype == "float32" else 1e-12
    for weight, bias in ((w, b), (None, None), (w, None), (None, b)):
        got = host.fused_impls["batch_norm"](x, weight, bias, eps=1e-3)
        want = [v.numpy() for v in _fused("batch_norm", "numpy", x, weight, bias, eps=1e-3)]
        for gv, wv in zip(got, want):
            assert gv.dtype == wv.dtype and gv.shape == wv.shape
            np.testing.assert_allclose(gv, wv, rtol=tol, atol=tol)
        got = host.fused_impls["batch_norm_backward"](g, x, weight, bias, *want[1:], eps=1e-3)
        ref = _fused("batch_norm_backward", "numpy", g, x, weight, bias, *want[1:], eps=1e-3)
        for gv, wv in zip(got, ref):
            assert (gv is None) == (wv is None)
            if gv is not None:
                np.testing.assert_allclose(gv, wv.numpy(), rtol=tol * 5, atol=tol * 5)


def test_eager_cnn_training_runs_the_pool_and_batch_norm_kernels(host, rng):
    """BatchNorm2d and MaxPool2d in an eager training step launch one forward and one backward
    kernel each, and the gradients and running statistics are the NumPy reference's."""
    import ember.nn as nn
    import ember.nn.functional as F

    x = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
    y = rng.integers(0, 5, 4)
    launched = [
        kernels.batch_norm_kernel("float32", True, True),
        kernels.batch_norm_backward_kernel("float32", True),
        kernels.max_pool_kernel("float32"),
        kernels.max_pool_backward_kernel("float32"),
    ]
    results = {}
    for backend in ("numpy", "cupy-host"):
        with ember.backend(backend):
            ember.manual_seed(2)
            model = nn.Sequential(
                nn.Conv2d(3, 4, 3, padding=1),
                nn.BatchNorm2d(4),
                nn.ReLU(),
                nn.MaxPool2d(2),
                nn.Flatten(),
                nn.Linear(64, 5),
            )
        before = [host.rt.calls.get(k.key, 0) for k in launched]
        F.cross_entropy(model(ember.tensor(x, backend=backend)), ember.tensor(y, backend=backend)).backward()
        after = [host.rt.calls.get(k.key, 0) for k in launched]
        results[backend] = (
            [p.grad.numpy() for p in model.parameters()],
            model[1].running_var.numpy(),
            [a - b for a, b in zip(after, before)],
        )
    assert results["cupy-host"][2] == [1, 1, 1, 1]
    (got_g, got_var, _), (want_g, want_var, _) = results["cupy-host"], results["numpy"]
    for got, want in zip(got_g + [got_var], want_g + [want_var]):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


FLOAT_EDGES = [0.0, -0.0, 3.0, -3.0, 1.0, -1.0, 5.5, -7.25, 0.1, 1e30, -1e-30, np.inf, -np.inf, np.nan]


def _edges(dtype: str) -> np.ndarray:
    if dtype.startswith("float"):
        with np.errstate(over="ignore"):  # 1e30 is inf in float16
            return np.array(FLOAT_EDGES, dtype)
    info = np.iinfo(dtype)
    values = {0, 1, 2, 7, info.max, info.max - 1, -1, -7, info.min, info.min + 1}
    return np.array(sorted(v for v in values if info.min <= v <= info.max), dtype)


@pytest.mark.parametrize(
    "dtype", ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
)
def test_remainder_kernel_is_numpys_bit_for_bit(host, dtype):
    # every pair of edge values: zeros of both signs, infinities, NaN, the extreme integers, -1
    v = _edges(dtype)
    a, b = np.repeat(v, len(v)), np.tile(v, len(v))
    calls = sum(host.rt.calls.values())
    got = host.impls["remainder"](a, b)
    assert sum(host.rt.calls.values()) == calls + 1  # the plugin's kernel, not the library's remainder
    with np.errstate(all="ignore"):
        want = np.remainder(a, b)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))  # -0.0 where NumPy has it
    np.testing.assert_array_equal(got, want)


def test_remainder_broadcasts_and_takes_weak_scalars(host, rng):
    x = rng.integers(-50, 50, (3, 1, 4)).astype(np.int32)
    y = rng.integers(-9, 9, (5, 1)).astype(np.int32)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(host.impls["remainder"](x, y), np.remainder(x, y))
        for a, b in [(x, 2.5), (-7, x), (x.astype(np.float16), 0.3), (np.float32(2.0) * x, np.array(-0.0))]:
            want = np.remainder(a, b)
            got = host.impls["remainder"](a, b)
            assert got.dtype == want.dtype, (a, b)
            np.testing.assert_array_equal(got, want)

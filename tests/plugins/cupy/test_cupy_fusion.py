"""ember.jit fusion groups compiled to CUDA C (fusion.py), run on the host harness and compared
with the same functions run eagerly on the NumPy reference."""

import numpy as np
import pytest

import ember
from ember.jit.graph import Var
from ember.jit.passes import Group
from ember_cupy import catalog, fusion


def _compare(host, fn, *arrays, rtol=1e-6, atol=1e-6, min_fused=1):
    want = fn(*[ember.tensor(a, backend="numpy") for a in arrays])
    jitted = ember.jit(fn)
    args = [ember.tensor(a, backend="cupy-host") for a in arrays]
    got = jitted(*args)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=rtol, atol=atol)
    assert jitted.lower(*args).program.compiled >= min_fused  # groups ran as our kernels
    return jitted.groups(*args)


def test_broadcast_bias_and_activation(host, rng):
    x, w = rng.standard_normal((6, 5)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    _compare(host, lambda x, w, b: ((x @ w.T + b).relu() * 2 - 0.5).tanh(), x, w, b)


def test_strided_inputs_are_read_in_place(host, rng):
    x = rng.standard_normal((5, 7)).astype(np.float32)
    _compare(host, lambda x: (x.T * 2 + 1).exp() + x.T.flip(0), x)
    _compare(host, lambda x: (x[1:, ::2] * 3).sin() + 1, x)


REDUCTIONS = [((2048, 8), 1, False), ((4, 1000), 1, True), ((3, 50, 7), (0, 2), True), ((300,), 0, False)]


@pytest.mark.parametrize("shape,dim,keepdim", REDUCTIONS[:2])
def test_reductions(host, rng, shape, dim, keepdim):
    x = rng.standard_normal(shape).astype(np.float32)
    _compare(host, lambda x: ((x * 2 + 1).relu().sum(dim, keepdim=keepdim) * 0.5).sqrt(), x, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("shape,dim,keepdim", REDUCTIONS)
def test_reductions_every_kind(host, rng, shape, dim, keepdim):
    x = rng.standard_normal(shape).astype(np.float32)
    _compare(host, lambda x: ((x * 2 + 1).relu().sum(dim, keepdim=keepdim) * 0.5).sqrt(), x, rtol=1e-5)
    _compare(host, lambda x: (x.abs() + 1).amax(dim, keepdim=keepdim) - 1, x)
    _compare(host, lambda x: (x - 3).amin(dim, keepdim=keepdim).exp(), x)


def test_reduction_kernels_pick_their_strategy(host, rng):
    kinds = set()
    for shape in ((2048, 8), (4, 1000)):
        x = ember.tensor(rng.standard_normal(shape).astype(np.float32), backend="cupy-host")
        for g in ember.jit(lambda x: (x * 2).exp().sum(1)).groups(x):
            if g.kind == "reduce":
                kinds.add(
                    fusion.group_kernel(
                        g, [(tuple(v.shape), fusion.contiguous_strides(v.shape), str(v.dtype)) for v in g.inputs]
                    ).meta["strategy"]
                )
    assert kinds == {"thread-reduce", "block-reduce"}


def test_nan_propagates_through_a_fused_max(host):
    x = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, 6.0]], np.float32)
    _compare(host, lambda x: (x * 1.5).amax(1) + 1, x)


def test_softmax_decomposition_fuses_and_matches(host, rng):
    x = (rng.standard_normal((16, 10)) * 4).astype(np.float32)
    groups = _compare(host, lambda x: x.softmax(-1) * 2, x, rtol=2e-6)
    assert sum(g.kind == "reduce" for g in groups) >= 2


def test_values_before_the_reduction_are_materialized(host, rng):
    x = rng.standard_normal((8, 300)).astype(np.float64)

    def f(x):
        y = (x * 2 + 1).exp()
        return y, y.sum(1), (y.sum(1) + 1).log()

    _compare(host, f, x, rtol=1e-12)


def test_integer_and_bool_groups(host, rng):
    i = rng.integers(-50, 50, (4, 9))
    _compare(host, lambda i: ((i * 3 + 1).maximum(5) - i.abs()).sum(1), i)
    _compare(host, lambda i: ember.where((i > 0) & (i < 20), i * 2, -i), i)


def test_float16_groups_run_op_by_op(host, rng):
    x = rng.standard_normal((4, 5)).astype(np.float16)
    xs = ember.tensor(x, backend="cupy-host")
    f = ember.jit(lambda x: (x * 2 + 1).relu())
    groups = f.groups(xs)
    assert all(host.compile(g) is None for g in groups if g.fused)
    np.testing.assert_allclose(f(xs).numpy(), np.maximum(x * np.float16(2) + np.float16(1), 0))


def test_one_kernel_per_input_layout(host, rng):
    x = Var(0, "input", (), {"index": 0}, (3, 4), ember.float32)
    y = Var(1, "exp", (x,), {}, (3, 4), ember.float32)
    z = Var(2, "mul", (y, 2.0), {}, (3, 4), ember.float32)
    g = Group("elementwise", [y, z], (3, 4))
    g.inputs, g.outputs = [x], [z]
    fused = host.compile(g)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((4, 3)).astype(np.float32).T
    for arr in (a, b, a):
        (out,) = fused(arr)
        np.testing.assert_allclose(out, np.exp(arr) * 2, rtol=1e-6)
    assert len(fused.kernels) == 2


@pytest.mark.slow
def test_jitted_mlp_training_step_matches_numpy(host):
    losses_np, params_np = catalog.run_model("mlp", "numpy", steps=2)
    losses, params = catalog.run_model("mlp", "cupy-host", steps=2)
    np.testing.assert_allclose(losses, losses_np, rtol=1e-5)
    for a, b in zip(params, params_np):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_jitted_cnn_training_step_matches_numpy(host):
    losses_np, params_np = catalog.run_model("cnn", "numpy", steps=2)
    losses, params = catalog.run_model("cnn", "cupy-host", steps=2)
    np.testing.assert_allclose(losses, losses_np, rtol=1e-5)
    for a, b in zip(params, params_np):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def _training_step(rng, optimizer):
    import ember.nn as nn
    import ember.nn.functional as F

    ember.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = optimizer(model.parameters())
    x = ember.tensor(rng.standard_normal((5, 12)).astype(np.float32))
    y = ember.tensor(rng.integers(0, 3, 5))

    def step():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return step


def _transfers_of(host, run):
    run()
    run()  # the first calls trace and allocate optimizer state
    before = dict(host.transfers)
    for _ in range(3):
        run()
    return {k: host.transfers[k] - before[k] for k in before}


def test_a_jitted_training_step_never_waits_for_the_device(host, rng):
    with ember.backend("cupy-host"):
        step = ember.jit(_training_step(rng, lambda ps: ember.optim.SGD(ps, lr=0.1)))
        moved = _transfers_of(host, step)
    assert moved["to_host"] == 0 and moved["bytes_to_host"] == 0  # nothing read back: no sync
    # ember.jit uploads the optimizer's Python hyperparameters (lr, ...) as 0-d buffers each
    # call: a few bytes, asynchronous; no tensor data crosses
    assert moved["bytes_to_device"] <= 3 * 64


@pytest.mark.slow
def test_an_eager_training_step_makes_no_host_transfers(host, rng):
    # F.cross_entropy's common case runs the fused cross-entropy kernels, forward and backward,
    # and nothing in the step reads a value back to the host.
    with ember.backend("cupy-host"):
        step = _training_step(rng, lambda ps: ember.optim.Adam(ps, lr=1e-2))
        assert set(_transfers_of(host, step).values()) == {0}


def test_a_kernel_that_fails_to_build_falls_back_to_the_ops(host, rng):
    from ember_cupy.host import BuildError, HostRuntime

    class Broken(HostRuntime):
        def function(self, kernel):
            raise BuildError("simulated NVRTC rejection")

    x = Var(0, "input", (), {"index": 0}, (3, 4), ember.float32)
    y = Var(1, "exp", (x,), {}, (3, 4), ember.float32)
    z = Var(2, "mul", (y, 2.0), {}, (3, 4), ember.float32)
    g = Group("elementwise", [y, z], (3, 4))
    g.inputs, g.outputs = [x], [z]
    fused = fusion.compile_group(g, Broken(), host.impls)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    before = len(fusion.FALLBACKS)
    with pytest.warns(RuntimeWarning, match="simulated NVRTC rejection"):
        (out,) = fused(a)
    np.testing.assert_allclose(out, np.exp(a) * 2, rtol=1e-6)
    assert len(fusion.FALLBACKS) == before + 1
    del fusion.FALLBACKS[before:]


def test_batch_norm_is_one_fused_node_and_relu_one_kernel(host, rng):
    import ember.nn as nn

    x = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
    outs = []
    for backend in ("numpy", "cupy-host"):
        with ember.backend(backend):
            ember.manual_seed(0)
            m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
            m.train()
            xs = ember.tensor(x)
            f = ember.jit(lambda x: m(x))
            outs.append((f(xs).numpy(), m[1].running_var.numpy(), f.groups(xs)))
    (want, var_want, _), (got, var, groups) = outs
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(var, var_want, rtol=1e-5)
    # batch norm (declared by the backend, with its backward op) is one node running its
    # fused kernel, not its decomposition; the ReLU after it is one elementwise kernel
    fused = [v.params["name"] for g in groups for v in g.nodes if v.op == "fused"]
    assert fused == ["batch_norm"] and not any(g.kind == "reduce" for g in groups)
    tail = [g for g in groups if g.kind == "elementwise" and g.shape == x.shape[:1] + (8, 8, 8)]
    assert len(tail) == 1 and "where" in {v.op for v in tail[0].nodes}
    assert host.compile(tail[0]) is not None


@pytest.mark.parametrize("dtype", ["int8", "int16", "uint16", "uint64"])
def test_narrow_and_wide_integers_fuse_wrap_and_compile_for_sm90(host, rng, dtype):
    """The optional integers as C types of their width: arithmetic wraps as NumPy's does (uint16
    products past int's range too), comparisons, abs/neg/max and a float cast fuse into one
    kernel, which nvcc also builds for the GPU."""
    lo, hi = (0, 2**16) if dtype == "uint16" else (-(2**7), 2**7) if dtype == "int8" else (-500, 500)
    if dtype == "uint64":
        lo, hi = 0, 2**62
    x = rng.integers(lo, hi, (5, 7)).astype(dtype)
    y = rng.integers(lo, hi, (5, 7)).astype(dtype)
    y[0, :3] = np.iinfo(dtype).max  # products and sums that wrap

    def f(x, y):
        z = x * y + x - (y * 3)
        return ember.where(z > x, z, x.maximum(y)), (-z).abs(), z.to(ember.float64) * 0.5

    _compare(host, f, x, y, rtol=0, atol=0)
    ks = [k for k in host.rt.seen.values() if k.name.startswith("ember_fused_") and fusion.ctype(dtype) in k.source]
    assert ks
    results = catalog.check(ks, "sm_90")
    assert all(r["ok"] for r in results), [r["log"] for r in results if not r["ok"]]

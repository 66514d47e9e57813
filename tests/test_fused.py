"""ember.fused: the reference decompositions (forward and backward) agree with PyTorch; run()
picks the backend's kernel only when it is declared, and with a gradient needed only when the
backward op is declared too, recording one autodiff node whose rule runs the backward kernel
(or, for a higher derivative, the backward op's decomposition)."""

import math

import numpy as np
import pytest
from references import known

import ember
from ember import fused
from ember.backend import BackendInfo
from ember.backends.numpy.backend import NumpyBackend
from ember.conformance import fused_ops

REF = fused_ops()  # every op ember.nn and ember.optim register


def t(a, **kw):
    return ember.tensor(np.asarray(a), **kw)


def test_decompositions_match_torch(torch, rng):
    F = torch.nn.functional
    x = rng.standard_normal((4, 6))
    tx = torch.tensor(x)
    np.testing.assert_allclose(REF["softmax"](t(x), dim=0).numpy(), known(F.softmax(tx, 0)), rtol=1e-12)
    np.testing.assert_allclose(REF["log_softmax"](t(x), dim=-1).numpy(), known(F.log_softmax(tx, -1)), rtol=1e-12)
    y = np.array([0, 5, 2, 2])
    np.testing.assert_allclose(
        REF["cross_entropy"](t(x), t(y)).item(), known(lambda: F.cross_entropy(tx, torch.tensor(y)).item()), rtol=1e-12
    )
    w, b = rng.standard_normal(6), rng.standard_normal(6)
    np.testing.assert_allclose(
        REF["layer_norm"](t(x), t(w), t(b), normalized_shape=(6,), eps=1e-5).numpy(),
        known(F.layer_norm(tx, (6,), torch.tensor(w), torch.tensor(b), 1e-5)),
        atol=1e-12,
    )
    np.testing.assert_allclose(
        REF["layer_norm"](t(x), None, None, normalized_shape=(4, 6)).numpy(),
        known(F.layer_norm(tx, (4, 6))),
        atol=1e-12,
    )
    for approximate in ("none", "tanh"):
        np.testing.assert_allclose(
            REF["gelu"](t(x), approximate=approximate).numpy(), known(F.gelu(tx, approximate=approximate)), atol=1e-12
        )
    q, k, v = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 2))
    want = F.scaled_dot_product_attention(torch.tensor(q), torch.tensor(k), torch.tensor(v))
    np.testing.assert_allclose(REF["scaled_dot_product_attention"](t(q), t(k), t(v)).numpy(), known(want), atol=1e-12)
    q = rng.standard_normal((2, 5, 4))
    want = F.scaled_dot_product_attention(torch.tensor(q), torch.tensor(k), torch.tensor(v), is_causal=True)
    np.testing.assert_allclose(
        REF["scaled_dot_product_attention"](t(q), t(k), t(v), causal=True).numpy(), known(want), atol=1e-12
    )


class Counting(NumpyBackend):
    """The reference plus a real fused softmax that counts its calls; gelu implemented, not declared."""

    name = "counting_fused"
    calls = []

    @staticmethod
    def _softmax(x, dim=-1):
        Counting.calls.append("softmax")
        e = np.exp(x - x.max(axis=dim, keepdims=True))
        return e / e.sum(axis=dim, keepdims=True)

    fused_impls = {"softmax": _softmax, "gelu": lambda x, approximate="none": x * 0}

    def capabilities(self):
        caps = super().capabilities()
        caps.fused = frozenset({"softmax"})
        return caps


@pytest.fixture
def counting():
    from ember.registry import REGISTRY

    ember.register_backend(BackendInfo("counting_fused", Counting))
    yield
    for table in (REGISTRY.infos, REGISTRY.origin, REGISTRY.loaded):  # leave the registry as it was
        table.pop("counting_fused", None)


def test_run_uses_the_declared_kernel_only_without_gradients(counting):
    x = ember.tensor([[1.0, 2.0, 3.0]], backend="counting_fused")
    assert fused.declared(x.backend) == frozenset({"softmax"})
    Counting.calls.clear()
    out = fused.run("softmax", x, dim=-1)
    assert Counting.calls == ["softmax"] and out.backend is x.backend
    np.testing.assert_allclose(out.numpy(), x.softmax(-1).numpy(), rtol=1e-6)
    # a gradient is needed and there is no softmax_backward: the decomposition, whose
    # primitives have VJP rules
    xg = x.detach().requires_grad_()
    y = fused.run("softmax", xg, dim=-1)
    assert Counting.calls == ["softmax"] and y.requires_grad
    (y[0, 0]).backward()
    assert xg.grad is not None
    with ember.no_grad():
        fused.run("softmax", xg, dim=-1)
    assert Counting.calls == ["softmax", "softmax"]
    # implemented but undeclared: never used
    g = fused.run("gelu", x)
    assert g.tolist()[0][2] == pytest.approx(3.0 * 0.5 * (1 + math.erf(3 / math.sqrt(2))), rel=1e-6)


# ----------------------------------------------------------------------------- gradients
def test_backward_decompositions_match_torch(torch, rng):
    """Each backward op's decomposition is the VJP torch's autograd computes."""
    F = torch.nn.functional
    x, g = rng.standard_normal((4, 6)), rng.standard_normal((4, 6))

    def vjp(f, *inputs):
        ts = [torch.tensor(a, requires_grad=True) if a is not None else None for a in inputs]
        out = f(*ts)
        cot = torch.tensor(g) if out.ndim else torch.tensor(1.7, dtype=out.dtype)
        return torch.autograd.grad(out, [t for t in ts if t is not None], cot)

    for dim in (0, -1):
        y = REF["softmax"](t(x), dim=dim)
        np.testing.assert_allclose(
            REF["softmax_backward"](t(g), y, dim=dim).numpy(),
            known(lambda: vjp(lambda a: F.softmax(a, dim), x)[0]),
            atol=1e-12,
        )
        y = REF["log_softmax"](t(x), dim=dim)
        np.testing.assert_allclose(
            REF["log_softmax_backward"](t(g), y, dim=dim).numpy(),
            known(lambda: vjp(lambda a: F.log_softmax(a, dim), x)[0]),
            atol=1e-12,
        )
    for ignore, target in ((-100, np.array([0, 5, -100, 2])), (2, np.array([0, 5, 2, 1]))):
        want = known(lambda: vjp(lambda a: F.cross_entropy(a, torch.tensor(target), ignore_index=ignore), x)[0])
        got = REF["cross_entropy_backward"](t(1.7), t(x), t(target), ignore_index=ignore)
        np.testing.assert_allclose(got.numpy(), want, atol=1e-12)
    for approximate in ("none", "tanh"):
        want = known(lambda: vjp(lambda a: F.gelu(a, approximate=approximate), x)[0])
        np.testing.assert_allclose(REF["gelu_backward"](t(g), t(x), approximate=approximate).numpy(), want, atol=1e-12)
    w, b = rng.standard_normal(6), rng.standard_normal(6)
    for weight, bias in ((w, b), (None, None), (w, None)):
        want = known(
            lambda: vjp(
                lambda a, *p: F.layer_norm(a, (6,), *p) if p else F.layer_norm(a, (6,)),
                x,
                *[v for v in (weight, bias) if v is not None],
            )
        )
        got = REF["layer_norm_backward"](
            t(g), t(x), None if weight is None else t(weight), None if bias is None else t(bias), normalized_shape=(6,)
        )
        assert [v is None for v in got] == [False, weight is None, bias is None]
        for gv, wv in zip([v for v in got if v is not None], want):
            np.testing.assert_allclose(gv.numpy(), wv, atol=1e-12)


def test_every_forward_vjp_names_a_fused_backward_op():
    assert set(fused.VJPS) <= set(fused.FUSED)
    assert all(back in fused.FUSED for back, _ in fused.VJPS.values())


class Tracking(NumpyBackend):
    """Declares every fused op with a NumPy kernel that counts its calls (each kernel computes
    the op's decomposition on the reference backend: right by construction)."""

    name = "tracking_fused"
    calls: list = []
    declare = None  # a subclass may declare fewer

    def __init__(self):
        def kernel(name):
            def run(*bufs, **params):
                Tracking.calls.append(name)
                with ember.no_grad():
                    out = fused.FUSED[name](
                        *(None if b is None else ember.tensor(b, backend="numpy") for b in bufs), **params
                    )
                return tuple(None if o is None else o.numpy() for o in out) if isinstance(out, tuple) else out.numpy()

            return run

        self.fused_impls = {n: kernel(n) for n in (self.declare or fused.FUSED)}

    def capabilities(self):
        caps = super().capabilities()
        caps.fused = frozenset(self.fused_impls)
        return caps


class ForwardOnly(Tracking):
    """Declares the forward ops only: training must take the decompositions."""

    name = "forward_only_fused"
    declare = ("softmax", "log_softmax", "cross_entropy", "gelu", "layer_norm")


@pytest.fixture
def tracking():
    from ember.registry import REGISTRY

    for cls in (Tracking, ForwardOnly):
        ember.register_backend(BackendInfo(cls.name, cls))
    Tracking.calls.clear()
    yield
    for cls in (Tracking, ForwardOnly):
        for table in (REGISTRY.infos, REGISTRY.origin, REGISTRY.loaded):
            table.pop(cls.name, None)


def _grads(backend, f, *arrays, order=1):
    """f's value and gradient (order 2: the gradient of |gradient|^2) for inputs on ``backend``."""
    xs = [ember.tensor(a, backend=backend) for a in arrays]
    if order == 1:
        v, gs = ember.value_and_grad(f, argnums=tuple(range(len(xs))))(*xs)
    else:

        def norm(*xs):
            gs = ember.grad(f, argnums=tuple(range(len(xs))))(*xs)
            return sum((g * g).sum() for g in gs)

        v, gs = ember.value_and_grad(norm, argnums=tuple(range(len(xs))))(*xs)
    return v.item(), [g.numpy() for g in gs]


def _tracked_grads(f, *arrays, order):
    """f's gradients on the tracking backend, checked (with its value) against NumPy's; the
    fused kernels that backend ran are left in ``Tracking.calls``."""
    want_v, want_g = _grads("numpy", f, *arrays, order=order)
    Tracking.calls.clear()
    got_v, got_g = _grads("tracking_fused", f, *arrays, order=order)
    assert got_v == pytest.approx(want_v, rel=1e-12)
    for g_got, g_want in zip(got_g, want_g):
        np.testing.assert_allclose(g_got, g_want, rtol=1e-10, atol=1e-12)
    return got_g


def _layers(target):
    import ember.nn.functional as F

    def f(x, w, b):
        h = F.layer_norm(x, (6,), w, b)
        h = F.gelu(h) + F.gelu(h * 0.5, approximate="tanh")
        h = F.softmax(h, dim=0) * 3 + F.log_softmax(h, dim=-1)
        return F.cross_entropy(h, ember.tensor(target, backend=x.backend.name))

    return f


@pytest.mark.parametrize("order", [1, 2])
def test_training_runs_the_fused_kernels_forward_and_backward(tracking, torch, rng, order):
    x, w, b = rng.standard_normal((5, 6)), rng.standard_normal(6), rng.standard_normal(6)
    target = np.array([0, 5, -100, 2, 2])
    f = _layers(target)
    got_g = _tracked_grads(f, x, w, b, order=order)
    forward = ["layer_norm", "gelu", "gelu", "softmax", "log_softmax", "cross_entropy"]
    backward = [
        "cross_entropy_backward",
        "log_softmax_backward",
        "softmax_backward",
        "gelu_backward",
        "gelu_backward",
        "layer_norm_backward",
    ]
    if order == 1:
        assert sorted(Tracking.calls) == sorted(forward + backward)
    else:
        # The first gradient is recorded for differentiation, so the backward ops run as their
        # decompositions; differentiating those reaches the forward nodes again, whose rules now
        # run the backward kernels -- all but cross-entropy's, whose output (the loss) the
        # decompositions never use.
        assert sorted(Tracking.calls) == sorted(forward + backward[1:])

    # and torch agrees
    def torch_grads():
        tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
        TF = torch.nn.functional
        h = TF.layer_norm(tx, (6,), tw, tb)
        h = TF.gelu(h) + TF.gelu(h * 0.5, approximate="tanh")
        h = TF.softmax(h, dim=0) * 3 + TF.log_softmax(h, dim=-1)
        loss = TF.cross_entropy(h, torch.tensor(target))
        gs = torch.autograd.grad(loss, (tx, tw, tb), create_graph=order == 2)
        if order == 2:
            gs = torch.autograd.grad(sum((g * g).sum() for g in gs), (tx, tw, tb))
        return gs

    for g_got, g_want in zip(got_g, known(torch_grads)):
        np.testing.assert_allclose(g_got, g_want, rtol=1e-8, atol=1e-10)


def test_one_autodiff_node_per_fused_op(tracking):
    import ember.nn.functional as F

    x = ember.tensor([[1.0, 2.0, 0.5]], backend="tracking_fused", requires_grad=True)
    loss = F.cross_entropy(x, ember.tensor([2], backend="tracking_fused"))
    assert loss._ctx[0] == "fused.cross_entropy" and loss._ctx[1][0] is x
    with ember.no_grad():
        assert F.cross_entropy(x, ember.tensor([2], backend="tracking_fused"))._ctx is None


def test_a_backend_without_the_backward_op_trains_on_the_decomposition(tracking, rng):
    x, w, b = rng.standard_normal((5, 6)), rng.standard_normal(6), rng.standard_normal(6)
    f = _layers(np.array([0, 5, 1, 2, 2]))
    want_v, want_g = _grads("numpy", f, x, w, b)
    got_v, got_g = _grads("forward_only_fused", f, x, w, b)
    assert Tracking.calls == [] and got_v == want_v
    for g_got, g_want in zip(got_g, want_g):
        np.testing.assert_array_equal(g_got, g_want)
    with ember.no_grad():
        f(*(ember.tensor(a, backend="forward_only_fused") for a in (x, w, b)))
    assert sorted(Tracking.calls) == sorted(["layer_norm", "gelu", "gelu", "softmax", "log_softmax", "cross_entropy"])


def test_cross_entropy_ignore_index_through_the_fused_op(tracking, torch):
    import ember.nn.functional as F

    x = np.array([[2.0, 0.0, 1.0], [0.0, 2.0, 1.0], [1.0, 1.0, 5.0]])
    for target in ([0, -100, 2], [0, 1, 1], [-100, -100, -100]):
        e = ember.tensor(x, backend="tracking_fused", requires_grad=True)
        loss = F.cross_entropy(
            e, ember.tensor(target, backend="tracking_fused"), ignore_index=-100 if -100 in target else 1
        )
        loss.backward()
        tx = torch.tensor(x, requires_grad=True)
        want = torch.nn.functional.cross_entropy(tx, torch.tensor(target), ignore_index=-100 if -100 in target else 1)
        want.backward()
        np.testing.assert_allclose(loss.item(), known(want), rtol=1e-12)
        np.testing.assert_allclose(e.grad.numpy(), known(tx.grad), atol=1e-12)


# ----------------------------------------------------------------------------- pooling and batch norm
POOLS = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=1, padding=1),
    dict(kernel_size=2, stride=1),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), dilation=(2, 1), ceil_mode=True),
]


@pytest.mark.parametrize("kw", POOLS)
def test_max_pool2d_and_its_backward_match_torch(torch, rng, kw):
    """Ties (small integers, zeros after a ReLU) send the gradient to each window's first
    maximum; NaN wins the window (the last NaN when there are two) and takes its gradient."""
    x = np.maximum(rng.integers(-2, 3, (2, 3, 9, 9)), 0).astype(np.float64)
    x[0, 0, 1, 1] = x[1, 2, 4, 4] = x[1, 2, 4, 5] = np.nan
    tx = torch.tensor(x, requires_grad=True)
    want = torch.nn.functional.max_pool2d(tx, **kw)
    got = REF["max_pool2d"](t(x), **kw).numpy()
    np.testing.assert_array_equal(got, known(want))
    g = rng.standard_normal(got.shape)
    want.backward(torch.tensor(g))
    np.testing.assert_allclose(REF["max_pool2d_backward"](t(g), t(x), **kw).numpy(), known(tx.grad), atol=1e-12)


@pytest.mark.parametrize("shape", [(4, 3, 5, 6), (6, 3), (2, 3, 4), (1, 3, 1, 2)])
def test_batch_norm_and_its_backward_match_torch(torch, rng, shape):
    TF = torch.nn.functional
    x, g = rng.standard_normal(shape) * 2 + 1, rng.standard_normal(shape)
    w, b = rng.standard_normal(3), rng.standard_normal(3)
    axes = (0,) + tuple(range(2, len(shape)))
    for weight, bias in ((w, b), (None, None), (w, None)):
        ts = [torch.tensor(a, requires_grad=True) for a in (x, weight, bias) if a is not None]
        want = TF.batch_norm(
            ts[0],
            None,
            None,
            *([ts[1]] if weight is not None else [None]),
            *([ts[-1]] if bias is not None else [None]),
            training=True,
            eps=1e-3,
        )
        out, mean, var = REF["batch_norm"](
            t(x), None if weight is None else t(weight), None if bias is None else t(bias), eps=1e-3
        )
        np.testing.assert_allclose(out.numpy(), known(want), atol=1e-12)
        np.testing.assert_allclose(mean.numpy(), x.mean(axes), atol=1e-12)
        np.testing.assert_allclose(var.numpy(), x.var(axes), atol=1e-12)
        want_g = known(torch.autograd.grad(want, ts, torch.tensor(g)))
        got = REF["batch_norm_backward"](
            t(g), t(x), None if weight is None else t(weight), None if bias is None else t(bias), mean, var, eps=1e-3
        )
        assert [v is None for v in got] == [False, weight is None, bias is None]
        for gv, wv in zip([v for v in got if v is not None], want_g):
            np.testing.assert_allclose(gv.numpy(), wv, atol=1e-11)


def _cnn_layers(x, w, b):
    import ember.nn.functional as F

    h = F.batch_norm(x, None, None, w, b, training=True)
    h = F.max_pool2d(h.tanh(), 2)
    h = F.max_pool2d(h, 3, stride=1, padding=1)
    return (h * h.sin()).sum()


def _torch_cnn_layers(torch, x, w, b):
    TF = torch.nn.functional
    h = TF.batch_norm(x, None, None, w, b, training=True)
    h = TF.max_pool2d(h.tanh(), 2)
    h = TF.max_pool2d(h, 3, stride=1, padding=1)
    return (h * h.sin()).sum()


@pytest.mark.parametrize("order", [1, 2])
def test_training_runs_the_pool_and_batch_norm_kernels(tracking, torch, rng, order):
    x, w, b = rng.standard_normal((3, 2, 8, 8)), rng.standard_normal(2), rng.standard_normal(2)
    got_g = _tracked_grads(_cnn_layers, x, w, b, order=order)
    forward = ["batch_norm", "max_pool2d", "max_pool2d"]
    backward = ["max_pool2d_backward", "max_pool2d_backward", "batch_norm_backward"]
    # Order 2: the first gradient is recorded, so the backward ops run as their decompositions
    # (batch norm's with its statistics recomputed from x, so that their dependence on x is
    # differentiated); differentiating those reaches the forward nodes again, whose rules then
    # run the backward kernels.
    assert sorted(Tracking.calls) == sorted(forward + backward)

    def torch_grads():
        ts = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
        gs = torch.autograd.grad(_torch_cnn_layers(torch, *ts), ts, create_graph=order == 2)
        if order == 2:
            gs = torch.autograd.grad(sum((g * g).sum() for g in gs), ts)
        return gs

    for g_got, g_want in zip(got_g, known(torch_grads)):
        np.testing.assert_allclose(g_got, g_want, rtol=1e-8, atol=1e-10)


def test_batch_norm_is_one_node_with_its_statistics_saved(tracking, rng):
    import ember.nn.functional as F

    x = ember.tensor(rng.standard_normal((4, 3, 2, 2)), backend="tracking_fused", requires_grad=True)
    w = ember.tensor(np.ones(3), backend="tracking_fused", requires_grad=True)
    rm, rv = (
        ember.zeros(3, dtype=ember.float64, backend="tracking_fused"),
        ember.ones(3, dtype=ember.float64, backend="tracking_fused"),
    )
    out = F.batch_norm(x, rm, rv, w, None, training=True, momentum=0.25)
    name, args, params = out._ctx
    assert name == "fused.batch_norm" and args[0] is x and args[1] is w and args[2] is None
    saved_mean, saved_var = args[3:]
    assert not saved_mean.requires_grad and not saved_var.requires_grad and params == {"eps": 1e-5}
    n = 4 * 2 * 2
    np.testing.assert_allclose(rm.numpy(), 0.25 * saved_mean.numpy(), rtol=1e-12)
    np.testing.assert_allclose(rv.numpy(), 0.75 + 0.25 * saved_var.numpy() * n / (n - 1), rtol=1e-12)
    assert Tracking.calls == ["batch_norm"]
    out.sum().backward()
    assert Tracking.calls == ["batch_norm", "batch_norm_backward"]


# ----------------------------------------------------------------------------- the registry
def test_the_ops_come_from_their_users_not_from_fused():
    import subprocess
    import sys

    code = (
        "import ember.fused as f; empty = sorted(f.FUSED); import ember.nn.functional; nn = sorted(f.FUSED); "
        "import ember.optim; print(empty, 'softmax' in nn, 'adam_step' in nn, 'adam_step' in f.FUSED)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["[]", "True", "False", "True"], out.stderr


def test_defop_wants_a_backward_op_and_its_rule_together():
    with pytest.raises(ValueError, match="give both backward= and vjp="):
        fused.defop("half", lambda x: x * 0.5, backward="half_backward")


class Halving(NumpyBackend):
    """Declares a throw-away fused op and its backward op, each a kernel that counts its calls."""

    name = "halving_fused"
    calls: list = []
    fused_impls = {
        "half": lambda x: Halving.calls.append("half") or x * 0.5,
        "half_backward": lambda g: Halving.calls.append("half_backward") or g * 0.5,
    }

    def capabilities(self):
        caps = super().capabilities()
        caps.fused = frozenset(self.fused_impls)
        return caps


def test_an_op_registered_later_reaches_a_backend_that_declared_it_earlier():
    backend = Halving()
    x = ember.tensor([2.0, 4.0], backend=backend)
    assert "half" not in fused.declared(backend)  # not registered yet: nothing to run
    fused.defop("half_backward", lambda g: g * 0.5)
    fused.defop(
        "half", lambda x: x * 0.5, backward="half_backward", vjp=lambda g, out, x: (fused.run("half_backward", g),)
    )
    try:
        assert fused.declared(backend) == {"half", "half_backward"}
        xg = ember.tensor([2.0, 4.0], backend=backend, requires_grad=True)
        Halving.calls.clear()
        assert fused.run("half", x).tolist() == [1.0, 2.0]
        fused.run("half", xg).sum().backward()
        assert xg.grad.tolist() == [0.5, 0.5] and Halving.calls == ["half", "half", "half_backward"]
    finally:
        fused.undef("half")
        fused.undef("half_backward")
    assert "half" not in fused.FUSED and fused.declared(backend) == frozenset()

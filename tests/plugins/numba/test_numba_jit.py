"""ember-numba's ember.jit groups: reduce kernels in each loop layout, parameters updated in
their own buffers, other results in ember.jit's planned buffers, and ember.fused's ops as
single graph nodes.

Each case runs a function through ember.jit on the numba backend and compares it with the
same function run eagerly on the NumPy reference. Thresholds are lowered (every kernel
compiles at once; threads and split reductions however small the work) so the code paths
taken on large inputs run here on small ones.
"""

import numpy as np
import pytest

pytest.importorskip("numba", reason="numba is not installed: pip install ./plugins/numba")
pytest.importorskip("ember_numba", reason="ember-numba is not installed: pip install ./plugins/numba")

import ember  # noqa: E402

pytestmark = pytest.mark.usefixtures("compile_at_once")


def _run_both(f, arrays):
    got = ember.jit(f)(*[ember.tensor(a, backend="numba") for a in arrays])
    want = f(*[ember.tensor(a, backend="numpy") for a in arrays])
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    return [g.numpy() for g in got], [w.numpy() for w in want]


def _reduce_groups(f, arrays):
    """The reduce groups of ``f`` and how many of them the numba backend compiled."""
    jf = ember.jit(f)
    compiled = jf.lower(*[ember.tensor(a, backend="numba") for a in arrays])
    reduce = [g for g in compiled.groups if g.kind == "reduce" and len(g.nodes) > 1]
    return reduce, compiled.program.compiled


def _nan(x, *where):
    x = x.copy()
    for index in where:
        x[index] = np.nan
    return x


def relu_backward_and_bias_grad(g, mask):  # W1's fused backward: columns, a pre output
    t = ember.where(mask, g, g * 0)
    return t, t.sum(0)


def col_max_plus_one(x):  # columns, max, a post op
    return x.amax(0) * 2 + 1


def narrow_sum(x, b):  # 5 columns: the fixed-width kernel, split rows
    return (x + b).sum(0, keepdim=True)


def col_min_of_a_column_broadcast(x, c):  # an input broadcast along the kept dim
    return (x - c).amin(0)


def expanded(x, y):  # y broadcast over two kept dims: a full copy
    return (x * y).sum(0)


def logsumexp(x, m):  # rows, sum, post op reading an input at b
    return (x - m).exp().sum(1, keepdim=True).log() + m


def row_min(x):  # rows, min (NaN rows, -inf), a post op
    return (x * 2).amin(1) - 1


def row_max_plus(x, y):  # rows, max of a sum, a pre output
    s = x + y
    return s, s.amax(1)


def channel_sum(x, w):  # (A, B, C) = (N, channels, H*W), split rows
    return (x * w).sum((0, 2, 3))


def total(x):  # everything: rows of the last dim
    return (x * x).sum()


def total_max(x):
    return x.abs().amax()


def positive_count(x):  # a bool sum: int64 accumulators
    return (x > 0).sum(0)


def _infinite_column(x, col):
    x = x.copy()
    x[:, col] = np.where(x[:, col] < 0, -np.inf, np.inf)
    return x


R = np.random.default_rng(0)


def normal(*shape):
    return R.standard_normal(shape).astype(np.float32)


CASES = [
    (relu_backward_and_bias_grad, [normal(64, 300), normal(64, 300) > 0]),
    (col_max_plus_one, [_nan(normal(257, 40), (3, 7), (200, 7), (9, 39))]),
    (narrow_sum, [normal(1000, 5), normal(5)]),
    (col_min_of_a_column_broadcast, [_nan(normal(70, 33), (5, 0)), normal(70, 1)]),
    (expanded, [normal(6, 5, 7), normal(5, 1)]),
    (logsumexp, [normal(33, 70), normal(33, 1)]),
    (row_min, [_infinite_column(_nan(normal(20, 129), (4, 128), (5, 0)), 3)]),
    (row_max_plus, [_nan(normal(24, 19), (2, 5)), normal(1, 19)]),
    (channel_sum, [normal(8, 3, 5, 6), normal(1, 3, 1, 1)]),
    (total, [normal(37, 41)]),
    (total_max, [_nan(normal(1000), (999,))]),
    (positive_count, [normal(300, 20)]),
]


@pytest.mark.parametrize("f,arrays", CASES, ids=[c[0].__name__ for c in CASES])
def test_reduce_groups_match_the_reference(f, arrays):
    groups, compiled = _reduce_groups(f, arrays)
    assert groups and compiled >= len(groups)  # the reduce group ran as a numba kernel
    got, want = _run_both(f, arrays)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-4, equal_nan=True)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))


@pytest.mark.parametrize("f,arrays", CASES[:3] + CASES[7:8] + CASES[9:11], ids=lambda c: getattr(c, "__name__", ""))
def test_unsplit_reductions_match_the_reference(f, arrays, monkeypatch):
    """Work below the threads' threshold: one chunk of rows, each task finishing its results."""
    from ember_numba import launch

    monkeypatch.setattr(launch, "PAR_MIN", 1 << 40)
    got, want = _run_both(f, arrays)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-4, equal_nan=True)


def test_the_loop_order_follows_the_layout(monkeypatch):
    """A column reduction walks the kept columns in its inner loop, a row reduction its rows."""
    from ember_numba import jit, render as rendering

    sources = []

    def render(*args, **kwargs):
        sources.append(rendering.render_reduce(*args, **kwargs))
        return sources[-1]

    monkeypatch.setattr(jit, "render_reduce", render)
    x = ember.tensor(normal(128, 512), backend="numba")
    for f, inner in ((lambda x: (x * 2).sum(0), "j"), (lambda x: (x * 2).sum(1), "c"), (lambda x: (x * 2).sum(), "c")):
        (group,) = [g for g in ember.jit(f).groups(x) if g.kind == "reduce"]
        assert jit.compile_group(group) is not None
        assert f"x0 = a0[b0 + {inner}]" in sources[-1]


# ----------------------------------------------------------------------------- donation
def _sgd_mlp(backend, momentum):
    from ember import models, optim
    from ember.nn import functional as F

    ember.manual_seed(0)
    with ember.backend(backend):
        model = models.MLP(20, (32,), 4)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=momentum)

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return model, opt, step


def _same_as_four_reference_steps(loss, model, x, y, momentum):
    """``loss`` and ``model``'s parameters after four jitted steps are those of four eager
    steps of the same MLP on NumPy."""
    ref_model, _, ref_step = _sgd_mlp("numpy", momentum)
    xr, yr = ember.tensor(x), ember.tensor(y)
    want = [ref_step(xr, yr).item() for _ in range(4)][-1]
    assert abs(loss - want) < 1e-5
    for p, q in zip(model.parameters(), ref_model.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_parameters_are_updated_in_place_without_copies(momentum, monkeypatch):
    x, y = normal(16, 20), R.integers(0, 4, 16)
    model, opt, step = _sgd_mlp("numba", momentum)
    jstep = ember.jit(step)
    xt, yt = ember.tensor(x, backend="numba"), ember.tensor(y, backend="numba")
    for _ in range(3):
        jstep(xt, yt)
    buffers = [p._data for p in model.parameters()]
    backend = ember.get_backend("numba")
    copies = []
    monkeypatch.setattr(type(backend), "assign", lambda self, dst, src: copies.append(dst) or np.copyto(dst, src))
    loss = jstep(xt, yt).item()
    program = jstep.lower(xt, yt).program
    assert len(program.donations) >= len(buffers)  # parameters (and momentum buffers)
    assert copies == []  # no copy after the kernels
    assert all(p._data is b for p, b in zip(model.parameters(), buffers))
    _same_as_four_reference_steps(loss, model, x, y, momentum)


def test_a_destination_the_kernel_cannot_write_is_copied_into_instead():
    """A parameter that is a transposed (non-contiguous) view: the kernel computes its new
    value into a fresh buffer and ember.jit copies it into the parameter."""
    w = ember.tensor(normal(6, 4), backend="numba").T  # (4, 6), Fortran-ordered
    g = ember.tensor(normal(4, 6), backend="numba")

    def update(g):
        w.sub_(g * 0.5)

    before = w.numpy().copy()
    jf = ember.jit(update)
    for k in range(1, 3):
        jf(g)
        np.testing.assert_allclose(w.numpy(), before - k * 0.5 * g.numpy(), rtol=1e-6)
    assert jf.lower(g).program.donations


# ----------------------------------------------------------------------------- planned buffers
def test_compiled_groups_write_into_planned_buffers():
    from ember.backends.numpy.jit_runner import NumpyProgram

    x, y = normal(16, 20), R.integers(0, 4, 16)
    model, opt, step = _sgd_mlp("numba", 0.9)
    jstep = ember.jit(step)
    xt, yt = ember.tensor(x, backend="numba"), ember.tensor(y, backend="numba")
    for _ in range(3):
        jstep(xt, yt)
    program = jstep.lower(xt, yt).program
    assert isinstance(program, NumpyProgram) and program.planned and program.compiled
    written = []
    for g in program.groups:  # note what each kernel is given and returns
        kernel = program.kernels[id(g)]
        if kernel is not None:

            def noting(*bufs, out=None, kernel=kernel):
                got = kernel(*bufs, out=out)
                written.extend(o for o, r in zip(out or (), got) if o is r)
                return got

            noting.accepts_out = True
            program.kernels[id(g)] = noting
    program.build()
    loss = jstep(xt, yt).item()
    assert any(any(w is b for b in program.buffers) for w in written)  # pooled
    assert any(any(w is p._data for p in model.parameters()) for w in written)  # donated
    _same_as_four_reference_steps(loss, model, x, y, 0.9)


def test_a_reduce_kernel_writes_into_a_destination_it_can_use():
    from ember_numba import jit

    g, mask = normal(64, 300), normal(64, 300) > 0
    f = ember.jit(relu_backward_and_bias_grad)
    args = [ember.tensor(a, backend="numba") for a in (g, mask)]
    (group,) = [grp for grp in f.groups(*args) if grp.kind == "reduce"]
    kernel = jit.compile_group(group)
    shapes = [tuple(o.shape) for o in group.outputs]
    into = [np.empty(s, np.float32) for s in shapes]
    got = kernel(g, mask, out=into)
    assert all(r is o for r, o in zip(got, into))
    fresh = kernel(g, mask, out=[np.empty(shapes[0], np.float64), None])  # unusable: allocated
    assert fresh[0] is not into[0] and fresh[0].dtype == np.float32
    for r in (got, fresh):
        np.testing.assert_allclose(r[0], np.where(mask, g, 0), rtol=1e-6)
        np.testing.assert_allclose(r[1].reshape(-1), np.where(mask, g, 0).sum(0), rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- fused ops
def _lenet():
    from ember import nn

    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 4 * 4, 3))


def test_a_cnn_training_step_runs_the_fused_ops_as_single_nodes():
    from ember import fused, optim
    from ember.nn import functional as F

    ember.manual_seed(0)
    ref = _lenet()
    model = _lenet().to("numba")
    model.load_state_dict(ref.state_dict())
    opts = [optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (ref, model)]

    def step(m, o, x, y):
        loss = F.cross_entropy(m(x), y)
        o.zero_grad()
        loss.backward()
        o.step()
        return loss

    jstep = ember.jit(step)
    x, y = ember.tensor(normal(6, 1, 10, 10)), ember.tensor(R.integers(0, 3, 6))
    xb, yb = x.to("numba"), y.to("numba")
    for _ in range(3):
        le, lj = step(ref, opts[0], x, y), jstep(model, opts[1], xb, yb)
        np.testing.assert_allclose(lj.item(), le.item(), rtol=1e-5)
    for p, q in zip(ref.parameters(), model.parameters()):
        np.testing.assert_allclose(q.numpy(), p.numpy(), rtol=1e-4, atol=1e-5)
    nodes = [v.params["name"] for v in jstep.lower(model, opts[1], xb, yb).graph.nodes if v.op == "fused"]
    declared = fused.declared(ember.get_backend("numba"))
    expect = [
        n
        for n in ("max_pool2d", "cross_entropy", "cross_entropy_backward", "max_pool2d_backward")
        if n in declared and (not n.startswith("max_pool2d") or "max_pool2d_backward" in declared)
    ]
    assert {"cross_entropy", "cross_entropy_backward"} <= set(expect)
    assert sorted(nodes) == sorted(expect)

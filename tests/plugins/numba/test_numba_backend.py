"""ember-numba: its kernels against the NumPy reference, on shapes large enough to take them.

The conformance suite (``ember certify numba``) checks every primitive and fused op on small,
adversarial cases; with the default thresholds those run on NumPy, so here the kernels
themselves are driven: thresholds lowered to 0 and shapes above the parallel threshold, so
both the serial and the parallel build of each kernel run. Skipped when numba or the plugin
is not installed (``pip install -e plugins/numba``).
"""

import doctest
import importlib
import pathlib

import numpy as np
import pytest

pytest.importorskip("numba", reason="numba is not installed: pip install ./plugins/numba")
pytest.importorskip("ember_numba", reason="ember-numba is not installed: pip install ./plugins/numba")

from numba_helpers import close, reference  # noqa: E402

import ember  # noqa: E402
from ember.backends.numpy import backend as nb  # noqa: E402

pytestmark = pytest.mark.usefixtures("compile_at_once")


# ----------------------------------------------------------------------------- elementwise
# Each op once or twice, each broadcast pattern of the kernels at least once (every kernel
# variant is compiled on first use, so the list is kept short): same shape, a row (bias), a
# column (softmax's max), NCHW with a per-channel operand, a Python scalar, a 0-d array.
BINARY = [
    ("add", (300, 257), (300, 257)),
    ("add", (300, 257), (257,)),
    ("sub", (8, 16, 30, 30), (1, 16, 1, 1)),
    ("mul", (300, 257), (300, 1)),
    ("div", (70000,), ()),
    ("maximum", (300, 257), (300, 257)),
    ("minimum", (257,), (300, 257)),
    ("gt", (300, 257), None),
    ("eq", (300, 257), (300, 257)),
    ("div", (300, 257), None),
]


@pytest.mark.parametrize("op,sa,sb", BINARY, ids=str)
def test_binary_kernels_match_the_reference(op, sa, sb, backend, kernels_always, rng):
    a = rng.standard_normal(sa).astype(np.float32)
    a.reshape(-1)[::97] = np.nan
    if sb is None:
        b = 0.5
    else:
        b = rng.standard_normal(sb).astype(np.float32)
        b.reshape(-1)[::89] = 0.0
    with np.errstate(all="ignore"):
        close(backend.impls[op](a, b), nb.IMPLS[op](a, b))


def test_where_and_unary_kernels(backend, kernels_always, rng):
    x = rng.standard_normal((256, 300))
    c = x > 0
    close(backend.impls["where"](c, x, 0.0), nb.IMPLS["where"](c, x, 0.0))
    x = x.astype(np.float32)
    close(backend.impls["where"](c, 1.5, x[:1]), nb.IMPLS["where"](c, 1.5, x[:1]))
    for op in ("neg", "sqrt", "reciprocal", "abs", "floor"):
        with np.errstate(all="ignore"):
            close(backend.impls[op](x), nb.IMPLS[op](x))


def test_views_and_other_dtypes_take_the_reference(backend, kernels_always, rng):
    x = rng.standard_normal((300, 400)).astype(np.float32)
    close(backend.impls["add"](x.T, x.T), x.T + x.T)  # a permuted view
    h = x.astype(np.float16)
    close(backend.impls["mul"](h, h), nb.IMPLS["mul"](h, h))
    i = rng.integers(-5, 5, (300, 400))
    np.testing.assert_array_equal(backend.impls["add"](i, i), i + i)


# ----------------------------------------------------------------------------- reductions, layout
@pytest.mark.parametrize(
    "shape,axes",
    [((512, 300), (0,)), ((300, 512), (1,)), ((64, 32, 7, 7), (0, 2, 3)), ((100, 1000), (0, 1)), ((6, 50, 40), (1,))],
    ids=str,
)
@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_reductions(op, shape, axes, backend, kernels_always, rng):
    x = rng.standard_normal(shape)
    for dtype in ("float32", "float64"):
        xd = x.astype(dtype)
        for keepdims in (False, True):
            # The kernels add in float64: compare with the exact sum of the same inputs, rounded once.
            want = nb.IMPLS[op](xd.astype(np.float64), axes, keepdims).astype(dtype)
            # (A layout the kernels leave to NumPy adds in float32: the suite's accumulation allowance.)
            terms = np.prod([shape[a] for a in axes])
            atol = 4 * np.finfo(dtype).eps * terms * np.abs(x).max()
            close(backend.impls[op](xd, axes, keepdims), want, rtol=1e-6 if dtype == "float32" else 1e-12, atol=atol)
    y = x.copy()
    y.reshape(-1)[7] = np.nan
    close(backend.impls[op](y, axes, False), nb.IMPLS[op](y, axes, False))


@pytest.mark.parametrize(
    "widths,value",
    [
        (((0, 0), (0, 0), (1, 1), (2, 0)), 0.0),
        (((1, 0), (0, 2), (0, 0), (0, 0)), -np.inf),
        (((0, 0), (0, 0), (0, 0), (0, 1)), 3.0),
    ],
    ids=str,
)
def test_pad(widths, value, backend, kernels_always, rng):
    x = rng.standard_normal((16, 8, 30, 20)).astype(np.float32)
    close(backend.impls["pad"](x, widths, value), nb.IMPLS["pad"](x, widths, value))


CONVS = [
    ((16, 3, 32, 32), (16, 3, 3, 3), (1, 1), (1, 1), (1, 1)),
    ((8, 16, 12, 12), (16, 16, 3, 3), (1, 1), (1, 1), (1, 2)),  # input gradient as a flipped convolution
    ((8, 16, 15, 13), (32, 16, 3, 3), (2, 2), (1, 1), (1, 1)),
    ((4, 4, 20, 20), (8, 4, 3, 2), (2, 1), (0, 2), (2, 1)),
    ((32, 1, 28, 28), (32, 1, 3, 3), (1, 1), (0, 0), (1, 1)),
]


@pytest.mark.parametrize("xs,ws,stride,padding,dilation", CONVS, ids=str)
def test_convolutions(xs, ws, stride, padding, dilation, backend, kernels_always, rng):
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    p = dict(stride=stride, padding=padding, dilation=dilation, groups=1)
    y = nb.IMPLS["conv2d"](x, w, **p)
    g = rng.standard_normal(y.shape)
    close(backend.impls["conv2d"](x, w, **p), y, rtol=1e-10, atol=1e-10)
    close(
        backend.impls["conv2d_grad_input"](g, w, input_shape=xs, **p),
        nb.IMPLS["conv2d_grad_input"](g, w, input_shape=xs, **p),
        rtol=1e-10,
        atol=1e-10,
    )
    close(
        backend.impls["conv2d_grad_weight"](x, g, weight_shape=ws, **p),
        nb.IMPLS["conv2d_grad_weight"](x, g, weight_shape=ws, **p),
        rtol=1e-10,
        atol=1e-9,
    )
    x32, w32 = x.astype(np.float32), w.astype(np.float32)
    close(backend.impls["conv2d"](x32, w32, **p), nb.IMPLS["conv2d"](x32, w32, **p), rtol=1e-4, atol=1e-4)


def test_windows_grad_index_add_and_random_bits(backend, kernels_always, rng):
    g = rng.standard_normal((4, 8, 9, 8, 2, 3)).astype(np.float32)
    args = dict(input_shape=(4, 8, 20, 20), kernel=(2, 3), stride=(2, 2), dilation=(1, 2))
    close(backend.impls["windows_grad"](g, **args), nb.IMPLS["windows_grad"](g, **args))
    x = rng.standard_normal((30, 1000))
    idx = rng.integers(-30, 30, 500)  # repeats accumulate, negatives count from the end
    v = rng.standard_normal((500, 1000))
    close(backend.impls["index_add"](x, idx, v, 0), nb.IMPLS["index_add"](x, idx, v, 0), rtol=1e-12, atol=1e-12)
    for shape, seed, offset in [((300, 301), 7, 3), ((100000,), 2**64 - 1, 2**40 + 1)]:
        np.testing.assert_array_equal(
            backend.impls["random_bits"](shape, seed, offset), nb.IMPLS["random_bits"](shape, seed, offset)
        )


# ----------------------------------------------------------------------------- fused ops
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fused_row_ops_on_large_inputs(dtype, backend, rng):
    x = (rng.standard_normal((600, 130)) * 5).astype(dtype)
    x[0, 0] = 800.0
    # float32 atol: a few roundings of values up to ~800 (the shifted logits), as tier 4 allows.
    tol = dict(rtol=2e-5, atol=1e-4) if dtype == "float32" else dict(rtol=1e-12, atol=1e-11)
    for name in ("softmax", "log_softmax"):
        for dim in (-1, 0):
            close(backend.fused_impls[name](x, dim=dim), reference(name, x, dim=dim), **tol)
    t = rng.integers(0, 130, 600)
    close(backend.fused_impls["cross_entropy"](x, t), reference("cross_entropy", x, t), **tol)
    w, b = rng.standard_normal(130).astype(dtype), rng.standard_normal(130).astype(dtype)
    close(
        backend.fused_impls["layer_norm"](x, w, b, normalized_shape=(130,)),
        reference("layer_norm", x, w, b, normalized_shape=(130,)),
        **tol,
    )
    for approximate in ("none", "tanh"):
        close(
            backend.fused_impls["gelu"](x, approximate=approximate),
            reference("gelu", x, approximate=approximate),
            **tol,
        )


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fused_backward_ops_on_large_inputs(dtype, backend, rng):
    x = (rng.standard_normal((600, 130)) * 5).astype(dtype)
    x[0, 0] = 800.0
    g = rng.standard_normal(x.shape).astype(dtype)
    tol = dict(rtol=2e-5, atol=1e-4) if dtype == "float32" else dict(rtol=1e-12, atol=1e-11)
    for name in ("softmax", "log_softmax"):
        for dim in (-1, 0):
            y = reference(name, x, dim=dim)
            close(
                backend.fused_impls[name + "_backward"](g, y, dim=dim),
                reference(name + "_backward", g, y, dim=dim),
                **tol,
            )
    t = rng.integers(0, 130, 600)
    t[::7] = 5
    for ignore_index in (-100, 5):
        args = (np.array(0.7, dtype), x, t)
        close(
            backend.fused_impls["cross_entropy_backward"](*args, ignore_index=ignore_index),
            reference("cross_entropy_backward", *args, ignore_index=ignore_index),
            **tol,
        )
        close(
            backend.fused_impls["cross_entropy"](x, t, ignore_index=ignore_index),
            reference("cross_entropy", x, t, ignore_index=ignore_index),
            **tol,
        )
    for approximate in ("none", "tanh"):
        close(
            backend.fused_impls["gelu_backward"](g, x, approximate=approximate),
            reference("gelu_backward", g, x, approximate=approximate),
            **tol,
        )
    w, b = rng.standard_normal(130).astype(dtype), rng.standard_normal(130).astype(dtype)
    # float32: the parameters' gradients add 600 rows (the kernel in float64, NumPy pairwise)
    ptol = dict(rtol=1e-4, atol=1e-3) if dtype == "float32" else tol
    for weight, bias in ((w, b), (None, None), (w, None)):
        got = backend.fused_impls["layer_norm_backward"](g, x, weight, bias, normalized_shape=(130,))
        want = reference("layer_norm_backward", g, x, weight, bias, normalized_shape=(130,))
        for i, (gv, wv) in enumerate(zip(got, want)):
            assert (gv is None) == (wv is None)
            if gv is not None:
                close(gv, wv, **(tol if i == 0 else ptol))


def test_eager_training_runs_the_fused_kernels(launches, rng):
    """F.cross_entropy in an eager training step runs the numba cross-entropy kernels, forward
    and backward, and the step computes what the NumPy reference computes."""
    from ember import models, optim
    from ember.nn import functional as F
    from ember_numba.fused import rows

    x = rng.standard_normal((64, 30)).astype(np.float32)
    y = rng.integers(0, 10, 64)
    losses, grads = {}, {}
    for name in ("numpy", "numba"):
        ember.manual_seed(0)
        with ember.backend(name):
            model = models.MLP(30, (40,), 10)
            opt = optim.SGD(model.parameters(), lr=0.1)
        xt, yt = ember.tensor(x, backend=name), ember.tensor(y, backend=name)
        losses[name] = []
        for _ in range(3):
            loss = F.cross_entropy(model(xt), yt)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses[name].append(loss.item())
        grads[name] = [p.grad.numpy() for p in model.parameters()]
    assert launches.count(rows.cross_entropy_rows) == 3
    assert launches.count(rows.cross_entropy_backward_rows) == 3
    np.testing.assert_allclose(losses["numba"], losses["numpy"], rtol=1e-5)
    for gn, gr in zip(grads["numba"], grads["numpy"]):
        close(gn, gr, rtol=1e-4, atol=1e-6)


def test_second_derivatives_through_the_fused_ops(rng):
    """grad of grad through ops that train on the fused kernels: the inner gradient is recorded
    through the backward ops' decompositions, and the result is the reference's."""
    from ember.nn import functional as F

    x = rng.standard_normal((7, 5))
    y = rng.integers(0, 5, 7)

    def f(x):
        h = F.gelu(F.log_softmax(x, dim=-1)) + F.softmax(x, dim=0)
        return F.cross_entropy(h, ember.tensor(y, backend=x.backend.name))

    def curvature(x):
        return (ember.grad(f)(x) ** 2).sum()

    got = ember.grad(curvature)(ember.tensor(x, backend="numba")).numpy()
    want = ember.grad(curvature)(ember.tensor(x, backend="numpy")).numpy()
    close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["sgd_step", "adam_step", "rmsprop_step"])
def test_fused_optimizer_steps_update_in_place(name, backend, rng):
    from ember.conformance.optimizers import CASES
    from ember.optim.functional import REFERENCE

    shape = (300, 257)
    for hyper in (CASES[name][0], CASES[name][-1]):  # the plainest and the most involved options
        p, g = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
        if name == "sgd_step":
            state = [rng.standard_normal(shape).astype(np.float32) if hyper.get("momentum") else None]
            extra = {}
        elif name == "adam_step":
            state = [
                rng.standard_normal(shape).astype(np.float32),
                rng.uniform(1, 2, shape).astype(np.float32),
                rng.uniform(2, 3, shape).astype(np.float32) if hyper.get("amsgrad") else None,
            ]
            extra = {"step": 4}
        else:
            state = [
                rng.uniform(1, 2, shape).astype(np.float32),
                (rng.standard_normal(shape) * 0.1).astype(np.float32) if hyper.get("centered") else None,
                rng.standard_normal(shape).astype(np.float32) if hyper.get("momentum") else None,
            ]
            extra = {}
        with ember.no_grad():
            want = REFERENCE[name](
                *(None if a is None else ember.tensor(a.copy(), backend="numpy") for a in [p, g] + state),
                **hyper,
                **extra,
            )
        bufs = [None if a is None else a.copy() for a in [p, g] + state]
        got = backend.fused_impls[name](*bufs, **hyper, **extra)
        assert got[0] is bufs[0], "the parameter is updated in its own buffer"
        for gv, wv in zip(got, want):
            if wv is None:
                assert gv is None
            else:
                close(gv, wv.numpy(), rtol=1e-6, atol=1e-7)


# ----------------------------------------------------------------------------- ember.jit groups
def test_jit_fusion_groups_run_as_numba_kernels(backend, rng):
    x = rng.standard_normal((64, 32, 9)).astype(np.float32)
    y = rng.standard_normal((32, 1)).astype(np.float32)

    def f(x, y):
        h = (x * y).tanh()
        s = h.sum((0, 2), keepdim=True)
        return (s * 2 + 1).relu().sqrt(), h.exp(), x.amax(2), (x - y).abs().sum(), (x > y).float() * 3

    jf = ember.jit(f)
    got = jf(ember.tensor(x, backend="numba"), ember.tensor(y, backend="numba"))
    want = f(ember.tensor(x, backend="numpy"), ember.tensor(y, backend="numpy"))
    for g, w in zip(got, want):
        close(g.numpy(), w.numpy(), rtol=2e-5, atol=1e-4)
    stats = jf.stats(ember.tensor(x, backend="numba"), ember.tensor(y, backend="numba"))
    compiled = jf.lower(ember.tensor(x, backend="numba"), ember.tensor(y, backend="numba"))
    assert stats["fused"] >= 2 and compiled.program.compiled == stats["fused"]


@pytest.mark.parametrize("use_jit", [False, True], ids=["eager", "jit"])
def test_training_steps_match_numpy(use_jit, rng):
    from ember import models, optim
    from ember.nn import functional as F

    x = rng.standard_normal((128, 100)).astype(np.float32)
    y = rng.integers(0, 10, 128)
    losses = {}
    for name in ("numpy", "numba"):
        ember.manual_seed(0)
        with ember.backend(name):
            model = models.MLP(100, (300,), 10)
            opt = optim.Adam(model.parameters(), lr=1e-3)

        def step(x, y):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss

        run = ember.jit(step) if use_jit else step
        xt, yt = ember.tensor(x, backend=name), ember.tensor(y, backend=name)
        losses[name] = [run(xt, yt).item() for _ in range(4)]
    np.testing.assert_allclose(losses["numba"], losses["numpy"], rtol=1e-5)
    assert losses["numba"][-1] < losses["numba"][0]


# ----------------------------------------------------------------------------- threads
@pytest.fixture
def steady_memory(monkeypatch):
    """The simulated calls below fault no pages: the process's real count (the interpreter's
    own allocations) must not take calls out of their timing."""
    from ember_numba import launch

    monkeypatch.setattr(launch, "_minor_faults", lambda: 0)


def test_thread_choice_follows_the_faster_way_and_backs_off(monkeypatch, steady_memory):
    """Simulated times: all threads 10x slower, then (the machine quiets down) 2x faster."""
    from ember_numba.launch import ThreadChoice

    choice = ThreadChoice()
    monkeypatch.setattr(ThreadChoice, "streak", [0])
    slow_calls = []
    for call in range(600):
        one, explore, st = choice.choose("k")
        if not one:
            slow_calls.append(call)
        choice.record(st, one, explore, 1.0 if one else 10.0)
    # one thread warms up and is timed (calls 0, 1); all threads warm up and are tried
    # TRIES times (2-5); then tried ever more rarely, TRIES calls in a row each time
    assert slow_calls[:4] == [2, 3, 4, 5] and len(slow_calls) <= 4 + 2 * ThreadChoice.TRIES
    starts = [c for c in slow_calls if c - 1 not in slow_calls]
    assert all(b - a >= 16 for a, b in zip(starts, starts[1:]))
    uses = []
    for _call in range(2000):  # the next try comes within MAX_PERIOD calls
        one, explore, st = choice.choose("k")
        uses.append(one)
        choice.record(st, one, explore, 1.0 if one else 0.5)
    assert sum(uses[-500:]) <= 2 * ThreadChoice.TRIES  # now all threads, re-checking one now and then


def test_thread_choice_does_not_time_calls_that_faulted_fresh_pages(monkeypatch):
    """All threads take half one thread's time, but the first try of all threads meets fresh
    buffers: page faults, and 20x the time. Those calls are not timed (the try goes on), so
    all threads win at once; a key whose every call faults is timed after FAULT_SKIPS."""
    from ember_numba import launch
    from ember_numba.launch import ThreadChoice

    faults = [0]
    monkeypatch.setattr(launch, "_minor_faults", lambda: faults[0])
    monkeypatch.setattr(ThreadChoice, "streak", [0])
    choice = ThreadChoice()
    uses = []
    for call in range(30):
        one, explore, st = choice.choose("k")
        uses.append(one)
        fresh = call in (3, 4, 5)  # the try's first three timed calls fault
        faults[0] += 500 if fresh else 0
        choice.record(st, one, explore, 20.0 if fresh else (1.0 if one else 0.5))
    assert uses[:2] == [True, True] and not any(uses[2:])  # warmed up, timed; tried; kept
    assert st[2] == 0.5
    always = ThreadChoice()
    for _call in range(ThreadChoice.FAULT_SKIPS + 2):
        one, explore, st = always.choose("j")
        faults[0] += 1
        always.record(st, one, explore, 1.0)
    assert st[1] == 1.0 and st[10] == 0  # the skips spent, then timed


def test_thread_choice_waits_by_the_margin_all_threads_won_before_trying_one_again(monkeypatch, steady_memory):
    """All threads at 0.65 of one thread's time: after they win, one thread is tried again
    only when that try (losing by the same margin) costs under ~5% of the calls in between,
    not after EXPLORE calls (3 calls in 16 at 1.54x: 8% of the layer's time)."""
    from ember_numba.launch import ThreadChoice

    choice = ThreadChoice()
    monkeypatch.setattr(ThreadChoice, "streak", [0])
    one_calls = []
    for call in range(400):
        one, explore, st = choice.choose("k")
        if one:
            one_calls.append(call)
        choice.record(st, one, explore, 1.0 if one else 0.65)
    assert one_calls[:2] == [0, 1]  # warmed up and timed; all threads tried at 2-5 and taken
    later = one_calls[2:]
    wait = ThreadChoice.TRIES * 20 * (1 / 0.65 - 1)  # 32 calls
    assert later and later[0] - 5 >= int(wait)
    assert len(later) <= 3 * ThreadChoice.TRIES  # and ever more rarely after that


def test_thread_choice_is_not_decided_by_one_stall_or_a_first_call(monkeypatch, steady_memory):
    """All threads take half the time, but their first call (fresh buffers) and one call of
    the first try stall: the choice still goes to all threads, at once."""
    from ember_numba.launch import ThreadChoice

    choice = ThreadChoice()
    monkeypatch.setattr(ThreadChoice, "streak", [0])
    times = {0: 5.0, 1: 1.0, 2: 20.0, 3: 0.5, 4: 8.0, 5: 0.5}  # call -> seconds, else 1 or 0.5
    uses = []
    for call in range(40):
        one, explore, st = choice.choose("k")
        uses.append(one)
        choice.record(st, one, explore, times.get(call, 1.0 if one else 0.5))
    assert uses[:6] == [True, True, False, False, False, False]
    assert not any(uses[6:21])  # all threads from the verdict on, until one thread's next try


@pytest.mark.parametrize("watch", [False, True])
def test_thread_choice_watching_tries_all_threads_once_the_machine_quiets(watch, monkeypatch, steady_memory):
    """A busy spell (one thread 2 s, all threads 8 s) keeps the key on one thread and grows the
    period between tries; then the machine goes quiet (one thread 1 s, all 0.5 s). A watching
    key tries all threads at once and keeps them; without watching it waits out the period."""
    from ember_numba import launch
    from ember_numba.launch import ThreadChoice

    class Machine:
        count = 0

        def spell(self, now=True):
            return self.count

        def quiet(self):
            return self.count > 0

    machine = Machine()
    monkeypatch.setattr(launch, "QUIETED", machine)
    choice = ThreadChoice()
    monkeypatch.setattr(ThreadChoice, "streak", [0])
    for _call in range(300):
        one, explore, st = choice.choose("k", watch)
        choice.record(st, one, explore, 2.0 if one else 8.0)
    machine.count += 1  # quiet now
    uses = []
    for _call in range(60):
        one, explore, st = choice.choose("k", watch)
        uses.append(one)
        choice.record(st, one, explore, 1.0 if one else 0.5)
    if watch:
        assert not uses[0] and sum(uses) <= ThreadChoice.TRIES  # all threads, but for one's re-try
    else:
        assert all(uses)


def test_a_watching_key_keeps_all_threads_that_won_while_the_machine_is_quiet(monkeypatch, steady_memory):
    """All threads win (0.5 s against 1 s); then the host slows every call 3x for 40 calls, no
    other process busy: a watching key stays on all threads and never re-tries one, where a key
    that does not watch re-tries one thread and goes to it once all threads' running mean passes
    one thread's time. A stall (all threads 4x one thread's time) or another process busy
    ends the rule."""
    from ember_numba import launch
    from ember_numba.launch import ThreadChoice

    class Machine:
        busy = False

        def spell(self, now=True):
            return 0

        def quiet(self):
            return not self.busy

    machine = Machine()
    monkeypatch.setattr(launch, "QUIETED", machine)
    monkeypatch.setattr(ThreadChoice, "streak", [0])

    def calls(choice, watch, n, one_s, all_s):
        uses = []
        for _call in range(n):
            one, explore, st = choice.choose("k", watch)
            uses.append(one)
            choice.record(st, one, explore, one_s if one else all_s)
        return uses

    watching, other = ThreadChoice(), ThreadChoice()
    for choice, watch in ((watching, True), (other, False)):
        calls(choice, watch, 200, 1.0, 0.5)
    assert not any(calls(watching, True, 40, 3.0, 1.5) + calls(watching, True, 100, 1.0, 0.5))
    assert any(calls(other, False, 40, 3.0, 1.5))  # the old rule: the host's slow spell sends it to one
    assert calls(watching, True, 10, 1.0, 4.0)[-1]  # a stall: one thread
    calls(watching, True, 3000, 1.0, 0.5)  # all threads again (tried, won)
    assert not calls(watching, True, 1, 1.0, 0.5)[0]
    machine.busy = True  # another process: the key's running times decide again
    assert calls(watching, True, 10, 1.0, 2.0)[-1]


def test_quieted_counts_turns_from_busy_to_quiet(monkeypatch):
    """Other processes' cores per window (all cores' busy time less this process's): 0.1 (not
    busy yet), 1.0 (busy), 0.4 (neither), 0.1 (quiet: one turn), 0.1, 1.5, 0.0 (a second)."""
    from ember_numba.launch import Quieted

    others = [0.1, 1.0, 0.4, 0.1, 0.1, 1.5, 0.0]
    samples = [(0.0, 0.0, 0.0)]
    for k, o in enumerate(others):  # windows of 1 s, this process using 0.5 cores of them
        samples.append((k + 1.0, samples[-1][1] + o + 0.5, samples[-1][2] + 0.5))
    quieted = Quieted()
    monkeypatch.setattr(quieted, "watching", True)
    monkeypatch.setattr(quieted, "_sample", lambda: samples.pop(0))
    times = iter(range(100))
    monkeypatch.setattr("time.perf_counter", lambda: float(next(times)))
    counts = [quieted.spell() for _ in range(len(others) + 1)]
    assert counts == [0, 0, 0, 0, 1, 1, 1, 2]


# ----------------------------------------------------------------------------- examples
@pytest.mark.parametrize("name", ["render", "launch", "cache", "backend", "blas", "fused.common", "jit"])
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(f"ember_numba.{name}"), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


@pytest.mark.parametrize("doc,heading", [("numba.md", "# The numba backend"), ("backends.md", "## `numba`")])
def test_docs_examples(doc, heading):
    """The examples of docs/numba.md and of the numba section of docs/backends.md."""
    text = (pathlib.Path(__file__).resolve().parents[3] / "docs" / doc).read_text()
    section = text[text.index(heading) :]
    section = section[: section.find("\n## ", 1)] if doc == "backends.md" and "\n## " in section[1:] else section
    test = doctest.DocTestParser().get_doctest(section, {}, doc, doc, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.failures == 0 and runner.tries > 0


@pytest.mark.parametrize("dtype", [ember.bfloat16, ember.float8_e5m2])
def test_pad_of_a_storage_dtype_encodes_its_fill_value(dtype):
    """-inf (max pool's padding) and 0.3 become the format's codes, as on the numpy backend."""
    for value in (float("-inf"), 0.3, 0.0):
        got = ember.nn.functional.pad(ember.ones(1, 2, 3, backend="numba").to(dtype), (1, 2, 1, 0), value=value)
        want = ember.nn.functional.pad(ember.ones(1, 2, 3).to(dtype), (1, 2, 1, 0), value=value)
        assert got.dtype is dtype and got.float().tolist() == want.float().tolist()


def test_string_tensors_move_and_compare_eager_and_under_jit():
    """Text on numba is NumPy's object arrays of str, as on numpy: its kernels leave them to
    NumPy's, and ember.jit keeps the string nodes out of compiled groups."""
    x = ember.tensor(["a", "b", "c", "d"], backend="numba")
    y = ember.tensor(["a", "x", "c", "y"], backend="numba")
    assert (x == y).tolist() == [True, False, True, False] and (x != "b").tolist() == [True, False, True, True]
    assert x.reshape(2, 2).T.tolist() == [["a", "c"], ["b", "d"]] and ember.cat([x[:1], y[3:]]).tolist() == ["a", "y"]
    step = ember.jit(lambda a, b: (a == b, ember.where(a == b, a, b).flip(0)))
    for _ in range(2):  # traced, then compiled
        same, picked = step(x, y)
    assert same.tolist() == [True, False, True, False] and picked.tolist() == ["y", "c", "x", "a"]
    with pytest.raises(ember.DTypeError, match="string tensors have no arithmetic"):
        x + y

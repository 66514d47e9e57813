"""dispatch: the current interpreter and grad mode are context-local, so threads do not share them.

Each test runs real threads and makes their work overlap with events: one thread is stopped
in the middle of tracing (or inside no_grad) while the other works, and both results are
checked against the same work done alone.
"""

import threading

import numpy as np
import pytest

import ember
import ember.nn.functional as F
from ember import dispatch, nn, optim


def _train(steps=5):
    """A few eager SGD steps on a fixed problem: the losses and the final weights."""
    ember.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = optim.SGD(model.parameters(), lr=0.1)
    x = ember.tensor(np.linspace(-1, 1, 40, dtype=np.float32).reshape(10, 4))
    y = ember.tensor(np.arange(10) % 3)
    losses = []
    for _ in range(steps):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.numpy().copy() for p in model.parameters()]


def _traced_step(x, w):
    """What the jitted function computes: a value and the gradient of w through autodiff."""
    loss = ((x @ w).tanh() ** 2).sum()
    loss.backward()
    return loss


def _run(threads):
    errors = []

    def guard(fn):
        def run():
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread
                errors.append(exc)

        return run

    ts = [threading.Thread(target=guard(fn)) for fn in threads]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not any(t.is_alive() for t in ts), "a thread hung"
    if errors:
        raise errors[0]


def test_one_thread_traces_while_another_trains_eagerly():
    want_losses, want_weights = _train()
    x = ember.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
    w0 = np.linspace(0.5, -0.5, 8, dtype=np.float32).reshape(4, 2)
    w_eager = ember.tensor(w0, requires_grad=True)
    want_value = _traced_step(x, w_eager).item()
    want_grad = w_eager.grad.numpy().copy()

    in_trace, trained = threading.Event(), threading.Event()
    got = {}

    def tracing():
        def f(x, w):
            out = _traced_step(x, w)
            assert ember.jit.is_tracing()
            in_trace.set()
            assert trained.wait(30), "the eager thread did not finish"
            assert ember.jit.is_tracing()  # the other thread did not end our trace
            return out

        step = ember.jit(f)
        w = ember.tensor(w0, requires_grad=True)
        value = step(x, w)
        got["value"], got["grad"], got["traces"] = value.item(), w.grad.numpy().copy(), step.trace_count
        got["stats"] = step.stats(x, w)

    def training():
        assert in_trace.wait(30), "the tracing thread did not start"
        assert not ember.jit.is_tracing() and dispatch.interpreter() is dispatch.EAGER
        got["losses"], got["weights"] = _train()
        trained.set()

    _run([tracing, training])
    assert got["traces"] == 1
    assert got["value"] == pytest.approx(want_value, rel=1e-6)
    np.testing.assert_allclose(got["grad"], want_grad, rtol=1e-6)
    assert got["losses"] == want_losses
    for a, b in zip(got["weights"], want_weights):
        np.testing.assert_array_equal(a, b)
    # the trace holds the traced function's work only: none of the eager thread's ops
    alone = ember.jit(_traced_step)
    assert got["stats"]["primitives"] == alone.stats(x, ember.tensor(w0, requires_grad=True))["primitives"]


def test_grad_mode_is_per_thread():
    inside, checked = threading.Event(), threading.Event()
    seen = {}

    def frozen():
        with ember.no_grad():
            inside.set()
            assert checked.wait(30)
            seen["frozen"] = (ember.ones(2, requires_grad=True) * 2).requires_grad

    def recording():
        assert inside.wait(30)
        seen["enabled"] = ember.is_grad_enabled()
        seen["recording"] = (ember.ones(2, requires_grad=True) * 2).requires_grad
        checked.set()

    _run([frozen, recording])
    assert seen == {"frozen": False, "enabled": True, "recording": True}
    assert ember.is_grad_enabled()


def test_a_no_grad_function_called_from_two_threads_restores_each_threads_mode():
    # first enters, then second enters, then first leaves before second: with one saved-mode
    # stack shared by the two calls, each would restore the other's mode.
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    after = {}

    @ember.no_grad()
    def work(entered, wait_for):
        entered.set()
        assert wait_for.wait(30)
        return ember.is_grad_enabled()

    def first():  # grad on around the call
        assert work(first_in, second_in) is False
        after["first"] = ember.is_grad_enabled()
        first_out.set()

    def second():  # grad off around the call: must stay off after it
        assert first_in.wait(30)
        with ember.no_grad():
            work(second_in, first_out)
            after["second"] = ember.is_grad_enabled()

    _run([first, second])
    assert after == {"first": True, "second": False}


def test_a_traced_tensor_handed_to_another_thread_is_an_error_there():
    seen = []

    @ember.jit
    def f(x):
        y = x * 2
        _run([lambda: seen.append(pytest.raises(ember.jit.TraceError, lambda: y + 1))])
        return y.sum()

    assert f(ember.ones(3)).item() == 6.0
    assert "outside its trace" in str(seen[0].value)


def test_wrap_builds_a_tensor_from_a_buffer():
    b = ember.get_backend("numpy")
    t = dispatch.wrap(b.from_list([1.0, 2.0], (2,), ember.float32), b)
    assert t.tolist() == [1.0, 2.0] and not t.requires_grad and t.grad is None
    assert dispatch._wrap is dispatch.wrap  # the old name, kept for plugins


def test_the_open_interpreter_count_returns_to_zero_after_a_trace_that_fails():
    # eager ops skip the context-variable read only while no interpreter block is open anywhere
    @ember.jit
    def fails(x):
        assert dispatch._open == 1 and dispatch.interpreter() is not dispatch.EAGER
        raise ValueError("inside the trace")

    with pytest.raises(ValueError, match="inside the trace"):
        fails(ember.ones(2))
    assert dispatch._open == 0 and dispatch.interpreter() is dispatch.EAGER
    assert (ember.ones(2) + 1).tolist() == [2.0, 2.0]


def test_tensor_has_no_init_since_dispatch_builds_it_by_calling_the_class():
    assert dispatch.Tensor.__init__ is object.__init__


@pytest.mark.parametrize("keyed_by", ["name", "record"])
def test_impls_keyed_by_name_or_record_and_kernels_added_later(keyed_by):
    # dispatch looks tables up by record; backends key them by name (or by record): both find
    # every kernel, the ones added after the backend was first used too
    from ember import primitives as P
    from ember.backends.numpy.backend import IMPLS, NumpyBackend

    class Table(NumpyBackend):
        name = f"by-{keyed_by}"
        impls = {(P.PRIMITIVES[k] if keyed_by == "record" else str(k)): v for k, v in IMPLS.items()}

    be = Table()
    x = ember.tensor([1.0, 2.0], backend=be)
    assert (x + x).tolist() == [2.0, 4.0] and x.sum().item() == 3.0
    later = "exp" if keyed_by == "record" else P.exp  # the other kind of key
    del be.impls["exp"]
    with pytest.raises(ember.NotImplementedByBackend):
        x.exp()
    be.impls[later] = lambda a: np.exp(a) + 1
    assert x.exp().tolist() == pytest.approx([np.e + 1, np.e**2 + 1])

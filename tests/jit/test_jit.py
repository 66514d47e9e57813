"""ember.jit end to end on core tensor code: values, gradients, re-tracing, errors, state."""

import numpy as np
import pytest

import ember
from ember.jit import TraceError, is_traced


def same(a, b):
    """Bit-for-bit equal (the numpy runner calls the very functions eager mode calls)."""
    a, b = np.asarray(a.numpy()), np.asarray(b.numpy())
    assert a.shape == b.shape and a.dtype == b.dtype
    np.testing.assert_array_equal(a, b)


X = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
Y = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)

OPS = {
    "arith": lambda x, y: (x * y + 2.0) / (y.abs() + 1) - x**2,
    "unary": lambda x, y: x.exp() + x.sin() * x.cos() + y.tanh() + (x.abs() + 1).log() + (y * y).sqrt(),
    "erf-floor-sign": lambda x, y: x.erf() + x.floor() + y.sign() + x.reciprocal(),
    "compare-where": lambda x, y: ember.where((x > y) & (x < 1.0), x, y * 2) + (x == y).float(),
    "reduce": lambda x, y: x.sum(0) + y.amax(1).sum() + x.mean() - y.amin(0) + x.var(1).sum(),
    "argmax": lambda x, y: x.argmax(1) + y.argmin(0).sum(),
    "softmax": lambda x, y: x.softmax(1) + y.log_softmax(0) + x.logsumexp(1, keepdim=True),
    "movement": lambda x, y: x.reshape(6, 4).T[1:5:2] + y.permute(1, 0)[::2, 1:].flip(0).sum(),
    "pad-cat-stack": lambda x, y: (
        ember.cat([x.pad(((1, 0), (0, 2))), y.pad(((0, 1), (2, 0)))], 1).sum(0) + ember.stack([x, y]).sum()
    ),
    "indexing": lambda x, y: x[[0, 2, 3]] * y[1:4] + x[:3, 1].unsqueeze(1),
    "take-gather": lambda x, y: x.take(ember.tensor([5, 0, 3]), 1) + y.gather(1, ember.tensor([[0], [1], [2], [5]])),
    "matmul": lambda x, y: x @ y.T + (x.reshape(2, 2, 6) @ y.reshape(2, 6, 2)).reshape(4, 2).sum(),
    "casts": lambda x, y: (x * 10).long() // 3 + (y > 0).long() + x.double().sum().float(),
    "cumsum-norm": lambda x, y: x.cumsum(1) + y.norm(dim=1, keepdim=True),
    "creation": lambda x, y: x + ember.arange(6).float() + ember.ones(4, 6) * ember.eye(4, 6),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_jit_matches_eager_bit_for_bit(name):
    fn = OPS[name]
    x, y = ember.tensor(X), ember.tensor(Y)
    f = ember.jit(fn)
    same(f(x, y), fn(x, y))
    same(f(x, y), fn(x, y))  # the second call runs the planned program
    assert f.trace_count == 1


def test_gradients_through_value_and_grad_inside_jit():
    def loss(w, x):
        return ((x @ w).tanh() ** 2).mean()

    step = ember.jit(ember.value_and_grad(loss))
    w, x = ember.tensor(np.concatenate([X, Y])[:6, :3]), ember.tensor(Y)
    (v1, g1), (v2, g2) = step(w, x), ember.value_and_grad(loss)(w, x)
    same(v1, v2)
    same(g1, g2)


def test_backward_inside_jit_sets_grad_of_arguments_and_captured_leaves():
    w = ember.tensor(X[:3, :].T.copy(), requires_grad=True)  # captured from the closure

    def f(x):
        out = (x @ w).relu().sum()
        out.backward()
        return out

    x = ember.tensor(Y, requires_grad=True)
    jf = ember.jit(f)
    out = jf(x)
    jw, jx = w.grad, x.grad
    w.grad = x.grad = None
    same(out, f(x))
    same(jw, w.grad)
    same(jx, x.grad)
    assert not is_traced(jw) and jw.backend.name == "numpy"


def test_accumulating_into_existing_grads_like_eager():
    w = ember.tensor([1.0, 2.0, 3.0], requires_grad=True)

    def f(x):
        (w * x).sum().backward()

    jf = ember.jit(f)
    x = ember.tensor([1.0, 1.0, 1.0])
    jf(x)
    jf(x)  # .grad was None then set: a guard sends this call back to tracing
    jf(x)
    assert w.grad.tolist() == [3.0, 3.0, 3.0]
    assert jf.trace_count == 2


# ----------------------------------------------------------------------------- re-tracing
def test_retrace_only_for_a_new_signature():
    f = ember.jit(lambda x, k: x * k)
    a, b = ember.ones(3), ember.zeros(3)
    f(a, 2)
    f(b, 2)
    assert f.trace_count == 1
    f(ember.ones(4), 2)  # shape
    f(ember.ones(3, dtype=ember.float64), 2)  # dtype
    f(a, 3)  # a non-tensor argument's value
    assert f.trace_count == 4
    with ember.no_grad():  # grad mode
        f(a, 2)
    assert f.trace_count == 5
    f(ember.ones(4), 2)
    assert f.trace_count == 5  # cached


def test_retrace_when_a_module_switches_between_train_and_eval():
    from ember import nn

    ember.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))
    f = ember.jit(lambda m, x: m(x))
    x = ember.ones(2, 3)
    f(model, x)
    model.eval()
    out = f(model, x)
    same(out, model(x))
    assert f.trace_count == 2
    model.train()
    f(model, x)
    assert f.trace_count == 2  # back to the first signature


def test_retrace_when_a_module_in_the_closure_switches_mode():
    from ember import nn

    ember.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))
    f = ember.jit(lambda x: model(x))
    x = ember.ones(2, 3)
    f(x)
    model.eval()
    same(f(x), model(x))
    assert f.trace_count == 2


def test_captured_tensors_are_read_at_every_call():
    w = ember.tensor([1.0, 2.0])
    f = ember.jit(lambda x: x * w)
    x = ember.ones(2)
    assert f(x).tolist() == [1.0, 2.0]
    w.copy_(ember.tensor([5.0, 6.0]))
    assert f(x).tolist() == [5.0, 6.0]
    assert f.trace_count == 1


def test_ops_on_captured_tensors_alone_run_at_every_call_not_at_trace_time():
    w = ember.tensor([1.0, 2.0])
    f = ember.jit(lambda x: x + w * 2)  # w * 2 involves no argument
    x = ember.zeros(2)
    f(x)
    w.copy_(ember.tensor([10.0, 20.0]))
    assert f(x).tolist() == [20.0, 40.0]


def test_in_place_updates_of_captured_state_happen_at_every_call():
    count = ember.zeros(())
    total = ember.zeros(3)

    @ember.jit
    def accumulate(x):
        count.add_(1)
        total.copy_(total + x)
        return total * 1

    for _ in range(3):
        accumulate(ember.ones(3))
    assert count.item() == 3.0 and total.tolist() == [3.0, 3.0, 3.0]
    assert accumulate.trace_count == 1


def test_python_values_are_fixed_at_trace_time_by_design():
    scale = [2.0]
    f = ember.jit(lambda x: x * scale[0])
    x = ember.ones(1)
    f(x)
    scale[0] = 3.0
    assert f(x).item() == 2.0  # documented: Python state is read while tracing


# ----------------------------------------------------------------------------- errors
def test_shape_mismatch_raises_at_trace_time_naming_each_operands_line():
    def model(x):
        h = x.reshape(6, 4)  # the first operand is made here
        w = ember.ones(5, 2)  # and the second here
        return h @ w

    f = ember.jit(model)
    with pytest.raises(ember.ShapeError) as info:
        f(ember.ones(4, 6))
    msg = str(info.value)
    assert "(6, 4)" in msg and "(5, 2)" in msg
    assert "h = x.reshape(6, 4)" in msg and "w = ember.ones(5, 2)" in msg and "return h @ w" in msg


def test_broadcast_error_at_trace_time_names_the_lines():
    def model(x, y):
        a = x.sum(0)
        b = y.exp()
        return a + b

    with pytest.raises(ember.ShapeError) as info:
        ember.jit(model)(ember.ones(3, 4), ember.ones(5))
    msg = str(info.value)
    assert "a = x.sum(0)" in msg and "b = y.exp()" in msg and "test_jit.py" in msg


def test_data_dependent_python_values_raise_a_clear_error():
    def f(x):
        if x.sum() > 0:
            return x
        return -x

    with pytest.raises(TraceError) as info:
        ember.jit(f)(ember.ones(2))
    msg = str(info.value)
    assert "if x.sum() > 0:" in msg and "ember.where" in msg and "EMBER_JIT=0" in msg


def test_values_independent_of_the_inputs_are_known_at_trace_time():
    def f(x):
        n = int(ember.arange(5).sum().item())  # no input involved: computed while tracing
        return x * n

    assert ember.jit(f)(ember.ones(2)).tolist() == [10.0, 10.0]


def test_run_time_failures_name_the_op_and_its_line():
    f = ember.jit(lambda x, i: x.take(i, 0))
    with pytest.raises(ember.BackendError) as info:
        f(ember.ones(3), ember.tensor([7]))
    assert "take" in str(info.value) and "x.take(i, 0)" in str(info.value)


# ----------------------------------------------------------------------------- randomness
def test_random_draws_match_eager_and_advance_the_generator():
    def f(x):
        return x + ember.rand(3) + ember.randn(3)

    jf = ember.jit(f)
    x = ember.zeros(3)
    ember.manual_seed(7)
    eager = [f(x) for _ in range(3)]
    ember.manual_seed(7)
    jitted = [jf(x) for _ in range(3)]
    for a, b in zip(eager, jitted):
        same(a, b)
    assert jf.trace_count == 1
    assert len({tuple(t.tolist()) for t in jitted}) == 3  # fresh numbers at every call


def test_dropout_under_jit_draws_the_eager_mask():
    from ember.nn import functional as F

    g1, g2 = ember.Generator(3), ember.Generator(3)
    x = ember.ones(6, 5)
    jf = ember.jit(lambda x, g: F.dropout(x, 0.5, True, generator=g))
    for _ in range(2):
        same(jf(x, g2), F.dropout(x, 0.5, True, generator=g1))


# ----------------------------------------------------------------------------- plumbing
def test_ember_jit_0_turns_jit_into_the_plain_function(monkeypatch):
    monkeypatch.setenv("EMBER_JIT", "0")
    seen = []
    f = ember.jit(lambda x: seen.append(x) or x * 2)
    x = ember.ones(2)
    f(x)
    f(x)
    assert len(seen) == 2 and seen[0] is x and f.trace_count == 0


def test_nested_jit_is_inlined_into_the_outer_trace():
    inner = ember.jit(lambda x: x.exp())
    outer = ember.jit(lambda x: inner(x) + 1)
    x = ember.ones(2)
    same(outer(x), x.exp() + 1)
    assert outer.trace_count == 1 and inner.trace_count == 0


def test_outputs_keep_their_structure_and_python_values():
    f = ember.jit(lambda x: {"y": (x + 1, 3), "z": [x * 2, None, "s"]})
    out = f(ember.ones(2))
    assert out["y"][1] == 3 and out["z"][1:] == [None, "s"]
    assert out["y"][0].tolist() == [2.0, 2.0] and out["z"][0].tolist() == [2.0, 2.0]


def test_outputs_are_fresh_buffers_not_reused_by_the_next_call():
    f = ember.jit(lambda x: (x * 2).exp())
    a = f(ember.zeros(3))
    f(ember.ones(3))
    f(ember.ones(3))
    assert a.tolist() == [1.0, 1.0, 1.0]


def test_graph_dump_shows_shapes_dtypes_and_groups():
    f = ember.jit(lambda a, b: (a * b + 1.0).relu().sum(1))
    text = f.graph(ember.ones(2, 3), ember.ones(2, 3))
    assert "input[0]" in text and "f32[2,3]" in text and "mul(%0, %1)" in text
    assert "groups:" in text and "reduce(2, 3)" in text and "f32[2]" in text


def test_traced_tensor_left_in_python_state_is_made_concrete():
    store = {}

    @ember.jit
    def f(x):
        if "buf" not in store:
            store["buf"] = x * 2  # lazily created state: a traced tensor escapes
        store["buf"].copy_(store["buf"] + x)
        return store["buf"] * 1

    x = ember.ones(2)
    assert f(x).tolist() == [3.0, 3.0]
    assert not is_traced(store["buf"]) and store["buf"].tolist() == [3.0, 3.0]
    assert f(x).tolist() == [4.0, 4.0] and f(x).tolist() == [5.0, 5.0]
    assert f.trace_count == 2  # the leaking trace is used once, then traced again


def test_a_failed_trace_leaves_no_traced_values_behind():
    from ember import optim

    w = ember.ones(3, requires_grad=True)
    opt = optim.SGD([w], lr=0.1)

    def f(x):
        (w * x).sum().backward()
        opt.step()
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        ember.jit(f)(ember.ones(3))
    assert w.grad is None and w.tolist() == [1.0, 1.0, 1.0]
    assert type(opt.param_groups[0]["lr"]) is float and opt.param_groups[0]["lr"] == 0.1


def test_freezing_a_captured_parameter_retraces():
    w = ember.ones(3, requires_grad=True)
    b = ember.zeros(3, requires_grad=True)

    @ember.jit
    def f(x):
        (w * x + b).sum().backward()

    f(ember.ones(3))
    w.grad = b.grad = None
    w.requires_grad_(False)
    f(ember.ones(3))
    assert w.grad is None and b.grad.tolist() == [1.0, 1.0, 1.0]
    assert f.trace_count == 2


def test_replacing_a_layer_retraces():
    from ember import nn

    ember.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 2))
    f = ember.jit(lambda m, x: m(x))
    x = ember.ones(1, 3)
    f(model, x)
    model[0] = nn.Linear(3, 2)
    same(f(model, x), model(x))
    assert f.trace_count == 2


def test_other_threads_run_eagerly_while_a_trace_is_active():
    import threading

    started, release, results = threading.Event(), threading.Event(), []

    def worker():  # e.g. a data loader's transform running ember ops
        started.wait()
        a = ember.ones(3) * 2
        a.copy_(a + 1)
        results.append((a.tolist(), is_traced(a)))
        release.set()

    t = threading.Thread(target=worker)
    t.start()

    @ember.jit
    def f(x):
        started.set()
        release.wait(5)  # trace while the other thread works
        return x + 1

    assert f(ember.zeros(2)).tolist() == [1.0, 1.0]
    t.join()
    assert results == [([3.0, 3.0, 3.0], False)]


def test_dtype_error_at_trace_time_names_the_lines():
    def f(x):
        idx = x[:2] * 1.5  # float indices
        return x.take(idx, 0)

    with pytest.raises(ember.DTypeError) as info:
        ember.jit(f)(ember.ones(4))
    msg = str(info.value)
    assert "indices must be integers" in msg and "idx = x[:2] * 1.5" in msg and "return x.take(idx, 0)" in msg


def test_importing_ember_jit_does_not_import_numpy():
    import subprocess
    import sys

    code = "import sys, ember, ember.jit; assert 'numpy' not in sys.modules, 'numpy imported'"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr


def test_jit_as_a_method_decorator_keys_on_the_instances_modules():
    from ember import nn

    class Runner:
        def __init__(self):
            ember.manual_seed(0)
            self.model = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))

        @ember.jit
        def forward(self, x):
            return self.model(x)

    r, x = Runner(), ember.ones(2, 3)
    r.forward(x)
    r.model.eval()
    same(r.forward(x), r.model(x))
    assert r.forward.trace_count == 2 and Runner().forward.trace_count == 0


def test_functions_returning_nothing_or_an_empty_tuple():
    w = ember.zeros(2)
    f = ember.jit(lambda x: [w.copy_(w + x), None][1])
    g = ember.jit(lambda x: ())
    assert f(ember.ones(2)) is None and g(ember.ones(2)) == ()
    assert w.tolist() == [1.0, 1.0]


def test_a_modules_key_walks_its_tree_as_modules_parameters_and_buffers_do():
    from ember import nn
    from ember.jit.api import _module_walk

    shared = nn.Linear(3, 3)
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Sequential(shared, nn.ReLU(), shared), nn.Linear(4, 2))
    model.eval()
    model[2].train()
    flags, params, bufs = _module_walk(model)
    assert flags == tuple(m.training for m in model.modules())
    assert params == tuple(map(id, model.parameters())) and len(params) == 8  # the shared layer's once
    assert bufs == tuple(map(id, model.buffers())) and bufs

"""Multi-tensor optimizer steps: a backend that declares ``sgd_step_foreach`` (...) gets one
call per param group and step from ``Optimizer.step()``, and the result is what the
per-parameter path computes. The kernels here are real NumPy ones that update their inputs in
place, the multi-tensor ones a loop over the per-parameter ones (so the two paths must agree
to the bit, and any difference is the optimizer's plumbing: state creation, step counts,
where results go)."""

import numpy as np
import pytest
from optim_helpers import assert_histories_close, batch, initial, train
from test_optim_fused import GOOD, FusedNumpy

import ember
from ember.backend import BackendInfo
from ember.conformance.optimizers import fused_mismatches
from ember.optim import functional
from ember.registry import REGISTRY


def _foreach(kernel):
    def run(params, grads, *states, **hyper):
        outs = [kernel(p, g, *s, **hyper) for p, g, *s in zip(params, grads, *states, strict=True)]
        return tuple(list(column) for column in zip(*outs))

    return run


class ForeachNumpy(FusedNumpy):
    """Per-parameter kernels plus their multi-tensor forms; counts calls and in-place copies."""

    def __init__(self, name, kernels, foreach=True):
        self.name, self.assigns = name, 0
        table = dict(kernels)
        if foreach:
            table.update({f"{rule}_foreach": _foreach(k) for rule, k in kernels.items()})
        super().__init__(table)

    def assign(self, dst, src):
        self.assigns += 1
        super().assign(dst, src)


@pytest.fixture(scope="module")
def backends():
    made = {
        "multi": ForeachNumpy("numpy-foreach-test", GOOD),
        "single": ForeachNumpy("numpy-single-test", GOOD, foreach=False),
    }
    for b in made.values():
        ember.register_backend(BackendInfo(b.name, lambda b=b: b))
    yield made
    for b in made.values():
        for table in (REGISTRY.infos, REGISTRY.origin, REGISTRY.loaded):
            table.pop(b.name, None)


CONFIGS = [
    ("SGD", dict(lr=0.05)),
    ("SGD", dict(lr=0.05, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.2, maximize=True)),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.01, amsgrad=True, weight_decay=0.1)),
    ("AdamW", dict(lr=0.01, weight_decay=0.1)),
    ("AdamW", dict(lr=0.01, amsgrad=True, maximize=True)),
    ("RMSprop", dict(lr=0.005)),
    ("RMSprop", dict(lr=0.005, centered=True, momentum=0.9, weight_decay=0.1)),
]
RULE = {"SGD": "sgd_step", "Adam": "adam_step", "AdamW": "adam_step", "RMSprop": "rmsprop_step"}
IDS = [f"{n}-{'-'.join(k for k in kw if k != 'lr') or 'plain'}" for n, kw in CONFIGS]


def _run(backend, name, kw, steps=6):
    init, (x, y) = initial(), batch()
    with ember.backend(backend.name):
        params = [ember.tensor(a, requires_grad=True) for a in init]
        buffers = [p._data for p in params]
        opt = getattr(ember.optim, name)(params, **kw)
        before = dict(backend.calls)
        history = train(ember, params, opt, steps, x, y, -1.0 if kw.get("maximize") else 1.0)
        assert all(p._data is b for p, b in zip(params, buffers)), "parameters keep their buffers"
    calls = {k: v - before.get(k, 0) for k, v in backend.calls.items()}
    return history, calls, opt


@pytest.mark.parametrize("name, kw", CONFIGS, ids=IDS)
def test_foreach_path_is_taken_and_matches_the_per_parameter_path(backends, name, kw):
    rule = RULE[name]
    multi, single = backends["multi"], backends["single"]
    assigns = multi.assigns
    got, calls, opt = _run(multi, name, kw)
    want, calls_single, opt_single = _run(single, name, kw)
    # one call per step for the whole group; never the per-parameter kernel
    assert calls.get(rule + "_foreach") == 6 and not calls.get(rule)
    assert calls_single.get(rule) == 6 * len(initial())
    # in-place kernels: nothing copied back into parameters or state
    assert multi.assigns == assigns
    for step_got, step_want in zip(got, want):
        for g, w in zip(step_got, step_want):
            np.testing.assert_array_equal(g, w)
    for p, q in zip(opt.param_groups[0]["params"], opt_single.param_groups[0]["params"]):
        s, t = opt.state[p], opt_single.state[q]
        assert sorted(s) == sorted(t)
        for k in s:
            if isinstance(s[k], ember.Tensor):
                np.testing.assert_array_equal(s[k].numpy(), t[k].numpy())
            else:
                assert s[k] == t[k]


@pytest.mark.parametrize("name, kw", CONFIGS, ids=IDS)
def test_the_reference_foreach_rules_equal_the_per_parameter_rules(name, kw):
    """On the numpy backend (no fused ops) run_foreach loops over run_step: compare the
    multi-tensor references directly with the rules, to the bit."""
    rule = RULE[name]
    hyper = dict(kw)
    if name == "Adam" or name == "AdamW":
        hyper.update(step=3, decoupled_weight_decay=name == "AdamW")
    rng = np.random.default_rng(0)
    shapes = [(4, 8), (8,), (3,)]

    def t(shape, positive=False):
        a = rng.standard_normal(shape).astype(np.float32)
        return ember.tensor(np.abs(a) + 1 if positive else a)

    params, grads = [t(s) for s in shapes], [t(s) for s in shapes]
    if rule == "sgd_step":
        states = [[t(shapes[0]), None, t(shapes[2])] if kw.get("momentum") else [None] * 3]
    elif rule == "adam_step":
        states = [
            [t(s) for s in shapes],
            [t(s, True) for s in shapes],
            [t(s, True) for s in shapes] if kw.get("amsgrad") else [None] * 3,
        ]
    else:
        states = [
            [t(s, True) for s in shapes],
            [t(s) * 0.1 for s in shapes] if kw.get("centered") else [None] * 3,
            [t(s) for s in shapes] if kw.get("momentum") else [None] * 3,
        ]
    with ember.no_grad():
        many = functional.FOREACH[rule + "_foreach"](params, grads, *states, **hyper)
        for k in range(len(shapes)):
            one = functional.REFERENCE[rule](params[k], grads[k], *(s[k] for s in states), **hyper)
            for column, value in zip(many, one):
                assert (column[k] is None) == (value is None)
                if value is not None:
                    np.testing.assert_array_equal(column[k].numpy(), value.numpy())


def test_one_call_per_param_group_and_step_count(backends):
    multi = backends["multi"]
    init = initial()
    with ember.backend(multi.name):
        params = [ember.tensor(a, requires_grad=True) for a in init]
        opt = ember.optim.Adam([{"params": params[:2]}, {"params": params[2:], "lr": 0.1}], lr=0.01)
        before = multi.calls.get("adam_step_foreach", 0)
        for p in params:
            p.grad = ember.ones(*p.shape)
        opt.step()
        assert multi.calls["adam_step_foreach"] - before == 2  # one per group
        params[0].grad = None  # skips a step: its count lags
        opt.step()
        for p in params:
            p.grad = ember.ones(*p.shape)
        before = multi.calls["adam_step_foreach"]
        opt.step()
        # group 0 now has step counts 2 and 3: two calls; group 1 one
        assert multi.calls["adam_step_foreach"] - before == 3
        assert [opt.state[p]["step"] for p in params] == [2, 3, 3, 3]


def test_steps_with_skipped_parameters_match_the_per_parameter_path(backends):
    results = []
    for backend in (backends["multi"], backends["single"]):
        with ember.backend(backend.name):
            ps = [ember.tensor(a, requires_grad=True) for a in initial()]
            opt = ember.optim.Adam(ps, lr=0.01, amsgrad=True)
            for step in range(5):
                for k, p in enumerate(ps):
                    p.grad = (
                        None if (step + k) % 3 == 0 else ember.tensor(np.full(p.shape, 0.1 * (k + step), np.float32))
                    )
                opt.step()
            results.append([p.numpy().copy() for p in ps])
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


def test_the_per_parameter_path_serves_what_the_backend_does_not_declare(backends):
    """A subclass with its own _update, and parameters on a backend without the op."""
    multi = backends["multi"]

    class Halving(ember.optim.SGD):
        def _update(self, param, grad, state, group):
            param.copy_(param * 0.5)

    with ember.backend(multi.name):
        w = ember.tensor([4.0], requires_grad=True)
        w.grad = ember.tensor([1.0])
        before = dict(multi.calls)
        Halving([w], lr=0.1).step()
        assert w.tolist() == [2.0] and multi.calls == before
    a = ember.tensor([1.0], requires_grad=True, backend="numpy")
    b = ember.tensor([1.0], requires_grad=True, backend=multi.name)
    a.grad, b.grad = ember.tensor([1.0], backend="numpy"), ember.tensor([1.0], backend=multi.name)
    before = multi.calls.get("sgd_step_foreach", 0)
    ember.optim.SGD([a, b], lr=0.5).step()
    assert a.tolist() == [0.5] and b.tolist() == [0.5]
    assert multi.calls["sgd_step_foreach"] - before == 1  # b only; a took numpy's path


def test_a_bad_gradient_shape_stops_the_step_before_any_update(backends):
    with ember.backend(backends["multi"].name):
        a, b = ember.ones(2, requires_grad=True), ember.ones(3, requires_grad=True)
        a.grad, b.grad = ember.ones(2), ember.ones(4)
        with pytest.raises(ember.ShapeError, match=r"parameter 1 of param group 0 has shape \(3,\) but its .grad"):
            ember.optim.SGD([a, b], lr=0.5).step()
        assert a.tolist() == [1.0, 1.0]


def test_jit_records_the_per_parameter_rules(backends):
    """While ember.jit traces, the multi-tensor kernel is not called (the graph records the
    per-parameter decomposition, which the jit compiler fuses); the jitted steps match."""
    multi = backends["multi"]
    init, (x, y) = initial(), batch()
    histories = []
    for jit in (False, True):
        with ember.backend(multi.name):
            params = [ember.tensor(a, requires_grad=True) for a in init]
            opt = ember.optim.SGD(params, lr=0.05, momentum=0.9)
            xs, ys = ember.tensor(x), ember.tensor(y)

            def step():
                opt.zero_grad()
                w1, b1, w2, b2 = params
                loss = (((xs @ w1 + b1).tanh() @ w2 + b2 - ys) ** 2).mean()
                loss.backward()
                opt.step()
                return loss

            run = ember.jit(step) if jit else step
            before = multi.calls.get("sgd_step_foreach", 0)
            for _ in range(4):
                run()
            if jit:
                assert multi.calls.get("sgd_step_foreach", 0) == before
            histories.append([[p.numpy().copy() for p in params]])
    assert_histories_close(histories[1], histories[0], rtol=1e-5, atol=1e-6)


def test_fused_mismatches_checks_the_foreach_kernels(backends):
    assert fused_mismatches(backends["multi"]) == []

    def forgets_the_last(params, grads, bufs, **hyper):  # a kernel that skips an entry
        out = _foreach(GOOD["sgd_step"])(params[:-1], grads[:-1], bufs[:-1], **hyper)
        return out[0] + [params[-1]], out[1] + [bufs[-1]]

    broken = FusedNumpy({"sgd_step_foreach": forgets_the_last})
    problems = fused_mismatches(broken)
    assert problems and all(p.startswith("sgd_step_foreach(") for p in problems)
    assert any("output 0 entry 2" in p and "differs from the reference" in p for p in problems)

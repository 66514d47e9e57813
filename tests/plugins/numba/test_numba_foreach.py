"""ember-numba's multi-tensor optimizer steps (foreach.py): one parallel kernel for a whole
param group, bit for bit what the per-parameter kernels compute, in the parameters' own
buffers; entries the kernel does not cover go through the per-parameter op."""

import numpy as np
import pytest

pytest.importorskip("numba", reason="numba is not installed: pip install ./plugins/numba")
pytest.importorskip("ember_numba", reason="ember-numba is not installed: pip install ./plugins/numba")

from foreach_helpers import FOREACH, assert_matches, group, launches_expected  # noqa: E402

import ember  # noqa: E402
from ember import fused  # noqa: E402
from ember.conformance.optimizers import CASES, fused_mismatches  # noqa: E402

pytestmark = pytest.mark.usefixtures("compile_at_once")

#: a weight above one task (CHUNK elements), a bias, a matrix split unevenly, a scalar-sized tail
SHAPES = [(300, 257), (257,), (129, 130), (1,)]


def test_the_backend_declares_them(backend):
    assert set(FOREACH) <= fused.declared(backend)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("rule", ["sgd_step", "adam_step", "rmsprop_step"])
def test_bit_for_bit_the_per_parameter_kernels_in_place(backend, rng, rule, dtype, launches):
    for hyper in CASES[rule]:
        params, grads, states, extra, want = group(backend.fused_impls, rule, hyper, SHAPES, dtype, rng)
        del launches[:]
        got = backend.fused_impls[rule + "_foreach"](params, grads, *map(list, zip(*states)), **hyper, **extra)
        assert len(launches) == launches_expected(rule, hyper), hyper  # not one per parameter
        assert_matches(got, want, params, states, f"{rule} {hyper}")


def test_conformance_helper_finds_no_mismatch(backend):
    assert fused_mismatches(backend, names=list(FOREACH)) == []


def test_entries_the_kernel_cannot_take_use_the_per_parameter_op(backend, rng, launches):
    from ember.optim.functional import sgd_step

    plain = rng.standard_normal((40, 30)).astype(np.float32)
    frozen = rng.standard_normal(64).astype(np.float32)
    frozen.flags.writeable = False
    params = [
        plain,
        rng.standard_normal((30, 40)).astype(np.float32).T,  # not contiguous
        rng.standard_normal(64).astype(np.float16),
        frozen,
        np.zeros((0, 3), np.float32),
    ]
    grads = [rng.standard_normal(p.shape).astype(p.dtype) for p in params]
    bufs = [rng.standard_normal(p.shape).astype(p.dtype) for p in params]
    inputs = [(p.copy(), g, b.copy()) for p, g, b in zip(params, grads, bufs)]
    del launches[:]
    new_params, new_bufs = backend.fused_impls["sgd_step_foreach"](params, grads, bufs, lr=0.1, momentum=0.9)
    from ember_numba import foreach

    assert new_params[0] is plain and new_bufs[0] is bufs[0]
    assert [fn for fn in launches if fn in foreach._MODULES.values()] == launches[:1]  # one multi-tensor launch
    for k, (p, g, b) in enumerate(inputs):
        with ember.no_grad():
            want = sgd_step(*(ember.tensor(a, backend="numpy") for a in (p, g, b)), lr=0.1, momentum=0.9)
        tol = 1e-3 if p.dtype == np.float16 else 1e-6
        np.testing.assert_allclose(new_params[k], want[0].numpy(), rtol=tol, atol=tol)
        np.testing.assert_allclose(new_bufs[k], want[1].numpy(), rtol=tol, atol=tol)
    assert not frozen.flags.writeable and np.array_equal(frozen, inputs[3][0])  # a copy was updated


def _train(name, make, foreach, steps=4):
    """A few steps of a small MLP on the numba backend, with or without the foreach ops."""
    from ember import models

    backend = ember.get_backend("numba")
    declared = fused.declared(backend)
    fused._DECLARED[backend] = declared if foreach else declared - set(FOREACH)
    try:
        rng = np.random.default_rng(0)
        x = ember.tensor(rng.standard_normal((32, 20)).astype(np.float32), backend="numba")
        y = ember.tensor(rng.integers(0, 5, 32), backend="numba")
        ember.manual_seed(0)
        with ember.backend("numba"):
            model = models.MLP(20, (30, 30), 5)
        opt = make(model.parameters())
        for _ in range(steps):
            loss = ember.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return [p.numpy().copy() for p in model.parameters()]
    finally:
        fused._DECLARED[backend] = declared


@pytest.mark.parametrize(
    "make",
    [
        lambda ps: ember.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3),
        lambda ps: ember.optim.Adam(ps, lr=0.01),
        lambda ps: ember.optim.AdamW(ps, lr=0.01, amsgrad=True),
        lambda ps: ember.optim.RMSprop(ps, lr=0.01, centered=True, momentum=0.5),
    ],
    ids=["sgd-nesterov", "adam", "adamw-amsgrad", "rmsprop"],
)
def test_training_with_the_foreach_op_matches_the_per_parameter_path(make, monkeypatch):
    calls = []
    backend = ember.get_backend("numba")
    for name in FOREACH:
        real = backend.fused_impls[name]
        monkeypatch.setitem(
            backend.fused_impls, name, lambda *a, _real=real, _name=name, **k: calls.append(_name) or _real(*a, **k)
        )
    got = _train("numba", make, foreach=True)
    assert len(calls) == 4  # one call per step for the six tensors
    want = _train("numba", make, foreach=False)
    assert len(calls) == 4
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_doctests():
    import doctest

    from ember_numba import foreach

    result = doctest.testmod(foreach, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0

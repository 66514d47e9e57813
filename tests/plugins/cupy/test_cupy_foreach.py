"""ember-cupy's multi-tensor optimizer steps (multi_tensor.py, the ``*_foreach`` fused ops):
checked on the host harness against the per-parameter kernels (bit for bit: the same
``__host__ __device__`` update functions), compiled for sm_90 with nvcc, and — on a GPU —
run without a host synchronisation. Without a GPU the ``gpu`` tests skip with the driver's
reason."""

import numpy as np
import pytest
from foreach_helpers import FOREACH, assert_matches, group, launches_expected

import ember
from ember.conformance.optimizers import CASES, fused_mismatches
from ember_cupy import catalog, kernels, multi_tensor
from ember_cupy.fused_ops import adam_constants, rmsprop_constants, sgd_constants

SHAPES = [(30, 17), (17,), (4, 5, 6), (1,)]
CONSTANTS = {
    "sgd_step": (sgd_constants, multi_tensor.SGD),
    "adam_step": (adam_constants, multi_tensor.ADAM),
    "rmsprop_step": (rmsprop_constants, multi_tensor.RMSPROP),
}


def _flags(rule, hyper, first=False):
    make, defaults = CONSTANTS[rule]
    extra = {"first": first} if rule == "sgd_step" else {}
    return make(**{**defaults, "lr": 0.1, **({"step": 5} if rule == "adam_step" else {}), **hyper, **extra})[0]


def _kernels_of_the_cases():
    """Every multi-tensor kernel the tests below launch (built with one nvcc run)."""
    ks = []
    sizes = [int(np.prod(s)) for s in SHAPES]
    for dt in ("float32", "float64"):
        for rule in CONSTANTS:
            for hyper in CASES[rule]:
                if rule == "sgd_step" and hyper.get("momentum"):
                    ks.append(multi_tensor._kernel(rule, dt, tuple(sizes[:1] + sizes[2:]), _flags(rule, hyper)))
                    ks.append(multi_tensor._kernel(rule, dt, (sizes[1],), _flags(rule, hyper, first=True)))
                else:
                    ks.append(multi_tensor._kernel(rule, dt, tuple(sizes), _flags(rule, hyper)))
    return ks


@pytest.fixture(scope="module")
def built(host):
    host.rt.prebuild(_kernels_of_the_cases())
    return host


def test_the_backend_declares_them(host):
    assert set(FOREACH) <= set(host.capabilities().fused)
    assert set(FOREACH) <= set(host.fused_impls)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("rule", ["sgd_step", "adam_step", "rmsprop_step"])
def test_bit_for_bit_the_per_parameter_kernels_in_one_launch(built, rng, rule, dtype):
    host = built
    for hyper in CASES[rule]:
        params, grads, states, extra, want = group(host.fused_impls, rule, hyper, SHAPES, dtype, rng)
        before = host.rt.launches
        got = host.fused_impls[rule + "_foreach"](params, grads, *map(list, zip(*states)), **hyper, **extra)
        assert host.rt.launches - before == launches_expected(rule, hyper), hyper
        assert_matches(got, want, params, states, f"{rule} {hyper}")


def test_conformance_helper_finds_no_mismatch(host):
    assert fused_mismatches(host, names=list(FOREACH)) == []


def test_more_tensors_than_one_launch_takes(host, rng):
    n = multi_tensor.PER_LAUNCH + 6
    params = [rng.standard_normal(3).astype(np.float32) for _ in range(n)]
    grads = [rng.standard_normal(3).astype(np.float32) for _ in range(n)]
    want = [p - np.float32(0.5) * g for p, g in zip(params, grads)]
    host.rt.prebuild(
        [
            multi_tensor._kernel("sgd_step", "float32", (3,) * size, _flags("sgd_step", {}))
            for size in (multi_tensor.PER_LAUNCH, 6)
        ]
    )
    before = host.rt.launches
    out, bufs = host.fused_impls["sgd_step_foreach"](params, grads, [None] * n, lr=0.5)
    assert host.rt.launches - before == 2 and bufs == [None] * n
    for got, w in zip(out, want):
        np.testing.assert_allclose(got, w, rtol=1e-6)


def test_entries_the_kernel_cannot_take_use_the_per_parameter_op(built, rng):
    host = built
    from ember.optim.functional import sgd_step

    base = rng.standard_normal((30, 17)).astype(np.float32)
    params = [
        base,
        rng.standard_normal((17, 30)).astype(np.float32).T,  # not contiguous
        rng.standard_normal(5).astype(np.float16),
    ]
    grads = [rng.standard_normal(p.shape).astype(p.dtype) for p in params]
    bufs = [rng.standard_normal(p.shape).astype(p.dtype) for p in params]
    inputs = [(p.copy(), g, b.copy()) for p, g, b in zip(params, grads, bufs)]
    hyper = dict(lr=0.1, momentum=0.9, dampening=0.3)
    host.rt.prebuild([multi_tensor._kernel("sgd_step", "float32", (510,), _flags("sgd_step", hyper))])
    new_params, new_bufs = host.fused_impls["sgd_step_foreach"](params, grads, bufs, **hyper)
    assert new_params[0] is base and new_bufs[0] is bufs[0]
    for k, (p, g, b) in enumerate(inputs):
        with ember.no_grad():
            want = sgd_step(*(ember.tensor(a, backend="numpy") for a in (p, g, b)), **hyper)
        tol = 2e-3 if p.dtype == np.float16 else 1e-6
        np.testing.assert_allclose(new_params[k], want[0].numpy(), rtol=tol, atol=tol)
        np.testing.assert_allclose(new_bufs[k], want[1].numpy(), rtol=tol, atol=tol)
    # two parameters over one array would race in one launch: all of them go one by one
    shared = np.zeros(8, np.float32)
    before = host.rt.launches
    out, _ = host.fused_impls["sgd_step_foreach"](
        [shared[:4], shared[2:6]], [np.ones(4, np.float32)] * 2, [None, None], lr=1.0
    )
    assert host.rt.launches - before == 2
    np.testing.assert_array_equal(shared, [-1, -1, -2, -2, -1, -1, 0, 0])


def test_optimizer_step_is_one_launch_per_group(host, rng):
    import ember.nn as nn
    import ember.nn.functional as F

    with ember.backend("cupy-host"):
        ember.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
        opt = ember.optim.AdamW(model.parameters(), lr=0.01)
        x, y = ember.tensor(rng.standard_normal((8, 6)).astype(np.float32)), ember.tensor(rng.integers(0, 3, 8))
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        step_kernels = [k for k in host.rt.seen.values() if "_multi" in k.name]
        calls = {k.key: host.rt.calls.get(k.key, 0) for k in step_kernels}
        opt.step()
        multi = [
            k for k in host.rt.seen.values() if "_multi" in k.name and host.rt.calls.get(k.key, 0) > calls.get(k.key, 0)
        ]
        assert len(multi) == 1 and multi[0].name.startswith("ember_adam_float32")
        assert host.rt.calls[multi[0].key] - calls.get(multi[0].key, 0) == 1


def test_every_multi_tensor_kernel_here_compiles_for_sm90(built):
    """The kernels these tests launched, built for the H200 by nvcc (no GPU needed)."""
    from ember_cupy import host as host_module

    if host_module.nvcc() is None:
        pytest.skip("nvcc not found on PATH")
    ks = list(
        {k.key: k for k in _kernels_of_the_cases() + [k for k in built.rt.seen.values() if "_multi" in k.name]}.values()
    )
    assert len(ks) >= 20
    results = catalog.check(ks, "sm_90")
    assert all(r["ok"] for r in results), [r["log"] for r in results if not r["ok"]]
    assert not [r["name"] for r in results if r["spill_bytes"]]


def test_library_catalog_lists_every_rule_in_multi_tensor_form():
    names = {k.name for k in catalog.library_kernels() if "_multi" in k.name}
    for rule in ("adam", "sgd", "rmsprop"):
        assert any(n.startswith(f"ember_{rule}_") for n in names), rule
    # SGD's first momentum step (no buffer yet) has its own kernel
    first = kernels.multi_step_kernel("sgd_step", "float32", [5, 7], **_flags("sgd_step", {"momentum": 0.9}, True))
    assert first.key in {k.key for k in catalog.library_kernels()}


# ----------------------------------------------------------------------------- on a GPU
def test_an_eager_training_step_never_synchronizes_on_the_gpu(gpu, rng):
    """Forward, cross-entropy (its target check deferred), backward and a multi-tensor Adam
    step: CuPy raises DeviceSynchronized on any host synchronisation."""
    import cupyx

    import ember.nn as nn
    import ember.nn.functional as F

    with ember.backend("cupy"):
        ember.manual_seed(0)
        model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
        opt = ember.optim.Adam(model.parameters(), lr=1e-3)
        x = ember.tensor(rng.standard_normal((16, 64)).astype(np.float32))
        y = ember.tensor(rng.integers(0, 10, 16))

        def step():
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss

        step()
        before = gpu.rt.launches
        with cupyx.allow_synchronize(False):
            for _ in range(3):
                loss = step()
        assert np.isfinite(loss.item())
        bad = ember.tensor(rng.integers(10, 12, 16))
        with cupyx.allow_synchronize(False):
            loss = F.cross_entropy(model(x), bad)  # no sync here either: the check waits
        with pytest.raises(ValueError, match="out of range for 10 classes"):
            loss.item()
        assert gpu.rt.launches > before


def test_foreach_steps_match_the_rules_on_the_gpu(gpu):
    assert fused_mismatches(gpu, names=list(FOREACH)) == []


def test_doctests():
    import doctest

    result = doctest.testmod(multi_tensor, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0

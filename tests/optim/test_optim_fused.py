"""The fused path: a backend that declares sgd_step/adam_step/rmsprop_step runs its own
kernels (here real in-place NumPy kernels, written independently of the reference rules), the
optimizers take them, and fused_mismatches compares them with the reference decompositions."""

import numpy as np
import pytest
from optim_helpers import assert_histories_close, batch, initial, train

import ember
from ember.backend import BackendInfo
from ember.backends.numpy.backend import NumpyBackend
from ember.conformance.optimizers import fused_mismatches
from ember.optim.functional import REFERENCE


def np_sgd(p, g, buf, *, lr, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0, maximize=False):
    d = -g if maximize else g.copy()
    d += weight_decay * p
    if momentum:
        if buf is None:
            buf = d.copy()
        else:
            buf *= momentum
            buf += (1 - dampening) * d
        d = d + momentum * buf if nesterov else buf
    p -= lr * d
    return p, buf


def np_adam(
    p,
    g,
    m,
    v,
    vmax,
    *,
    step,
    lr,
    beta1=0.9,
    beta2=0.999,
    eps=1e-8,
    weight_decay=0.0,
    amsgrad=False,
    maximize=False,
    decoupled_weight_decay=False,
):
    g = -g if maximize else g
    if decoupled_weight_decay:
        p *= 1 - lr * weight_decay
    else:
        g = g + weight_decay * p
    m += (1 - beta1) * (g - m)
    v *= beta2
    v += (1 - beta2) * g * g
    if amsgrad:
        np.maximum(vmax, v, out=vmax)
    denom = np.sqrt(vmax if amsgrad else v) / np.sqrt(1 - beta2**step) + eps
    p -= lr / (1 - beta1**step) * m / denom
    return p, m, v, vmax


def np_rmsprop(
    p, g, sq, gavg, buf, *, lr, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False, maximize=False
):
    g = (-g if maximize else g) + weight_decay * p
    sq *= alpha
    sq += (1 - alpha) * g * g
    var = sq
    if centered:
        gavg += (1 - alpha) * (g - gavg)
        var = sq - gavg * gavg
    avg = np.sqrt(var) + eps
    if momentum > 0:
        buf *= momentum
        buf += g / avg
        p -= lr * buf
    else:
        p -= lr * g / avg
    return p, sq, gavg, buf


class FusedNumpy(NumpyBackend):
    """The NumPy backend plus fused optimizer kernels; counts the calls it gets."""

    name = "numpy-fused-optim-test"

    def __init__(self, kernels):
        self.calls = {}
        self.fused_impls = {name: self._counted(name, k) for name, k in kernels.items()}

    def _counted(self, name, kernel):
        def run(*args, **kw):
            self.calls[name] = self.calls.get(name, 0) + 1
            return kernel(*args, **kw)

        return run

    def capabilities(self):
        caps = super().capabilities()
        caps.fused = frozenset(self.fused_impls)
        return caps


GOOD = {"sgd_step": np_sgd, "adam_step": np_adam, "rmsprop_step": np_rmsprop}


@pytest.fixture(scope="module")
def fused():
    backend = FusedNumpy(GOOD)
    ember.register_backend(BackendInfo(backend.name, lambda: backend))
    return backend


@pytest.mark.parametrize(
    "name, kw",
    [
        ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1)),
        ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.2, maximize=True)),
        ("Adam", dict(lr=0.01, amsgrad=True, weight_decay=0.1)),
        ("AdamW", dict(lr=0.01, maximize=True)),
        ("RMSprop", dict(lr=0.005, centered=True, momentum=0.9)),
    ],
)
def test_optimizers_take_the_fused_kernel_and_agree_with_the_reference(fused, name, kw):
    init, (x, y) = initial(), batch()
    histories = []
    for backend in ("numpy", fused.name):
        with ember.backend(backend):
            params = [ember.tensor(a, requires_grad=True) for a in init]
            buffers = [p._data for p in params]
            opt = getattr(ember.optim, name)(params, **kw)
            sign = -1.0 if kw.get("maximize") else 1.0
            before = dict(fused.calls)
            histories.append(train(ember, params, opt, 10, x, y, sign))
            assert all(p._data is b for p, b in zip(params, buffers))
    rule = {"SGD": "sgd_step", "Adam": "adam_step", "AdamW": "adam_step", "RMSprop": "rmsprop_step"}[name]
    assert fused.calls[rule] - before.get(rule, 0) == 10 * len(init)
    assert_histories_close(*histories, rtol=2e-5, atol=1e-6)


def test_fused_mismatches_passes_good_kernels_and_catches_a_broken_one(fused):
    assert fused_mismatches(fused) == []

    def no_bias_correction(p, g, m, v, vmax, *, step, **kw):
        return np_adam(p, g, m, v, vmax, step=10**6, **kw)  # forgets the bias correction

    broken = FusedNumpy({"adam_step": no_bias_correction})
    problems = fused_mismatches(broken)
    assert problems and all(line.startswith("adam_step(") for line in problems)
    assert "output 0" in problems[0] and "differs from the reference" in problems[0]

    def zero_first_buffer(p, g, buf, **kw):  # starts momentum from zeros, not from the gradient
        return np_sgd(p, g, np.zeros_like(p) if buf is None and kw.get("momentum") else buf, **kw)

    problems = fused_mismatches(FusedNumpy({"sgd_step": zero_first_buffer}))
    assert problems and all("dampening=0.3" in line and "with inputs [2] None" in line for line in problems)


def test_every_rule_has_cases_and_is_known_to_ember_fused():
    from ember.conformance import fused_ops

    FUSED = fused_ops()
    from ember.conformance.optimizers import CASES

    assert set(REFERENCE) <= set(FUSED) and set(CASES) == set(REFERENCE)

"""Tier 5 — layers. For each ember.nn layer on the backend: the output has the right shape,
the layer has PyTorch's parameter count, its output matches the same layer (same weights) on
the NumPy reference, one SGD step lowers a loss, and a state_dict taken to the host and loaded
into a fresh layer gives the same output (the checkpoint round trip). Parameters and their
gradients keep float32 through the step (and the watch checks every primitive's output dtype
against its rule on the way).

Each layer's forward and backward pass is also run twice from the same state: the two runs
must compute the same bits at every primitive (else the test names the first primitive whose
outputs differ: "nondeterministic"), and its forward pass under ember.jit must match eager
mode's within float32 rounding."""

from dataclasses import dataclass

import numpy as np
import pytest

import ember
from ember.conformance.tolerances import mismatch
from ember.conformance.watch import run_twice

EMBER_TIER = 5


@dataclass
class Layer:
    make: object  # nn -> module
    inputs: object  # rng -> list of numpy arrays
    out_shape: tuple
    params: int  # PyTorch's count for the same constructor arguments
    call: object = None  # (module, *tensors) -> output tensor; default module(*tensors)


def _x(*shape):
    return lambda rng: [rng.standard_normal(shape).astype(np.float32)]


def _first(module, *xs):
    out = module(*xs)
    return out[0]


E = 8
LAYERS = {
    "Linear": Layer(lambda nn: nn.Linear(6, 4), _x(5, 6), (5, 4), 6 * 4 + 4),
    "Conv2d": Layer(lambda nn: nn.Conv2d(3, 4, 3, stride=1, padding=1), _x(2, 3, 6, 6), (2, 4, 6, 6), 4 * 3 * 9 + 4),
    "BatchNorm2d": Layer(lambda nn: nn.BatchNorm2d(3), _x(4, 3, 5, 5), (4, 3, 5, 5), 2 * 3),
    "LayerNorm": Layer(lambda nn: nn.LayerNorm(6), _x(4, 6), (4, 6), 2 * 6),
    "Embedding": Layer(
        lambda nn: nn.Embedding(10, 4), lambda rng: [rng.integers(0, 10, (3, 5)).astype(np.int64)], (3, 5, 4), 10 * 4
    ),
    "LSTM": Layer(
        lambda nn: nn.LSTM(4, 5, batch_first=True), _x(2, 3, 4), (2, 3, 5), 4 * 5 * (4 + 5) + 2 * 4 * 5, call=_first
    ),
    "MultiheadAttention": Layer(
        lambda nn: nn.MultiheadAttention(E, 2, batch_first=True),
        _x(2, 3, E),
        (2, 3, E),
        4 * E * E + 4 * E,
        call=lambda m, x: m(x, x, x)[0],
    ),
}


def _nn():
    try:
        from ember import nn, optim

        return nn, optim
    except ImportError as exc:
        pytest.skip(f"[missing] ember.nn / ember.optim cannot be imported: {exc}")


def _build(name, backend, seed=0):
    nn, _ = _nn()
    spec = LAYERS[name]
    if not hasattr(nn, name):
        pytest.skip(f"[missing] ember.nn has no {name} yet")
    with ember.backend(backend):
        ember.manual_seed(seed)
        return spec.make(nn)


def _forward(name, module, arrays, backend):
    spec = LAYERS[name]
    xs = [ember.tensor(a, backend=backend) for a in arrays]
    return (spec.call or (lambda m, *t: m(*t)))(module, *xs)


def _host_state(module):
    return {k: v.numpy().copy() for k, v in module.state_dict().items()}


@pytest.mark.parametrize("op", sorted(LAYERS))
def test_layer(op, conformance):
    name, spec = op, LAYERS[op]
    _, optim = _nn()
    for dt in ("float32", "int64"):
        conformance.require_dtype(dt)
    rng = np.random.default_rng(sum(map(ord, name)) + conformance.seed)
    arrays = spec.inputs(rng)
    here = conformance.name
    layer = _build(name, here, conformance.seed)
    ref = _build(name, "numpy", conformance.seed)
    layer.load_state_dict({k: ember.tensor(v, backend=here) for k, v in _host_state(ref).items()})

    out = _forward(name, layer, arrays, here)
    assert out.backend is conformance.backend, f"{name} output lives on {out.backend.name}, not {here}"
    assert out.shape == spec.out_shape, f"{name} output shape {out.shape}, expected {spec.out_shape}"
    count = sum(p.numel() for p in layer.parameters())
    assert count == spec.params, f"{name} has {count} parameters, PyTorch's {name} has {spec.params}"

    want = _forward(name, ref, arrays, "numpy").detach().numpy()
    got = out.detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"{name} forward differs from the reference")

    # one SGD step on a fixed linear loss lowers it
    w = ember.tensor(rng.standard_normal(spec.out_shape).astype(np.float32), backend=here)
    opt = optim.SGD(layer.parameters(), lr=1e-3)
    before = (out * w).sum()
    opt.zero_grad()
    before.backward()
    missing = [k for k, p in layer.named_parameters() if p.grad is None]
    assert not missing, f"{name}: no gradient reached parameters {missing}"
    opt.step()
    kept = [
        f"{k} {p.dtype.name} (gradient {p.grad.dtype.name})"
        for k, p in layer.named_parameters()
        if p.dtype is not ember.float32 or p.grad.dtype is not ember.float32
    ]
    assert not kept, f"dtype discipline: {name}'s float32 parameters after one SGD step: {', '.join(kept)}"
    after = (_forward(name, layer, arrays, here) * w).sum()
    assert after.item() < before.item(), (
        f"{name}: one SGD step did not lower the loss ({before.item()} -> {after.item()})"
    )

    # checkpoint round trip: state to host arrays, into a freshly initialized layer
    layer.eval()
    state = _host_state(layer)
    fresh = _build(name, here, seed=conformance.seed + 1)
    fresh.load_state_dict({k: ember.tensor(v, backend=here) for k, v in state.items()})
    fresh.eval()
    a = _forward(name, layer, arrays, here).detach().numpy()
    b = _forward(name, fresh, arrays, here).detach().numpy()
    assert np.array_equal(a, b), f"{name}: a layer loaded from the state_dict computes something else"


@pytest.mark.parametrize("op", sorted(LAYERS))
def test_layer_deterministic(op, conformance):
    name, spec = op, LAYERS[op]
    for dt in ("float32", "int64"):
        conformance.require_dtype(dt)
    rng = np.random.default_rng(sum(map(ord, name)) + conformance.seed)
    arrays = spec.inputs(rng)
    w = rng.standard_normal(spec.out_shape).astype(np.float32)
    here = conformance.name
    state = _host_state(_build(name, "numpy", conformance.seed))

    def forward_backward():
        layer = _build(name, here, conformance.seed + 1)
        layer.load_state_dict({k: ember.tensor(v, backend=here) for k, v in state.items()})
        loss = (_forward(name, layer, arrays, here) * ember.tensor(w, backend=here)).sum()
        loss.backward()
        return layer, [p.grad.numpy() for p in layer.parameters()]

    layer, _ = run_twice(forward_backward, conformance.backend)
    with ember.no_grad():
        eager = _forward(name, layer, arrays, here).numpy()
        compiled = ember.jit(lambda *xs: (spec.call or (lambda m, *t: m(*t)))(layer, *xs))(
            *(ember.tensor(a, backend=here) for a in arrays)
        ).numpy()
    problem = mismatch(np.asarray(compiled), np.asarray(eager), 1e-4, 1e-5)
    assert problem is None, (
        f"nondeterministic under ember.jit: {name}'s forward pass differs from eager mode's: {problem}"
    )

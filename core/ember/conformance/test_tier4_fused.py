"""Tier 4 — each optional fused op the backend declares (``Capabilities.fused``) equals its
reference decomposition (ember.fused.FUSED, run in Tensor ops on the NumPy reference), in
float32 and float64, including inputs that need the numerically careful form (softmax of
logits near 1000). Ops the backend does not declare are skipped: ember runs the decomposition.
"""
import numpy as np
import pytest

import ember
from ember.conformance.cases import upload
from ember.conformance.tolerances import mismatch, tolerance
from ember.fused import FUSED

EMBER_TIER = 4
DTYPES = ("float32", "float64")


def _n(rng, shape, dt, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dt)


def _pos(rng, shape, dt):
    return rng.uniform(1.0, 2.0, shape).astype(dt)


def _softmax_like(rng, dt):
    x = _n(rng, (4, 7), dt, 3.0)
    big = x.copy()
    big[0] += 1000.0            # the unshifted exp overflows: the fused op must shift as well
    return [((x,), dict(dim=-1), 7), ((x,), dict(dim=0), 4), ((big,), dict(dim=-1), 7),
            ((_n(rng, (2, 3, 5), dt),), dict(dim=1), 3)]


def _cross_entropy(rng, dt):
    return [((_n(rng, (6, 5), dt, 2.0), rng.integers(0, 5, 6).astype(np.int64)), {}, 30)]


def _layer_norm(rng, dt):
    x = _n(rng, (3, 4, 5), dt, 2.0) + 1.5
    w, b = _n(rng, (5,), dt), _n(rng, (5,), dt)
    return [((x, w, b), dict(normalized_shape=(5,), eps=1e-5), 5),
            ((x, None, None), dict(normalized_shape=(4, 5), eps=1e-3), 20),
            ((x, _n(rng, (4, 5), dt), None), dict(normalized_shape=(4, 5), eps=1e-5), 20)]


def _gelu(rng, dt):
    x = _n(rng, (5, 6), dt, 3.0)
    return [((x,), dict(approximate="none"), 1), ((x,), dict(approximate="tanh"), 1)]


def _attention(rng, dt):
    q, k, v = _n(rng, (2, 3, 4), dt), _n(rng, (2, 5, 4), dt), _n(rng, (2, 5, 6), dt)
    qs = _n(rng, (2, 5, 4), dt)
    return [((q, k, v), dict(causal=False), 20), ((qs, k, v), dict(causal=True), 20),
            ((q, k, v), dict(causal=False, scale=0.3), 20)]


def _optimizer_options(name):
    from ember.optim import functional
    return functional.CASES[name]


def _sgd(rng, dt):
    out = []
    for hyper in _optimizer_options("sgd_step"):
        buf = _n(rng, (3, 17), dt) if hyper.get("momentum", 0) else None
        out.append(((_n(rng, (3, 17), dt), _n(rng, (3, 17), dt), buf), dict(hyper), 8))
    return out


def _adam(rng, dt):
    out = []
    for hyper in _optimizer_options("adam_step"):
        sq = _pos(rng, (3, 17), dt)
        mx = (sq + 0.5).astype(dt) if hyper.get("amsgrad") else None
        out.append(((_n(rng, (3, 17), dt), _n(rng, (3, 17), dt), _n(rng, (3, 17), dt), sq, mx),
                    dict(hyper, step=3), 16))
    return out


def _rmsprop(rng, dt):
    out = []
    for hyper in _optimizer_options("rmsprop_step"):
        avg = (_n(rng, (3, 17), dt) * 0.1).astype(dt) if hyper.get("centered") else None
        mom = _n(rng, (3, 17), dt) if hyper.get("momentum", 0) else None
        out.append(((_n(rng, (3, 17), dt), _n(rng, (3, 17), dt), _pos(rng, (3, 17), dt), avg, mom), dict(hyper), 16))
    return out


#: fused op -> cases: (inputs, parameters, values each output element combines, for the tolerance)
CASES = {"softmax": _softmax_like, "log_softmax": _softmax_like, "cross_entropy": _cross_entropy,
         "layer_norm": _layer_norm, "gelu": _gelu, "scaled_dot_product_attention": _attention,
         "sgd_step": _sgd, "adam_step": _adam, "rmsprop_step": _rmsprop}


def _compare(where, got, want, dt, terms, backend):
    if want is None or got is None:
        assert want is None and got is None, f"{where}: expected {'None' if want is None else 'a buffer'}, got " \
                                             f"{'None' if got is None else 'a buffer'}"
        return
    got = np.asarray(backend.to_numpy(got))
    want = np.asarray(want.numpy())
    scale = float(np.abs(want).max()) if want.size else 1.0
    problem = mismatch(got, want, *tolerance(dt, terms, max(scale, 1.0)))
    assert problem is None, f"{where}: fused result differs from the decomposition: {problem}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", sorted(FUSED))
def test_fused(op, dtype, conformance):
    conformance.require_fused(op)
    conformance.require_dtype(dtype)
    if op not in CASES:
        pytest.skip(f"[missing] the conformance suite has no cases for fused op {op!r} yet")
    backend = conformance.backend
    rng = np.random.default_rng(sum(map(ord, op + dtype)))
    for k, (args, params, terms) in enumerate(CASES[op](rng, dtype)):
        where = f"{op}(case {k}: {', '.join('None' if a is None else f'{a.dtype}{list(a.shape)}' for a in args)}, " \
                f"{params})"
        with ember.no_grad():
            want = FUSED[op](*(None if a is None else ember.tensor(a, backend="numpy") for a in args), **params)
        # fresh copies: a fused optimizer step may update its inputs in place
        bufs = [None if a is None else upload(backend, a.copy(), "contiguous") for a in args]
        try:
            with np.errstate(all="ignore"):
                got = backend.fused_impls[op](*bufs, **params)
        except Exception as exc:  # noqa: BLE001
            raise AssertionError(f"{where} raised {type(exc).__name__}: {exc}") from exc
        if isinstance(want, tuple):
            assert isinstance(got, tuple) and len(got) == len(want), \
                f"{where}: expected a tuple of {len(want)} buffers like the decomposition, got {type(got).__name__}"
            for i, (g, w) in enumerate(zip(got, want)):
                _compare(f"{where} output {i}", g, w, dtype, terms, backend)
        else:
            _compare(where, got, want, dtype, terms, backend)

"""Tier 4 — each optional fused op the backend declares (``Capabilities.fused``) equals its
reference decomposition (ember.fused.FUSED, as ember.nn and ember.optim register it, run in Tensor ops on the NumPy reference), in
float32 and float64, including inputs that need the numerically careful form (softmax of
logits near 1000), ignored cross-entropy targets, max-pool windows with ties, NaNs and
padding, batch norm over as few as two values per channel, and the backward ops (``*_backward``) that
ember calls to train on a backend's kernels. Ops the backend does not declare are skipped:
ember runs the decomposition.
"""

import numpy as np
import pytest

import ember
from ember.conformance import fused_ops
from ember.conformance.cases import upload
from ember.conformance.optimizers import CASES as OPTIMIZER_CASES
from ember.conformance.tolerances import mismatch, tolerance

FUSED = fused_ops()  # the ops ember.nn.functional and ember.optim.functional register

EMBER_TIER = 4
DTYPES = ("float32", "float64")


def _n(rng, shape, dt, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dt)


def _pos(rng, shape, dt):
    return rng.uniform(1.0, 2.0, shape).astype(dt)


def _softmax_like(rng, dt):
    x = _n(rng, (4, 7), dt, 3.0)
    big = x.copy()
    big[0] += 1000.0  # the unshifted exp overflows: the fused op must shift as well
    return [
        ((x,), dict(dim=-1), 7),
        ((x,), dict(dim=0), 4),
        ((big,), dict(dim=-1), 7),
        ((_n(rng, (2, 3, 5), dt),), dict(dim=1), 3),
    ]


def _targets(rng):
    """Class indices into 5 classes; the same with two rows at the default ignore_index."""
    t = rng.integers(0, 5, 6).astype(np.int64)
    ignored = t.copy()
    ignored[[1, 4]] = -100
    return t, ignored


def _cross_entropy(rng, dt):
    x = _n(rng, (6, 5), dt, 2.0)
    t, ignored = _targets(rng)
    return [((x, t), {}, 30), ((x, ignored), dict(ignore_index=-100), 30), ((x, t), dict(ignore_index=int(t[0])), 30)]


def _softmax_backward(log):
    def cases(rng, dt):
        out = []
        for (x,), params, terms in _softmax_like(rng, dt):
            z = x.astype(np.float64) - x.astype(np.float64).max(params["dim"], keepdims=True)
            lse = np.log(np.exp(z).sum(params["dim"], keepdims=True))
            y = (z - lse if log else np.exp(z - lse)).astype(dt)
            out.append(((_n(rng, x.shape, dt), y), params, terms))
        return out

    return cases


def _cross_entropy_backward(rng, dt):
    x = _n(rng, (6, 5), dt, 2.0)
    t, ignored = _targets(rng)
    g = np.array(1.3, dt)
    return [
        ((g, x, t), {}, 30),
        ((g, x, ignored), dict(ignore_index=-100), 30),
        ((g, x, t), dict(ignore_index=int(t[0])), 30),
        ((g, x, np.full(6, -100, np.int64)), {}, 30),
    ]  # nothing counts: a zero gradient


def _gelu_backward(rng, dt):
    return [((_n(rng, args[0].shape, dt),) + args, params, terms) for args, params, terms in _gelu(rng, dt)]


def _layer_norm_backward(rng, dt):
    # terms: the row reductions of dx and the column sums of the weight's and bias's gradients
    return [((_n(rng, args[0].shape, dt),) + args, params, 12 * terms) for args, params, terms in _layer_norm(rng, dt)]


def _layer_norm(rng, dt):
    x = _n(rng, (3, 4, 5), dt, 2.0) + 1.5
    w, b = _n(rng, (5,), dt), _n(rng, (5,), dt)
    return [
        ((x, w, b), dict(normalized_shape=(5,), eps=1e-5), 5),
        ((x, None, None), dict(normalized_shape=(4, 5), eps=1e-3), 20),
        ((x, _n(rng, (4, 5), dt), None), dict(normalized_shape=(4, 5), eps=1e-5), 20),
    ]


def _gelu(rng, dt):
    x = _n(rng, (5, 6), dt, 3.0)
    return [((x,), dict(approximate="none"), 1), ((x,), dict(approximate="tanh"), 1)]


def _attention(rng, dt):
    q, k, v = _n(rng, (2, 3, 4), dt), _n(rng, (2, 5, 4), dt), _n(rng, (2, 5, 6), dt)
    qs = _n(rng, (2, 5, 4), dt)
    return [
        ((q, k, v), dict(causal=False), 20),
        ((qs, k, v), dict(causal=True), 20),
        ((q, k, v), dict(causal=False, scale=0.3), 20),
    ]


#: max_pool2d parameter sets: kernel = stride, overlapping windows with padding, ceil_mode with
#: a ragged edge, dilation and unequal dims, ints and a default stride as callers may pass them.
POOLS = [
    dict(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1), ceil_mode=False),
    dict(kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), dilation=(1, 1), ceil_mode=False),
    dict(kernel_size=(2, 2), stride=(1, 1), padding=(0, 0), dilation=(1, 1), ceil_mode=False),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), dilation=(2, 1), ceil_mode=True),
    dict(kernel_size=3, stride=None, padding=1, dilation=1, ceil_mode=True),
]


def _pool_inputs(rng, dt):
    """Random values; ties (small integers, zeros after a ReLU); NaNs, two in one window; all
    below zero with a -inf (padding, which is -inf too, must never win over a real cell)."""
    x = _n(rng, (2, 3, 7, 8), dt)
    ties = np.maximum(rng.integers(-2, 3, x.shape), 0).astype(dt)
    nan = x.copy()
    nan[0, 0, 1, 1] = nan[1, 2, 4, 4] = nan[1, 2, 4, 5] = np.nan
    neg = (-np.abs(x) - 10).astype(dt)
    neg[0, 1, 0, 0] = -np.inf
    return [x, ties, nan, neg, _n(rng, (3, 5, 5), dt)]  # the last: (C, H, W)


def _max_pool2d(rng, dt):
    return [((x,), params, 1) for params in POOLS for x in _pool_inputs(rng, dt)]


def _max_pool2d_backward(rng, dt):
    out = []
    for params in POOLS:
        for x in _pool_inputs(rng, dt):
            with ember.no_grad():
                shape = FUSED["max_pool2d"](ember.tensor(x, backend="numpy"), **params).shape
            # terms: overlapping windows add several gradients into one cell
            out.append(((_n(rng, shape, dt), x), params, 9))
    return out


def _batch_norm(rng, dt):
    """(N, C, H, W), (N, C), (N, C, L) and N * H * W = 2 (the fewest values training allows)."""
    x4 = _n(rng, (3, 4, 5, 6), dt, 2.0) + 1.5
    w, b = _n(rng, (4,), dt), _n(rng, (4,), dt)
    return [
        ((x4, w, b), dict(eps=1e-5), 90),
        ((x4, None, None), dict(eps=1e-3), 90),
        ((_n(rng, (9, 4), dt), w, None), dict(eps=1e-5), 9),
        ((_n(rng, (4, 4, 3), dt), None, b), {}, 12),
        ((_n(rng, (1, 4, 1, 2), dt), w, b), dict(eps=1e-5), 2),
        ((_n(rng, (2, 4), dt), w, b), {}, 2),
    ]


def _batch_norm_backward(rng, dt):
    out = []
    for (x, w, b), params, terms in _batch_norm(rng, dt):
        axes = (0,) + tuple(range(2, x.ndim))
        wide = x.astype(np.float64)
        mean, var = wide.mean(axes).astype(dt), wide.var(axes).astype(dt)  # the forward's statistics
        # terms: dx and the weight's gradient sum gradients times normalized values
        out.append(((_n(rng, x.shape, dt), x, w, b, mean, var), params, 4 * terms))
    return out


def _optimizer_options(name):
    return OPTIMIZER_CASES[name]


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
        out.append(
            ((_n(rng, (3, 17), dt), _n(rng, (3, 17), dt), _n(rng, (3, 17), dt), sq, mx), dict(hyper, step=3), 16)
        )
    return out


def _rmsprop(rng, dt):
    out = []
    for hyper in _optimizer_options("rmsprop_step"):
        avg = (_n(rng, (3, 17), dt) * 0.1).astype(dt) if hyper.get("centered") else None
        mom = _n(rng, (3, 17), dt) if hyper.get("momentum", 0) else None
        out.append(((_n(rng, (3, 17), dt), _n(rng, (3, 17), dt), _pos(rng, (3, 17), dt), avg, mom), dict(hyper), 16))
    return out


def _foreach(single):
    """Cases of a multi-tensor op (``adam_step_foreach``) from its rule's: each option set over
    three parameters of different sizes, every argument a list (None stays None)."""
    parts = [lambda a: a, lambda a: np.ascontiguousarray(a[:2, :5]), lambda a: np.ascontiguousarray(a[0])]

    def cases(rng, dt):
        return [
            ([[None if a is None else part(a) for part in parts] for a in args], params, terms)
            for args, params, terms in single(rng, dt)
        ]

    return cases


#: fused op -> cases: (inputs, parameters, values each output element combines, for the tolerance)
CASES = {
    "softmax": _softmax_like,
    "log_softmax": _softmax_like,
    "cross_entropy": _cross_entropy,
    "layer_norm": _layer_norm,
    "gelu": _gelu,
    "scaled_dot_product_attention": _attention,
    "softmax_backward": _softmax_backward(False),
    "log_softmax_backward": _softmax_backward(True),
    "cross_entropy_backward": _cross_entropy_backward,
    "gelu_backward": _gelu_backward,
    "layer_norm_backward": _layer_norm_backward,
    "max_pool2d": _max_pool2d,
    "max_pool2d_backward": _max_pool2d_backward,
    "batch_norm": _batch_norm,
    "batch_norm_backward": _batch_norm_backward,
    "sgd_step": _sgd,
    "adam_step": _adam,
    "rmsprop_step": _rmsprop,
    "sgd_step_foreach": _foreach(_sgd),
    "adam_step_foreach": _foreach(_adam),
    "rmsprop_step_foreach": _foreach(_rmsprop),
}


def _compare(where, got, want, dt, terms, backend):
    if want is None or got is None:
        assert want is None and got is None, (
            f"{where}: expected {'None' if want is None else 'a buffer'}, got {'None' if got is None else 'a buffer'}"
        )
        return
    got = np.asarray(backend.to_numpy(got))
    want = np.asarray(want.numpy())
    scale = float(np.abs(want).max()) if want.size else 1.0
    problem = mismatch(got, want, *tolerance(dt, terms, max(scale, 1.0)))
    assert problem is None, f"{where}: fused result differs from the decomposition: {problem}"


def _each(a, fn):
    """``fn`` of an array, or of each array of a list (a multi-tensor op's argument); None kept."""
    if isinstance(a, list):
        return [None if x is None else fn(x) for x in a]
    return None if a is None else fn(a)


def _describe(a):
    if isinstance(a, list):
        return "[" + ", ".join(map(_describe, a)) + "]"
    return "None" if a is None else f"{a.dtype}{list(a.shape)}"


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
        where = f"{op}(case {k}: {', '.join(_describe(a) for a in args)}, {params})"
        with ember.no_grad():
            want = FUSED[op](*(_each(a, lambda x: ember.tensor(x, backend="numpy")) for a in args), **params)
        # fresh copies: a fused optimizer step may update its inputs in place
        bufs = [_each(a, lambda x: upload(backend, x.copy(), "contiguous")) for a in args]
        try:
            with np.errstate(all="ignore"):
                got = backend.fused_impls[op](*bufs, **params)
        except Exception as exc:  # noqa: BLE001
            raise AssertionError(f"{where} raised {type(exc).__name__}: {exc}") from exc
        if isinstance(want, tuple):
            assert isinstance(got, tuple) and len(got) == len(want), (
                f"{where}: expected a tuple of {len(want)} buffers like the decomposition, got {type(got).__name__}"
            )
            for i, (g, w) in enumerate(zip(got, want)):
                if isinstance(w, list):  # a multi-tensor op: a list per output
                    assert isinstance(g, (list, tuple)) and len(g) == len(w), (
                        f"{where} output {i}: expected a list of {len(w)} buffers"
                    )
                    for j, (gj, wj) in enumerate(zip(g, w)):
                        _compare(f"{where} output {i} entry {j}", gj, wj, dtype, terms, backend)
                else:
                    _compare(f"{where} output {i}", g, w, dtype, terms, backend)
        else:
            _compare(where, got, want, dtype, terms, backend)

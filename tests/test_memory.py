"""Memory: graphs live exactly as long as the tensors that hold them, so training loops stay flat."""

import gc
import os
import tracemalloc
import weakref

import numpy as np

import ember


def _mlp_params(seed=0):
    g = ember.Generator(seed)
    shapes = [(32, 64), (64,), (64, 10), (10,)]
    return [(ember.randn(*s, generator=g) * 0.1).requires_grad_() for s in shapes]


def _step(params, x, onehot, lr=0.05):
    w1, b1, w2, b2 = params
    h = (x @ w1 + b1).tanh()
    logits = h @ w2 + b2
    loss = -(logits.log_softmax(1) * onehot).sum() / x.shape[0]
    loss.backward()
    with ember.no_grad():
        for p in params:
            p.sub_(lr * p.grad)
            p.grad = None
    return loss


def _rss_bytes():
    """Resident set size from /proc (Linux); None elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def test_ten_thousand_training_steps_keep_memory_flat():
    rng = np.random.default_rng(0)
    x = ember.tensor(rng.standard_normal((16, 32)).astype(np.float32))
    onehot = ember.tensor(np.eye(10, dtype=np.float32)[rng.integers(0, 10, 16)])
    params = _mlp_params()
    first = _step(params, x, onehot).item()
    for _ in range(200):  # warm-up: caches, free lists, allocator pools
        _step(params, x, onehot)
    gc.collect()
    objects, rss = len(gc.get_objects()), _rss_bytes()
    # Exact bytes over a stretch with tracemalloc (which slows Python ~4x, hence not all 10,000).
    tracemalloc.start()
    try:
        for _ in range(300):
            _step(params, x, onehot)
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(1000):
            _step(params, x, onehot)
        gc.collect()
        traced_growth = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    for _ in range(10_000 - 1300):
        _step(params, x, onehot)
    gc.collect()
    # A leaked tensor per step would be >= 100 bytes a step and one Python object or more.
    assert traced_growth < 20_000, f"traced memory grew by {traced_growth} bytes over 1,000 steps"
    assert len(gc.get_objects()) - objects < 100, "Python objects accumulate across steps"
    if rss is not None:
        assert _rss_bytes() - rss < 4_000_000, f"RSS grew by {_rss_bytes() - rss} bytes over 10,000 steps"
    assert _step(params, x, onehot).item() < first / 10, "the steps must actually train"


def test_dropping_the_output_frees_the_graph():
    gc.disable()  # reference counting alone must do it: the graph has no cycles
    try:
        x = ember.randn(4, 3, generator=ember.Generator(1), requires_grad=True)
        hidden = (x * 2).tanh()
        out = (hidden @ ember.ones(3, 2)).sum()
        ref = weakref.ref(hidden)
        del hidden
        assert ref() is not None, "the output's graph keeps its inputs alive until it is dropped"
        del out
        assert ref() is None, "dropping the output must free the graph"

        hidden = (x * 2).tanh()
        loss = (hidden * hidden).sum()
        ref = weakref.ref(hidden)
        del hidden
        loss.backward()
        del loss
        assert ref() is None, "backward() must not keep the graph alive"
        assert x.grad is not None and x.grad.is_leaf and not x.grad.requires_grad
    finally:
        gc.enable()


def test_no_grad_records_nothing():
    x = ember.ones(3, requires_grad=True)
    with ember.no_grad():
        y = (x * 2).exp()
    assert y._ctx is None and not y.requires_grad
    gc.disable()
    try:
        inner = x * 3
        ref = weakref.ref(inner)
        with ember.no_grad():
            z = inner + 1
        del inner
        assert ref() is None, "a tensor made under no_grad must not hold its inputs"
        assert z.is_leaf
    finally:
        gc.enable()

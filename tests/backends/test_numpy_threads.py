"""The NumPy backend's threads (backends/numpy/threads.py): every kernel that splits its passes
across threads gives the bits it gives on one thread, ties, zeros, infinities and NaN included,
and the pool itself covers the range, nests, and reports errors."""

import threading

import numpy as np
import pytest
import test_numpy_rewrites as steps  # its training steps (tests/backends is on the path)

import ember
from ember.backends.numpy import conv, fused, rewrites, threads

POOL = {"kernel_size": 2, "stride": 2}


@pytest.fixture
def split_everything(monkeypatch):
    """Every pass split (no size threshold), three threads so parts are uneven."""
    monkeypatch.setattr(threads, "MIN_BYTES", 0)
    monkeypatch.setattr(threads, "THREADS", 3)


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view({4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _channels_last(a):
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def _awkward(shape, seed=0, dtype=np.float32):
    """Values with repeated ties, zeros of both signs, infinities and a NaN, channels last."""
    rng = np.random.default_rng(seed)
    a = rng.integers(-3, 4, shape).astype(dtype) * dtype(0.5)
    flat = a.reshape(-1)
    flat[3], flat[10], flat[17], flat[-5] = np.inf, -np.inf, -0.0, np.nan
    return _channels_last(a)


def _relu(a):
    return np.where(a > 0, a, 0).astype(a.dtype)


def _cases():
    x, w = _awkward((5, 3, 9, 8)), np.random.default_rng(1).standard_normal((4, 3, 3, 3)).astype(np.float32)
    x1 = _awkward((5, 1, 9, 8), 2)
    w1 = np.random.default_rng(3).standard_normal((4, 1, 3, 3)).astype(np.float32)
    g = _awkward((5, 4, 7, 6), 4)
    r = _relu(_awkward((5, 3, 8, 8), 5))
    gp = _awkward((5, 3, 4, 4), 6)
    bn = _channels_last(np.random.default_rng(7).standard_normal((5, 3, 8, 8)).astype(np.float32))
    gamma, beta = np.array([1.0, 0.5, 2.0], np.float32), np.array([0.1, -0.2, 0.0], np.float32)
    mean, var = bn.mean(axis=(0, 2, 3)), bn.var(axis=(0, 2, 3))
    return {
        "conv2d": lambda: conv.conv2d(x, w, padding=(1, 1)),
        "conv2d one channel": lambda: conv.conv2d(x1, w1),
        "conv2d_grad_weight": lambda: conv.conv2d_grad_weight(x, g, w.shape),
        "conv2d_grad_input": lambda: conv.conv2d_grad_input(g, w, x.shape),
        "conv2d_grad_input stride 2": lambda: conv.conv2d_grad_input(
            _awkward((5, 4, 4, 4), 8), w, x.shape, stride=(2, 2), padding=(1, 1)
        ),
        "max_pool2d": lambda: fused.max_pool2d(r, **POOL),
        "max_pool2d_backward": lambda: fused.max_pool2d_backward(gp, r, **POOL),
        "relu_max_pool2d_backward": lambda: rewrites.relu_max_pool2d_backward(gp, r, **POOL),
        "conv2d_bias_relu": lambda: rewrites.conv2d_bias_relu(x, w, np.ones(4, np.float32), padding=(1, 1)),
        "relu": lambda: rewrites.relu(x),
        "relu_backward": lambda: rewrites.relu_backward(x, _relu(x)),
        "batch_norm": lambda: fused.batch_norm(bn, gamma, beta),
        "batch_norm_relu": lambda: rewrites.batch_norm_relu(bn, gamma, beta, bn),
        "batch_norm_backward": lambda: fused.batch_norm_backward(bn * 0.5, bn, gamma, beta, mean, var),
    }


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the NaN and infinities in the products
@pytest.mark.parametrize("name", sorted(_cases()))
def test_threads_give_one_threads_bits(name, monkeypatch):
    monkeypatch.setattr(threads, "THREADS", 1)
    monkeypatch.setattr(fused, "CHUNK_BYTES", 64)  # many chunks, so batch norm's sums have several parts
    monkeypatch.setattr(rewrites, "CHUNK_BYTES", 64)
    alone = _cases()[name]()
    monkeypatch.setattr(threads, "MIN_BYTES", 0)
    monkeypatch.setattr(threads, "THREADS", 3)
    split = _cases()[name]()
    alone, split = (a if isinstance(a, tuple) else (a,) for a in (alone, split))
    for a, b in zip(alone, split):
        if a is None:
            assert b is None
            continue
        assert a.shape == b.shape and a.strides == b.strides
        np.testing.assert_array_equal(_bits(a), _bits(b))


def test_split_covers_the_range_once(split_everything):
    seen = np.zeros(10, int)
    lock = threading.Lock()

    def mark(s):
        with lock:
            seen[s] += 1

    threads.split(mark, 10, nbytes=0)
    assert seen.tolist() == [1] * 10


def test_small_work_runs_on_the_calling_thread(monkeypatch):
    monkeypatch.setattr(threads, "THREADS", 2)
    who = []
    threads.split(lambda s: who.append((threading.get_ident(), s)), 8, nbytes=threads.MIN_BYTES - 1)
    assert who == [(threading.get_ident(), slice(0, 8))]


def test_a_split_inside_a_part_runs_inline(split_everything):
    inner = []

    def outer(s):
        threads.split(lambda t: inner.append(t), 4, nbytes=0)

    threads.split(outer, 6, nbytes=0)
    assert inner == [slice(0, 4)] * 3  # three parts, each running its inner split whole


def test_an_error_in_a_part_is_raised_after_all_parts_finish(split_everything):
    done = []

    def part(s):
        if s.start > 0:
            raise ValueError(f"part {s.start}")
        done.append(s)

    with pytest.raises(ValueError, match="part"):
        threads.split(part, 9, nbytes=0)
    assert done == [slice(0, 3)]


def test_parts():
    assert threads.parts(7, 3) == [slice(0, 3), slice(3, 5), slice(5, 7)]
    assert threads.parts(2, 4) == [slice(0, 1), slice(1, 2)]


def test_batch_norm_sums_chunks_in_one_threads_order(split_everything, monkeypatch):
    """The per-chunk sums made on several threads are added in chunk order: the statistics are
    those of one thread summing chunk after chunk."""
    monkeypatch.setattr(fused, "CHUNK_BYTES", 64)
    rng = np.random.default_rng(9)
    x = rng.standard_normal((7, 3, 5, 5)) * 10.0 ** rng.integers(-8, 8, (7, 3, 5, 5))  # float64: sums that round
    _, mean, var = fused.batch_norm(_channels_last(x), None, None)
    rows = np.ascontiguousarray(np.moveaxis(x, 1, -1)).reshape(-1, 3)
    s1, s2 = np.zeros(3), np.zeros(3)
    for at in fused._row_chunks(rows)[0]:
        s1 += np.add.reduce(rows[at], axis=0, dtype=np.float64)
        s2 += np.add.reduce(np.multiply(rows[at], rows[at], dtype=np.float64), axis=0)
    expect = s1 / len(rows)
    np.testing.assert_array_equal(mean, expect)
    np.testing.assert_array_equal(var, np.maximum(s2 / len(rows) - expect * expect, 0.0))


@pytest.mark.parametrize("model", ["lenet", "block", "downsample"])
def test_a_compiled_training_step_on_threads_gives_one_threads_gradients(model, monkeypatch):
    """Every pass of the step split (no size threshold): the loss and every gradient keep their bits."""
    build, shape = {
        "lenet": (steps._lenet, (5, 1, 14, 15)),
        "block": (steps._block, (3, 3, 6, 6)),
        "downsample": (steps._downsample, (3, 3, 6, 6)),
    }[model]
    rng = np.random.RandomState(0)
    x = ember.tensor(rng.randint(-2, 3, size=shape).astype(np.float32))
    y = ember.tensor(rng.randint(0, 10, size=shape[0]))
    monkeypatch.setattr(threads, "THREADS", 1)
    want, _ = steps._grads(build, x, y, compiled=True)
    monkeypatch.setattr(threads, "MIN_BYTES", 0)
    monkeypatch.setattr(threads, "THREADS", 2)
    got, _ = steps._grads(build, x, y, compiled=True)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(_bits(g), _bits(w))

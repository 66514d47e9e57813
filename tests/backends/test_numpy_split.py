"""backends/numpy/split.py: runs of a kernel's blocks on all of BLAS's threads, BLAS on one
thread meanwhile, and the kernels that use it (conv.py, fused.py, rewrites.py) giving the same
bits split or not, on any number of threads."""

import threading

import numpy as np
import pytest

from ember.backends.numpy import conv, fused, openblas, rewrites, split


@pytest.mark.parametrize("n,parts", [(0, 4), (1, 4), (3, 4), (4, 4), (10, 4), (129, 4), (7, 1)])
def test_runs_are_contiguous_near_equal_and_cover_every_item(n, parts):
    items = list(range(n))
    rs = split.runs(items, parts)
    assert [i for r in rs for i in r] == items
    assert len(rs) == max(1, min(parts, n))
    assert max(map(len, rs)) - min(map(len, rs)) <= 1


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_each_gives_the_runs_results_in_order_on_any_thread_count(threads, monkeypatch):
    if threads > 1 and openblas.thread_count() is None:
        pytest.skip("NumPy's BLAS is not its bundled OpenBLAS")
    monkeypatch.setattr(split, "threads", lambda: threads)
    seen = set()

    def run(part):
        seen.add(threading.get_ident())
        return [i * i for i in part]

    assert split.each(run, list(range(11))) == [[0, 1, 4], [9, 16, 25], [36, 49, 64], [81, 100]]
    assert len(seen) <= threads


def _blas():
    control = openblas.thread_count()
    if control is None:
        pytest.skip("NumPy's BLAS is not its bundled OpenBLAS")
    return control


def test_blas_runs_on_one_thread_during_a_split_and_gets_its_count_back(monkeypatch):
    get, put = _blas()
    before = get()
    put(2)
    try:
        inside = split.each(lambda part: get(), list(range(8)))
        assert inside == [1, 1, 1, 1]
        assert get() == 2
        caller = threading.get_ident()
        whole = split.each(lambda part: (part, get(), threading.get_ident() == caller), list(range(8)), parts=1)
        assert whole == [(list(range(8)), 2, True)]  # one run of all, on the caller, BLAS untouched
    finally:
        put(before)


def test_an_error_in_a_run_is_raised_after_every_run_ends_and_blas_gets_its_count_back():
    get, put = _blas()
    before = get()
    put(2)
    ended = []

    def run(part):
        if part[0] == 3:
            raise ValueError("run 2 failed")
        ended.append(part[0])

    try:
        with pytest.raises(ValueError, match="run 2 failed"):
            split.each(run, list(range(12)))
        assert sorted(ended) == [0, 6, 9]
        assert get() == 2
    finally:
        put(before)


def _narrow_layer(rng, n=6, c=8, o=8, hw=7):
    x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
    w = rng.standard_normal((o, c, 3, 3)).astype(np.float32)
    g = rng.standard_normal((n, o, hw, hw)).astype(np.float32)
    return x, w, g


@pytest.mark.parametrize("threads", [1, 2])
def test_split_convolutions_have_the_bits_of_unsplit_ones(threads, monkeypatch):
    if threads > 1:
        _blas()
    monkeypatch.setattr(split, "threads", lambda: threads)
    monkeypatch.setattr(conv, "BLOCK_BYTES", 1)  # one image a block: several runs
    monkeypatch.setattr(conv, "MIN_ROWS", 1)
    x, w, g = _narrow_layer(np.random.default_rng(0))
    kw = {"padding": (1, 1)}

    def all_three():
        return (
            conv.conv2d(x, w, **kw),
            conv.conv2d_grad_input(g, w, x.shape, **kw),
            conv.conv2d_grad_weight(x, g, w.shape, **kw),
        )

    monkeypatch.setattr(conv, "SPLIT_MIN_DEPTH", 10**9)
    y0, dx0, dw0 = all_three()
    monkeypatch.setattr(conv, "SPLIT_MIN_DEPTH", 0)
    y, dx, dw = all_three()
    assert np.array_equal(y, y0) and np.array_equal(dx, dx0)
    # the weight gradient sums its runs' partial sums: another order, within rounding
    np.testing.assert_allclose(dw, dw0, rtol=1e-5, atol=1e-5)


def test_a_split_weight_gradient_has_the_same_bits_on_one_thread_or_several(monkeypatch):
    _blas()
    monkeypatch.setattr(conv, "BLOCK_BYTES", 1)
    monkeypatch.setattr(conv, "MIN_ROWS", 1)
    monkeypatch.setattr(conv, "SPLIT_MIN_DEPTH", 0)
    x, _, g = _narrow_layer(np.random.default_rng(1), n=9)
    found = []
    for threads in (1, 2, 3):
        monkeypatch.setattr(split, "threads", lambda threads=threads: threads)
        found.append(conv.conv2d_grad_weight(x, g, (8, 8, 3, 3), padding=(1, 1)))
    assert all(np.array_equal(found[0], f) for f in found[1:])


@pytest.mark.parametrize("threads", [1, 2])
def test_split_batch_norm_and_relu_passes_have_the_bits_of_unsplit_ones(threads, monkeypatch):
    if threads > 1:
        _blas()
    monkeypatch.setattr(split, "threads", lambda: threads)
    monkeypatch.setattr(fused, "CHUNK_BYTES", 256)  # many chunks
    monkeypatch.setattr(rewrites, "CHUNK_BYTES", 256)
    rng = np.random.default_rng(2)
    x, g = (rng.standard_normal((4, 8, 6, 6)).astype(np.float32) for _ in range(2))
    weight, bias = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)

    def passes():
        out, mean, var = rewrites.batch_norm_relu(x, weight, bias, residual=g)
        back = fused.batch_norm_backward(g, x, weight, bias, mean, var)
        return (out, mean, var, *back, rewrites.relu_backward(g, out), rewrites.relu(x))

    monkeypatch.setattr(fused, "SPLIT_CHUNKS", 10**9)
    monkeypatch.setattr(rewrites, "SPLIT_CHUNKS", 10**9)
    whole = passes()
    monkeypatch.setattr(fused, "SPLIT_CHUNKS", 1)
    monkeypatch.setattr(rewrites, "SPLIT_CHUNKS", 1)
    for a, b in zip(passes(), whole, strict=True):
        assert np.array_equal(a, b)


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="no fork here")
def test_a_forked_child_splits_on_threads_of_its_own(monkeypatch):
    import os

    monkeypatch.setattr(split, "threads", lambda: 2)
    _blas()
    split.each(sum, list(range(8)))  # the parent's pool exists now
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if its split finishes (in 20 s) and is right
        import signal

        signal.alarm(20)
        ok = split.each(sum, list(range(8))) == [1, 5, 9, 13]
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_an_empty_batch_splits_into_nothing(monkeypatch):
    monkeypatch.setattr(conv, "SPLIT_MIN_DEPTH", 0)
    x, w, g = _narrow_layer(np.random.default_rng(3), n=0)
    assert conv.conv2d(x, w, padding=(1, 1)).shape == (0, 8, 7, 7)
    assert conv.conv2d_grad_input(g, w, x.shape, padding=(1, 1)).shape == (0, 8, 7, 7)
    assert not conv.conv2d_grad_weight(x, g, w.shape, padding=(1, 1)).any()


def test_ember_numpy_split_0_turns_splitting_off(monkeypatch):
    get, put = _blas()
    before = get()
    put(2)
    try:
        monkeypatch.setenv("EMBER_NUMPY_SPLIT", "0")
        assert split.threads() == 1
        assert split.each(lambda part: get(), list(range(8))) == [2, 2, 2, 2]  # BLAS untouched
        monkeypatch.delenv("EMBER_NUMPY_SPLIT")
        assert split.threads() == 2
    finally:
        put(before)

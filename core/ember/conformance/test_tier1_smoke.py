"""Tier 1 — smoke: a few ops end to end through ember.Tensor on the backend, checked against
plain NumPy arithmetic (not against another backend)."""

import numpy as np
import pytest

import ember

EMBER_TIER = 1


@pytest.fixture
def on(conformance):
    """Tensors from NumPy arrays, on the backend under test."""
    for dtype in ("float32", "int64", "bool"):  # ember's defaults: every smoke test uses them
        conformance.require_dtype(dtype)
    with ember.backend(conformance.name):
        yield lambda a, **kw: ember.tensor(np.asarray(a), backend=conformance.name, **kw)


def _close(t, expected, rtol=1e-5, atol=1e-6):
    got = np.asarray(t.numpy())
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


def test_tensor_lives_on_backend(on, conformance):
    x = ember.tensor([[1.0, 2.0], [3.0, 4.0]], backend=conformance.name)
    assert x.backend is conformance.backend and x.shape == (2, 2) and x.dtype is ember.float32
    assert x.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert ember.ones(3).backend is conformance.backend, "ember.backend(name) did not make new tensors there"


def test_elementwise_chain(on):
    a = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    y = ((on(a) * 2 + 1) / 3).exp().tanh() - on(a).abs().sqrt()
    _close(y, np.tanh(np.exp((a * 2 + 1) / 3)) - np.sqrt(np.abs(a)))


def test_matmul_reduce(on):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
    y = (on(a) @ on(b)).relu()
    _close(y.sum(1), np.maximum(a @ b, 0).sum(1), atol=1e-5)
    _close(y.amax(0), np.maximum(a @ b, 0).max(0))
    assert (on(a) @ on(b)).argmax(1).tolist() == (a @ b).argmax(1).tolist()


def test_backward(on):
    rng = np.random.default_rng(1)
    w0, x = rng.standard_normal((3, 2)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)
    w = on(w0, requires_grad=True)
    loss = ((on(x) @ w) ** 2).mean()
    loss.backward()
    _close(w.grad, 2 * x.T @ (x @ w0) / 8, atol=1e-5)


def test_indexing_and_movement(on):
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x = on(a)
    _close(x[1, :, ::2], a[1, :, ::2])
    _close(x[:, [2, 0]], a[:, [2, 0]])
    _close(x.permute(2, 0, 1).reshape(4, 6), a.transpose(2, 0, 1).reshape(4, 6))
    _close(ember.cat([x, x.flip(0)], 2), np.concatenate([a, a[::-1]], 2))


def test_integer_and_bool(on):
    i = on(np.array([3, -1, 4, 1, -5], dtype=np.int64))
    assert (i * 2 + 1).tolist() == [7, -1, 9, 3, -9]
    assert (i > 0).tolist() == [True, False, True, True, False]
    assert ember.where(i > 0, i, 0).sum().item() == 8
    assert (i.to(ember.float32) / 2).tolist() == [1.5, -0.5, 2.0, 0.5, -2.5]


def test_random_matches_reference(conformance, on):
    here = ember.rand(5, 3, generator=ember.Generator(7), backend=conformance.name)
    ref = ember.rand(5, 3, generator=ember.Generator(7), backend="numpy")
    assert here.tolist() == ref.tolist(), "same seed, different numbers than the reference (random_bits)"


def test_transfer_between_backends(on, conformance):
    a = np.arange(6, dtype=np.float32).reshape(2, 3) / np.float32(7)
    x = on(a)
    assert x.to("numpy").tolist() == a.tolist()
    assert ember.tensor(a, backend="numpy").to(conformance.name).tolist() == a.tolist()

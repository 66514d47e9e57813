"""ember.fused: the reference decompositions agree with PyTorch, and run() picks the backend's
kernel only when it is declared and no gradient is needed."""
import math

import numpy as np
import pytest

import ember
from ember import fused
from ember.backend import BackendInfo
from ember.backends.numpy_backend import NumpyBackend


def t(a, **kw):
    return ember.tensor(np.asarray(a), **kw)


def test_decompositions_match_torch(torch, rng):
    F = torch.nn.functional
    x = rng.standard_normal((4, 6))
    tx = torch.tensor(x)
    np.testing.assert_allclose(fused.softmax(t(x), dim=0).numpy(), F.softmax(tx, 0).numpy(), rtol=1e-12)
    np.testing.assert_allclose(fused.log_softmax(t(x), dim=-1).numpy(), F.log_softmax(tx, -1).numpy(), rtol=1e-12)
    y = np.array([0, 5, 2, 2])
    np.testing.assert_allclose(fused.cross_entropy(t(x), t(y)).item(), F.cross_entropy(tx, torch.tensor(y)).item(),
                               rtol=1e-12)
    w, b = rng.standard_normal(6), rng.standard_normal(6)
    np.testing.assert_allclose(fused.layer_norm(t(x), t(w), t(b), normalized_shape=(6,), eps=1e-5).numpy(),
                               F.layer_norm(tx, (6,), torch.tensor(w), torch.tensor(b), 1e-5).numpy(), atol=1e-12)
    np.testing.assert_allclose(fused.layer_norm(t(x), None, None, normalized_shape=(4, 6)).numpy(),
                               F.layer_norm(tx, (4, 6)).numpy(), atol=1e-12)
    for approximate in ("none", "tanh"):
        np.testing.assert_allclose(fused.gelu(t(x), approximate=approximate).numpy(),
                                   F.gelu(tx, approximate=approximate).numpy(), atol=1e-12)
    q, k, v = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 2))
    want = F.scaled_dot_product_attention(torch.tensor(q), torch.tensor(k), torch.tensor(v))
    np.testing.assert_allclose(fused.scaled_dot_product_attention(t(q), t(k), t(v)).numpy(), want.numpy(), atol=1e-12)
    q = rng.standard_normal((2, 5, 4))
    want = F.scaled_dot_product_attention(torch.tensor(q), torch.tensor(k), torch.tensor(v), is_causal=True)
    np.testing.assert_allclose(fused.scaled_dot_product_attention(t(q), t(k), t(v), causal=True).numpy(),
                               want.numpy(), atol=1e-12)


class Counting(NumpyBackend):
    """The reference plus a real fused softmax that counts its calls; gelu implemented, not declared."""
    name = "counting_fused"
    calls = []

    @staticmethod
    def _softmax(x, dim=-1):
        Counting.calls.append("softmax")
        e = np.exp(x - x.max(axis=dim, keepdims=True))
        return e / e.sum(axis=dim, keepdims=True)

    fused_impls = {"softmax": _softmax, "gelu": lambda x, approximate="none": x * 0}

    def capabilities(self):
        caps = super().capabilities()
        caps.fused = frozenset({"softmax"})
        return caps


@pytest.fixture
def counting():
    from ember.registry import REGISTRY
    ember.register_backend(BackendInfo("counting_fused", Counting))
    yield
    for table in (REGISTRY.infos, REGISTRY.origin, REGISTRY.loaded):     # leave the registry as it was
        table.pop("counting_fused", None)


def test_run_uses_the_declared_kernel_only_without_gradients(counting):
    x = ember.tensor([[1.0, 2.0, 3.0]], backend="counting_fused")
    assert fused.declared(x.backend) == frozenset({"softmax"})
    Counting.calls.clear()
    out = fused.run("softmax", x, dim=-1)
    assert Counting.calls == ["softmax"] and out.backend is x.backend
    np.testing.assert_allclose(out.numpy(), x.softmax(-1).numpy(), rtol=1e-6)
    # a gradient is needed: the decomposition, whose primitives have VJP rules
    xg = x.detach().requires_grad_()
    y = fused.run("softmax", xg, dim=-1)
    assert Counting.calls == ["softmax"] and y.requires_grad
    (y[0, 0]).backward()
    assert xg.grad is not None
    with ember.no_grad():
        fused.run("softmax", xg, dim=-1)
    assert Counting.calls == ["softmax", "softmax"]
    # implemented but undeclared: never used
    g = fused.run("gelu", x)
    assert g.tolist()[0][2] == pytest.approx(3.0 * 0.5 * (1 + math.erf(3 / math.sqrt(2))), rel=1e-6)

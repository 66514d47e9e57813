"""ember.fused's ops under ember.jit: one graph node each (and one for the backward op) on a
backend that declares them, the decomposition elsewhere."""

import numpy as np
import pytest
from jit_helpers import mlp_twins, train_step, twins

import ember
from ember import dispatch, fused, nn, optim
from ember.autodiff import no_grad
from ember.backends.numpy.backend import NumpyBackend
from ember.nn import functional as F


class FusedReference(NumpyBackend):
    """Declares fused ops whose kernels are ember.fused's own decompositions run on NumPy
    buffers, and counts the calls: the graph must call them, once per node and run."""

    name = "numpy-fused-reference-test"
    declares = ("cross_entropy", "cross_entropy_backward", "batch_norm", "batch_norm_backward", "softmax", "sgd_step")

    def __init__(self):
        self.calls = []
        self.fused_impls = {name: self._kernel(name) for name in self.declares}

    def _kernel(self, name):
        numpy = ember.get_backend("numpy")

        def kernel(*buffers, **params):
            self.calls.append(name)
            args = [dispatch.wrap(b, numpy) if isinstance(b, np.ndarray) else b for b in buffers]
            with no_grad():
                out = fused.FUSED[name](*args, **params)
            return tuple(None if t is None else t._data for t in out) if isinstance(out, tuple) else out._data

        return kernel

    def capabilities(self):
        caps = super().capabilities()
        caps.fused = frozenset(self.declares)
        return caps


@pytest.fixture(scope="module")
def backend():
    ember.register_backend(ember.BackendInfo(FusedReference.name, FusedReference))
    return ember.get_backend(FusedReference.name)


def _fused_nodes(jf, *args):
    return [v.params["name"] for v in jf.lower(*args).graph.nodes if v.op == "fused"]


def test_a_declared_fused_op_is_one_node_and_runs_the_backends_kernel(backend):
    x = ember.randn(5, 4)
    t = ember.tensor([0, 3, 1, 1, 2])
    f = ember.jit(lambda x, t: F.cross_entropy(x, t))
    xb, tb = x.to(backend.name), t.to(backend.name)
    backend.calls.clear()
    got = f(xb, tb)
    assert backend.calls == ["cross_entropy"]
    assert _fused_nodes(f, xb, tb) == ["cross_entropy"]
    assert not {"exp", "log", "max"} & {v.op for v in f.lower(xb, tb).graph.nodes}  # no decomposition
    np.testing.assert_allclose(got.item(), F.cross_entropy(x, t).item(), rtol=1e-6)
    assert "fused.cross_entropy(%0, %1, ignore_index=-100)" in f.graph(xb, tb)


def test_a_training_step_records_the_forward_and_the_backward_op(backend):
    ref, model, opts = mlp_twins(backend.name)
    step = ember.jit(train_step)
    x, y = ember.randn(4, 6), ember.tensor([0, 2, 1, 1])
    xb, yb = x.to(backend.name), y.to(backend.name)
    for _ in range(3):
        le, lj = train_step(ref, opts[0], x, y), step(model, opts[1], xb, yb)
        np.testing.assert_allclose(lj.item(), le.item(), rtol=1e-5)
    for p, q in zip(ref.parameters(), model.parameters()):
        np.testing.assert_allclose(q.numpy(), p.numpy(), rtol=1e-5, atol=1e-6)
    # The optimizer's steps stay elementwise work for the fusion groups, though declared.
    assert sorted(_fused_nodes(step, model, opts[1], xb, yb)) == ["cross_entropy", "cross_entropy_backward"]


def test_an_op_with_several_results_and_saved_statistics(backend):
    """batch_norm returns (out, mean, var); its backward op three gradients (None without
    parameters): one node each, the results picked by fused_output nodes."""
    build = lambda: nn.Sequential(nn.Linear(5, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 3))  # noqa: E731
    ref, model = twins(backend.name, build)
    opts = [optim.SGD(m.parameters(), lr=0.1) for m in (ref, model)]
    step = ember.jit(train_step)
    x, y = ember.randn(8, 5), ember.tensor([0, 2, 1, 1, 0, 2, 2, 1])
    xb, yb = x.to(backend.name), y.to(backend.name)
    for _ in range(3):
        le, lj = train_step(ref, opts[0], x, y), step(model, opts[1], xb, yb)
        np.testing.assert_allclose(lj.item(), le.item(), rtol=1e-5)
    for a, b in zip(list(ref.parameters()) + list(ref.buffers()), list(model.parameters()) + list(model.buffers())):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-5, atol=1e-6)
    graph = step.lower(model, opts[1], xb, yb).graph
    assert {"batch_norm", "batch_norm_backward"} <= set(_fused_nodes(step, model, opts[1], xb, yb))
    assert sum(v.op == "fused_output" for v in graph.nodes) >= 3


def test_without_the_backward_op_training_records_the_decomposition(backend, monkeypatch):
    monkeypatch.setattr(backend, "declares", ("softmax",))
    fused._DECLARED.pop(backend, None)
    try:
        x = ember.randn(3, 4).to(backend.name)
        w = ember.ones(4, backend=backend.name, requires_grad=True)
        train = ember.jit(lambda x: ember.grad(lambda w: F.softmax(x * w, -1)[:, 0].sum())(w))
        infer = ember.jit(lambda x: F.softmax(x, -1))
        assert _fused_nodes(train, x) == [] and _fused_nodes(infer, x) == ["softmax"]
        np.testing.assert_allclose(infer(x).numpy(), F.softmax(x.to("numpy"), -1).numpy(), rtol=1e-6)
    finally:
        fused._DECLARED.pop(backend, None)


def test_graphs_on_the_numpy_backend_have_fused_nodes_only_for_its_kernels():
    # the numpy backend declares batch_norm (backends/numpy/fused.py) but not cross_entropy
    ember.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.Linear(8, 3))
    opt = optim.SGD(model.parameters(), lr=0.1)
    step = ember.jit(train_step)
    x, y = ember.randn(4, 6), ember.tensor([0, 2, 1, 1])
    step(model, opt, x, y)
    nodes = step.lower(model, opt, x, y).graph.nodes
    assert sorted(v.params["name"] for v in nodes if v.op == "fused") == ["batch_norm", "batch_norm_backward"]

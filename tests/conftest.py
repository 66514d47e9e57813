"""Fixtures shared by the tests: the reference libraries, a seeded NumPy generator, and the
torch twin that checks an ember layer against the same torch layer with the same weights."""

import numpy as np
import pytest
import references
from references import known

import ember

RTOL, ATOL = 1e-4, 1e-5  # float32 comparisons of a layer against its torch twin


@pytest.fixture
def torch():
    """PyTorch, the reference for dtype rules and gradients, or where it is not installed a
    stand-in: the values a test checks go through ``known`` and come from tests/references."""
    return references.load_torch()


@pytest.fixture(autouse=True)
def _torch_references(request):
    """Tells ``known`` which test is asking (its values are stored under the test's id)."""
    references.begin(
        request.node.path,
        request.node.nodeid.split("::", 1)[1],
        live=request.node.get_closest_marker("torch") is not None,
    )
    yield
    references.end()


def pytest_sessionfinish(session):
    if references.WRITE:
        references.save_all()


def pytest_collection_modifyitems(config, items):
    """Tests marked ``torch`` compare with a live torch run (too big to store): they need it."""
    if references.load_torch() is references.ABSENT:
        skip = pytest.mark.skip(reason="compares with a live torch run: pip install torch")
        for item in items:
            if item.get_closest_marker("torch"):
                item.add_marker(skip)


@pytest.fixture
def rng():
    """A NumPy generator with a fixed seed, so every run draws the same inputs."""
    return np.random.default_rng(0)


def to_numpy_state(tmod):
    return {k: v.detach().cpu().numpy() for k, v in tmod.state_dict().items()}


class Twin:
    """Compare an ember module (or function) with a torch one, through the stored torch values
    (``known``) where torch is not installed."""

    def __init__(self, torch):
        self.torch = torch

    def load(self, emod, tmod):
        emod.load_state_dict(known(lambda: to_numpy_state(tmod)))

    def inputs(self, arrays):
        torch = self.torch
        e, t = [], []
        for a in arrays:
            if isinstance(a, np.ndarray):
                grad = a.dtype.kind == "f"
                e.append(ember.tensor(a, requires_grad=grad))
                t.append(torch.tensor(a, requires_grad=grad))
            else:
                e.append(a), t.append(a)
        return e, t

    def close(self, e, t, what, rtol=RTOL, atol=ATOL):
        """Assert ember's ``e`` equals torch's ``t`` (a tensor, or the NumPy value ``known`` gave)."""
        assert e is not None, f"{what}: ember gave no value"
        t = t if isinstance(t, np.ndarray) else np.asarray(known(t))
        e = e.numpy() if isinstance(e, ember.Tensor) else np.asarray(e)
        assert e.shape == t.shape, f"{what}: shape {e.shape} vs torch {t.shape}"
        np.testing.assert_allclose(e, t, rtol=rtol, atol=atol, err_msg=what)

    def check(self, efn, tfn, *arrays, outputs=lambda out: [out], rtol=RTOL, atol=ATOL, emod=None, tmod=None, seed=0):
        """Forward both, backprop the same random cotangents, compare outputs, the input
        gradients and (given the modules) every parameter's gradient by name."""
        torch = self.torch
        e_in, t_in = self.inputs(arrays)
        e_out, t_out = outputs(efn(*e_in)), tfn(*t_in)
        # without torch, the stand-in cannot be split into outputs; each one is the stand-in
        t_out = [t_out] * len(e_out) if isinstance(t_out, references.Absent) else outputs(t_out)
        assert len(e_out) == len(t_out), f"{len(e_out)} outputs vs torch's {len(t_out)}"
        rng = np.random.default_rng(seed)
        e_loss, t_loss = None, None
        for i, (eo, to) in enumerate(zip(e_out, t_out)):
            self.close(eo, to, f"output {i}", rtol, atol)
            if not known(lambda: to.requires_grad):
                continue
            cot = rng.standard_normal(tuple(eo.shape)).astype(np.float32)
            el = (eo * ember.tensor(cot)).sum()
            tl = (to * torch.tensor(cot)).sum()
            e_loss = el if e_loss is None else e_loss + el
            t_loss = tl if t_loss is None else t_loss + tl
        if e_loss is None:
            return e_out, t_out
        e_loss.backward()
        t_loss.backward()
        for i, (a, ei, ti) in enumerate(zip(arrays, e_in, t_in)):
            if isinstance(a, np.ndarray) and a.dtype.kind == "f":
                t_grad = known(lambda: ti.grad)
                if t_grad is not None:
                    self.close(ei.grad, t_grad, f"grad of input {i}", rtol, atol)
        if emod is not None:
            eparams = dict(emod.named_parameters())
            t_grads = known(lambda: {n: p.grad for n, p in tmod.named_parameters() if p.grad is not None})
            for name, t_grad in t_grads.items():
                self.close(eparams[name].grad, t_grad, f"grad of {name}", rtol, atol)
        return e_out, t_out

    def module(self, emod, tmod, *arrays, **kw):
        """Parameter count, names, forward and gradients of a module pair (weights torch -> ember)."""
        tnames = known(lambda: [n for n, _ in tmod.named_parameters()])
        assert [n for n, _ in emod.named_parameters()] == tnames
        assert emod.num_parameters() == known(lambda: sum(p.numel() for p in tmod.parameters()))
        assert list(emod.state_dict()) == known(lambda: list(tmod.state_dict()))
        self.load(emod, tmod)
        return self.check(emod, tmod, *arrays, emod=emod, tmod=tmod, **kw)


@pytest.fixture
def twin(torch):
    torch.manual_seed(0)
    return Twin(torch)


@pytest.fixture
def lacking_backend():
    """A backend that lists none of the dtypes a backend may leave out of its capabilities but
    ember's contract (the storage dtypes bfloat16, float8, int4, ...; text), as a plugin may:
    the python backend without them, registered as ``python-lacking`` for the test."""
    import dataclasses

    from ember import dtypes as D
    from ember.backend import BackendInfo
    from ember.backends.python.backend import PythonBackend
    from ember.registry import REGISTRY

    class Lacking(PythonBackend):
        name = "python-lacking"

        def capabilities(self):
            caps = super().capabilities()
            return dataclasses.replace(caps, dtypes=caps.dtypes - frozenset(D.STORAGE) - frozenset(D.TEXT))

    backend = Lacking()
    ember.register_backend(BackendInfo(backend.name, lambda: backend))
    yield backend
    for table in (REGISTRY.infos, REGISTRY.loaded, REGISTRY.origin):
        table.pop(backend.name, None)

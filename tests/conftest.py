"""Fixtures shared by the tests: the reference libraries, a seeded NumPy generator, and the
torch twin that checks an ember layer against the same torch layer with the same weights."""
import numpy as np
import pytest

import ember

RTOL, ATOL = 1e-4, 1e-5     # float32 comparisons of a layer against its torch twin


@pytest.fixture
def torch():
    """PyTorch, the reference for dtype rules and gradients (a test-only dependency)."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    return torch


@pytest.fixture
def rng():
    """A NumPy generator with a fixed seed, so every run draws the same inputs."""
    return np.random.default_rng(0)


def to_numpy_state(tmod):
    return {k: v.detach().cpu().numpy() for k, v in tmod.state_dict().items()}


class Twin:
    """Compare an ember module (or function) with a torch one."""

    def __init__(self, torch):
        self.torch = torch

    def load(self, emod, tmod):
        emod.load_state_dict(to_numpy_state(tmod))

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
        assert e is not None, f"{what}: ember gave no value"
        t = t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)
        e = e.numpy() if isinstance(e, ember.Tensor) else np.asarray(e)
        assert e.shape == t.shape, f"{what}: shape {e.shape} vs torch {t.shape}"
        np.testing.assert_allclose(e, t, rtol=rtol, atol=atol, err_msg=what)

    def check(self, efn, tfn, *arrays, outputs=lambda out: [out], rtol=RTOL, atol=ATOL, emod=None, tmod=None,
              seed=0):
        """Forward both, backprop the same random cotangents, compare outputs, the input
        gradients and (given the modules) every parameter's gradient by name."""
        torch = self.torch
        e_in, t_in = self.inputs(arrays)
        e_out, t_out = outputs(efn(*e_in)), outputs(tfn(*t_in))
        rng = np.random.default_rng(seed)
        e_loss, t_loss = None, None
        for i, (eo, to) in enumerate(zip(e_out, t_out)):
            self.close(eo, to, f"output {i}", rtol, atol)
            if not to.requires_grad:
                continue
            cot = rng.standard_normal(tuple(to.shape)).astype(np.float32)
            el = (eo * ember.tensor(cot)).sum()
            tl = (to * torch.tensor(cot)).sum()
            e_loss = el if e_loss is None else e_loss + el
            t_loss = tl if t_loss is None else t_loss + tl
        if t_loss is None:
            return e_out, t_out
        e_loss.backward()
        t_loss.backward()
        for i, (ei, ti) in enumerate(zip(e_in, t_in)):
            if isinstance(ti, torch.Tensor) and ti.requires_grad and ti.grad is not None:
                self.close(ei.grad, ti.grad, f"grad of input {i}", rtol, atol)
        if emod is not None:
            eparams = dict(emod.named_parameters())
            for name, tp in tmod.named_parameters():
                if tp.grad is not None:
                    self.close(eparams[name].grad, tp.grad, f"grad of {name}", rtol, atol)
        return e_out, t_out

    def module(self, emod, tmod, *arrays, **kw):
        """Parameter count, names, forward and gradients of a module pair (weights torch -> ember)."""
        tnames = [n for n, _ in tmod.named_parameters()]
        assert [n for n, _ in emod.named_parameters()] == tnames
        assert emod.num_parameters() == sum(p.numel() for p in tmod.parameters())
        assert list(emod.state_dict()) == list(tmod.state_dict())
        self.load(emod, tmod)
        return self.check(emod, tmod, *arrays, emod=emod, tmod=tmod, **kw)


@pytest.fixture
def twin(torch):
    torch.manual_seed(0)
    return Twin(torch)

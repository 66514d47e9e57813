"""The training step and the twin models the ember.jit tests share: a model on the NumPy
reference and a copy with the same weights on the backend under test, trained side by side."""

import ember
from ember import nn, optim
from ember.nn import functional as F


def train_step(model, opt, x, y):
    """One classification step (forward, cross-entropy, backward, update); returns the loss."""
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


def twins(backend, build):
    """Two models from ``build`` with the same weights: the reference, and a copy moved to the
    backend named ``backend``."""
    ember.manual_seed(0)
    ref = build()
    model = build().to(backend)
    model.load_state_dict(ref.state_dict())
    return ref, model


def mlp_twins(backend):
    """:func:`twins` of a small MLP, each with SGD with momentum (a buffer per parameter)."""
    ref, model = twins(backend, lambda: nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3)))
    return ref, model, [optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (ref, model)]

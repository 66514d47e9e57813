"""Fixtures shared by the core tests: the reference libraries and a seeded NumPy generator."""
import numpy as np
import pytest


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

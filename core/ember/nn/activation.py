"""Activation layers and Dropout: thin Module wrappers around ember.nn.functional."""

from __future__ import annotations

from ..errors import located
from . import functional as F
from .module import Module


class ReLU(Module):
    """max(x, 0). (``inplace`` is accepted for PyTorch compatibility and ignored.)"""

    def __init__(self, inplace=False):
        super().__init__()

    def forward(self, x):
        return F.relu(x)


class LeakyReLU(Module):
    def __init__(self, negative_slope=0.01, inplace=False):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        return F.leaky_relu(x, self.negative_slope)

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}"


class GELU(Module):
    """x * Phi(x); ``approximate='tanh'`` for the tanh formula."""

    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(x, self.approximate)

    def extra_repr(self):
        return f"approximate={self.approximate!r}"


class SiLU(Module):
    def __init__(self, inplace=False):
        super().__init__()

    def forward(self, x):
        return F.silu(x)


class Tanh(Module):
    def forward(self, x):
        return x.tanh()


class Sigmoid(Module):
    def forward(self, x):
        return x.sigmoid()


class Softmax(Module):
    def __init__(self, dim=-1):
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, x):
        return x.softmax(self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    def forward(self, x):
        return x.log_softmax(self.dim)


class Dropout(Module):
    """Zero elements with probability ``p`` while training (scaling the rest by 1/(1-p)).

    Draws from ``generator`` when given, else from ember's default generator.

    >>> import ember
    >>> from ember import nn
    >>> nn.Dropout(0.5).eval()(ember.ones(3)).tolist()
    [1.0, 1.0, 1.0]
    """

    def __init__(self, p=0.5, inplace=False, generator=None):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise located(ValueError, f"dropout probability must be in [0, 1], got {p}")
        self.p, self.generator = p, generator

    def forward(self, x):
        return F.dropout(x, self.p, self.training, self.generator)

    def extra_repr(self):
        return f"p={self.p}, inplace=False"

"""Activations and dropout. softmax, log_softmax and gelu are fused ops (ember.fused): their
reference decompositions and backward ops are registered at the end of this module.

>>> import ember
>>> [round(v, 4) for v in softmax(ember.tensor([[1.0, 2.0, 3.0]]))[0].tolist()]
[0.09, 0.2447, 0.6652]
"""

from __future__ import annotations

import math

from ... import fused
from ...errors import located
from ...random import rand
from ...tensor import where


def relu(input):
    """max(x, 0)."""
    return input.relu()


def leaky_relu(input, negative_slope=0.01):
    """x where x > 0, else negative_slope * x."""
    return where(input > 0, input, input * negative_slope)


def gelu(input, approximate="none"):
    """x * Phi(x), exactly (erf) or with PyTorch's ``approximate='tanh'`` formula.

    >>> import ember
    >>> round(gelu(ember.tensor([1.0])).item(), 4)
    0.8413
    """
    if approximate not in ("none", "tanh"):
        raise located(ValueError, f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return fused.run("gelu", input, approximate=approximate)


def silu(input):
    """x * sigmoid(x) (also called swish)."""
    return input * input.sigmoid()


def sigmoid(input):
    return input.sigmoid()


def tanh(input):
    return input.tanh()


def softmax(input, dim=-1):
    """``exp(x) / sum(exp(x))`` along ``dim`` (a fused op: a backend may run it as one kernel)."""
    return fused.run("softmax", input, dim=dim)


def log_softmax(input, dim=-1):
    """``x - logsumexp(x)`` along ``dim`` (a fused op)."""
    return fused.run("log_softmax", input, dim=dim)


def dropout(input, p=0.5, training=True, generator=None):
    """Zero each element with probability ``p`` and scale the rest by ``1/(1-p)``; identity when
    not training. Draws from ``generator`` or ember's default one (``ember.manual_seed``).

    >>> import ember
    >>> dropout(ember.ones(4), 0.5, training=False).tolist()
    [1.0, 1.0, 1.0, 1.0]
    """
    if not 0.0 <= p <= 1.0:
        raise located(ValueError, f"dropout probability must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0
    keep = rand(input.shape, dtype=input.dtype, generator=generator, backend=input._backend) >= p
    return input * (keep.to(input.dtype) * (1.0 / (1.0 - p)))


# ============================================================================== the fused ops
# References in Tensor ops; backward ops take the upstream gradient first (PyTorch's
# *_backward order) and return the forward op's input gradient; VJP rules hand the work to the
# backward op through fused.run (its kernel, or its decomposition for a higher derivative).
def _softmax_reference(x, *, dim=-1):
    """``exp(x) / sum(exp(x))`` along ``dim``, shifted by the max for stability."""
    return x.softmax(dim)


def _log_softmax_reference(x, *, dim=-1):
    """``x - logsumexp(x)`` along ``dim``."""
    return x.log_softmax(dim)


def _gelu_reference(x, *, approximate="none"):
    """GELU: ``x * Phi(x)`` with the exact erf, or PyTorch's tanh approximation."""
    if approximate == "tanh":
        inner = (x + x * x * x * 0.044715) * math.sqrt(2 / math.pi)
        return x * 0.5 * (inner.tanh() + 1)
    return x * 0.5 * ((x * (1 / math.sqrt(2))).erf() + 1)


def _softmax_backward(grad, out, *, dim=-1):
    """The VJP of softmax from its output ``out``: ``out * (grad - sum(grad * out))``."""
    return out * (grad - (grad * out).sum(dim, keepdim=True))


def _log_softmax_backward(grad, out, *, dim=-1):
    """The VJP of log_softmax from its output ``out``: ``grad - exp(out) * sum(grad)``."""
    return grad - out.exp() * grad.sum(dim, keepdim=True)


def _gelu_backward(grad, x, *, approximate="none"):
    """d gelu / dx times ``grad``: ``Phi(x) + x * phi(x)``, or the tanh form's derivative."""
    if approximate == "tanh":
        k = math.sqrt(2 / math.pi)
        t = ((x + x * x * x * 0.044715) * k).tanh()
        slope = (x * x * (3 * 0.044715) + 1) * k
        return grad * ((t + 1) * 0.5 + x * 0.5 * (1 - t * t) * slope)
    cdf = ((x * (1 / math.sqrt(2))).erf() + 1) * 0.5
    pdf = (x * x * -0.5).exp() * (1 / math.sqrt(2 * math.pi))
    return grad * (cdf + x * pdf)


def _softmax_vjp(g, out, x, *, dim=-1):
    return (fused.run("softmax_backward", g, out, dim=dim),)


def _log_softmax_vjp(g, out, x, *, dim=-1):
    return (fused.run("log_softmax_backward", g, out, dim=dim),)


def _gelu_vjp(g, out, x, *, approximate="none"):
    return (fused.run("gelu_backward", g, x, approximate=approximate),)


fused.defop("softmax_backward", _softmax_backward)
fused.defop("log_softmax_backward", _log_softmax_backward)
fused.defop("gelu_backward", _gelu_backward)
fused.defop("softmax", _softmax_reference, "softmax_backward", _softmax_vjp)
fused.defop("log_softmax", _log_softmax_reference, "log_softmax_backward", _log_softmax_vjp)
fused.defop("gelu", _gelu_reference, "gelu_backward", _gelu_vjp)

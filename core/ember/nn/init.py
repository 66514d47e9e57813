"""``ember.nn.init``: fill a tensor in place with PyTorch's initialization schemes.

Every function takes an optional ``generator``; without one it draws from ember's default
generator, so ``ember.manual_seed(s)`` before building a model makes it reproducible.

>>> import ember
>>> from ember.nn import init
>>> w = init.kaiming_uniform_(ember.empty(4, 3), generator=ember.Generator(0))
>>> bool((w.abs() <= (6 / 3) ** 0.5).all())
True
"""

from __future__ import annotations

import math

from .. import random as R
from ..autodiff import no_grad
from ..errors import ShapeError, located
from ..tensor import where

__all__ = [
    "calculate_gain",
    "uniform_",
    "normal_",
    "constant_",
    "zeros_",
    "ones_",
    "xavier_uniform_",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "trunc_normal_",
]

# The gain table of torch.nn.init.calculate_gain.
_GAINS = {
    "linear": 1.0,
    "identity": 1.0,
    "conv1d": 1.0,
    "conv2d": 1.0,
    "conv3d": 1.0,
    "conv_transpose1d": 1.0,
    "conv_transpose2d": 1.0,
    "conv_transpose3d": 1.0,
    "sigmoid": 1.0,
    "tanh": 5.0 / 3,
    "relu": math.sqrt(2.0),
    "selu": 3.0 / 4,
}


def calculate_gain(nonlinearity, param=None):
    """The recommended std multiplier for a nonlinearity (PyTorch's table).

    >>> round(calculate_gain("relu"), 4)
    1.4142
    """
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity not in _GAINS:
        raise located(ValueError, f"unknown nonlinearity {nonlinearity!r}; known: leaky_relu, {', '.join(_GAINS)}")
    return _GAINS[nonlinearity]


def _fans(tensor):
    """(fan_in, fan_out): dim 1 and dim 0 times the receptive field (the dims after 1)."""
    if tensor.ndim < 2:
        raise located(ShapeError, f"fan in/out needs a tensor with at least 2 dims, got shape {tensor.shape}")
    receptive = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _fan(tensor, mode):
    if mode not in ("fan_in", "fan_out"):
        raise located(ValueError, f"mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = _fans(tensor)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    """Fill with U(a, b)."""
    with no_grad():
        return R.uniform_(tensor, a, b, generator)


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    """Fill with N(mean, std^2)."""
    with no_grad():
        return R.normal_(tensor, mean, std, generator)


def constant_(tensor, val):
    with no_grad():
        return tensor.fill_(val)


def zeros_(tensor):
    return constant_(tensor, 0.0)


def ones_(tensor):
    return constant_(tensor, 1.0)


def xavier_uniform_(tensor, gain=1.0, generator=None):
    """U(-a, a) with ``a = gain * sqrt(6 / (fan_in + fan_out))`` (Glorot & Bengio, 2010)."""
    fan_in, fan_out = _fans(tensor)
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -a, a, generator)


def xavier_normal_(tensor, gain=1.0, generator=None):
    """N(0, std^2) with ``std = gain * sqrt(2 / (fan_in + fan_out))``."""
    fan_in, fan_out = _fans(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)


def kaiming_uniform_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """U(-b, b) with ``b = gain * sqrt(3 / fan)`` (He et al., 2015). PyTorch's Linear and Conv
    use ``a=sqrt(5)``, which gives ``b = 1 / sqrt(fan_in)``."""
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / _fan(tensor, mode))
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """N(0, std^2) with ``std = gain / sqrt(fan)``."""
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode))
    return normal_(tensor, 0.0, std, generator)


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """N(mean, std^2) conditioned on [a, b]: redraw the values that fall outside (a few rounds
    over the whole tensor, never a loop over elements).

    >>> import ember
    >>> t = trunc_normal_(ember.empty(1000), std=1.0, a=-0.5, b=0.5)
    >>> bool(((t >= -0.5) & (t <= 0.5)).all())
    True
    """
    if not a < b:
        raise located(ValueError, f"trunc_normal_: needs a < b, got a={a}, b={b}")
    with no_grad():
        draw = R.randn(tensor.shape, dtype=tensor.dtype, generator=generator, backend=tensor._backend) * std + mean
        for _ in range(100):
            outside = (draw < a) | (draw > b)
            if not bool(outside.any()):
                break
            fresh = R.randn(tensor.shape, dtype=tensor.dtype, generator=generator, backend=tensor._backend) * std + mean
            draw = where(outside, fresh, draw)
        else:  # a window far in the tail: fall back to clamping what is left
            draw = draw.clamp(a, b)
        return tensor.copy_(draw)

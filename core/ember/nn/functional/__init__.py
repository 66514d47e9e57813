"""``ember.nn.functional`` (imported as ``F``): layers and losses as plain functions.

Everything here is a short composition of Tensor operations, so gradients come from the
primitives' VJP rules and every backend runs it unchanged. Convolution is the ``conv2d``
primitive (a transposed convolution its input gradient); a k x k pool is the elementwise max
(or sum) of k*k strided slices. softmax, log_softmax, gelu, layer_norm, max_pool2d,
training-mode batch_norm and the common cross_entropy are fused ops (``ember.fused``), so a backend may run them, forward and
backward, as its own kernels; each topic module registers its ops' reference
decompositions. Names, arguments and defaults follow ``torch.nn.functional``.

The modules, by topic: linear.py (linear, conv2d) · conv.py (conv1d, conv_transpose2d) ·
pooling.py · activation.py · normalization.py · shape.py (embedding, pad, one_hot) ·
upsampling.py (interpolate) · attention.py · loss.py.

>>> import ember
>>> import ember.nn.functional as F
>>> F.relu(ember.tensor([-1.0, 2.0])).tolist()
[0.0, 2.0]
"""

from .activation import dropout, gelu, leaky_relu, log_softmax, relu, sigmoid, silu, softmax, tanh
from .attention import scaled_dot_product_attention
from .conv import conv1d, conv_transpose2d, transposed_size
from .linear import _batched, _pair, _same_padding, conv2d, linear  # noqa: F401 - the private ones for nn's layers
from .loss import (
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cross_entropy,
    huber_loss,
    l1_loss,
    mse_loss,
    nll_loss,
    smooth_l1_loss,
)
from .normalization import batch_norm, group_norm, layer_norm, rms_norm
from .pooling import adaptive_avg_pool2d, avg_pool2d, max_pool2d, pool_geometry
from .shape import embedding, one_hot, pad
from .upsampling import interpolate

__all__ = [
    "linear",
    "conv1d",
    "conv2d",
    "conv_transpose2d",
    "max_pool2d",
    "avg_pool2d",
    "adaptive_avg_pool2d",
    "relu",
    "leaky_relu",
    "gelu",
    "silu",
    "sigmoid",
    "tanh",
    "softmax",
    "log_softmax",
    "dropout",
    "batch_norm",
    "group_norm",
    "layer_norm",
    "rms_norm",
    "interpolate",
    "embedding",
    "pad",
    "one_hot",
    "scaled_dot_product_attention",
    "cross_entropy",
    "nll_loss",
    "mse_loss",
    "l1_loss",
    "huber_loss",
    "smooth_l1_loss",
    "binary_cross_entropy_with_logits",
    "binary_cross_entropy",
    "pool_geometry",
    "transposed_size",
]

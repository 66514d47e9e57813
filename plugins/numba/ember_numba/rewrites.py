"""The NumPy runner's graph rewrites (ember.backends.numpy.rewrites) with this backend's kernels.

The runner rewrites a few node patterns of convolutional training steps as one kernel each,
where the backend computes the pattern's values bit for bit with it. Here the pattern's
``where``/``gt``/``add`` are NumPy's bits (the elementwise kernels), the pooling kernels are
exact and the convolution is this backend's own, so each kernel below gives what the nodes
it replaces give on this backend, to the bit; NumbaBackend.rewrite_kernels names them.

| kernel | pattern | saves (LeNet, W2) |
|---|---|---|
| :func:`conv2d_bias_relu` | ``where(gt(p, 0), p, 0)``, ``p = conv2d(x, w) + bias`` | a pass over the activation: the bias and ReLU go on each chunk of the convolution's output as the chunk finishes, in cache |
| :func:`conv2d_bias` | ``conv2d(x, w) + bias`` | a pass over the activation: the bias goes on each chunk as it finishes (ResNet's downsample layers) |
| :func:`relu_max_pool2d_backward` | ``where(c, max_pool2d_backward(g, r), 0)``, ``r`` ReLU's output under mask ``c`` | the full-size ``where`` and the forward pass's mask: ReLU's gradient is taken on the pooled gradient |
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange, uint64

from . import launch
from .epilogue import Epilogue
from .fused.common import FLOATS, JIT
from .fused.pooling import max_pool2d, max_pool2d_backward, relu_max_pool_2x2_backward


@numba.njit(parallel=True, **JIT)
def _relu_gate(g, best, out):
    """out = g where best > 0, else +0.0 (g's bits kept)."""
    zero = out.dtype.type(0)
    for i in prange(uint64(g.size)):
        out[i] = g[i] if best[i] > 0 else zero


def relu_max_pool2d_backward(grad, r, best=None, **pool):
    """``where(r > 0, max_pool2d_backward(grad, r), 0)`` for a ReLU output ``r`` and disjoint
    windows: ReLU's gradient taken on the pooled gradient, then the pool's backward kernel.
    A window's first maximum is above zero exactly when ``best`` (its pooled output, computed
    from ``r`` when not given) is; there the backward writes ``0 + grad`` as before,
    elsewhere ``0 + 0``: the pattern's bits. 2x2 pools do it in one pass, in the vector
    kernel's registers (fused/pooling.py); others gate the pooled gradient first."""
    dx = relu_max_pool_2x2_backward(grad, r, **pool)
    if dx is not None:
        return dx
    if best is None:
        best = max_pool2d(r, **pool)
    if grad.dtype not in FLOATS or best.dtype != grad.dtype or best.shape != grad.shape:
        return max_pool2d_backward(np.where(best > 0, grad, 0).astype(grad.dtype), r, **pool)
    gated = np.empty(grad.shape, grad.dtype)
    flat = [np.ascontiguousarray(a).reshape(-1) for a in (grad, best)]
    launch.run(launch.for_work(_relu_gate, grad.size), grad.size, *flat, gated.reshape(-1))
    return max_pool2d_backward(gated, r, **pool)


def conv2d_bias(x, w, bias, **params):
    """``conv2d(x, w) + bias``: the convolution, with the bias added to each block of its
    output as it is made (epilogue.py)."""
    from . import conv  # loaded at the first convolution (backend.LAZY): an MLP never needs it

    return conv._conv2d(x, w, epilogue=Epilogue(bias), **params)


def conv2d_bias_relu(x, w, bias, **params):
    """``where(gt(p, 0), p, 0)`` with ``p = conv2d(x, w) + bias``: the convolution, with the
    bias and ReLU applied to each block of its output as it is made (epilogue.py)."""
    from . import conv

    return conv._conv2d(x, w, epilogue=Epilogue(bias, relu=True), **params)


#: kernel name -> function, as ember.backends.numpy.rewrites.KERNELS names them.
KERNELS = {
    "conv2d_bias_relu": conv2d_bias_relu,
    "conv2d_bias": conv2d_bias,
    "relu_max_pool2d_backward": relu_max_pool2d_backward,
}

"""Fused ops (ember.fused) the NumPy backend runs as its own kernels.

| op | kernel |
|---|---|
| ``max_pool2d`` | the running maximum of the k*k kernel-position slices, into one buffer |
| ``max_pool2d_backward`` | each window's first maximum found again from the slices (a small int map of kernel positions), then one masked add per kernel position into a padded buffer |

The reference decomposition builds a flat index per output and scatters the gradient with
``index_add`` (``np.add.at``, slow) through Tensor ops; these kernels do the same arithmetic
on whole arrays, lay their results out like their input (a channels-last activation from
conv.py stays channels last), and make the same choices: padding counts as -inf, the first
maximum wins and a later NaN replaces it. Integer and float16 inputs go to the reference.
"""
from __future__ import annotations

import numpy as np


def _reference(name, *args, **params):
    """Run the reference decomposition of fused op ``name`` on NumPy buffers."""
    import ember
    from ember import dispatch
    from ember.conformance import fused_ops
    backend = ember.get_backend("numpy")
    wrapped = [dispatch.wrap(a, backend) if isinstance(a, np.ndarray) else a for a in args]
    with ember.no_grad():
        out = fused_ops()[name](*wrapped, **params)
    return out._data


def _views(a, kernel, stride, dilation, out_hw):
    """One strided view of ``a`` per kernel position, in kernel order: view n = (i, j) holds
    element (i, j) of every window."""
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel, stride, dilation, out_hw
    return [a[..., i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
            for i in range(kh) for j in range(kw)]


def _padded(x, kernel_size, stride, padding, dilation, ceil_mode):
    """``(padded, (top, left), (OH, OW))``: ``x`` padded with -inf (ceil_mode's extra cells
    included; ``x`` itself when nothing is added), where x starts in it, the output size."""
    from ember.nn.functional.pooling import pool_geometry
    (oh, eh), (ow, ew) = (pool_geometry(x.shape[-2 + a], kernel_size[a], stride[a], padding[a], dilation[a],
                                        ceil_mode) for a in range(2))
    (ph, pw), (h, w) = padding, x.shape[-2:]
    if not (ph or pw or eh or ew):
        return x, (0, 0), (oh, ow)
    padded = np.full(x.shape[:-2] + (h + 2 * ph + eh, w + 2 * pw + ew), -np.inf, dtype=x.dtype)
    padded[..., ph:ph + h, pw:pw + w] = x
    return padded, (ph, pw), (oh, ow)


def _kernel_covers(x):
    return x.dtype in (np.float32, np.float64) and x.ndim >= 3


def max_pool2d(x, *, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """Max over sliding windows: ``np.maximum`` of the kernel-position slices into one buffer."""
    params = {"kernel_size": kernel_size, "stride": stride, "padding": padding, "dilation": dilation,
              "ceil_mode": ceil_mode}
    if not _kernel_covers(x):
        return _reference("max_pool2d", x, **params)
    padded, _, out_hw = _padded(x, kernel_size, stride, padding, dilation, ceil_mode)
    slices = _views(padded, kernel_size, stride, dilation, out_hw)
    if len(slices) == 1:
        return slices[0].copy(order="K")
    out = np.maximum(slices[0], slices[1])           # NaN propagates: NaN wins, as in the reference
    for piece in slices[2:]:
        np.maximum(out, piece, out=out)
    return out


def max_pool2d_backward(grad, x, *, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """Each output's ``grad`` added at its window's first maximum in ``x``."""
    params = {"kernel_size": kernel_size, "stride": stride, "padding": padding, "dilation": dilation,
              "ceil_mode": ceil_mode}
    if not _kernel_covers(x) or grad.dtype != x.dtype:
        return _reference("max_pool2d_backward", grad, x, **params)
    padded, (top, left), out_hw = _padded(x, kernel_size, stride, padding, dilation, ceil_mode)
    slices = _views(padded, kernel_size, stride, dilation, out_hw)
    best = slices[0].copy(order="K")
    arg = np.zeros_like(best, dtype=np.int16 if len(slices) < 2 ** 15 else np.int64)
    better = np.empty_like(best, dtype=bool)
    for n, piece in enumerate(slices[1:], 1):
        np.greater(piece, best, out=better)
        better |= np.isnan(piece)                    # a later NaN replaces the choice
        np.copyto(arg, n, where=better)
        np.maximum(best, piece, out=best)
    dx = np.zeros_like(padded)                       # laid out like x (zeros_like keeps the strides' order)
    for n, target in enumerate(_views(dx, kernel_size, stride, dilation, out_hw)):
        np.add(target, grad, out=target, where=(arg == n))     # overlapping windows accumulate
    h, w = x.shape[-2:]
    return dx[..., top:top + h, left:left + w]


#: fused op name -> kernel: what the backend declares (backend.py)
IMPLS = {"max_pool2d": max_pool2d, "max_pool2d_backward": max_pool2d_backward}

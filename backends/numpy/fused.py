"""Fused ops (ember.fused) the NumPy backend runs as its own kernels.

| op | kernel |
|---|---|
| ``max_pool2d`` | the running maximum of the k*k kernel-position slices, into one buffer |
| ``max_pool2d_backward`` | each window's first maximum found again from the slices (a small int map of kernel positions), then per kernel position the gradient written (disjoint windows) or added (overlapping ones) into a padded buffer |
| ``batch_norm`` | the statistics in float64 sums, the output in two passes into one buffer |
| ``batch_norm_backward`` | the two per-channel sums, then ``dx`` in four passes over one buffer |

The reference decomposition builds a flat index per output and scatters the gradient with
``index_add`` (``np.add.at``, slow) through Tensor ops; these kernels do the same arithmetic
on whole arrays, lay their results out like their input (a channels-last activation from
conv.py stays channels last), and make the same choices: padding counts as -inf, the first
maximum wins and a later NaN replaces it. Batch norm's reference makes about twice the passes
over the activation and keeps each intermediate alive for the backward pass (in a jit'd
ResNet that is most of the peak memory); its kernels save only the statistics. Integer and
float16 inputs go to the reference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def _reference(name, *args, **params):
    """Run the reference decomposition of fused op ``name`` on NumPy buffers."""
    from ember.conformance import run_reference

    return run_reference("numpy", name, *args, **params)


def _views(a, kernel, stride, dilation, out_hw):
    """One strided view of ``a`` per kernel position, in kernel order: view n = (i, j) holds
    element (i, j) of every window."""
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel, stride, dilation, out_hw
    return [
        a[..., i * dh : i * dh + sh * (oh - 1) + 1 : sh, j * dw : j * dw + sw * (ow - 1) + 1 : sw]
        for i in range(kh)
        for j in range(kw)
    ]


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _pool_args(kernel_size, stride, padding, dilation):
    """The parameters as pairs (the op may be called with ints, and ``stride=None`` for the kernel size)."""
    return (
        _pair(kernel_size),
        _pair(kernel_size if stride is None or stride == () else stride),
        _pair(padding),
        _pair(dilation),
    )


def _padded(x, kernel_size, stride, padding, dilation, ceil_mode):
    """``(padded, (top, left), (OH, OW))``: ``x`` padded with -inf (ceil_mode's extra cells
    included; ``x`` itself when nothing is added), where x starts in it, the output size."""
    from ember.nn.functional.pooling import pool_geometry

    (oh, eh), (ow, ew) = (
        pool_geometry(x.shape[-2 + a], kernel_size[a], stride[a], padding[a], dilation[a], ceil_mode) for a in range(2)
    )
    (ph, pw), (h, w) = padding, x.shape[-2:]
    if not (ph or pw or eh or ew):
        return x, (0, 0), (oh, ow)
    padded = np.full(x.shape[:-2] + (h + 2 * ph + eh, w + 2 * pw + ew), -np.inf, dtype=x.dtype)
    padded[..., ph : ph + h, pw : pw + w] = x
    return padded, (ph, pw), (oh, ow)


def _kernel_covers(x):
    return x.dtype in (np.float32, np.float64) and x.ndim >= 3


def max_pool2d(x, *, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """Max over sliding windows: ``np.maximum`` of the kernel-position slices into one buffer."""
    if not _kernel_covers(x):
        return _reference(
            "max_pool2d",
            x,
            kernel_size=kernel_size,
            stride=stride,
            padding=padding,
            dilation=dilation,
            ceil_mode=ceil_mode,
        )
    kernel_size, stride, padding, dilation = _pool_args(kernel_size, stride, padding, dilation)
    padded, _, out_hw = _padded(x, kernel_size, stride, padding, dilation, ceil_mode)
    slices = _views(padded, kernel_size, stride, dilation, out_hw)
    if len(slices) == 1:
        return slices[0].copy(order="K")
    out = np.maximum(slices[0], slices[1])  # NaN propagates: NaN wins, as in the reference
    for piece in slices[2:]:
        np.maximum(out, piece, out=out)
    return out


def max_pool2d_backward(grad, x, *, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """Each output's ``grad`` added at its window's first maximum in ``x``."""
    if not _kernel_covers(x) or grad.dtype != x.dtype:
        return _reference(
            "max_pool2d_backward",
            grad,
            x,
            kernel_size=kernel_size,
            stride=stride,
            padding=padding,
            dilation=dilation,
            ceil_mode=ceil_mode,
        )
    kernel_size, stride, padding, dilation = _pool_args(kernel_size, stride, padding, dilation)
    padded, (top, left), out_hw = _padded(x, kernel_size, stride, padding, dilation, ceil_mode)
    slices = _views(padded, kernel_size, stride, dilation, out_hw)
    best = slices[0].copy(order="K")
    arg = np.zeros_like(best, dtype=np.int16 if len(slices) < 2**15 else np.int64)
    better = np.empty_like(best, dtype=bool)
    for n, piece in enumerate(slices[1:], 1):
        np.greater(piece, best, out=better)
        better |= np.isnan(piece)  # a later NaN replaces the choice
        # positions only grow: a maximum is the select (np.copyto's where= is ten times slower)
        np.maximum(arg, np.multiply(better, n, dtype=arg.dtype), out=arg)
        np.maximum(best, piece, out=best)
    dx = np.zeros_like(padded)  # laid out like x (zeros_like keeps the strides' order)
    targets = _views(dx, kernel_size, stride, dilation, out_hw)
    if all(s >= d * (k - 1) + 1 for k, s, d in zip(kernel_size, stride, dilation)):
        # Disjoint windows: each cell takes at most one gradient, so it is written, not added,
        # as the gradient's bits masked by the kernel-position map (exact, infinities included).
        itype = {4: np.int32, 8: np.int64}[x.dtype.itemsize]
        bits, mask = grad.view(itype), np.empty_like(arg, dtype=itype)
        for n, target in enumerate(targets):
            np.negative(arg == n, dtype=itype, out=mask)
            np.bitwise_and(bits, mask, out=target.view(itype))
    else:
        for n, target in enumerate(targets):
            np.add(target, grad, out=target, where=(arg == n))  # overlapping windows accumulate
    h, w = x.shape[-2:]
    return dx[..., top : top + h, left : left + w]


def _channel_axes(x):
    return (0,) + tuple(range(2, x.ndim))


def _per_channel(v, x):
    """A (C,) vector as (1, C, 1, ...) in ``x``'s dtype, to broadcast against ``x``."""
    return v.astype(x.dtype, copy=False).reshape((1, -1) + (1,) * (x.ndim - 2))


def _channels_cover(x, *vectors):
    return (
        x.dtype in (np.float32, np.float64)
        and x.ndim >= 2
        and x.size > 0
        and all(v is None or (v.dtype == x.dtype and v.shape == (x.shape[1],)) for v in vectors)
    )


def batch_norm(x, weight, bias, *, eps=1e-5):
    """Training-mode batch norm: ``(out, mean, var)``, the biased variance, as the reference."""
    if not _channels_cover(x, weight, bias):
        return _reference("batch_norm", x, weight, bias, eps=eps)
    axes, n = _channel_axes(x), x.size // x.shape[1]
    mean = np.add.reduce(x, axis=axes, dtype=np.float64) / n
    centered = np.subtract(x, _per_channel(mean, x))
    out = np.multiply(centered, centered)
    var = np.add.reduce(out, axis=axes, dtype=np.float64) / n
    scale = 1.0 / np.sqrt(var + eps)
    if weight is not None:
        scale *= weight
    np.multiply(centered, _per_channel(scale, x), out=out)
    if bias is not None:
        np.add(out, _per_channel(bias, x), out=out)
    return out, mean.astype(x.dtype), var.astype(x.dtype)


def batch_norm_backward(grad, x, weight, bias, mean, var, *, eps=1e-5):
    """With ``xhat = (x - mean) * rstd``: ``dx = w * rstd * (g - mean(g) - xhat * mean(g *
    xhat))``, ``dweight = sum(g * xhat)``, ``dbias = sum(g)`` (sums per channel, float64)."""
    if not _channels_cover(x, weight, bias, mean, var) or grad.dtype != x.dtype or grad.shape != x.shape:
        return _reference("batch_norm_backward", grad, x, weight, bias, mean, var, eps=eps)
    axes, n = _channel_axes(x), x.size // x.shape[1]
    rstd = 1.0 / np.sqrt(var.astype(np.float64) + eps)
    xhat = np.subtract(x, _per_channel(mean, x))
    np.multiply(xhat, _per_channel(rstd, x), out=xhat)
    gsum = np.add.reduce(grad, axis=axes, dtype=np.float64)
    dx = np.multiply(grad, xhat)
    gxsum = np.add.reduce(dx, axis=axes, dtype=np.float64)
    a = rstd if weight is None else rstd * weight
    np.multiply(xhat, _per_channel(a * gxsum / n, x), out=xhat)
    np.multiply(grad, _per_channel(a, x), out=dx)
    np.subtract(dx, xhat, out=dx)
    np.subtract(dx, _per_channel(a * gsum / n, x), out=dx)
    return (dx, None if weight is None else gxsum.astype(x.dtype), None if bias is None else gsum.astype(x.dtype))


#: fused op name -> kernel: what the backend declares (backend.py)
IMPLS: dict[str, Callable[..., Any]] = {
    "max_pool2d": max_pool2d,
    "max_pool2d_backward": max_pool2d_backward,
    "batch_norm": batch_norm,
    "batch_norm_backward": batch_norm_backward,
}

"""Pooling: a k x k pool is the elementwise max (or sum) of its k*k strided kernel-position
slices. max_pool2d is a fused op (ember.fused): its decomposition and backward op are
registered at the end."""

from __future__ import annotations

import math

from ... import fused
from ...autodiff import is_grad_enabled, no_grad
from ...errors import ShapeError, located
from ...tensor import Tensor, arange
from .linear import _pair


def pool_geometry(size, kernel, stride, padding, dilation, ceil_mode):
    """(output size, extra cells on the far side) of one spatial dim of a pool, PyTorch's rule:
    the last window must start inside the input or its left padding. Backends' pool kernels
    compute their output shape with it.

    >>> pool_geometry(5, 2, 2, 0, 1, False), pool_geometry(5, 2, 2, 0, 1, True)
    ((2, 0), (3, 1))
    """
    k, s, p, d = kernel, stride, padding, dilation
    span = size + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    extra = max(0, (out - 1) * s + d * (k - 1) + 1 - (size + 2 * p))
    return out, extra


def _pool_params(x, kernel_size, stride, padding, dilation, ceil_mode, name):
    """Check a pool's arguments; returns them as pairs ``(k, s, p, d)`` and, per spatial dim,
    ``(output size, extra far-side padding)``."""
    k = _pair(kernel_size, "kernel_size")
    s = _pair(stride if stride is not None and stride != () else kernel_size, "stride")
    p, d = _pair(padding, "padding"), _pair(dilation, "dilation")
    if any(pi * 2 > ki for pi, ki in zip(p, k)):
        raise located(ValueError, f"{name}: padding {p} should be at most half the kernel size {k}")
    if x.ndim < 3:
        raise located(ShapeError, f"{name} needs input (N, C, H, W) or (C, H, W), got shape {x.shape}")
    geo = [pool_geometry(x.shape[-2 + i], k[i], s[i], p[i], d[i], ceil_mode) for i in range(2)]
    if any(o <= 0 for o, _ in geo):
        raise located(
            ShapeError,
            f"{name}: kernel {k} (dilation {d}, padding {p}) is larger than the input's spatial size {x.shape[-2:]}",
        )
    return k, s, p, d, geo


def _pool_input(x, kernel_size, stride, padding, dilation, ceil_mode, value, name):
    """Check the arguments, pad ``x`` (ceil_mode adds cells on the far side) and return
    ``(padded, kernel, stride, dilation, (OH, OW), pad widths)``."""
    k, s, p, d, geo = _pool_params(x, kernel_size, stride, padding, dilation, ceil_mode, name)
    widths = ((0, 0),) * (x.ndim - 2) + tuple((p[i], p[i] + geo[i][1]) for i in range(2))
    return x.pad(widths, value=value), k, s, d, (geo[0][0], geo[1][0]), widths


def _kernel_slices(padded, k, s, d, out_size):
    """One strided slice per kernel position: slice (i, j) holds element (i, j) of every window,
    so a k x k pool is the elementwise max (or sum) of the k*k slices.

    This beats ``windows`` + a reduction over the small trailing (KH, KW) axes, which NumPy
    runs 20-40x slower than elementwise ops on whole arrays.
    """
    lead = padded.shape[:-2]
    slices = []
    for i in range(k[0]):
        for j in range(k[1]):
            top, left = i * d[0], j * d[1]
            stops = lead + (top + s[0] * (out_size[0] - 1) + 1, left + s[1] * (out_size[1] - 1) + 1)
            slices.append(padded._slice((0,) * len(lead) + (top, left), stops, (1,) * len(lead) + tuple(s)))
    return slices


def _total(slices, combine):
    out = slices[0]
    for piece in slices[1:]:
        out = combine(out, piece)
    return out


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """Max over sliding windows (padding counts as -inf; NaN wins, as in PyTorch). The gradient
    goes to each window's first maximum. A fused op: a backend may run it, forward and backward, as its own
    kernels; the reference (:func:`_max_pool2d_reference`) is the elementwise maximum of the
    k*k kernel-position slices (one ``take`` of the maxima when a gradient is recorded).

    >>> import ember
    >>> max_pool2d(ember.arange(16.0).reshape(1, 1, 4, 4), 2).tolist()
    [[[[5.0, 7.0], [13.0, 15.0]]]]
    """
    k, s, p, d, _ = _pool_params(input, kernel_size, stride, padding, dilation, ceil_mode, "max_pool2d")
    return fused.run("max_pool2d", input, kernel_size=k, stride=s, padding=p, dilation=d, ceil_mode=bool(ceil_mode))


def avg_pool2d(
    input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None
):
    """Mean over sliding windows; zero padding counts in the divisor unless
    ``count_include_pad=False`` (PyTorch's default is True).

    >>> import ember
    >>> avg_pool2d(ember.ones(1, 1, 4, 4), 2, padding=1).tolist()[0][0][0]
    [0.25, 0.5, 0.25]
    """
    padded, k, s, d, out_size, widths = _pool_input(
        input, kernel_size, stride, padding, 1, ceil_mode, 0.0, "avg_pool2d"
    )
    total = _total(_kernel_slices(padded, k, s, d, out_size), Tensor.__add__)
    if divisor_override:
        return total / divisor_override
    (pt, pb), (pl, pr) = widths[-2:]
    h, w = input.shape[-2:]
    if not count_include_pad:
        counted = (pt, pt + h), (pl, pl + w)
    else:  # the padding counts, the extra cells ceil_mode adds do not
        counted = (0, h + 2 * pt), (0, w + 2 * pl)
    if counted == ((0, h + pt + pb), (0, w + pl + pr)):
        return total / (k[0] * k[1])
    # The divisor of each window: how many counted cells it covers (a constant map, no gradient).
    ones = input._full_like(1.0, shape=(counted[0][1] - counted[0][0], counted[1][1] - counted[1][0]))
    ones = ones.pad(((counted[0][0], h + pt + pb - counted[0][1]), (counted[1][0], w + pl + pr - counted[1][1])))
    return total / _total(_kernel_slices(ones, k, s, d, out_size), Tensor.__add__)


def _adaptive_matrix(size, out, like):
    """(out, size) averaging matrix of PyTorch's adaptive windows [floor(i*n/o), ceil((i+1)*n/o))."""
    rows = []
    for i in range(out):
        lo, hi = (i * size) // out, -(-((i + 1) * size) // out)
        rows.append([1.0 / (hi - lo) if lo <= j < hi else 0.0 for j in range(size)])
    return like._like(rows)


def adaptive_avg_pool2d(input, output_size):
    """Average into a fixed output size (``None`` keeps that dim), PyTorch's window rule.

    >>> import ember
    >>> adaptive_avg_pool2d(ember.ones(2, 3, 7, 5), 1).shape
    (2, 3, 1, 1)
    """
    if input.ndim < 3:
        raise located(ShapeError, f"adaptive_avg_pool2d needs (N, C, H, W) or (C, H, W), got {input.shape}")
    oh, ow = (output_size, output_size) if isinstance(output_size, int) or output_size is None else output_size
    h, w = input.shape[-2:]
    oh, ow = h if oh is None else oh, w if ow is None else ow
    if (oh, ow) == (1, 1):
        return input.mean((-2, -1), keepdim=True)
    if h % oh == 0 and w % ow == 0:
        return avg_pool2d(input, (h // oh, w // ow))
    # Overlapping windows: two small averaging matrices, P_h @ x @ P_w^T (exact, differentiable).
    return _adaptive_matrix(h, oh, input) @ input @ _adaptive_matrix(w, ow, input).T


# ============================================================================== the fused op
def _max_pool_index(x, kernel_size, stride, padding, dilation, ceil_mode):
    """``(padded, index, widths)``: ``x`` padded with -inf (ceil_mode's extra cells included);
    per output element, the flat index into ``padded`` of its window's first maximum (a later
    NaN replaces the choice, as in PyTorch); the pad widths. Computed without recording a graph."""
    padded, k, s, d, (oh, ow), widths = _pool_input(
        x, kernel_size, stride, padding, dilation, ceil_mode, -math.inf, "max_pool2d"
    )
    *lead, hp, wp = padded.shape
    with no_grad():
        slices = _kernel_slices(padded.detach(), k, s, d, (oh, ow))
        best, arg = slices[0], 0
        for n, piece in enumerate(slices[1:], 1):
            # arithmetic select: np.where is several times slower on unpredictable masks
            better = ((piece > best) | (piece != piece)).long()
            arg = arg + better * ((n // k[1]) * d[0] * wp + (n % k[1]) * d[1] - arg)
            best = best.maximum(piece)
        be = x.backend
        corner = arange(oh, backend=be).unsqueeze(1) * (s[0] * wp) + arange(ow, backend=be) * s[1]
        plane = arange(math.prod(lead), backend=be).reshape(tuple(lead) + (1, 1)) * (hp * wp)
        index = plane + corner + arg
    return padded, index, widths


def _max_pool2d_reference(x, *, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """Max over sliding windows of the last two dims (padding counts as -inf; NaN wins).

    Without a gradient to record it is the elementwise maximum of the k*k kernel-position
    slices. With one, it finds each window's first maximum the same way (unrecorded), then
    gathers it with one ``take``: the gradient goes to that single element, as in PyTorch, and
    the backward pass is one scatter-add instead of k*k tie-splitting rules.
    """
    if not (x.requires_grad and is_grad_enabled()):
        padded, k, s, d, out_size, _ = _pool_input(
            x, kernel_size, stride, padding, dilation, ceil_mode, -math.inf, "max_pool2d"
        )
        return _total(_kernel_slices(padded, k, s, d, out_size), Tensor.maximum)
    padded, index, _ = _max_pool_index(x, kernel_size, stride, padding, dilation, ceil_mode)
    return padded.reshape(-1).take(index, 0)


def _max_pool2d_backward(grad, x, *, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """The VJP of max_pool2d: each output's ``grad`` added to its window's first maximum in
    ``x`` (overlapping windows accumulate; a window whose maximum is padding gives nothing)."""
    padded, index, widths = _max_pool_index(x, kernel_size, stride, padding, dilation, ceil_mode)
    flat = padded._full_like(0.0, shape=(padded.numel(),)).index_add(0, index, grad)
    lo = [w[0] for w in widths]
    return flat.reshape(padded.shape)._slice(lo, [a + n for a, n in zip(lo, x.shape)], [1] * x.ndim)


def _max_pool2d_vjp(g, out, x, **params):
    return (fused.run("max_pool2d_backward", g, x, **params),)


fused.defop("max_pool2d_backward", _max_pool2d_backward)
fused.defop("max_pool2d", _max_pool2d_reference, "max_pool2d_backward", _max_pool2d_vjp)

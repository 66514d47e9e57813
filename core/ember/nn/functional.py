"""``ember.nn.functional`` (imported as ``F``): layers and losses as plain functions.

Everything here is a short composition of Tensor operations, so gradients come from the
primitives' VJP rules and every backend runs it unchanged. Convolution is the ``conv2d``
primitive; a k x k pool is the elementwise max (or sum) of k*k strided slices. softmax,
log_softmax, gelu, layer_norm, max_pool2d, training-mode batch_norm and the common
cross_entropy go through ``ember.fused``, so a backend may run them, forward and backward, as
its own kernels. Names, arguments and defaults follow ``torch.nn.functional``.

>>> import ember
>>> import ember.nn.functional as F
>>> F.relu(ember.tensor([-1.0, 2.0])).tolist()
[0.0, 2.0]
"""
from __future__ import annotations

import math

from .. import deferred, dispatch
from .. import dtypes as D
from .. import fused
from ..autodiff import no_grad
from ..dispatch import apply
from ..errors import DTypeError, ShapeError, located
from ..random import rand
from ..tensor import Tensor, arange, where

__all__ = [
    "linear", "conv2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "relu", "leaky_relu",
    "gelu", "silu", "sigmoid", "tanh", "softmax", "log_softmax", "dropout", "batch_norm",
    "layer_norm", "rms_norm", "embedding", "pad", "one_hot", "scaled_dot_product_attention",
    "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "huber_loss", "smooth_l1_loss",
    "binary_cross_entropy_with_logits", "binary_cross_entropy",
]


def _pair(v, name="argument"):
    """``3`` -> ``(3, 3)``; a pair stays a pair."""
    if isinstance(v, int):
        return (v, v)
    v = tuple(int(x) for x in v)
    if len(v) != 2:
        raise located(ValueError, f"{name} needs an int or a pair of ints, got {v}")
    return v


def _batched(x, name, ndim=4):
    """Accept (C, H, W) like torch by adding a batch dim; returns (x, undo)."""
    if x.ndim == ndim:
        return x, lambda y: y
    if x.ndim == ndim - 1:
        return x.unsqueeze(0), lambda y: y.squeeze(0)
    raise located(ShapeError, f"{name} needs input (N, C, H, W) or (C, H, W), got shape {x.shape}")


# ============================================================================== linear and conv
def linear(input, weight, bias=None):
    """``input @ weight.T + bias`` over the last dim; weight is (out_features, in_features).

    >>> import ember
    >>> linear(ember.ones(2, 3), ember.ones(4, 3)).shape
    (2, 4)
    """
    if input.shape[-1:] != weight.shape[1:]:
        raise located(ShapeError, f"linear: input of shape {input.shape} has {input.shape[-1:] or 'no'} "
                      f"features in its last dim, but the weight {weight.shape} expects {weight.shape[1]}: "
                      f"expected input shape (..., {weight.shape[1]})")
    lead = input.shape[:-1]
    # One GEMM over all leading dims: the weight gradient is then one GEMM too, not a batch of them.
    out = input.reshape(-1, weight.shape[1]) @ weight.T if len(lead) != 1 else input @ weight.T
    if bias is not None:
        out = out + bias
    return out.reshape(lead + (weight.shape[0],)) if len(lead) != 1 else out


def _same_padding(kernel, dilation):
    """Per-dim (lo, hi) so the output keeps the input size at stride 1; the odd extra goes last
    (PyTorch's choice)."""
    out = []
    for k, d in zip(kernel, dilation):
        total = d * (k - 1)
        out.append((total // 2, total - total // 2))
    return out


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-d cross-correlation; padding is an int, a pair, ``'valid'`` or ``'same'``.

    >>> import ember
    >>> conv2d(ember.ones(1, 3, 8, 8), ember.ones(4, 3, 3, 3), padding="same").shape
    (1, 4, 8, 8)
    """
    x, undo = _batched(input, "conv2d")
    stride, dilation = _pair(stride, "stride"), _pair(dilation, "dilation")
    if weight.ndim != 4:
        raise located(ShapeError, f"conv2d: weight must be (out, in/groups, kh, kw), got shape {weight.shape}")
    if x.shape[1] != weight.shape[1] * groups:
        raise located(ShapeError, f"conv2d: input of shape {tuple(input.shape)} has {x.shape[1]} channels, but "
                      f"the weight {weight.shape} with groups={groups} expects {weight.shape[1] * groups}")
    if isinstance(padding, str):
        if padding == "valid":
            padding = (0, 0)
        elif padding == "same":
            if stride != (1, 1):
                raise located(ValueError, "conv2d: padding='same' needs stride 1 (as in PyTorch)")
            (t, b), (l, r) = _same_padding(weight.shape[2:], dilation)
            if t != b or l != r:
                x = x.pad(((0, 0), (0, 0), (t, b), (l, r)))
                padding = (0, 0)
            else:
                padding = (t, l)
        else:
            raise located(ValueError, f"conv2d: padding must be an int, a pair, 'valid' or 'same', got {padding!r}")
    out = apply("conv2d", x, weight, stride=stride, padding=_pair(padding, "padding"),
                dilation=dilation, groups=groups)
    if bias is not None:
        out = out + bias.reshape(1, -1, 1, 1)
    return undo(out)


# ============================================================================== pooling
def _pool_geometry(size, k, s, p, d, ceil_mode):
    """Output size and the extra right padding ceil_mode needs (PyTorch's rule: the last
    window must start inside the input or its left padding)."""
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
    geo = [_pool_geometry(x.shape[-2 + i], k[i], s[i], p[i], d[i], ceil_mode) for i in range(2)]
    if any(o <= 0 for o, _ in geo):
        raise located(ShapeError, f"{name}: kernel {k} (dilation {d}, padding {p}) is larger than the "
                      f"input's spatial size {x.shape[-2:]}")
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
    goes to each window's first maximum. ember.fused's op: a backend may run it, forward and
    backward, as its own kernels; the reference is the elementwise maximum of the k*k
    kernel-position slices (one ``take`` of the maxima when a gradient is recorded).

    >>> import ember
    >>> max_pool2d(ember.arange(16.0).reshape(1, 1, 4, 4), 2).tolist()
    [[[[5.0, 7.0], [13.0, 15.0]]]]
    """
    k, s, p, d, _ = _pool_params(input, kernel_size, stride, padding, dilation, ceil_mode, "max_pool2d")
    return fused.run("max_pool2d", input, kernel_size=k, stride=s, padding=p, dilation=d, ceil_mode=bool(ceil_mode))


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """Mean over sliding windows; zero padding counts in the divisor unless
    ``count_include_pad=False`` (PyTorch's default is True).

    >>> import ember
    >>> avg_pool2d(ember.ones(1, 1, 4, 4), 2, padding=1).tolist()[0][0][0]
    [0.25, 0.5, 0.25]
    """
    padded, k, s, d, out_size, widths = _pool_input(input, kernel_size, stride, padding, 1, ceil_mode, 0.0,
                                                    "avg_pool2d")
    total = _total(_kernel_slices(padded, k, s, d, out_size), Tensor.__add__)
    if divisor_override:
        return total / divisor_override
    (pt, pb), (pl, pr) = widths[-2:]
    h, w = input.shape[-2:]
    if not count_include_pad:
        counted = (pt, pt + h), (pl, pl + w)
    else:              # the padding counts, the extra cells ceil_mode adds do not
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


# ============================================================================== activations
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
    """``exp(x) / sum(exp(x))`` along ``dim`` (ember.fused's op: a backend may run it as one kernel)."""
    return fused.run("softmax", input, dim=dim)


def log_softmax(input, dim=-1):
    """``x - logsumexp(x)`` along ``dim`` (ember.fused's op)."""
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


# ============================================================================== normalization
def _channel_shape(x):
    return (1, -1) + (1,) * (x.ndim - 2)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
               eps=1e-5):
    """Normalize over every dim but the channel dim 1. In training use the batch statistics and
    update the running ones in place (``momentum`` is the weight of the new value; the running
    variance takes the unbiased batch variance, as in PyTorch); otherwise use the running ones.
    Training mode is ember.fused's ``batch_norm``: a backend may run it, forward and backward,
    as its own kernels.

    >>> import ember
    >>> y = batch_norm(ember.randn(8, 3), None, None, training=True)
    >>> [abs(round(v, 4)) for v in y.mean(0).tolist()]
    [0.0, 0.0, 0.0]
    """
    if input.ndim < 2:
        raise located(ShapeError, f"batch_norm needs input (N, C, ...), got shape {input.shape}")
    if training:
        n = input.numel() // input.shape[1]
        if n <= 1:
            raise located(ValueError, f"batch_norm: expected more than 1 value per channel when training, "
                          f"got input of shape {input.shape}")
        out, mean, var = fused.run("batch_norm", input, weight, bias, eps=eps)
        if running_mean is not None:
            with no_grad():
                running_mean.copy_(running_mean * (1 - momentum) + mean * momentum)
                running_var.copy_(running_var * (1 - momentum) + var * (momentum * n / (n - 1)))
        return out
    if running_mean is None or running_var is None:
        raise located(ValueError, "batch_norm in eval mode needs running_mean and running_var")
    shape = _channel_shape(input)
    out = (input - running_mean.reshape(shape)) * (running_var.reshape(shape) + eps).rsqrt()
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


def _norm_axes(input, normalized_shape, name):
    normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(normalized_shape)
    if k > input.ndim or input.shape[input.ndim - k:] != normalized_shape:
        raise located(ShapeError, f"{name}: input of shape {input.shape} does not end with normalized_shape "
                      f"{normalized_shape}")
    return tuple(range(input.ndim - k, input.ndim))


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalize over the trailing ``normalized_shape`` dims (biased variance), then scale/shift.

    >>> import ember
    >>> [round(v, 4) for v in layer_norm(ember.tensor([[1.0, 3.0]]), (2,))[0].tolist()]
    [-1.0, 1.0]
    """
    axes = _norm_axes(input, normalized_shape, "layer_norm")
    return fused.run("layer_norm", input, weight, bias, normalized_shape=input.shape[input.ndim - len(axes):],
                     eps=eps)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the trailing dims; eps defaults to the dtype's
    machine epsilon, as in PyTorch."""
    axes = _norm_axes(input, normalized_shape, "rms_norm")
    if eps is None:
        eps = {D.float16: 2.0 ** -10, D.float32: 2.0 ** -23, D.float64: 2.0 ** -52}.get(input.dtype, 2.0 ** -23)
    out = input * ((input * input).mean(axes, keepdim=True) + eps).rsqrt()
    return out * weight if weight is not None else out


# ============================================================================== lookup and shape
def embedding(input, weight, padding_idx=None):
    """Rows of ``weight`` picked by the integer ``input``; no gradient reaches ``padding_idx``.

    >>> import ember
    >>> embedding(ember.tensor([[0, 2]]), ember.eye(3)).tolist()
    [[[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]]
    """
    if input.dtype.kind not in "iu":
        raise located(DTypeError, f"embedding: indices must be integers, got {input.dtype}")
    out = weight.take(input, 0)
    if padding_idx is not None and weight.requires_grad:
        pad_rows = (input == (padding_idx % weight.shape[0])).unsqueeze(-1)
        out = where(pad_rows, out.detach(), out)
    return out


def _reflect_index(n, lo, hi, mode):
    """Source index along one dim for each padded position (reflect, replicate, circular)."""
    out = []
    for i in range(-lo, n + hi):
        if mode == "replicate":
            out.append(min(max(i, 0), n - 1))
        elif mode == "circular":
            out.append(i % n)
        else:      # reflect: mirror without repeating the edge
            period = 2 * (n - 1)
            j = i % period if period else 0
            out.append(j if j < n else period - j)
    return out


def pad(input, pad, mode="constant", value=0.0):
    """Pad with PyTorch's argument order: ``(left, right)`` for the last dim, then ``(top,
    bottom)`` for the one before, and so on. Modes: constant, reflect, replicate, circular.

    >>> import ember
    >>> pad(ember.ones(1, 2), (1, 0)).tolist()
    [[0.0, 1.0, 1.0]]
    """
    pad = tuple(int(v) for v in pad)
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise located(ValueError, f"pad: needs pairs for at most {input.ndim} dims, got {pad}")
    pairs = [(pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)]
    widths = [(0, 0)] * (input.ndim - len(pairs)) + pairs[::-1]
    if mode == "constant":
        if any(lo < 0 or hi < 0 for lo, hi in widths):   # negative padding crops, as in torch
            starts = [max(-lo, 0) for lo, _ in widths]
            stops = [s - max(-hi, 0) for s, (_, hi) in zip(input.shape, widths)]
            input = input._slice(starts, stops, [1] * input.ndim)
            widths = [(max(lo, 0), max(hi, 0)) for lo, hi in widths]
        return input.pad(widths, value=value)
    if mode not in ("reflect", "replicate", "circular"):
        raise located(ValueError, f"pad: mode must be constant, reflect, replicate or circular, got {mode!r}")
    out = input
    for d, (lo, hi) in enumerate(widths):
        if lo or hi:
            n = input.shape[d]
            if mode == "reflect" and (lo >= n or hi >= n):
                raise located(ValueError, f"pad: reflect padding ({lo}, {hi}) must be smaller than the dim size {n}")
            out = out.take(_reflect_index(n, lo, hi, mode), d)
    return out


def one_hot(tensor, num_classes=-1):
    """int64 one-hot encoding along a new last dim.

    >>> import ember
    >>> one_hot(ember.tensor([0, 2]), 3).tolist()
    [[1, 0, 0], [0, 0, 1]]
    """
    if tensor.dtype.kind not in "iu":
        raise located(DTypeError, f"one_hot: needs integer class indices, got {tensor.dtype}")
    if num_classes < 0:
        num_classes = int(tensor.amax().item()) + 1 if tensor.numel() else 0
    return (tensor.unsqueeze(-1) == arange(num_classes, backend=tensor._backend)).long()


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 generator=None, need_weights=False):
    """softmax(q k^T * scale + mask) v over the last two dims (..., L, E) x (..., S, E).

    A bool ``attn_mask`` is True where attention is *allowed* (PyTorch's convention for this
    function); a float one is added to the scores. With ``need_weights`` also returns the weights.
    """
    L, S = query.shape[-2], key.shape[-2]
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = (query * scale) @ key.mT
    if is_causal:
        allowed = arange(L, backend=query._backend).unsqueeze(1) >= arange(S, backend=query._backend)
        scores = where(allowed, scores, -math.inf)
    if attn_mask is not None:
        scores = where(attn_mask, scores, -math.inf) if attn_mask.dtype is D.bool_ else scores + attn_mask
    weights = scores.softmax(-1)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p, True, generator)
    out = weights @ value
    return (out, weights) if need_weights else out


# ============================================================================== losses
def _reduce(loss, reduction, name):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise located(ValueError, f"{name}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _check_same_shape(input, target, name):
    if input.shape != target.shape:
        raise located(ShapeError, f"{name}: input {input.shape} and target {target.shape} must have the same shape")


def _class_last(x):
    """(N, C, d1, ...) -> (N, d1, ..., C): the class dim last, so targets index the last dim."""
    return x if x.ndim <= 2 else x.permute((0,) + tuple(range(2, x.ndim)) + (1,))


def _pick(logp, target):
    """logp[..., target] along the last dim, as one take on the flattened tensor."""
    c = logp.shape[-1]
    flat = arange(target.numel(), backend=target._backend).reshape(target.shape) * c + target
    return logp.reshape(-1).take(flat, 0)


def _check_targets(input, target, name):
    if input.ndim == 1:
        expected = ()
    else:
        expected = (input.shape[0],) + input.shape[2:]
    if target.shape != expected:
        raise located(ShapeError, f"{name}: input {input.shape} (N, C, ...) needs class-index targets of shape "
                      f"{expected}, got {target.shape}")


def _range_error(lo, hi, c):
    """The message for targets whose extremes are ``lo`` and ``hi``, or None if in [0, c)."""
    if lo >= 0 and hi < c:
        return None
    return f"nll_loss: target {hi if hi >= c else lo} is out of range for {c} classes"


def _check_class_range(targets, c):
    """Raise ValueError for a target outside [0, c); return the targets to index with.

    On the CPU the extremes are read at once. On a device backend (``Capabilities.on_device``)
    that read would wait for the device every step, so the check is deferred to the next host
    read (ember.deferred: same error, same line), and meanwhile bad targets are replaced by 0
    so the loss reads only real entries."""
    if not deferred.on_device(targets._backend):
        text = _range_error(targets.amin().item(), targets.amax().item(), c)
        if text is not None:
            raise located(ValueError, text)
        return targets
    deferred.defer(("nll_loss", c), (targets.amin(), targets.amax()), (Tensor.minimum, Tensor.maximum),
                   lambda lo, hi: _range_error(lo, hi, c))
    return where((targets >= 0) & (targets < c), targets, 0)


def nll_loss(input, target, weight=None, ignore_index=-100, reduction="mean"):
    """Negative log-likelihood of class-index targets, given log-probabilities (N, C, ...).

    >>> import ember
    >>> round(nll_loss(ember.tensor([[-1.0, -2.0]]), ember.tensor([1])).item(), 4)
    2.0
    """
    if target.dtype.kind not in "iu":
        raise located(DTypeError, f"nll_loss: targets must be class indices (integers), got {target.dtype}")
    _check_targets(input, target, "nll_loss")
    logp = _class_last(input)
    valid = target != ignore_index
    safe = where(valid, target, 0)
    c = logp.shape[-1]
    # Under ember.jit the targets are not known while tracing: the check is left to run time
    # (take fails there on an index past the end).
    if target.numel() and dispatch.interpreter().evaluates:
        safe = _check_class_range(safe, c)
    w = valid.to(logp.dtype) if weight is None else weight.take(safe, 0) * valid.to(logp.dtype)
    loss = -_pick(logp, safe) * w
    if reduction == "mean":
        return loss.sum() / w.sum()
    return _reduce(loss, reduction, "nll_loss")


def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """Softmax cross-entropy of logits (N, C, ...) against class indices (N, ...) or class
    probabilities (same shape as the input), computed stably through ``log_softmax``.

    >>> import ember
    >>> round(cross_entropy(ember.zeros(2, 4), ember.tensor([0, 3])).item(), 4)
    1.3863
    """
    if not 0.0 <= label_smoothing <= 1.0:
        raise located(ValueError, f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    if input.ndim == 2 and weight is None and label_smoothing == 0 and reduction == "mean" \
            and target.dtype.kind in "iu" and target.shape == input.shape[:1]:
        # The common case is ember.fused's op: a backend may run it (and its gradient) as one kernel.
        if deferred.on_device(input._backend) and dispatch.interpreter().evaluates and target.numel() \
                and "cross_entropy" in fused.declared(input._backend):
            # A device kernel cannot raise: the range check waits for the next host read.
            _check_class_range(where(target != ignore_index, target, 0), input.shape[1])
        return fused.run("cross_entropy", input, target, ignore_index=ignore_index)
    class_dim = 0 if input.ndim == 1 else 1
    logp = input.log_softmax(class_dim)
    c = input.shape[class_dim]
    wshape = [1] * input.ndim
    wshape[class_dim] = c
    if target.dtype.is_floating_point:                       # probability targets
        _check_same_shape(input, target, "cross_entropy")
        if label_smoothing > 0:
            target = target * (1 - label_smoothing) + label_smoothing / c
        prod = logp * target if weight is None else logp * target * weight.reshape(wshape)
        loss = -prod.sum(class_dim)
        if reduction == "mean":
            return loss.sum() / max(input.numel() // c, 1) if input.numel() else loss.sum() * math.nan
        return _reduce(loss, reduction, "cross_entropy")
    nll = nll_loss(logp, target, weight, ignore_index, reduction)
    if label_smoothing <= 0:
        return nll
    # PyTorch's smoothing term: the (weighted) mean of -log p over all classes.
    valid = (target != ignore_index).to(logp.dtype)
    smooth = -(logp if weight is None else logp * weight.reshape(wshape)).sum(class_dim) * valid
    if reduction == "mean":
        if weight is None:
            denom = valid.sum()
        else:
            denom = (weight.take(where(target != ignore_index, target, 0), 0) * valid).sum()
        smooth = smooth.sum() / denom
    else:
        smooth = _reduce(smooth, reduction, "cross_entropy")
    return nll * (1 - label_smoothing) + smooth * (label_smoothing / c)


def mse_loss(input, target, reduction="mean"):
    """Mean squared error."""
    _check_same_shape(input, target, "mse_loss")
    d = input - target
    return _reduce(d * d, reduction, "mse_loss")


def l1_loss(input, target, reduction="mean"):
    """Mean absolute error."""
    _check_same_shape(input, target, "l1_loss")
    return _reduce((input - target).abs(), reduction, "l1_loss")


def huber_loss(input, target, reduction="mean", delta=1.0):
    """Quadratic for |x - y| < delta, linear beyond: ``delta * (|d| - delta/2)``."""
    _check_same_shape(input, target, "huber_loss")
    d = (input - target).abs()
    return _reduce(where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta)), reduction, "huber_loss")


def smooth_l1_loss(input, target, reduction="mean", beta=1.0):
    """``0.5 d^2 / beta`` for |d| < beta, else ``|d| - beta/2`` (Huber divided by beta)."""
    _check_same_shape(input, target, "smooth_l1_loss")
    d = (input - target).abs()
    if beta == 0:
        return _reduce(d, reduction, "smooth_l1_loss")
    return _reduce(where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta), reduction, "smooth_l1_loss")


def binary_cross_entropy_with_logits(input, target, weight=None, reduction="mean", pos_weight=None):
    """Sigmoid + binary cross-entropy in one stable formula:
    ``(1 - y) x + (1 + (pw - 1) y) (log(1 + e^-|x|) + max(-x, 0))``.

    >>> import ember
    >>> round(binary_cross_entropy_with_logits(ember.tensor([0.0]), ember.tensor([1.0])).item(), 4)
    0.6931
    """
    _check_same_shape(input, target, "binary_cross_entropy_with_logits")
    softplus_neg = (-input.abs()).exp().log1p() + (-input).relu()       # log(1 + e^-x), stably
    if pos_weight is None:
        loss = (1 - target) * input + softplus_neg
    else:
        loss = (1 - target) * input + ((pos_weight - 1) * target + 1) * softplus_neg
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction, "binary_cross_entropy_with_logits")


def binary_cross_entropy(input, target, weight=None, reduction="mean"):
    """``-(y log p + (1 - y) log(1 - p))`` with each log clamped at -100, as in PyTorch."""
    _check_same_shape(input, target, "binary_cross_entropy")
    loss = -(target * input.log().clamp(min=-100.0) + (1 - target) * (1 - input).log().clamp(min=-100.0))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction, "binary_cross_entropy")

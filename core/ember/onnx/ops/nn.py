"""Neural-network operators: convolutions, pooling, normalisations.

Convolutions run on ember's ``conv2d`` primitive (1-d as a 2-d with height 1, 3-d as a sum of
2-d convolutions over depth taps; transposed convolutions on ``conv2d_grad_input``). Pooling of
any rank is an elementwise max/sum over the kernel's strided slices of the padded input, as
``ember.nn.functional`` pools; a plain 2-d MaxPool is ``ember.nn.functional.max_pool2d``
itself, a fused op a backend may run as one kernel.
"""

from __future__ import annotations

import math

from ... import dtypes as D
from ...dispatch import apply
from ...tensor import arange, where
from .common import const, filled


# ---------------------------------------------------------------- geometry
def _geometry(node, spatial, kernel):
    """Strides, dilations and (begin, end) pads per spatial dim, auto_pad resolved."""
    n = len(kernel)
    strides = list(node.attr("strides") or [1] * n)
    dil = list(node.attr("dilations") or [1] * n)
    pads = list(node.attr("pads") or [0] * (2 * n))
    mode = node.attr("auto_pad", "NOTSET")
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * n)
        for i in range(n):
            out = -(-spatial[i] // strides[i])
            total = max((out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - spatial[i], 0)
            small, big = total // 2, total - total // 2
            pads[i], pads[i + n] = (small, big) if mode == "SAME_UPPER" else (big, small)
    elif mode == "VALID":
        pads = [0] * (2 * n)
    return strides, dil, [(pads[i], pads[i + n]) for i in range(n)]


# ---------------------------------------------------------------- convolutions
def _conv2d(x, w, strides, dil, group, padding=(0, 0)):
    return apply("conv2d", x, w, stride=tuple(strides), padding=tuple(padding), dilation=tuple(dil), groups=group)


def _pointwise(x, w):
    """A 1x1 convolution (stride 1, no padding, one group) is a matrix product over the
    channels, (O, C) @ (N, C, H*W): no im2col copy. (ResNet-50 has 33 of them; on numba at
    batch 1 each ran 0.8-0.96x the time of conv2d, measured pairwise. Strided ones stay
    convolutions: slicing the pixels first cost 3x.)"""
    n, c, h, wd = x.shape
    y = w.reshape(w.shape[0], c) @ x.reshape(n, c, h * wd)
    return y.reshape(n, w.shape[0], h, wd)


def conv(node, x, w, b=None):
    kernel = list(w.shape[2:])
    strides, dil, pads = _geometry(node, x.shape[2:], kernel)
    group = node.attr("group", 1)
    if kernel == [1, 1] and strides == [1, 1] and group == 1 and not any(p for pair in pads for p in pair):
        y = _pointwise(x, w)
    elif len(kernel) == 2:
        # conv2d pads evenly itself: only an uneven remainder (SAME_UPPER, ...) is padded here,
        # so the common case makes no padded copy of its input.
        even = [min(pair) for pair in pads]
        rest = [(lo - e, hi - e) for (lo, hi), e in zip(pads, even)]
        x = x.pad([(0, 0), (0, 0)] + rest) if any(p for pair in rest for p in pair) else x
        y = _conv2d(x, w, strides, dil, group, even)
    else:
        x = x.pad([(0, 0), (0, 0)] + pads) if any(p for pair in pads for p in pair) else x
        if len(kernel) == 1:
            y = _conv2d(x.unsqueeze(2), w.unsqueeze(2), [1] + strides, [1] + dil, group).squeeze(2)
        elif len(kernel) == 3:
            y = _conv3d(x, w, strides, dil, group)
        else:
            raise node.error(f"{len(kernel)}-d convolution is not supported (1-d, 2-d and 3-d are)")
    if b is not None:
        y = y + b.reshape([1, -1] + [1] * len(kernel))
    return y


def _conv3d(x, w, strides, dil, group):
    # One 2-d convolution per depth tap, with the output depths folded into the batch.
    n, c, d = x.shape[:3]
    kd = w.shape[2]
    od = (d - (kd - 1) * dil[0] - 1) // strides[0] + 1
    out = None
    for t in range(kd):
        start = t * dil[0]
        xs = x._slice(
            [0, 0, start, 0, 0], [n, c, start + (od - 1) * strides[0] + 1] + list(x.shape[3:]), [1, 1, strides[0], 1, 1]
        )
        xs = xs.permute(0, 2, 1, 3, 4).reshape(n * od, c, *x.shape[3:])
        y = _conv2d(xs, w.narrow(2, t, 1).squeeze(2), strides[1:], dil[1:], group)
        out = y if out is None else out + y
    return out.reshape(n, od, *out.shape[1:]).permute(0, 2, 1, 3, 4)


def conv_transpose(node, x, w, b=None):
    kernel = list(w.shape[2:])
    nd = len(kernel)
    if nd not in (1, 2, 3):
        raise node.error(f"{nd}-d transposed convolution is not supported (1-d, 2-d and 3-d are)")
    group = node.attr("group", 1)
    strides = list(node.attr("strides") or [1] * nd)
    dil = list(node.attr("dilations") or [1] * nd)
    outpad = list(node.attr("output_padding") or [0] * nd)
    pads = list(node.attr("pads") or [0] * (2 * nd))
    spatial = x.shape[2:]
    full = [strides[i] * (spatial[i] - 1) + outpad[i] + (kernel[i] - 1) * dil[i] + 1 for i in range(nd)]
    shape = node.attr("output_shape")
    mode = node.attr("auto_pad", "NOTSET")
    if shape or mode in ("SAME_UPPER", "SAME_LOWER"):
        target = list(shape)[-nd:] if shape else [spatial[i] * strides[i] for i in range(nd)]
        for i in range(nd):
            total = full[i] - target[i]
            # C's division (toward zero), as onnxruntime: an output past the full one grows at the end
            small = -(-total // 2) if total < 0 else total // 2
            big = total - small
            pads[i], pads[i + nd] = (big, small) if mode == "SAME_LOWER" else (small, big)
    # conv2d_grad_input cannot produce output_padding rows beyond the last window: pad them on.
    base = [full[i] - outpad[i] for i in range(nd)]
    if nd == 1:
        x, w = x.unsqueeze(2), w.unsqueeze(2)
        strides, dil, base = [1] + strides, [1] + dil, [1] + base
    y = (_conv3d_transpose if nd == 3 else _conv2d_transpose)(x, w, base, strides, dil, group)
    if nd == 1:
        y = y.squeeze(2)
    if any(outpad):
        y = y.pad([(0, 0), (0, 0)] + [(0, p) for p in outpad])
    if any(p < 0 for p in pads):  # an output_shape beyond the full result: zeros
        y = y.pad([(0, 0), (0, 0)] + [(max(-pads[i], 0), max(-pads[i + nd], 0)) for i in range(nd)])
        full = [full[i] + max(-pads[i], 0) + max(-pads[i + nd], 0) for i in range(nd)]
        pads = [max(p, 0) for p in pads]
    lo = [0, 0] + pads[:nd]
    hi = [y.shape[0], y.shape[1]] + [full[i] - pads[i + nd] for i in range(nd)]
    y = y._slice(lo, hi, [1] * y.ndim)
    if b is not None:
        y = y + b.reshape([1, -1] + [1] * nd)
    return y


def _conv2d_transpose(x, w, base, strides, dil, group):
    n, m = x.shape[0], w.shape[1] * group
    return apply(
        "conv2d_grad_input",
        x,
        w,
        input_shape=(n, m, *base),
        stride=tuple(strides),
        padding=(0, 0),
        dilation=tuple(dil),
        groups=group,
    )


def _conv3d_transpose(x, w, base, strides, dil, group):
    # One 2-d transposed convolution per depth tap, the input depths folded into the batch;
    # tap t's result lands on output depths t*dil + i*stride, spaced by zeros when stride > 1.
    n, c, d = x.shape[:3]
    s, m = strides[0], w.shape[1] * group
    flat = x.permute(0, 2, 1, 3, 4).reshape(n * d, c, *x.shape[3:])
    span = (d - 1) * s + 1
    out = None
    for t in range(w.shape[2]):
        y = _conv2d_transpose(flat, w.narrow(2, t, 1).squeeze(2), base[1:], strides[1:], dil[1:], group)
        y = y.reshape(n, d, 1, m, *base[1:])
        if s > 1:
            y = y.pad([(0, 0), (0, 0), (0, s - 1), (0, 0), (0, 0), (0, 0)])
        y = y.reshape(n, d * s, m, *base[1:]).narrow(1, 0, span)
        first = t * dil[0]
        y = y.pad([(0, 0), (first, base[0] - span - first), (0, 0), (0, 0), (0, 0)])
        out = y if out is None else out + y
    return out.permute(0, 2, 1, 3, 4)


def deform_conv(node, x, w, offset, b=None, mask=None):
    """DeformConv (2-d): each kernel tap samples the input bilinearly at its place plus a learned
    offset (zero outside the image), times the mask; the samples then meet the weights in one
    product per group, as an im2col convolution's columns do."""
    if x.ndim != 4:
        raise node.error(f"only 2-d deformable convolution is supported, got a {x.ndim - 2}-d input")
    n, c, ih, iw = x.shape
    kh, kw = node.attr("kernel_shape") or w.shape[2:]
    sh, sw = node.attr("strides") or [1, 1]
    dh, dw = node.attr("dilations") or [1, 1]
    top, left = (node.attr("pads") or [0, 0, 0, 0])[:2]
    group, og = node.attr("group", 1), node.attr("offset_group", 1)
    oh, ow = offset.shape[2:]
    taps = kh * kw
    off = offset.reshape(n, og, taps, 2, oh * ow)
    base_h = [-top + i * sh + (k // kw) * dh for k in range(taps) for i in range(oh) for _ in range(ow)]
    base_w = [-left + j * sw + (k % kw) * dw for k in range(taps) for _ in range(oh) for j in range(ow)]
    where_h = off.narrow(3, 0, 1).reshape(n, og, taps * oh * ow) + const(base_h, x).to(x.dtype)
    where_w = off.narrow(3, 1, 1).reshape(n, og, taps * oh * ow) + const(base_w, x).to(x.dtype)
    h0, w0 = where_h.floor(), where_w.floor()
    planes = x.reshape(n, og, c // og, ih * iw)
    cols = None
    for dy, dx in ((0, 0), (0, 1), (1, 0), (1, 1)):
        hc, wc = h0 + dy, w0 + dx
        weight = (1 - (where_h - hc).abs()) * (1 - (where_w - wc).abs())
        inside = (hc >= 0) & (hc <= ih - 1) & (wc >= 0) & (wc <= iw - 1)
        flat = (hc.clamp(0, ih - 1) * iw + wc.clamp(0, iw - 1)).long()
        index = flat.unsqueeze(2).expand(n, og, c // og, flat.shape[-1])
        sample = planes.gather(3, index) * where(inside, weight, 0.0).unsqueeze(2)
        cols = sample if cols is None else cols + sample
    if mask is not None:
        cols = cols * mask.reshape(n, og, 1, taps * oh * ow)
    cols = cols.reshape(n, group, (c // group) * taps, oh * ow)
    y = w.reshape(group, w.shape[0] // group, -1) @ cols
    y = y.reshape(n, w.shape[0], oh, ow)
    return y if b is None else y + b.reshape(1, -1, 1, 1)


# ---------------------------------------------------------------- pooling
def _windows(node, x, kernel, fill):
    """(strided slices of the padded input, one per kernel tap, the padded input, geometry)."""
    strides, dil, pads = _geometry(node, x.shape[2:], kernel)
    ceil = node.attr("ceil_mode", 0)
    outs = []
    for i, k in enumerate(kernel):
        span = (k - 1) * dil[i] + 1
        size = x.shape[2 + i] + sum(pads[i]) - span
        o = (-(-size // strides[i]) if ceil else size // strides[i]) + 1
        if ceil and (o - 1) * strides[i] >= x.shape[2 + i] + pads[i][0]:
            o -= 1
        outs.append(o)
    extra = [
        max((outs[i] - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - (x.shape[2 + i] + sum(pads[i])), 0)
        for i in range(len(kernel))
    ]
    widths = [(0, 0), (0, 0)] + [(p[0], p[1] + e) for p, e in zip(pads, extra)]
    padded = x.pad(widths, fill) if any(a or b for a, b in widths) else x
    return padded, (strides, dil, pads, extra, outs)


def _taps(t, kernel, strides, dil, outs):
    for offset in _product([range(k) for k in kernel]):
        lo = [0, 0] + [o * d for o, d in zip(offset, dil)]
        hi = [t.shape[0], t.shape[1]] + [lo[2 + i] + (outs[i] - 1) * strides[i] + 1 for i in range(len(kernel))]
        yield t._slice(lo, hi, [1, 1] + list(strides))


def _product(ranges):
    out = [()]
    for r in ranges:
        out = [o + (i,) for o in out for i in r]
    return out


def _max_pool2d(node, x, kernel):
    """A float 2-d MaxPool without indices and with equal pads on both sides, as the fused
    ``max_pool2d`` (ember.nn.functional's): one kernel where the backend has one (ResNet's
    3x3/2 stem pool on numba: one pass, where the slices cost a padded copy and eight
    maximums), the same slices elsewhere. None for any other pool."""
    if len(kernel) != 2 or not x.dtype.is_floating_point or x.ndim != 4 or (len(node.outputs) > 1 and node.outputs[1]):
        return None
    strides, dil, pads = _geometry(node, x.shape[2:], kernel)
    if any(a != b or 2 * a > k for (a, b), k in zip(pads, kernel)):
        return None
    from ...nn.functional.pooling import max_pool2d

    padding = tuple(a for a, _ in pads)
    return max_pool2d(x, tuple(kernel), tuple(strides), padding, tuple(dil), bool(node.attr("ceil_mode", 0)))


def max_pool(node, x):
    kernel = list(node.attr("kernel_shape"))
    fused = _max_pool2d(node, x, kernel)
    if fused is not None:
        return fused
    # the padding value: -inf, or an integer dtype's smallest value
    low = float("-inf") if x.dtype.is_floating_point else D.int_range(x.dtype)[0]
    padded, (strides, dil, _, _, outs) = _windows(node, x, kernel, low)
    best = None
    for s in _taps(padded, kernel, strides, dil, outs):
        best = s if best is None else best.maximum(s)
    if len(node.outputs) < 2 or not node.outputs[1]:
        return best
    # Indices: the flat input position of each window's first maximum.
    spatial = x.shape[2:]
    hw = math.prod(spatial)
    pos = arange(x.shape[0] * x.shape[1] * hw, backend=x.backend).reshape(x.shape)
    if node.attr("storage_order", 0) and len(spatial) == 2:
        h, w = spatial
        inner = arange(hw, backend=x.backend).reshape(w, h).permute(1, 0)
        pos = (pos // hw) * hw + inner.reshape(1, 1, h, w)
    ppos, _ = _windows(node, pos, kernel, -1)
    index = None
    for s, p in zip(_taps(padded, kernel, strides, dil, outs), _taps(ppos, kernel, strides, dil, outs)):
        hit = (s == best) & (p >= 0)
        index = where(hit, p, -1) if index is None else where((index < 0) & hit, p, index)
    return best, index


def _pool_sum(node, x, kernel, p=None):
    padded, (strides, dil, pads, extra, outs) = _windows(node, x, kernel, 0.0)
    total = None
    for s in _taps(padded, kernel, strides, dil, outs):
        s = s.abs() ** p if p is not None else s
        total = s if total is None else total + s
    return total, (strides, dil, pads, extra, outs)


def average_pool(node, x):
    kernel = list(node.attr("kernel_shape"))
    total, (strides, dil, pads, extra, outs) = _pool_sum(node, x, kernel)
    # Count the taps each window averages: pads count when count_include_pad, ceil's overhang never.
    ones = filled([1, 1] + list(x.shape[2:]), 1.0, x)
    fill = 1.0 if node.attr("count_include_pad", 0) else 0.0
    ones = ones.pad([(0, 0), (0, 0)] + list(pads), fill) if any(a or b for a, b in pads) else ones
    ones = ones.pad([(0, 0), (0, 0)] + [(0, e) for e in extra], 0.0) if any(extra) else ones
    count = None
    for s in _taps(ones, kernel, strides, dil, outs):
        count = s if count is None else count + s
    return total / count


def lp_pool(node, x):
    kernel = list(node.attr("kernel_shape"))
    p = node.attr("p", 2)
    total, _ = _pool_sum(node, x, kernel, p)
    return total ** (1.0 / p)


def global_pool(node, x):
    dims = tuple(range(2, x.ndim))
    if node.op_type == "GlobalMaxPool":
        return x.amax(dims, keepdim=True)
    if node.op_type == "GlobalLpPool":
        p = node.attr("p", 2)
        return (x.abs() ** p).sum(dims, keepdim=True) ** (1.0 / p)
    return x.mean(dims, keepdim=True)


# ---------------------------------------------------------------- normalisations
def _channel(t, ndim):
    return t.reshape([1, -1] + [1] * (ndim - 2))


def batch_norm(node, x, scale, bias, mean, var, *_):
    if node.attr("training_mode", 0):
        dims = [0] + list(range(2, x.ndim))
        m = x.mean(dims)
        v = ((x - _channel(m, x.ndim)) ** 2).mean(dims)
        mom = node.attr("momentum", 0.9)
        y = (x - _channel(m, x.ndim)) / (_channel(v, x.ndim) + node.attr("epsilon", 1e-5)).sqrt()
        y = y * _channel(scale, x.ndim) + _channel(bias, x.ndim)
        return y, mean * mom + m * (1 - mom), var * mom + v * (1 - mom)
    eps = node.attr("epsilon", 1e-5)
    inv = scale / (var + eps).sqrt()
    return x * _channel(inv, x.ndim) + _channel(bias - mean * inv, x.ndim)


def _normalize(x, dims, eps):
    m = x.mean(dims, keepdim=True)
    v = ((x - m) ** 2).mean(dims, keepdim=True)
    return (x - m) / (v + eps).sqrt(), m, (v + eps).rsqrt()


def instance_norm(node, x, scale, bias):
    y, _, _ = _normalize(x, tuple(range(2, x.ndim)), node.attr("epsilon", 1e-5))
    return y * _channel(scale, x.ndim) + _channel(bias, x.ndim)


def layer_norm(node, x, scale, bias=None):
    a = node.attr("axis", -1)
    a = a + x.ndim if a < 0 else a
    dims = tuple(range(a, x.ndim))
    xf = x.to(D.float32) if x.dtype != D.float64 and node.attr("stash_type", 1) == 1 else x
    y, m, inv = _normalize(xf, dims, node.attr("epsilon", 1e-5))
    y = y.to(x.dtype) * scale
    y = y + bias if bias is not None else y
    return y, m, inv


def group_norm(node, x, scale, bias):
    g = node.attr("num_groups")
    xg = x.reshape(x.shape[0], g, -1)
    y, _, _ = _normalize(xg, (2,), node.attr("epsilon", 1e-5))
    if node.version < 21:  # scale and bias per group
        y = y * scale.reshape(1, g, 1) + bias.reshape(1, g, 1)
        return y.reshape(x.shape)
    return y.reshape(x.shape) * _channel(scale, x.ndim) + _channel(bias, x.ndim)


def rms_norm(node, x, scale):
    a = node.attr("axis", -1)
    a = a + x.ndim if a < 0 else a
    dims = tuple(range(a, x.ndim))
    xf = x.to(D.float32) if x.dtype != D.float64 else x
    y = xf * ((xf * xf).mean(dims, keepdim=True) + node.attr("epsilon", 1e-5)).rsqrt()
    return y.to(x.dtype) * scale


def lrn(node, x):
    size = node.attr("size")
    alpha, beta, bias = node.attr("alpha", 1e-4), node.attr("beta", 0.75), node.attr("bias", 1.0)
    sq = (x * x).pad([(0, 0), ((size - 1) // 2, size // 2)] + [(0, 0)] * (x.ndim - 2))
    total = None
    for i in range(size):
        s = sq.narrow(1, i, x.shape[1])
        total = s if total is None else total + s
    return x / (bias + alpha / size * total) ** beta


def lp_norm(node, x):
    a, p = node.attr("axis", -1), node.attr("p", 2)
    norm = (x * x).sum(a, keepdim=True).sqrt() if p == 2 else x.abs().sum(a, keepdim=True)
    return x / where(norm == 0, 1, norm)


def mvn(node, x):
    dims = tuple(node.attr("axes") or [0, 2, 3])
    m = x.mean(dims, keepdim=True)
    v = ((x - m) ** 2).mean(dims, keepdim=True)
    return (x - m) / (v.sqrt() + 1e-9)


# ---------------------------------------------------------------- losses
def nll_loss(node, logp, target, weight=None):
    ignore = node.attr("ignore_index")
    t = target.to(D.int64)
    valid = (t != ignore) if ignore is not None else filled(t.shape, True, t, D.bool_)
    safe = where(valid, t, 0)
    picked = -logp.gather(1, safe.unsqueeze(1)).squeeze(1)
    w = weight.take(safe.reshape(-1), 0).reshape(t.shape) if weight is not None else filled(t.shape, 1.0, logp)
    w = where(valid, w, 0.0)
    loss = picked * w
    how = node.attr("reduction", "mean")
    if how == "sum":
        return loss.sum()
    if how == "mean":
        return loss.sum() / w.sum()
    return loss


def softmax_cross_entropy(node, scores, labels, weight=None):
    logp = scores.log_softmax(1)
    return nll_loss(node, logp, labels, weight), logp


OPS = {
    "Conv": (conv, 1),
    "ConvTranspose": (conv_transpose, 1),
    "DeformConv": (deform_conv, 19),
    "MaxPool": (max_pool, 1),
    "AveragePool": (average_pool, 1),
    "LpPool": (lp_pool, 2),
    "GlobalAveragePool": (global_pool, 1),
    "GlobalMaxPool": (global_pool, 1),
    "GlobalLpPool": (global_pool, 2),
    "BatchNormalization": (batch_norm, 6),
    "InstanceNormalization": (instance_norm, 1),
    "LayerNormalization": (layer_norm, 17),
    "GroupNormalization": (group_norm, 18),
    "RMSNormalization": (rms_norm, 23),
    "LRN": (lrn, 1),
    "LpNormalization": (lp_norm, 1),
    "MeanVarianceNormalization": (mvn, 9),
    "NegativeLogLikelihoodLoss": (nll_loss, 12),
    "SoftmaxCrossEntropyLoss": (softmax_cross_entropy, 12),
}

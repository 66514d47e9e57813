"""Attention operators (opset 23+), written with matmul, softmax and masks.

``Attention`` follows ONNX's reference step by step: 3-d inputs split into heads, the KV cache
appended, one additive bias built from the mask, causal frontier, sliding window and padding,
grouped-query heads repeated, then softmax(q k^T * scale + bias) v, with rows that may attend
nothing giving zeros.
"""
from __future__ import annotations

import math

from ...tensor import arange, cat, where
from .common import filled


def _heads(x, n):
    b, s, h = x.shape
    return x.reshape(b, s, n, h // n).permute(0, 2, 1, 3)


def _allowed_bias(allowed, like):
    return where(allowed, filled((), 0.0, like), filled((), -math.inf, like))


def _frontier(q, kv, offset, like):
    """(q, kv) positions j - i - offset: causal keeps <= 0. offset is an int or a (batch,) tensor."""
    i = arange(q, backend=like.backend).reshape(q, 1)
    j = arange(kv, backend=like.backend).reshape(1, kv)
    if isinstance(offset, int):
        return j - i - offset
    return j - i - offset.reshape(-1, 1, 1, 1)


def _safe_softmax(x):
    m = x.amax(-1, keepdim=True)
    m = where(m.isinf() & (m < 0), 0.0, m)
    e = (x - m).exp()
    s = e.sum(-1, keepdim=True)
    return e / where(s == 0, 1.0, s)


def attention(node, q, k, v, mask=None, past_k=None, past_v=None, nonpad=None):
    rank = q.ndim
    if rank == 3:
        q = _heads(q, node.attr("q_num_heads"))
        k, v = _heads(k, node.attr("kv_num_heads")), _heads(v, node.attr("kv_num_heads"))
    scale = node.attr("scale")
    scale = 1 / math.sqrt(q.shape[3]) if scale is None else scale
    root = math.sqrt(scale)
    if past_k is not None:
        k, v = cat([past_k, k], 2), cat([past_v, v], 2)
    present_k, present_v = k, v
    lq, lkv = q.shape[2], k.shape[2]
    bias = filled((lq, lkv), 0.0, q)
    if mask is not None and mask.shape[-1] < lkv:
        fill = False if mask.dtype.kind == "b" else -math.inf
        mask = mask.pad([(0, 0)] * (mask.ndim - 1) + [(0, lkv - mask.shape[-1])], fill)
    if nonpad is not None and past_k is None:
        offset = nonpad.reshape(-1) - lq
    else:
        offset = past_k.shape[2] if past_k is not None else 0
    if mask is not None:
        bias = bias + (_allowed_bias(mask, q) if mask.dtype.kind == "b" else mask.to(q.dtype))
    if node.attr("is_causal", 0):
        bias = bias + _allowed_bias(_frontier(lq, lkv, offset, q) <= 0, q)
    left, right = node.attr("left_window_size", -1), node.attr("right_window_size", -1)
    if left >= 0 or right >= 0:
        diff = -_frontier(lq, lkv, offset, q)        # i + offset - j
        allowed = diff == diff
        if left >= 0:
            allowed = allowed & (diff <= left)
        if right >= 0:
            allowed = allowed & (-diff <= right)
        bias = bias + _allowed_bias(allowed, q)
    if nonpad is not None:
        keep = arange(lkv, backend=q.backend).reshape(1, lkv) < nonpad.reshape(-1, 1)
        bias = bias + _allowed_bias(keep.reshape(q.shape[0], 1, 1, lkv), q)
    hq, hk = q.shape[1], k.shape[1]
    if hq != hk and hq % hk == 0:
        reps = hq // hk
        k = k.unsqueeze(2).expand(k.shape[0], hk, reps, *k.shape[2:]).reshape(k.shape[0], hq, *k.shape[2:])
        v = v.unsqueeze(2).expand(v.shape[0], hk, reps, *v.shape[2:]).reshape(v.shape[0], hq, *v.shape[2:])
    scores = (q * root) @ (k * root).permute(0, 1, 3, 2)
    cap = node.attr("softcap")
    if cap:
        scores = (scores / cap).tanh() * cap
    with_bias = scores + bias
    mode = node.attr("qk_matmul_output_mode", 0)
    qk = with_bias if mode == 2 else scores
    precision = node.attr("softmax_precision")
    wb = with_bias.to(node.dtype(precision)) if precision is not None else with_bias
    probs = _safe_softmax(wb)
    dead = bias.amax(-1, keepdim=True)
    probs = where(dead.isinf() & (dead < 0), 0.0, probs)
    if mode == 3:
        qk = probs
    out = probs.to(q.dtype) @ v
    if rank == 3:
        out = out.permute(0, 2, 1, 3)
        out = out.reshape(out.shape[0], out.shape[1], -1)
    return out, present_k, present_v, qk.to(q.dtype)


OPS = {"Attention": (attention, 23)}

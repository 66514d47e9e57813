"""Attention operators (opset 23+), written with matmul, softmax and masks.

``Attention`` follows ONNX's reference step by step: 3-d inputs split into heads, the KV cache
appended, one additive bias built from the mask, causal frontier, sliding window and padding,
grouped-query heads repeated, then softmax(q k^T * scale + bias) v, with rows that may attend
nothing giving zeros.
"""

from __future__ import annotations

import math

from ... import dtypes as D
from ...tensor import arange, cat, stack, where
from .common import body, filled


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
        diff = -_frontier(lq, lkv, offset, q)  # i + offset - j
        allowed = (diff <= left) if left >= 0 else None
        if right >= 0:
            allowed = (-diff <= right) if allowed is None else allowed & (-diff <= right)
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


# ---------------------------------------------------------------- recurrent-state attention
def linear_attention(node, q, k, v, past=None, decay=None, beta=None):
    """Linear attention with a (d_k, d_v) state per head, updated token by token."""
    rule = node.attr("update_rule", "gated_delta")
    hq, hk = node.attr("q_num_heads"), node.attr("kv_num_heads")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    b, t, _ = q.shape
    q4, k4, v4 = (_heads(x, h).to(D.float32) for x, h in ((q, hq), (k, hk), (v, hk)))
    dk, dv = q4.shape[3], v4.shape[3]
    if decay is not None:
        decay = (decay.reshape(b, t, hk, 1).permute(0, 2, 1, 3) if decay.shape[-1] == hk else _heads(decay, hk)).to(
            D.float32
        )
    if beta is not None:
        beta = beta.reshape(b, t, beta.shape[-1], 1).permute(0, 2, 1, 3).to(D.float32)
    state = past.to(D.float32) if past is not None else filled((b, hk, dk, dv), 0.0, q4)
    scale = node.attr("scale") or 1 / math.sqrt(dk)
    group = hq // hk
    outs = []
    for i in range(t):
        qt, kt, vt = q4[:, :, i], k4[:, :, i], v4[:, :, i]
        if gating:
            state = state * decay[:, :, i].exp().unsqueeze(-1)
        if delta:
            got = (state * kt.unsqueeze(-1)).sum(2)
            vt = beta[:, :, i] * (vt - got)
        state = state + kt.unsqueeze(-1) * vt.unsqueeze(-2)
        read = state if group == 1 else _repeat_heads(state, group)
        outs.append(scale * (qt.unsqueeze(-1) * read).sum(2))
    out = stack(outs, 2).permute(0, 2, 1, 3).reshape(b, t, hq * dv).to(q.dtype)
    return out, state.to(past.dtype if past is not None else q.dtype)


def _repeat_heads(x, reps):
    b, h = x.shape[:2]
    return x.unsqueeze(2).expand(b, h, reps, *x.shape[2:]).reshape(b, h * reps, *x.shape[2:])


def causal_conv_with_state(node, x, w, bias=None, past=None):
    """Depthwise causal 1-d convolution whose left context is carried as state."""
    from ...dispatch import apply

    b, c, _ = x.shape
    k = w.shape[2]
    pad = past if past is not None else filled((b, c, k - 1), 0.0, x)
    padded = cat([pad, x], 2)
    y = apply(
        "conv2d", padded.unsqueeze(2), w.unsqueeze(2), stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=c
    ).squeeze(2)
    if bias is not None:
        y = y + bias.reshape(1, -1, 1)
    if node.attr("activation", "none") in ("silu", "swish"):
        y32 = y.to(D.float32)
        y = (y32 * y32.sigmoid()).to(x.dtype)
    return y, padded.narrow(2, padded.shape[2] - (k - 1), k - 1)


def tensor_scatter(node, cache, update, write=None):
    """Write `update` into the KV cache at per-batch positions along `axis` (linear or circular)."""
    a = node.attr("axis", -2) % cache.ndim
    n, s = cache.shape[a], update.shape[a]
    start = write.to(D.int64) if write is not None else filled((cache.shape[0],), 0, cache, D.int64)
    shape = [1] * cache.ndim
    shape[0], shape[a] = cache.shape[0], n
    pos = arange(n, backend=cache.backend).reshape([1] * a + [n] + [1] * (cache.ndim - a - 1))
    offset = pos - start.reshape([-1] + [1] * (cache.ndim - 1))
    if node.attr("mode", "linear") == "circular":
        offset = offset - n * (offset.to(D.float64) / n).floor().to(D.int64)
    hit = (offset >= 0) & (offset < s)
    src = offset.clamp(0, s - 1).expand(*[cache.shape[d] if d != a else n for d in range(cache.ndim)])
    return where(hit, update.gather(a, src), cache)


def flex_attention(node, q, k, v):
    """softmax(score_mod(q k^T * scale)) v, with probabilities passed through prob_mod (preview domain)."""
    hq, hk = q.shape[1], k.shape[1]
    if hq != hk:
        k, v = _repeat_heads(k, hq // hk), _repeat_heads(v, hq // hk)
    scale = node.attr("scale")
    scale = 1 / math.sqrt(q.shape[3]) if scale is None else scale
    precision = node.attr("softmax_precision")
    work = node.dtype(precision) if precision is not None else (D.float32 if q.dtype == D.float16 else q.dtype)
    root = math.sqrt(scale)
    scores = ((q * root) @ (k * root).permute(0, 1, 3, 2)).to(work)
    if "score_mod" in node.graphs:
        scores = body(node, "score_mod", [scores])[0].to(work)
    probs = scores.softmax(-1)
    if "prob_mod" in node.graphs:
        probs = body(node, "prob_mod", [probs])[0].to(work)
    return (probs @ v.to(work)).to(v.dtype)


PREVIEW_OPS = {"FlexAttention": (flex_attention, 1)}
OPS = {
    "Attention": (attention, 23),
    "LinearAttention": (linear_attention, 27),
    "CausalConvWithState": (causal_conv_with_state, 27),
    "TensorScatter": (tensor_scatter, 24),
}

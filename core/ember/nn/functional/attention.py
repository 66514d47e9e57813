"""Scaled dot-product attention (its fused op's reference is registered at the end)."""

from __future__ import annotations

import math

from ... import dtypes as D, fused
from ...tensor import arange, where
from .activation import dropout


def scaled_dot_product_attention(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, generator=None, need_weights=False
):
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


# ============================================================================== the fused op
def _attention_reference(q, k, v, *, causal=False, scale=None):
    """``softmax(q @ k^T * scale) @ v`` over (..., L, E) inputs; ``causal`` masks the future."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.mT) * scale
    if causal:
        n, m = scores.shape[-2], scores.shape[-1]
        keep = arange(n, backend=q.backend).unsqueeze(1) >= arange(m, backend=q.backend)
        scores = scores.masked_fill(~keep, -math.inf)
    return scores.softmax(-1) @ v


fused.defop("scaled_dot_product_attention", _attention_reference)

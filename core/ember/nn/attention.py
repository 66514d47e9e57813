"""MultiheadAttention with PyTorch's parameters (``in_proj_weight``, ``in_proj_bias``,
``out_proj``) and masks, so a torch state_dict loads 1:1."""

from __future__ import annotations

import math

from .. import dtypes as D
from ..creation import empty, zeros
from ..errors import ShapeError, located
from ..tensor import arange, where
from . import functional as F, init
from .linear import Linear
from .module import Module
from .parameter import Parameter


def _additive(mask, dtype, name):
    """A mask as something to add to the scores: bool True (= not allowed) becomes -inf."""
    if mask is None:
        return None
    if mask.dtype is D.bool_:
        return where(mask, -math.inf, 0.0).to(dtype)
    if not mask.dtype.is_floating_point:
        raise located(TypeError, f"MultiheadAttention: {name} must be bool or float, got {mask.dtype}")
    return mask.to(dtype)


class MultiheadAttention(Module):
    """Attention with ``num_heads`` heads: ``out_proj(softmax(Q K^T / sqrt(d) + mask) V)``.

    Inputs are (L, N, E), or (N, L, E) with ``batch_first=True``, or unbatched (L, E).
    ``attn_mask`` (L, S) or (N*num_heads, L, S) and ``key_padding_mask`` (N, S) are bool
    (True = may not attend) or float (added to the scores). Returns ``(output, weights)``;
    weights are averaged over heads unless ``average_attn_weights=False``, and None when
    ``need_weights=False``.

    >>> import ember
    >>> from ember import nn
    >>> mha = nn.MultiheadAttention(16, 4, batch_first=True)
    >>> x = ember.randn(2, 5, 16)
    >>> out, w = mha(x, x, x)
    >>> out.shape, w.shape
    ((2, 5, 16), (2, 5, 5))
    """

    def __init__(
        self,
        embed_dim,
        num_heads,
        dropout=0.0,
        bias=True,
        add_bias_kv=False,
        add_zero_attn=False,
        kdim=None,
        vdim=None,
        batch_first=False,
    ):
        super().__init__()
        if add_bias_kv or add_zero_attn:
            raise located(NotImplementedError, "MultiheadAttention: add_bias_kv and add_zero_attn are not supported")
        if embed_dim % num_heads:
            raise located(
                ValueError, f"MultiheadAttention: embed_dim {embed_dim} must be divisible by num_heads {num_heads}"
            )
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, float(dropout)
        self.head_dim = embed_dim // num_heads
        self.kdim, self.vdim = kdim or embed_dim, vdim or embed_dim
        self.batch_first = batch_first
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(empty(3 * embed_dim, embed_dim))
        else:
            self.q_proj_weight = Parameter(empty(embed_dim, embed_dim))
            self.k_proj_weight = Parameter(empty(embed_dim, self.kdim))
            self.v_proj_weight = Parameter(empty(embed_dim, self.vdim))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(empty(3 * embed_dim))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias)
        self.reset_parameters()

    def reset_parameters(self):
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            init.zeros_(self.in_proj_bias)
            init.zeros_(self.out_proj.bias)

    def _project(self, query, key, value):
        E = self.embed_dim
        b = self.in_proj_bias
        bq, bk, bv = (None, None, None) if b is None else (b.narrow(0, 0, E), b.narrow(0, E, E), b.narrow(0, 2 * E, E))
        if self._qkv_same_embed_dim:
            w = self.in_proj_weight
            if query is key and key is value:  # self-attention: one GEMM for q, k and v
                return F.linear(query, w, b).chunk(3, -1)
            wq, wk, wv = w.narrow(0, 0, E), w.narrow(0, E, E), w.narrow(0, 2 * E, E)
        else:
            wq, wk, wv = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        return F.linear(query, wq, bq), F.linear(key, wk, bk), F.linear(value, wv, bv)

    def forward(
        self,
        query,
        key,
        value,
        key_padding_mask=None,
        need_weights=True,
        attn_mask=None,
        average_attn_weights=True,
        is_causal=False,
    ):
        unbatched = query.ndim == 2
        if query.ndim not in (2, 3) or query.shape[-1] != self.embed_dim:
            raise located(
                ShapeError,
                f"MultiheadAttention: expected query (L, N, {self.embed_dim}) "
                f"[(N, L, {self.embed_dim}) with batch_first] or (L, {self.embed_dim}), got {query.shape}",
            )
        if key.ndim != query.ndim or value.ndim != query.ndim or key.shape[:-1] != value.shape[:-1]:
            raise located(
                ShapeError,
                f"MultiheadAttention: query {query.shape}, key {key.shape} and value {value.shape} do not fit together",
            )
        same = query is key and key is value
        if unbatched:  # work batch-first: (N, L, E)
            query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
            key_padding_mask = None if key_padding_mask is None else key_padding_mask.unsqueeze(0)
        elif not self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        if same:
            key = value = query
        N, L, _ = query.shape
        S = key.shape[1]
        H, hd = self.num_heads, self.head_dim
        q, k, v = self._project(query, key, value)
        q, k, v = (t.reshape(N, -1, H, hd).transpose(1, 2) for t in (q, k, v))  # (N, H, len, hd)

        mask = _additive(attn_mask, q.dtype, "attn_mask")
        if mask is not None:
            if mask.shape == (L, S):
                pass
            elif mask.shape == (N * H, L, S):
                mask = mask.reshape(N, H, L, S)
            else:
                raise located(
                    ShapeError,
                    f"MultiheadAttention: attn_mask must be ({L}, {S}) or ({N * H}, {L}, {S}), got {attn_mask.shape}",
                )
        if is_causal and attn_mask is None:
            causal = arange(L, backend=q.backend).unsqueeze(1) < arange(S, backend=q.backend)
            mask = where(causal, -math.inf, zeros((), dtype=q.dtype, backend=q.backend))
        kpm = _additive(key_padding_mask, q.dtype, "key_padding_mask")
        if kpm is not None:
            if kpm.shape != (N, S):
                raise located(
                    ShapeError, f"MultiheadAttention: key_padding_mask must be ({N}, {S}), got {key_padding_mask.shape}"
                )
            kpm = kpm.reshape(N, 1, 1, S)
            mask = kpm if mask is None else mask + kpm

        scores = (q * (1.0 / math.sqrt(hd))) @ k.mT
        if mask is not None:
            scores = scores + mask
        weights = scores.softmax(-1)
        if self.dropout > 0.0 and self.training:
            weights = F.dropout(weights, self.dropout, True)
        out = (weights @ v).transpose(1, 2).reshape(N, L, self.embed_dim)
        out = self.out_proj(out)
        if unbatched:
            out = out.squeeze(0)
        elif not self.batch_first:
            out = out.transpose(0, 1)
        if not need_weights:
            return out, None
        if average_attn_weights:
            weights = weights.mean(1)
        return out, (weights.squeeze(0) if unbatched else weights)

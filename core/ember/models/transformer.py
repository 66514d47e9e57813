"""CharTransformer: a small causal (GPT-style) character-level language model."""

from __future__ import annotations

import math

from .. import nn
from ..errors import ShapeError, located
from ..nn import init
from ..tensor import arange


class Block(nn.Module):
    """Pre-norm transformer block: ``x + attn(ln1(x))``, then ``x + mlp(ln2(x))``."""

    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, n_heads, dropout=dropout, batch_first=True)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model), nn.Dropout(dropout)
        )

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class CharTransformer(nn.Module):
    """Token + learned position embeddings, ``n_layers`` pre-norm blocks with causal
    self-attention and a GELU MLP, a final LayerNorm and a linear head (its weight tied to the
    token embedding when ``tie_weights``). Input (N, T) token ids with T <= max_len; output
    (N, T, vocab_size) logits.

    >>> import ember
    >>> from ember.models import CharTransformer
    >>> model = CharTransformer(65, d_model=32, n_heads=4, n_layers=1, max_len=16)
    >>> model(ember.zeros(2, 16, dtype=ember.int64)).shape
    (2, 16, 65)
    """

    def __init__(self, vocab_size, d_model=128, n_heads=4, n_layers=2, max_len=128, dropout=0.0, tie_weights=True):
        super().__init__()
        self.vocab_size, self.max_len = vocab_size, max_len
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(max_len, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([Block(d_model, n_heads, dropout) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        # GPT-2's init: N(0, 0.02) weights, zero biases, residual projections scaled by depth.
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                init.zeros_(p)
            elif p.ndim >= 2:
                std = 0.02 / math.sqrt(2 * n_layers) if name.endswith(("out_proj.weight", "mlp.2.weight")) else 0.02
                init.normal_(p, 0.0, std)
        if tie_weights:
            self.head.weight = self.tok_emb.weight

    def forward(self, idx):
        if idx.ndim != 2:
            raise located(ShapeError, f"CharTransformer: expected token ids of shape (N, T), got {idx.shape}")
        T = idx.shape[1]
        if self.max_len < T:
            raise located(ShapeError, f"CharTransformer: sequence length {T} exceeds max_len {self.max_len}")
        pos = arange(T, backend=idx.backend)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
        mask = pos.unsqueeze(1) < pos  # True above the diagonal: the future is hidden
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln_f(x))

"""Transformer layers with PyTorch's structure and names (``self_attn``, ``linear1``, ``norm1``,
...), so a torch state_dict loads 1:1: TransformerEncoderLayer, TransformerDecoderLayer and
their stacks TransformerEncoder and TransformerDecoder.

A layer is attention and a two-layer feed-forward block, each inside a residual connection
with a LayerNorm after it (post-norm, the 2017 paper's order and torch's default) or before
it (``norm_first=True``, which trains deep stacks more stably).
"""

from __future__ import annotations

import copy

from ..errors import located
from . import functional as F
from .activation import Dropout
from .attention import MultiheadAttention
from .container import ModuleList
from .linear import Linear
from .module import Module
from .normalization import LayerNorm

#: the activations named by a string, as torch accepts them
ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


def _activation(activation, name):
    if callable(activation):
        return activation
    if activation not in ACTIVATIONS:
        raise located(ValueError, f"{name}: activation should be relu/gelu or a callable, not {activation!r}")
    return ACTIVATIONS[activation]


class _Layer(Module):
    """The feed-forward block and the helpers both layers share."""

    def _feed_forward_init(self, d_model, dim_feedforward, dropout, activation, layer_norm_eps, bias, norms):
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias)
        for i in range(1, norms + 1):
            setattr(self, f"norm{i}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias))
        for i in range(1, norms + 1):
            setattr(self, f"dropout{i}", Dropout(dropout))
        self.activation = _activation(activation, type(self).__name__)

    def _attend(self, attn, x, mem, mask, key_padding_mask, is_causal):
        return attn(
            x, mem, mem, attn_mask=mask, key_padding_mask=key_padding_mask, need_weights=False, is_causal=is_causal
        )[0]

    def _ff_block(self, x):
        return self.linear2(self.dropout(self.activation(self.linear1(x))))

    def _residual(self, x, blocks):
        """``blocks``: (norm, block, dropout) triples applied in order, pre- or post-norm."""
        for norm, block, drop in blocks:
            x = x + drop(block(norm(x))) if self.norm_first else norm(x + drop(block(x)))
        return x


class TransformerEncoderLayer(_Layer):
    """Self-attention and a feed-forward block over (S, N, d_model), or (N, S, d_model) with
    ``batch_first=True``, or unbatched (S, d_model); torch's arguments and defaults.

    ``src_mask`` (S, S) and ``src_key_padding_mask`` (N, S) follow MultiheadAttention's
    conventions (bool True = may not attend, or float added to the scores); ``is_causal=True``
    without a mask masks the future.

    >>> import ember
    >>> from ember import nn
    >>> layer = nn.TransformerEncoderLayer(d_model=16, nhead=4, dim_feedforward=32, batch_first=True)
    >>> layer(ember.randn(2, 7, 16)).shape
    (2, 7, 16)
    >>> sorted(layer.state_dict())[:3]
    ['linear1.bias', 'linear1.weight', 'linear2.bias']
    """

    def __init__(
        self,
        d_model,
        nhead,
        dim_feedforward=2048,
        dropout=0.1,
        activation="relu",
        layer_norm_eps=1e-5,
        batch_first=False,
        norm_first=False,
        bias=True,
    ):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first)
        self._feed_forward_init(d_model, dim_feedforward, dropout, activation, layer_norm_eps, bias, norms=2)
        self.norm_first = norm_first

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        def sa(x):
            return self._attend(self.self_attn, x, x, src_mask, src_key_padding_mask, is_causal)

        return self._residual(src, [(self.norm1, sa, self.dropout1), (self.norm2, self._ff_block, self.dropout2)])


class TransformerDecoderLayer(_Layer):
    """Self-attention over the target, attention to the encoder's ``memory``, and a
    feed-forward block; shapes as TransformerEncoderLayer's, memory (S, N, d_model).

    Masks: ``tgt_mask`` (T, T), ``memory_mask`` (T, S), ``tgt_key_padding_mask`` (N, T),
    ``memory_key_padding_mask`` (N, S); ``tgt_is_causal=True`` without a tgt_mask masks the
    future targets.

    >>> import ember
    >>> from ember import nn
    >>> layer = nn.TransformerDecoderLayer(d_model=16, nhead=4, dim_feedforward=32)
    >>> layer(ember.randn(5, 2, 16), ember.randn(7, 2, 16), tgt_is_causal=True).shape
    (5, 2, 16)
    """

    def __init__(
        self,
        d_model,
        nhead,
        dim_feedforward=2048,
        dropout=0.1,
        activation="relu",
        layer_norm_eps=1e-5,
        batch_first=False,
        norm_first=False,
        bias=True,
    ):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first)
        self._feed_forward_init(d_model, dim_feedforward, dropout, activation, layer_norm_eps, bias, norms=3)
        self.norm_first = norm_first

    def forward(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal=False,
        memory_is_causal=False,
    ):
        def sa(x):
            return self._attend(self.self_attn, x, x, tgt_mask, tgt_key_padding_mask, tgt_is_causal)

        def mha(x):
            return self._attend(self.multihead_attn, x, memory, memory_mask, memory_key_padding_mask, memory_is_causal)

        return self._residual(
            tgt,
            [
                (self.norm1, sa, self.dropout1),
                (self.norm2, mha, self.dropout2),
                (self.norm3, self._ff_block, self.dropout3),
            ],
        )


class TransformerEncoder(Module):
    """``num_layers`` copies of ``encoder_layer`` (``layers.0``, ``layers.1``, ... as in torch),
    then the optional ``norm``.

    >>> import ember
    >>> from ember import nn
    >>> enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, 32), num_layers=2)
    >>> enc(ember.randn(7, 2, 16)).shape, len(enc.layers)
    ((7, 2, 16), 2)
    """

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True, mask_check=True):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers, self.norm = num_layers, norm

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal))
        return self.norm(x) if self.norm is not None else x


class TransformerDecoder(Module):
    """``num_layers`` copies of ``decoder_layer``, then the optional ``norm``.

    >>> import ember
    >>> from ember import nn
    >>> dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(16, 4, 32), num_layers=2)
    >>> dec(ember.randn(5, 2, 16), ember.randn(7, 2, 16)).shape
    (5, 2, 16)
    """

    def __init__(self, decoder_layer, num_layers, norm=None):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(decoder_layer) for _ in range(num_layers)])
        self.num_layers, self.norm = num_layers, norm

    def forward(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal=None,
        memory_is_causal=False,
    ):
        x = tgt
        for layer in self.layers:
            x = layer(
                x,
                memory,
                tgt_mask,
                memory_mask,
                tgt_key_padding_mask,
                memory_key_padding_mask,
                bool(tgt_is_causal),
                memory_is_causal,
            )
        return self.norm(x) if self.norm is not None else x

"""LSTM: PyTorch's layout (gate order i, f, g, o; parameters ``weight_ih_l0`` ...), so a torch
state_dict loads 1:1.

The input projection of a whole sequence is one GEMM per layer and direction; only the
recurrent part ``h @ W_hh^T`` and the gate arithmetic loop, once per time step.
"""
from __future__ import annotations

import math

from ..errors import ShapeError, located
from ..tensor import cat, empty, stack, zeros
from . import functional as F
from . import init
from .module import Module
from .parameter import Parameter


def _steps(x):
    """Split (T, ...) into T tensors of shape (...) by halving.

    Slicing one step straight out of x would make each step's gradient a zero-padded copy of
    the whole sequence (O(T^2) work in backward); halving keeps it at O(T log T).
    """
    n = x.shape[0]
    if n == 1:
        return [x.squeeze(0)]
    half = n // 2
    return _steps(x.narrow(0, 0, half)) + _steps(x.narrow(0, half, n - half))


class LSTM(Module):
    """A multi-layer long short-term memory RNN over (T, N, input_size), or (N, T, input_size)
    with ``batch_first=True``, or an unbatched (T, input_size).

    Returns ``output, (h_n, c_n)``: output (T, N, D*hidden_size) with D = 2 if bidirectional,
    h_n and c_n (D*num_layers, N, hidden_size). Every weight starts U(-1/sqrt(H), 1/sqrt(H)).

    >>> import ember
    >>> from ember import nn
    >>> lstm = nn.LSTM(8, 16, num_layers=2, batch_first=True)
    >>> out, (h, c) = lstm(ember.randn(4, 10, 8))
    >>> out.shape, h.shape
    ((4, 10, 16), (2, 4, 16))
    """

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0):
        super().__init__()
        if proj_size:
            raise located(NotImplementedError, "LSTM: proj_size is not supported")
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional = bidirectional
        dirs = 2 if bidirectional else 1
        h = hidden_size
        for layer in range(num_layers):
            width = input_size if layer == 0 else h * dirs
            for sfx in ("", "_reverse")[:dirs]:
                setattr(self, f"weight_ih_l{layer}{sfx}", Parameter(empty(4 * h, width)))
                setattr(self, f"weight_hh_l{layer}{sfx}", Parameter(empty(4 * h, h)))
                if bias:
                    setattr(self, f"bias_ih_l{layer}{sfx}", Parameter(empty(4 * h)))
                    setattr(self, f"bias_hh_l{layer}{sfx}", Parameter(empty(4 * h)))
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for p in self.parameters():
            init.uniform_(p, -bound, bound)

    def _direction(self, xs, layer, sfx, h, c, reverse):
        """Run one layer in one direction over the list of steps; returns outputs and (h, c)."""
        w_ih, w_hh = getattr(self, f"weight_ih_l{layer}{sfx}"), getattr(self, f"weight_hh_l{layer}{sfx}")
        b = getattr(self, f"bias_ih_l{layer}{sfx}") + getattr(self, f"bias_hh_l{layer}{sfx}") if self.bias else None
        projected = _steps(F.linear(xs, w_ih, b))             # one GEMM for the whole sequence
        H = self.hidden_size
        w_hh_t = w_hh.T
        outs = [None] * len(projected)
        order = range(len(projected) - 1, -1, -1) if reverse else range(len(projected))
        for t in order:
            gates = projected[t] + h @ w_hh_t
            s = gates.sigmoid()
            i, f, o = s.narrow(-1, 0, H), s.narrow(-1, H, H), s.narrow(-1, 3 * H, H)
            g = gates.narrow(-1, 2 * H, H).tanh()
            c = f * c + i * g
            h = o * c.tanh()
            outs[t] = h
        return stack(outs), h, c

    def forward(self, input, hx=None):
        unbatched = input.ndim == 2
        if input.ndim not in (2, 3) or input.shape[-1] != self.input_size:
            raise located(ShapeError, f"{self!r}: expected input (T, N, {self.input_size})"
                          f"{' [batch_first: (N, T, ' + str(self.input_size) + ')]' if self.batch_first else ''} "
                          f"or (T, {self.input_size}), got {input.shape}")
        x = input.unsqueeze(1) if unbatched else (input.transpose(0, 1) if self.batch_first else input)
        T, N = x.shape[:2]
        dirs = 2 if self.bidirectional else 1
        state_shape = (self.num_layers * dirs, N, self.hidden_size)
        if hx is None:
            h0 = c0 = zeros(state_shape, dtype=x.dtype, backend=x.backend)
        else:
            h0, c0 = hx
            if unbatched:
                h0, c0 = h0.unsqueeze(1), c0.unsqueeze(1)
            if h0.shape != state_shape or c0.shape != state_shape:
                raise located(ShapeError, f"LSTM: expected h0 and c0 of shape {state_shape}, got {h0.shape} "
                              f"and {c0.shape}")
        hs, cs = [], []
        for layer in range(self.num_layers):
            outs = []
            for d, sfx in enumerate(("", "_reverse")[:dirs]):
                k = layer * dirs + d
                out, h, c = self._direction(x, layer, sfx, h0[k], c0[k], reverse=d == 1)
                outs.append(out)
                hs.append(h), cs.append(c)
            x = outs[0] if dirs == 1 else cat(outs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        h_n, c_n = stack(hs), stack(cs)
        if unbatched:
            return x.squeeze(1), (h_n.squeeze(1), c_n.squeeze(1))
        return (x.transpose(0, 1) if self.batch_first else x), (h_n, c_n)

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s

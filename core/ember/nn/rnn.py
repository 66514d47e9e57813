"""LSTM, GRU and GRUCell: PyTorch's layout (gate order i, f, g, o for the LSTM, r, z, n for the
GRU; parameters ``weight_ih_l0`` ...), so a torch state_dict loads 1:1.

The input projection of a whole sequence is one GEMM per layer and direction; only the
recurrent part ``h @ W_hh^T`` and the gate arithmetic loop, once per time step.
"""

from __future__ import annotations

import math

from ..creation import empty, zeros
from ..errors import ShapeError, located
from ..tensor import cat, stack
from . import functional as F, init
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


class _RNNBase(Module):
    """The stack of layers and directions the recurrent layers share; a subclass gives the
    number of gates, the state's parts and the step (``_cell``)."""

    _gates = 1
    _parts: tuple[str, ...] = ("h",)  # the state: h for the GRU, (h, c) for the LSTM

    def __init__(
        self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0, bidirectional=False
    ):
        super().__init__()
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional = bidirectional
        dirs = 2 if bidirectional else 1
        h, k = hidden_size, self._gates
        for layer in range(num_layers):
            width = input_size if layer == 0 else h * dirs
            for sfx in ("", "_reverse")[:dirs]:
                setattr(self, f"weight_ih_l{layer}{sfx}", Parameter(empty(k * h, width)))
                setattr(self, f"weight_hh_l{layer}{sfx}", Parameter(empty(k * h, h)))
                if bias:
                    setattr(self, f"bias_ih_l{layer}{sfx}", Parameter(empty(k * h)))
                    setattr(self, f"bias_hh_l{layer}{sfx}", Parameter(empty(k * h)))
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for p in self.parameters():
            init.uniform_(p, -bound, bound)

    def _weights(self, layer, sfx):
        """(w_ih, w_hh, b_ih, b_hh) of one layer and direction (biases None without bias)."""
        names = ("weight_ih", "weight_hh") + (("bias_ih", "bias_hh") if self.bias else ())
        w = [getattr(self, f"{n}_l{layer}{sfx}") for n in names]
        return tuple(w) + (None, None) * (not self.bias)

    def _direction(self, xs, layer, sfx, state, reverse):
        """Run one layer in one direction over the sequence; returns the outputs and last state."""
        w_ih, w_hh, b_ih, b_hh = self._weights(layer, sfx)
        projected = _steps(F.linear(xs, w_ih, b_ih))  # one GEMM for the whole sequence
        w_hh_t = w_hh.T
        outs = [None] * len(projected)
        order = range(len(projected) - 1, -1, -1) if reverse else range(len(projected))
        for t in order:
            state = self._cell(projected[t], state, w_hh_t, b_hh)
            outs[t] = state[0]
        return stack(outs), state

    def _expect(self):
        bf = f" [batch_first: (N, T, {self.input_size})]" if self.batch_first else ""
        return f"(T, N, {self.input_size}){bf} or (T, {self.input_size})"

    def forward(self, input, hx=None):
        unbatched = input.ndim == 2
        if input.ndim not in (2, 3) or input.shape[-1] != self.input_size:
            raise located(ShapeError, f"{self!r}: expected input {self._expect()}, got {input.shape}")
        x = input.unsqueeze(1) if unbatched else (input.transpose(0, 1) if self.batch_first else input)
        T, N = x.shape[:2]
        dirs = 2 if self.bidirectional else 1
        state_shape = (self.num_layers * dirs, N, self.hidden_size)
        if hx is None:
            states = (zeros(state_shape, dtype=x.dtype, backend=x.backend),) * len(self._parts)
        else:
            states = tuple(hx) if len(self._parts) > 1 else (hx,)
            if unbatched:
                states = tuple(s.unsqueeze(1) for s in states)
            if any(s.shape != state_shape for s in states):
                raise located(
                    ShapeError,
                    f"{type(self).__name__}: expected {' and '.join(p + '0' for p in self._parts)} "
                    f"of shape {state_shape}, got {' and '.join(str(s.shape) for s in states)}",
                )
        finals = []
        for layer in range(self.num_layers):
            outs = []
            for d, sfx in enumerate(("", "_reverse")[:dirs]):
                k = layer * dirs + d
                out, last = self._direction(x, layer, sfx, tuple(s[k] for s in states), reverse=d == 1)
                outs.append(out)
                finals.append(last)
            x = outs[0] if dirs == 1 else cat(outs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        last = tuple(stack([f[i] for f in finals]) for i in range(len(self._parts)))
        if unbatched:
            x, last = x.squeeze(1), tuple(s.squeeze(1) for s in last)
        elif self.batch_first:
            x = x.transpose(0, 1)
        return x, (last if len(self._parts) > 1 else last[0])

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


def _lstm_cell(gi, state, w_hh_t, b_hh):
    """One LSTM step from the projected input ``gi`` (its bias and b_hh already in it)."""
    h, c = state
    gates = gi + h @ w_hh_t
    H = h.shape[-1]
    s = gates.sigmoid()
    i, f, o = s.narrow(-1, 0, H), s.narrow(-1, H, H), s.narrow(-1, 3 * H, H)
    g = gates.narrow(-1, 2 * H, H).tanh()
    c = f * c + i * g
    return o * c.tanh(), c


def gru_cell(gi, h, w_hh_t, b_hh=None):
    """One GRU step from the projected input ``gi = x W_ih^T + b_ih`` (torch's equations):
    ``r, z = sigmoid(gi + gh)``, ``n = tanh(gi_n + r * gh_n)``, ``h' = n + z * (h - n)``
    with ``gh = h W_hh^T + b_hh``."""
    gh = h @ w_hh_t
    if b_hh is not None:
        gh = gh + b_hh
    H = h.shape[-1]
    rz = (gi.narrow(-1, 0, 2 * H) + gh.narrow(-1, 0, 2 * H)).sigmoid()
    r, z = rz.narrow(-1, 0, H), rz.narrow(-1, H, H)
    n = (gi.narrow(-1, 2 * H, H) + r * gh.narrow(-1, 2 * H, H)).tanh()
    return n + z * (h - n)


class LSTM(_RNNBase):
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

    _gates, _parts = 4, ("h", "c")

    def __init__(
        self,
        input_size,
        hidden_size,
        num_layers=1,
        bias=True,
        batch_first=False,
        dropout=0.0,
        bidirectional=False,
        proj_size=0,
    ):
        if proj_size:
            raise located(NotImplementedError, "LSTM: proj_size is not supported")
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional)

    def _weights(self, layer, sfx):
        # both biases go into the one input GEMM: the LSTM adds them before any gate
        w_ih, w_hh, b_ih, b_hh = super()._weights(layer, sfx)
        return w_ih, w_hh, (None if b_ih is None else b_ih + b_hh), None

    @staticmethod
    def _cell(gi, state, w_hh_t, b_hh):
        return _lstm_cell(gi, state, w_hh_t, b_hh)


class GRU(_RNNBase):
    """A multi-layer gated recurrent unit RNN, with the LSTM's shapes and arguments: input
    (T, N, input_size), (N, T, input_size) with ``batch_first=True``, or unbatched
    (T, input_size); optional ``h0`` (D*num_layers, N, hidden_size).

    Returns ``output, h_n``. Gates in torch's order r, z, n, so ``weight_ih_l0`` is
    (3*hidden_size, input_size) and a torch state_dict loads as it is.

    >>> import ember
    >>> from ember import nn
    >>> gru = nn.GRU(8, 16, num_layers=2, bidirectional=True)
    >>> out, h = gru(ember.randn(10, 4, 8))
    >>> out.shape, h.shape, gru.weight_ih_l1_reverse.shape
    ((10, 4, 32), (4, 4, 16), (48, 32))
    """

    _gates = 3

    @staticmethod
    def _cell(gi, state, w_hh_t, b_hh):
        return (gru_cell(gi, state[0], w_hh_t, b_hh),)


class GRUCell(Module):
    """One GRU step: ``h' = GRUCell(input_size, hidden_size)(x, h)`` over (N, input_size) or
    (input_size,); ``h`` defaults to zeros. Parameters ``weight_ih``, ``weight_hh``,
    ``bias_ih``, ``bias_hh`` as in torch.

    >>> import ember
    >>> from ember import nn
    >>> cell = nn.GRUCell(3, 5)
    >>> h = cell(ember.randn(2, 3))
    >>> cell(ember.randn(2, 3), h).shape
    (2, 5)
    """

    def __init__(self, input_size, hidden_size, bias=True):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        self.weight_ih = Parameter(empty(3 * hidden_size, input_size))
        self.weight_hh = Parameter(empty(3 * hidden_size, hidden_size))
        if bias:
            self.bias_ih = Parameter(empty(3 * hidden_size))
            self.bias_hh = Parameter(empty(3 * hidden_size))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        _RNNBase.reset_parameters(self)

    def forward(self, input, hx=None):
        if input.ndim not in (1, 2) or input.shape[-1] != self.input_size:
            raise located(
                ShapeError,
                f"{self!r}: expected input (N, {self.input_size}) or ({self.input_size},), got {input.shape}",
            )
        x = input.unsqueeze(0) if input.ndim == 1 else input
        h = zeros((x.shape[0], self.hidden_size), dtype=x.dtype, backend=x.backend) if hx is None else hx
        h = h.unsqueeze(0) if input.ndim == 1 and hx is not None else h
        if h.shape != (x.shape[0], self.hidden_size):
            raise located(ShapeError, f"GRUCell: expected hx of shape {(x.shape[0], self.hidden_size)}, got {h.shape}")
        out = gru_cell(F.linear(x, self.weight_ih, self.bias_ih), h, self.weight_hh.T, self.bias_hh)
        return out.squeeze(0) if input.ndim == 1 else out

    def extra_repr(self):
        return f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")

"""Recurrent operators (RNN, GRU, LSTM): a Python loop over time steps of matmuls and gates.

One cell function per operator; ``recurrent`` handles what they share (directions, layout,
initial states, outputs). Sequence lengths shorter than the input and ``clip`` are not
supported yet and raise an error naming the node.
"""

from __future__ import annotations

from ...tensor import stack
from .common import filled

ACTIVATIONS = {
    "Tanh": lambda x, a, b: x.tanh(),
    "Sigmoid": lambda x, a, b: x.sigmoid(),
    "Relu": lambda x, a, b: x.relu(),
    "HardSigmoid": lambda x, a, b: (a * x + b).clamp(0, 1),
    "LeakyRelu": lambda x, a, b: x.relu() - a * (-x).relu(),
    "Affine": lambda x, a, b: a * x + b,
    "ScaledTanh": lambda x, a, b: a * (b * x).tanh(),
    "Softsign": lambda x, a, b: x / (1 + x.abs()),
    "Softplus": lambda x, a, b: x.relu() + (-x.abs()).exp().log1p(),
}
DEFAULTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _activations(node, d):
    names = node.attr("activations") or DEFAULTS[node.op_type] * 2
    k = len(DEFAULTS[node.op_type])
    names = list(names)[d * k : (d + 1) * k] if len(names) >= (d + 1) * k else list(names)[:k]
    alphas, betas = list(node.attr("activation_alpha") or []), list(node.attr("activation_beta") or [])
    out = []
    for i, name in enumerate(names):
        j = d * k + i
        a = alphas[j] if j < len(alphas) else (0.01 if name == "LeakyRelu" else 1.0)
        b = betas[j] if j < len(betas) else 0.0
        out.append(lambda x, f=ACTIVATIONS[name], a=a, b=b: f(x, a, b))
    return out


def _rnn_cell(x, h, c, w, r, wb, rb, p, acts, node):
    return acts[0](x @ w.t() + h @ r.t() + wb + rb), c


def _gru_cell(x, h, c, w, r, wb, rb, p, acts, node):
    f, g = acts
    n = h.shape[-1]
    xw = x @ w.t() + wb
    z = f(xw.narrow(-1, 0, n) + h @ r.narrow(0, 0, n).t() + rb.narrow(-1, 0, n))
    rr = f(xw.narrow(-1, n, n) + h @ r.narrow(0, n, n).t() + rb.narrow(-1, n, n))
    rh, rbh = r.narrow(0, 2 * n, n), rb.narrow(-1, 2 * n, n)
    if node.attr("linear_before_reset", 0):
        hh = g(xw.narrow(-1, 2 * n, n) + rr * (h @ rh.t() + rbh))
    else:
        hh = g(xw.narrow(-1, 2 * n, n) + (rr * h) @ rh.t() + rbh)
    return (1 - z) * hh + z * h, c


def _lstm_cell(x, h, c, w, r, wb, rb, p, acts, node):
    f, g, hf = acts
    n = h.shape[-1]
    gates = x @ w.t() + h @ r.t() + wb + rb
    gi, go, gf, gc = (gates.narrow(-1, k * n, n) for k in range(4))
    pi, po, pf = (p.narrow(0, k * n, n) for k in range(3)) if p is not None else (0, 0, 0)
    i = f(gi + pi * c)
    fg = f(gf + pf * c)
    c = fg * c + i * g(gc)
    o = f(go + po * c)
    return o * hf(c), c


CELLS = {"RNN": _rnn_cell, "GRU": _gru_cell, "LSTM": _lstm_cell}


def recurrent(node, x, w, r, b=None, lengths=None, h0=None, c0=None, p=None):
    if node.attr("clip") is not None:
        raise node.error("the clip attribute is not supported")
    layout = node.attr("layout", 0)
    if layout:
        x = x.permute(1, 0, 2)
        h0 = h0.permute(1, 0, 2) if h0 is not None else None
        c0 = c0.permute(1, 0, 2) if c0 is not None else None
    seq, batch = x.shape[:2]
    if lengths is not None and any(int(v) != seq for v in lengths.tolist()):
        raise node.error("sequence_lens shorter than the input are not supported")
    n = node.attr("hidden_size") or r.shape[-1]
    g = GATES[node.op_type]
    dirs = 2 if node.attr("direction", "forward") == "bidirectional" else 1
    reverse = node.attr("direction", "forward") == "reverse"
    ys, hs, cs = [], [], []
    for d in range(dirs):
        bias = b[d] if b is not None else filled((2 * g * n,), 0.0, x)
        wb, rb = bias.narrow(0, 0, g * n), bias.narrow(0, g * n, g * n)
        h = h0[d] if h0 is not None else filled((batch, n), 0.0, x)
        c = c0[d] if c0 is not None else filled((batch, n), 0.0, x)
        acts = _activations(node, d)
        steps = range(seq - 1, -1, -1) if (d == 1 or reverse) else range(seq)
        out = [None] * seq
        for t in steps:
            h, c = CELLS[node.op_type](x[t], h, c, w[d], r[d], wb, rb, p[d] if p is not None else None, acts, node)
            out[t] = h
        ys.append(stack(out, 0))
        hs.append(h)
        cs.append(c)
    y, yh, yc = stack(ys, 1), stack(hs, 0), stack(cs, 0)
    if layout:
        y, yh, yc = y.permute(2, 0, 1, 3), yh.permute(1, 0, 2), yc.permute(1, 0, 2)
    return y, yh, yc


OPS = {"RNN": (recurrent, 7), "GRU": (recurrent, 7), "LSTM": (recurrent, 7)}

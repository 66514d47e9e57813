"""Lookup and shape: embedding, pad, one_hot."""

from __future__ import annotations

from ...errors import DTypeError, located
from ...tensor import arange, where


def embedding(input, weight, padding_idx=None):
    """Rows of ``weight`` picked by the integer ``input``; no gradient reaches ``padding_idx``.

    >>> import ember
    >>> embedding(ember.tensor([[0, 2]]), ember.eye(3)).tolist()
    [[[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]]
    """
    if input.dtype.kind not in "iu":
        raise located(DTypeError, f"embedding: indices must be integers, got {input.dtype}")
    out = weight.take(input, 0)
    if padding_idx is not None and weight.requires_grad:
        pad_rows = (input == (padding_idx % weight.shape[0])).unsqueeze(-1)
        out = where(pad_rows, out.detach(), out)
    return out


def _reflect_index(n, lo, hi, mode):
    """Source index along one dim for each padded position (reflect, replicate, circular)."""
    out = []
    for i in range(-lo, n + hi):
        if mode == "replicate":
            out.append(min(max(i, 0), n - 1))
        elif mode == "circular":
            out.append(i % n)
        else:  # reflect: mirror without repeating the edge
            period = 2 * (n - 1)
            j = i % period if period else 0
            out.append(j if j < n else period - j)
    return out


def pad(input, pad, mode="constant", value=0.0):
    """Pad with PyTorch's argument order: ``(left, right)`` for the last dim, then ``(top,
    bottom)`` for the one before, and so on. Modes: constant, reflect, replicate, circular.

    >>> import ember
    >>> pad(ember.ones(1, 2), (1, 0)).tolist()
    [[0.0, 1.0, 1.0]]
    """
    pad = tuple(int(v) for v in pad)
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise located(ValueError, f"pad: needs pairs for at most {input.ndim} dims, got {pad}")
    pairs = [(pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)]
    widths = [(0, 0)] * (input.ndim - len(pairs)) + pairs[::-1]
    if mode == "constant":
        if any(lo < 0 or hi < 0 for lo, hi in widths):  # negative padding crops, as in torch
            starts = [max(-lo, 0) for lo, _ in widths]
            stops = [s - max(-hi, 0) for s, (_, hi) in zip(input.shape, widths)]
            input = input._slice(starts, stops, [1] * input.ndim)
            widths = [(max(lo, 0), max(hi, 0)) for lo, hi in widths]
        return input.pad(widths, value=value)
    if mode not in ("reflect", "replicate", "circular"):
        raise located(ValueError, f"pad: mode must be constant, reflect, replicate or circular, got {mode!r}")
    out = input
    for d, (lo, hi) in enumerate(widths):
        if lo or hi:
            n = input.shape[d]
            if mode == "reflect" and (lo >= n or hi >= n):
                raise located(ValueError, f"pad: reflect padding ({lo}, {hi}) must be smaller than the dim size {n}")
            out = out.take(_reflect_index(n, lo, hi, mode), d)
    return out


def one_hot(tensor, num_classes=-1):
    """int64 one-hot encoding along a new last dim.

    >>> import ember
    >>> one_hot(ember.tensor([0, 2]), 3).tolist()
    [[1, 0, 0], [0, 0, 1]]
    """
    if tensor.dtype.kind not in "iu":
        raise located(DTypeError, f"one_hot: needs integer class indices, got {tensor.dtype}")
    if num_classes < 0:
        num_classes = int(tensor.amax().item()) + 1 if tensor.numel() else 0
    return (tensor.unsqueeze(-1) == arange(num_classes, backend=tensor._backend)).long()

"""Linear maps and convolution; the argument helpers the layers share (``_pair``, ``_batched``)."""

from __future__ import annotations

from ...dispatch import apply
from ...errors import ShapeError, located


def _pair(v, name="argument"):
    """``3`` -> ``(3, 3)``; a pair stays a pair."""
    if isinstance(v, int):
        return (v, v)
    v = tuple(int(x) for x in v)
    if len(v) != 2:
        raise located(ValueError, f"{name} needs an int or a pair of ints, got {v}")
    return v


def _batched(x, name, ndim=4):
    """Accept (C, H, W) like torch by adding a batch dim; returns (x, undo)."""
    if x.ndim == ndim:
        return x, lambda y: y
    if x.ndim == ndim - 1:
        return x.unsqueeze(0), lambda y: y.squeeze(0)
    raise located(ShapeError, f"{name} needs input (N, C, H, W) or (C, H, W), got shape {x.shape}")


def linear(input, weight, bias=None):
    """``input @ weight.T + bias`` over the last dim; weight is (out_features, in_features).

    >>> import ember
    >>> linear(ember.ones(2, 3), ember.ones(4, 3)).shape
    (2, 4)
    """
    if input.shape[-1:] != weight.shape[1:]:
        raise located(
            ShapeError,
            f"linear: input of shape {input.shape} has {input.shape[-1:] or 'no'} "
            f"features in its last dim, but the weight {weight.shape} expects {weight.shape[1]}: "
            f"expected input shape (..., {weight.shape[1]})",
        )
    lead = input.shape[:-1]
    # One GEMM over all leading dims: the weight gradient is then one GEMM too, not a batch of them.
    out = input.reshape(-1, weight.shape[1]) @ weight.T if len(lead) != 1 else input @ weight.T
    if bias is not None:
        out = out + bias
    return out.reshape(lead + (weight.shape[0],)) if len(lead) != 1 else out


def _same_padding(kernel, dilation):
    """Per-dim (lo, hi) so the output keeps the input size at stride 1; the odd extra goes last
    (PyTorch's choice)."""
    out = []
    for k, d in zip(kernel, dilation):
        total = d * (k - 1)
        out.append((total // 2, total - total // 2))
    return out


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-d cross-correlation; padding is an int, a pair, ``'valid'`` or ``'same'``.

    >>> import ember
    >>> conv2d(ember.ones(1, 3, 8, 8), ember.ones(4, 3, 3, 3), padding="same").shape
    (1, 4, 8, 8)
    """
    x, undo = _batched(input, "conv2d")
    stride, dilation = _pair(stride, "stride"), _pair(dilation, "dilation")
    if weight.ndim != 4:
        raise located(ShapeError, f"conv2d: weight must be (out, in/groups, kh, kw), got shape {weight.shape}")
    if x.shape[1] != weight.shape[1] * groups:
        raise located(
            ShapeError,
            f"conv2d: input of shape {tuple(input.shape)} has {x.shape[1]} channels, but "
            f"the weight {weight.shape} with groups={groups} expects {weight.shape[1] * groups}",
        )
    if isinstance(padding, str):
        if padding == "valid":
            padding = (0, 0)
        elif padding == "same":
            if stride != (1, 1):
                raise located(ValueError, "conv2d: padding='same' needs stride 1 (as in PyTorch)")
            (t, b), (l, r) = _same_padding(weight.shape[2:], dilation)
            if t != b or l != r:
                x = x.pad(((0, 0), (0, 0), (t, b), (l, r)))
                padding = (0, 0)
            else:
                padding = (t, l)
        else:
            raise located(ValueError, f"conv2d: padding must be an int, a pair, 'valid' or 'same', got {padding!r}")
    out = apply("conv2d", x, weight, stride=stride, padding=_pair(padding, "padding"), dilation=dilation, groups=groups)
    if bias is not None:
        out = out + bias.reshape(1, -1, 1, 1)
    return undo(out)

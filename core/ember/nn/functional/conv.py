"""The convolutions built on conv2d's primitives: conv1d and the transposed convolutions.

A 1-d convolution is a 2-d one over a unit height. A transposed convolution is the gradient
of a convolution with respect to its input, which is the primitive ``conv2d_grad_input``
itself: its weight (in, out/groups, kh, kw) is laid out as the forward convolution's
(out, in/groups, kh, kw) read the other way round, so torch's weights fit unchanged, and its
gradients are the primitive's VJP (a convolution and ``conv2d_grad_weight``).
"""

from __future__ import annotations

from ...dispatch import apply
from ...errors import ShapeError, located
from .linear import _batched, _pair, conv2d


def _single(v, name):
    """``3`` or ``(3,)`` -> ``3``."""
    if isinstance(v, int):
        return v
    v = tuple(int(x) for x in v)
    if len(v) != 1:
        raise located(ValueError, f"{name} needs an int or a 1-tuple for a 1-d convolution, got {v}")
    return v[0]


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-d cross-correlation over (N, C, L) or (C, L); padding is an int, ``'valid'`` or ``'same'``.

    >>> import ember
    >>> conv1d(ember.ones(2, 3, 10), ember.ones(4, 3, 3), padding="same").shape
    (2, 4, 10)
    """
    x, undo = _batched(input, "conv1d", ndim=3)
    if weight.ndim != 3:
        raise located(ShapeError, f"conv1d: weight must be (out, in/groups, k), got shape {weight.shape}")
    if not isinstance(padding, str):
        padding = (0, _single(padding, "padding"))
    out = conv2d(
        x.unsqueeze(2),
        weight.unsqueeze(2),
        bias,
        (1, _single(stride, "stride")),
        padding,
        (1, _single(dilation, "dilation")),
        groups,
    )
    return undo(out.squeeze(2))


def transposed_size(size, kernel, stride, padding, output_padding, dilation):
    """The output length of a transposed convolution along one dim (torch's formula).

    >>> transposed_size(4, 3, 2, 1, 1, 1)
    8
    """
    return (size - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """2-d transposed convolution ("deconvolution") of (N, C_in, H, W) with a weight
    (C_in, C_out/groups, kh, kw); argument order as in torch (groups before dilation).

    >>> import ember
    >>> conv_transpose2d(ember.ones(1, 4, 5, 5), ember.ones(4, 2, 3, 3), stride=2, padding=1,
    ...                  output_padding=1).shape
    (1, 2, 10, 10)
    """
    x, undo = _batched(input, "conv_transpose2d")
    stride, padding = _pair(stride, "stride"), _pair(padding, "padding")
    output_padding, dilation = _pair(output_padding, "output_padding"), _pair(dilation, "dilation")
    if weight.ndim != 4:
        raise located(
            ShapeError, f"conv_transpose2d: weight must be (in, out/groups, kh, kw), got shape {weight.shape}"
        )
    if x.shape[1] != weight.shape[0] or weight.shape[0] % groups:
        raise located(
            ShapeError,
            f"conv_transpose2d: input of shape {tuple(input.shape)} has {x.shape[1]} channels, "
            f"but the weight {weight.shape} expects {weight.shape[0]} (divisible by groups={groups})",
        )
    for op, s, d in zip(output_padding, stride, dilation):
        if op >= s and op >= d:
            raise located(
                ValueError,
                f"conv_transpose2d: output_padding {output_padding} must be smaller than "
                f"stride {stride} or dilation {dilation}",
            )
    size = tuple(
        transposed_size(x.shape[2 + i], weight.shape[2 + i], stride[i], padding[i], output_padding[i], dilation[i])
        for i in range(2)
    )
    if min(size) <= 0:
        raise located(ShapeError, f"conv_transpose2d: input {tuple(input.shape)} gives an empty output {size}")
    lead = (x.shape[0], weight.shape[1] * groups)
    if all(op < s for op, s in zip(output_padding, stride)):
        out = apply(
            "conv2d_grad_input",
            x,
            weight,
            input_shape=lead + size,
            stride=stride,
            padding=padding,
            dilation=dilation,
            groups=groups,
        )
    else:
        # output_padding >= stride (allowed below the dilation) leaves room for one more window,
        # which the primitive's own gradient rules do not expect: compute the windows' full
        # extent unpadded, add the output padding as zeros, then crop the padding.
        full = tuple(
            transposed_size(x.shape[2 + i], weight.shape[2 + i], stride[i], 0, 0, dilation[i]) for i in range(2)
        )
        out = apply(
            "conv2d_grad_input",
            x,
            weight,
            input_shape=lead + full,
            stride=stride,
            padding=(0, 0),
            dilation=dilation,
            groups=groups,
        )
        out = out.pad(((0, 0), (0, 0), (0, output_padding[0]), (0, output_padding[1])))
        out = out.narrow(2, padding[0], size[0]).narrow(3, padding[1], size[1])
    if bias is not None:
        out = out + bias.reshape(1, -1, 1, 1)
    return undo(out)

"""Convolution and pooling layers: Conv1d, Conv2d, ConvTranspose2d, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d."""

from __future__ import annotations

import math

from ..creation import empty
from ..errors import ShapeError, located
from . import functional as F, init
from .module import Module
from .parameter import Parameter


class _ConvNd(Module):
    """What Conv1d, Conv2d and ConvTranspose2d share: arguments, parameters, torch's init and repr.

    ``_n`` is the number of spatial dims, ``_transposed`` says whether the weight is laid out
    (in, out/groups, *kernel) instead of (out, in/groups, *kernel).
    """

    _n = 2
    _transposed = False

    def __init__(
        self,
        in_channels,
        out_channels,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups=1,
        bias=True,
        padding_mode="zeros",
        output_padding=0,
    ):
        super().__init__()
        name = type(self).__name__
        if in_channels % groups or out_channels % groups:
            raise located(
                ValueError,
                f"{name}: in_channels {in_channels} and out_channels {out_channels} must "
                f"both be divisible by groups {groups}",
            )
        modes = ("zeros",) if self._transposed else ("zeros", "reflect", "replicate", "circular")
        if padding_mode not in modes:
            raise located(ValueError, f"{name}: padding_mode must be {' or '.join(modes)}, got {padding_mode!r}")
        if isinstance(padding, str) and (padding not in ("valid", "same") or self._transposed):
            raise located(
                ValueError,
                f"{name}: padding must be an int or a tuple"
                f"{'' if self._transposed else ', valid or same'}, got {padding!r}",
            )
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        tup = _tuple(self._n)
        self.kernel_size = tup(kernel_size, "kernel_size")
        self.stride, self.dilation = tup(stride, "stride"), tup(dilation, "dilation")
        self.padding = padding if isinstance(padding, str) else tup(padding, "padding")
        self.output_padding = tup(output_padding, "output_padding")
        self.padding_mode = padding_mode
        shape = (in_channels, out_channels // groups) if self._transposed else (out_channels, in_channels // groups)
        self.weight = Parameter(empty(*shape, *self.kernel_size))
        if bias:
            self.bias = Parameter(empty(out_channels))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = math.prod(self.weight.shape[1:])
            bound = 1 / math.sqrt(fan_in) if fan_in else 0
            init.uniform_(self.bias, -bound, bound)

    def _check(self, x, dims):
        if x.ndim not in (self._n + 1, self._n + 2) or x.shape[-self._n - 1] != self.in_channels:
            raise located(
                ShapeError,
                f"{self!r}: expected input (N, {self.in_channels}, {dims}) or "
                f"({self.in_channels}, {dims}), got {x.shape}",
            )

    def _pad_mode(self, x):
        """Pad ``x`` by ``padding_mode`` (not zeros) and return it with the padding left to the conv."""
        if self.padding_mode == "zeros":
            return x, self.padding
        if self.padding == "same":
            widths = F._same_padding(self.kernel_size, self.dilation)
        elif self.padding == "valid":
            widths = [(0, 0)] * self._n
        else:
            widths = [(p, p) for p in self.padding]
        flat = [v for lo_hi in reversed(widths) for v in lo_hi]  # torch's order: last dim first
        return F.pad(x, flat, mode=self.padding_mode), 0

    def extra_repr(self):
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * self._n:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self._n:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * self._n:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


def _tuple(n):
    """The argument normaliser for ``n`` spatial dims: ``3`` -> ``(3,) * n``."""

    def tup(v, name):
        if isinstance(v, int):
            return (v,) * n
        v = tuple(int(x) for x in v)
        if len(v) != n:
            raise located(ValueError, f"{name} needs an int or {n} ints, got {v}")
        return v

    return tup


class _Conv(_ConvNd):
    """Conv1d's and Conv2d's constructor (torch's argument order) and forward: padding_mode's
    padding, then the functional convolution ``_conv`` over the spatial dims ``_dims``."""

    _dims = "H, W"
    _conv = staticmethod(F.conv2d)

    def __init__(
        self,
        in_channels,
        out_channels,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups=1,
        bias=True,
        padding_mode="zeros",
    ):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, padding_mode)

    def forward(self, x):
        self._check(x, self._dims)
        x, padding = self._pad_mode(x)
        return self._conv(x, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)


class Conv1d(_Conv):
    """1-d convolution (cross-correlation) over (N, C, L), PyTorch's arguments and init; it
    runs as a 2-d convolution over a unit height.

    ``padding`` is an int, ``'valid'`` or ``'same'``; ``padding_mode`` is ``'zeros'``,
    ``'reflect'``, ``'replicate'`` or ``'circular'``.

    >>> import ember
    >>> from ember import nn
    >>> conv = nn.Conv1d(4, 8, 5, padding="same", dilation=2)
    >>> conv(ember.ones(2, 4, 30)).shape, conv.weight.shape
    ((2, 8, 30), (8, 4, 5))
    """

    _n, _dims, _conv = 1, "L", staticmethod(F.conv1d)


class Conv2d(_Conv):
    """2-d convolution (cross-correlation) over (N, C, H, W), PyTorch's arguments and init.

    ``padding`` is an int, a pair, ``'valid'`` or ``'same'``; ``padding_mode`` is ``'zeros'``,
    ``'reflect'``, ``'replicate'`` or ``'circular'``.

    >>> import ember
    >>> from ember import nn
    >>> nn.Conv2d(3, 8, 3, padding=1)(ember.ones(2, 3, 16, 16)).shape
    (2, 8, 16, 16)
    """


class ConvTranspose2d(_ConvNd):
    """2-d transposed convolution over (N, C, H, W): the gradient of a Conv2d with respect to
    its input, so it upsamples by ``stride``. The weight is (in, out/groups, kh, kw), as in
    torch. ``output_padding`` (or ``output_size`` in the call) picks among the output sizes a
    strided convolution maps to the same input size.

    >>> import ember
    >>> from ember import nn
    >>> up = nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1)
    >>> up(ember.ones(2, 8, 7, 7)).shape, up.weight.shape
    ((2, 4, 14, 14), (8, 4, 3, 3))
    >>> up(ember.ones(2, 8, 7, 7), output_size=(13, 13)).shape
    (2, 4, 13, 13)
    """

    _transposed = True

    def __init__(
        self,
        in_channels,
        out_channels,
        kernel_size,
        stride=1,
        padding=0,
        output_padding=0,
        groups=1,
        bias=True,
        dilation=1,
        padding_mode="zeros",
    ):
        super().__init__(
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
            bias,
            padding_mode,
            output_padding,
        )

    def _output_padding(self, x, output_size):
        """The output padding that gives ``output_size`` (H, W), or (N, C, H, W)."""
        if output_size is None:
            return self.output_padding
        size = tuple(output_size)[-2:]
        pads = []
        for i in range(2):
            least = F.transposed_size(
                x.shape[-2 + i], self.kernel_size[i], self.stride[i], self.padding[i], 0, self.dilation[i]
            )
            pad = size[i] - least
            if not 0 <= pad < max(self.stride[i], self.dilation[i]):
                raise located(
                    ValueError,
                    f"ConvTranspose2d: output_size {tuple(output_size)} is out of reach: "
                    f"dim {i} must lie in [{least}, {least + max(self.stride[i], self.dilation[i]) - 1}]",
                )
            pads.append(pad)
        return tuple(pads)

    def forward(self, x, output_size=None):
        self._check(x, "H, W")
        return F.conv_transpose2d(
            x,
            self.weight,
            self.bias,
            self.stride,
            self.padding,
            self._output_padding(x, output_size),
            self.groups,
            self.dilation,
        )


class MaxPool2d(Module):
    """Max over ``kernel_size`` windows (stride defaults to the kernel size).

    >>> import ember
    >>> from ember import nn
    >>> nn.MaxPool2d(2)(ember.ones(1, 3, 28, 28)).shape
    (1, 3, 14, 14)
    """

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.dilation, self.ceil_mode = padding, dilation, ceil_mode

    def forward(self, x):
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)

    def extra_repr(self):
        return (
            f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
            f"dilation={self.dilation}, ceil_mode={self.ceil_mode}"
        )


class AvgPool2d(Module):
    """Mean over ``kernel_size`` windows; zero padding counts unless ``count_include_pad=False``."""

    def __init__(
        self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None
    ):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.ceil_mode = padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, x):
        return F.avg_pool2d(
            x,
            self.kernel_size,
            self.stride,
            self.padding,
            self.ceil_mode,
            self.count_include_pad,
            self.divisor_override,
        )

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    """Average to a fixed ``output_size`` whatever the input size (``1`` = global average)."""

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, x):
        return F.adaptive_avg_pool2d(x, self.output_size)

    def extra_repr(self):
        return f"output_size={self.output_size}"

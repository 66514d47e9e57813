"""Convolution and pooling layers: Conv2d, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d."""
from __future__ import annotations

import math

from ..errors import ShapeError, located
from ..tensor import empty
from . import functional as F
from . import init
from .module import Module
from .parameter import Parameter


class Conv2d(Module):
    """2-d convolution (cross-correlation) over (N, C, H, W), PyTorch's arguments and init.

    ``padding`` is an int, a pair, ``'valid'`` or ``'same'``; ``padding_mode`` is ``'zeros'``,
    ``'reflect'``, ``'replicate'`` or ``'circular'``.

    >>> import ember
    >>> from ember import nn
    >>> nn.Conv2d(3, 8, 3, padding=1)(ember.ones(2, 3, 16, 16)).shape
    (2, 8, 16, 16)
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros"):
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise located(ValueError, f"Conv2d: in_channels {in_channels} and out_channels {out_channels} must "
                          f"both be divisible by groups {groups}")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise located(ValueError, f"Conv2d: padding_mode must be zeros, reflect, replicate or circular, "
                          f"got {padding_mode!r}")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = F._pair(kernel_size, "kernel_size")
        self.stride, self.dilation = F._pair(stride, "stride"), F._pair(dilation, "dilation")
        self.padding = padding if isinstance(padding, str) else F._pair(padding, "padding")
        self.padding_mode = padding_mode
        self.weight = Parameter(empty(out_channels, in_channels // groups, *self.kernel_size))
        if bias:
            self.bias = Parameter(empty(out_channels))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.weight.shape[1] * self.kernel_size[0] * self.kernel_size[1]
            bound = 1 / math.sqrt(fan_in) if fan_in else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        if x.ndim not in (3, 4) or x.shape[-3] != self.in_channels:
            raise located(ShapeError, f"{self!r}: expected input (N, {self.in_channels}, H, W), got {x.shape}")
        padding = self.padding
        if self.padding_mode != "zeros":
            if padding == "same":
                (t, b), (l, r) = F._same_padding(self.kernel_size, self.dilation)
            elif padding == "valid":
                t = b = l = r = 0
            else:
                (t, l), (b, r) = padding, padding
            x = F.pad(x, (l, r, t, b), mode=self.padding_mode)
            padding = 0
        return F.conv2d(x, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)

    def extra_repr(self):
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0, 0):
            s += f", padding={self.padding}"
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


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
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool2d(Module):
    """Mean over ``kernel_size`` windows; zero padding counts unless ``count_include_pad=False``."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.ceil_mode = padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, x):
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)

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

"""Upsample: ``F.interpolate`` as a layer, with torch's arguments."""

from __future__ import annotations

from . import functional as F
from .module import Module


class Upsample(Module):
    """Resize (N, C, L) or (N, C, H, W) to ``size`` or by ``scale_factor``; ``mode`` is
    ``'nearest'`` (the default), ``'linear'`` or ``'bilinear'``; ``align_corners`` as in
    ``F.interpolate``. No parameters.

    >>> import ember
    >>> from ember import nn
    >>> nn.Upsample(scale_factor=2, mode="bilinear")(ember.ones(1, 3, 4, 5)).shape
    (1, 3, 8, 10)
    >>> nn.Upsample(size=(6, 7))(ember.ones(1, 3, 4, 5)).shape
    (1, 3, 6, 7)
    """

    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None, recompute_scale_factor=None):
        super().__init__()
        self.size = size
        self.scale_factor = float(scale_factor) if isinstance(scale_factor, (int, float)) else scale_factor
        self.mode, self.align_corners, self.recompute_scale_factor = mode, align_corners, recompute_scale_factor

    def forward(self, input):
        return F.interpolate(
            input, self.size, self.scale_factor, self.mode, self.align_corners, self.recompute_scale_factor
        )

    def extra_repr(self):
        info = f"scale_factor={self.scale_factor!r}" if self.scale_factor is not None else f"size={self.size!r}"
        return info + f", mode={self.mode!r}"

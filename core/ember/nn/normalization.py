"""Normalization layers: BatchNorm1d/2d, LayerNorm, GroupNorm, RMSNorm."""

from __future__ import annotations

from .. import dtypes as D
from ..autodiff import no_grad
from ..creation import ones, zeros
from ..errors import ShapeError, located
from ..tensor import tensor
from . import functional as F
from .module import Module
from .parameter import Parameter


def _affine(module, shape, affine, bias):
    """Register ``weight`` (ones) and ``bias`` (zeros) of ``shape``, or None where switched off."""
    module.register_parameter("weight", Parameter(ones(shape)) if affine else None)
    module.register_parameter("bias", Parameter(zeros(shape)) if affine and bias else None)


class _BatchNorm(Module):
    """Shared by BatchNorm1d/2d; subclasses only say which input ranks they accept."""

    _ranks: tuple = ()
    _expect: str = ""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, bias=True):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.has_bias = affine and bias
        _affine(self, num_features, affine, bias)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features))
            self.register_buffer("running_var", ones(num_features))
            self.register_buffer("num_batches_tracked", tensor(0, dtype=D.int64))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def reset_running_stats(self):
        if self.track_running_stats:
            self.running_mean.zero_(), self.running_var.fill_(1), self.num_batches_tracked.zero_()

    def forward(self, x):
        if x.ndim not in self._ranks or x.shape[1] != self.num_features:
            raise located(
                ShapeError, f"{self!r}: expected input {self._expect.format(C=self.num_features)}, got {x.shape}"
            )
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            with no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                factor = 1.0 / self.num_batches_tracked.item()
        use_batch = self.training or self.running_mean is None
        track = not self.training or self.track_running_stats
        return F.batch_norm(
            x,
            self.running_mean if track else None,
            self.running_var if track else None,
            self.weight,
            self.bias,
            use_batch,
            factor,
            self.eps,
        )

    def extra_repr(self):
        bias = f", bias={self.has_bias}" if self.affine else ""
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}{bias}, "
            f"track_running_stats={self.track_running_stats}"
        )


class BatchNorm1d(_BatchNorm):
    """Batch normalization over (N, C) or (N, C, L): per channel, over the batch (and length).

    >>> import ember
    >>> from ember import nn
    >>> nn.BatchNorm1d(4)(ember.randn(8, 4)).shape
    (8, 4)
    """

    _ranks, _expect = (2, 3), "(N, {C}) or (N, {C}, L)"


class BatchNorm2d(_BatchNorm):
    """Batch normalization over (N, C, H, W): per channel, over batch and pixels. In eval mode
    (``model.eval()``) it uses the running statistics.

    >>> import ember
    >>> from ember import nn
    >>> bn = nn.BatchNorm2d(3)
    >>> _ = bn(ember.randn(4, 3, 5, 5)); bn.num_batches_tracked.item()
    1
    """

    _ranks, _expect = (4,), "(N, {C}, H, W)"


class LayerNorm(Module):
    """Normalize over the trailing ``normalized_shape`` dims, with a learned scale and shift.

    >>> import ember
    >>> from ember import nn
    >>> nn.LayerNorm(8)(ember.randn(2, 5, 8)).shape
    (2, 5, 8)
    """

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        self.has_bias = elementwise_affine and bias
        _affine(self, self.normalized_shape, elementwise_affine, bias)

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
            f"bias={self.has_bias}"
        )


class GroupNorm(Module):
    """Normalize (N, C, ...) over groups of ``num_channels / num_groups`` channels, then scale
    and shift per channel. The same in training and eval (no running statistics), so it works
    at any batch size. ``num_groups=1`` is a LayerNorm over (C, ...) with per-channel affine.

    >>> import ember
    >>> from ember import nn
    >>> gn = nn.GroupNorm(4, 32)
    >>> gn(ember.randn(2, 32, 8, 8)).shape, gn.weight.shape
    ((2, 32, 8, 8), (32,))
    """

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, *, bias=True):
        super().__init__()
        if num_groups <= 0 or num_channels % num_groups:
            raise located(
                ValueError, f"GroupNorm: num_channels {num_channels} must be divisible by num_groups {num_groups}"
            )
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        self.has_bias = affine and bias
        _affine(self, num_channels, affine, bias)

    def forward(self, x):
        if x.ndim < 2 or x.shape[1] != self.num_channels:
            raise located(ShapeError, f"{self!r}: expected input (N, {self.num_channels}, ...), got {x.shape}")
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, bias={self.has_bias}"


class RMSNorm(Module):
    """``x / rms(x) * weight`` over the trailing dims; eps None = the dtype's machine epsilon."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(ones(self.normalized_shape))
        else:
            self.register_parameter("weight", None)

    def forward(self, x):
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"

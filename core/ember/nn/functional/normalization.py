"""Batch, layer, group and RMS normalization. Training-mode batch_norm and layer_norm are fused ops
(ember.fused): their decompositions and backward ops are registered at the end."""

from __future__ import annotations

from ... import dispatch, dtypes as D, fused
from ...autodiff import no_grad
from ...errors import ShapeError, located


def _channel_shape(x):
    return (1, -1) + (1,) * (x.ndim - 2)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    """Normalize over every dim but the channel dim 1. In training use the batch statistics and
    update the running ones in place (``momentum`` is the weight of the new value; the running
    variance takes the unbiased batch variance, as in PyTorch); otherwise use the running ones.
    Training mode is the fused op ``batch_norm``: a backend may run it, forward and backward,
    as its own kernels.

    >>> import ember
    >>> y = batch_norm(ember.randn(8, 3), None, None, training=True)
    >>> [abs(round(v, 4)) for v in y.mean(0).tolist()]
    [0.0, 0.0, 0.0]
    """
    if input.ndim < 2:
        raise located(ShapeError, f"batch_norm needs input (N, C, ...), got shape {input.shape}")
    if training:
        n = input.numel() // input.shape[1]
        if n <= 1:
            raise located(
                ValueError,
                f"batch_norm: expected more than 1 value per channel when training, got input of shape {input.shape}",
            )
        out, mean, var = fused.run("batch_norm", input, weight, bias, eps=eps)
        if running_mean is not None:
            with no_grad():
                running_mean.copy_(running_mean * (1 - momentum) + mean * momentum)
                running_var.copy_(running_var * (1 - momentum) + var * (momentum * n / (n - 1)))
        return out
    if running_mean is None or running_var is None:
        raise located(ValueError, "batch_norm in eval mode needs running_mean and running_var")
    shape = _channel_shape(input)
    out = (input - running_mean.reshape(shape)) * (running_var.reshape(shape) + eps).rsqrt()
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


def _norm_axes(input, normalized_shape, name):
    normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(normalized_shape)
    if k > input.ndim or input.shape[input.ndim - k :] != normalized_shape:
        raise located(
            ShapeError, f"{name}: input of shape {input.shape} does not end with normalized_shape {normalized_shape}"
        )
    return tuple(range(input.ndim - k, input.ndim))


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalize over the trailing ``normalized_shape`` dims (biased variance), then scale/shift.

    >>> import ember
    >>> [round(v, 4) for v in layer_norm(ember.tensor([[1.0, 3.0]]), (2,))[0].tolist()]
    [-1.0, 1.0]
    """
    axes = _norm_axes(input, normalized_shape, "layer_norm")
    return fused.run("layer_norm", input, weight, bias, normalized_shape=input.shape[input.ndim - len(axes) :], eps=eps)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """Normalize (N, C, ...) over each group of ``C / num_groups`` channels and its positions
    (biased variance), then scale and shift per channel. Each group is one row of the fused
    ``layer_norm``, so a backend's layer-norm kernel runs it.

    >>> import ember
    >>> y = group_norm(ember.randn(2, 6, 4, 4), 3)
    >>> [round(abs(v), 4) for v in y.reshape(2, 3, -1).mean(-1).reshape(-1).tolist()]
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    """
    if input.ndim < 2:
        raise located(ShapeError, f"group_norm needs input (N, C, ...), got shape {input.shape}")
    n, c = input.shape[:2]
    if num_groups <= 0 or c % num_groups:
        raise located(
            ValueError,
            f"group_norm: {c} channels (dim 1 of input {input.shape}) do not split into num_groups={num_groups} groups",
        )
    rows = input.reshape(n, num_groups, -1)
    out = fused.run("layer_norm", rows, None, None, normalized_shape=rows.shape[2:], eps=eps).reshape(input.shape)
    shape = _channel_shape(input)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the trailing dims; eps defaults to the dtype's
    machine epsilon, as in PyTorch."""
    axes = _norm_axes(input, normalized_shape, "rms_norm")
    if eps is None:
        eps = {D.float16: 2.0**-10, D.float32: 2.0**-23, D.float64: 2.0**-52}.get(input.dtype, 2.0**-23)
    out = input * ((input * input).mean(axes, keepdim=True) + eps).rsqrt()
    return out * weight if weight is not None else out


# ============================================================================== the fused ops
def _layer_norm_reference(x, weight, bias, *, normalized_shape, eps=1e-5):
    """Normalize over the trailing ``normalized_shape`` dims (biased variance, as PyTorch),
    then scale by ``weight`` and shift by ``bias`` (either may be None)."""
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    mean = x.mean(axes, keepdim=True)
    centered = x - mean
    var = (centered * centered).mean(axes, keepdim=True)
    out = centered * (var + eps).rsqrt()
    if weight is not None:
        out = out * weight
    return out + bias if bias is not None else out


def _layer_norm_backward(grad, x, weight, bias, *, normalized_shape, eps=1e-5):
    """The gradients of layer_norm for ``(x, weight, bias)`` (None for an absent parameter):
    ``dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))`` with ``gw = grad * weight``."""
    from ...autodiff import unbroadcast

    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    centered = x - x.mean(axes, keepdim=True)
    rstd = ((centered * centered).mean(axes, keepdim=True) + eps).rsqrt()
    xhat = centered * rstd
    gw = grad if weight is None else grad * weight
    dx = (gw - gw.mean(axes, keepdim=True) - xhat * (gw * xhat).mean(axes, keepdim=True)) * rstd
    return (
        dx,
        None if weight is None else unbroadcast(grad * xhat, weight.shape),
        None if bias is None else unbroadcast(grad, bias.shape),
    )


def _batch_stats(x):
    """Per-channel mean and biased variance of ``x`` (N, C, ...) over every dim but 1, keepdim."""
    axes = (0,) + tuple(range(2, x.ndim))
    mean = x.mean(axes, keepdim=True)
    centered = x - mean
    return mean, centered, (centered * centered).mean(axes, keepdim=True)


def _batch_norm_reference(x, weight, bias, *, eps=1e-5):
    """Batch normalization in training mode over ``x`` (N, C, ...): normalize each channel by
    its batch mean and biased variance, then scale by ``weight`` and shift by ``bias`` (C,)
    (either may be None). Returns ``(out, mean, var)``, the statistics of shape (C,) for the
    running averages; a kernel's statistics carry no gradient (batch_norm uses them so)."""
    mean, centered, var = _batch_stats(x)
    out = centered * (var + eps).rsqrt()
    shape = _channel_shape(x)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out, mean.reshape(-1), var.reshape(-1)


def _batch_norm_backward(grad, x, weight, bias, mean, var, *, eps=1e-5):
    """The gradients of batch_norm for ``(x, weight, bias)`` (None for an absent parameter),
    given the batch statistics it returned: with ``xhat = (x - mean) / sqrt(var + eps)`` and
    ``gw = grad * weight``, ``dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))`` over every
    dim but the channel dim, ``dweight = sum(grad * xhat)``, ``dbias = sum(grad)``."""
    axes = (0,) + tuple(range(2, x.ndim))
    shape = _channel_shape(x)
    rstd = (var + eps).rsqrt().reshape(shape)
    xhat = (x - mean.reshape(shape)) * rstd
    gw = grad if weight is None else grad * weight.reshape(shape)
    dx = (gw - gw.mean(axes, keepdim=True) - xhat * (gw * xhat).mean(axes, keepdim=True)) * rstd
    return (dx, None if weight is None else (grad * xhat).sum(axes), None if bias is None else grad.sum(axes))


def _layer_norm_vjp(g, out, x, weight, bias, *, normalized_shape, eps=1e-5):
    return fused.run("layer_norm_backward", g, x, weight, bias, normalized_shape=normalized_shape, eps=eps)


def _batch_norm_vjp(g, out, x, weight, bias, mean, var, *, eps=1e-5):
    # mean and var are the kernel's saved statistics (constants). For a higher derivative their
    # dependence on x counts: recompute them in Tensor ops, which run() then differentiates.
    if dispatch.is_grad_enabled() and x.requires_grad:
        mean, _, var = _batch_stats(x)
    return fused.run("batch_norm_backward", g, x, weight, bias, mean.reshape(-1), var.reshape(-1), eps=eps) + (
        None,
        None,
    )


fused.defop("layer_norm_backward", _layer_norm_backward)
fused.defop("batch_norm_backward", _batch_norm_backward)
fused.defop("layer_norm", _layer_norm_reference, "layer_norm_backward", _layer_norm_vjp)
fused.defop("batch_norm", _batch_norm_reference, "batch_norm_backward", _batch_norm_vjp, saves=True)

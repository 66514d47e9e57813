"""Losses. The common cross_entropy (2-d logits, class indices, mean) is a fused op
(ember.fused): its decomposition and backward op are registered at the end."""

from __future__ import annotations

import math

from ... import deferred, dispatch, fused
from ...errors import DTypeError, ShapeError, located
from ...tensor import Tensor, arange, where


def _reduce(loss, reduction, name):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise located(ValueError, f"{name}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _check_same_shape(input, target, name):
    if input.shape != target.shape:
        raise located(ShapeError, f"{name}: input {input.shape} and target {target.shape} must have the same shape")


def _class_last(x):
    """(N, C, d1, ...) -> (N, d1, ..., C): the class dim last, so targets index the last dim."""
    return x if x.ndim <= 2 else x.permute((0,) + tuple(range(2, x.ndim)) + (1,))


def _pick(logp, target):
    """logp[..., target] along the last dim, as one take on the flattened tensor."""
    c = logp.shape[-1]
    flat = arange(target.numel(), backend=target._backend).reshape(target.shape) * c + target
    return logp.reshape(-1).take(flat, 0)


def _check_targets(input, target, name):
    if input.ndim == 1:
        expected = ()
    else:
        expected = (input.shape[0],) + input.shape[2:]
    if target.shape != expected:
        raise located(
            ShapeError,
            f"{name}: input {input.shape} (N, C, ...) needs class-index targets of shape "
            f"{expected}, got {target.shape}",
        )


def _range_error(lo, hi, c):
    """The message for targets whose extremes are ``lo`` and ``hi``, or None if in [0, c)."""
    if lo >= 0 and hi < c:
        return None
    return f"nll_loss: target {hi if hi >= c else lo} is out of range for {c} classes"


def _check_class_range(targets, c):
    """Raise ValueError for a target outside [0, c); return the targets to index with.

    On the CPU the extremes are read at once. On a device backend (``Capabilities.on_device``)
    that read would wait for the device every step, so the check is deferred to the next host
    read (ember.deferred: same error, same line), and meanwhile bad targets are replaced by 0
    so the loss reads only real entries."""
    if not deferred.on_device(targets._backend):
        text = _range_error(targets.amin().item(), targets.amax().item(), c)
        if text is not None:
            raise located(ValueError, text)
        return targets
    deferred.defer(
        ("nll_loss", c),
        (targets.amin(), targets.amax()),
        (Tensor.minimum, Tensor.maximum),
        lambda lo, hi: _range_error(lo, hi, c),
    )
    return where((targets >= 0) & (targets < c), targets, 0)


def nll_loss(
    input: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100, reduction: str = "mean"
) -> Tensor:
    """Negative log-likelihood of class-index targets, given log-probabilities (N, C, ...).

    >>> import ember
    >>> round(nll_loss(ember.tensor([[-1.0, -2.0]]), ember.tensor([1])).item(), 4)
    2.0
    """
    if target.dtype.kind not in "iu":
        raise located(DTypeError, f"nll_loss: targets must be class indices (integers), got {target.dtype}")
    _check_targets(input, target, "nll_loss")
    logp = _class_last(input)
    valid = target != ignore_index
    safe = where(valid, target, 0)
    c = logp.shape[-1]
    # Under ember.jit the targets are not known while tracing: the check is left to run time
    # (take fails there on an index past the end).
    if target.numel() and dispatch.interpreter().evaluates:
        safe = _check_class_range(safe, c)
    w = valid.to(logp.dtype) if weight is None else weight.take(safe, 0) * valid.to(logp.dtype)
    loss = -_pick(logp, safe) * w
    if reduction == "mean":
        return loss.sum() / w.sum()
    return _reduce(loss, reduction, "nll_loss")


def cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Softmax cross-entropy of logits (N, C, ...) against class indices (N, ...) or class
    probabilities (same shape as the input), computed stably through ``log_softmax``.

    >>> import ember
    >>> round(cross_entropy(ember.zeros(2, 4), ember.tensor([0, 3])).item(), 4)
    1.3863
    """
    if not 0.0 <= label_smoothing <= 1.0:
        raise located(ValueError, f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    if (
        input.ndim == 2
        and weight is None
        and label_smoothing == 0
        and reduction == "mean"
        and target.dtype.kind in "iu"
        and target.shape == input.shape[:1]
    ):
        # The common case is a fused op: a backend may run it (and its gradient) as one kernel.
        if (
            deferred.on_device(input._backend)
            and dispatch.interpreter().evaluates
            and target.numel()
            and "cross_entropy" in fused.declared(input._backend)
        ):
            # A device kernel cannot raise: the range check waits for the next host read.
            _check_class_range(where(target != ignore_index, target, 0), input.shape[1])
        return fused.run("cross_entropy", input, target, ignore_index=ignore_index)
    class_dim = 0 if input.ndim == 1 else 1
    logp = input.log_softmax(class_dim)
    c = input.shape[class_dim]
    wshape = [1] * input.ndim
    wshape[class_dim] = c
    if target.dtype.is_floating_point:  # probability targets
        _check_same_shape(input, target, "cross_entropy")
        if label_smoothing > 0:
            target = target * (1 - label_smoothing) + label_smoothing / c
        prod = logp * target if weight is None else logp * target * weight.reshape(wshape)
        loss = -prod.sum(class_dim)
        if reduction == "mean":
            return loss.sum() / max(input.numel() // c, 1) if input.numel() else loss.sum() * math.nan
        return _reduce(loss, reduction, "cross_entropy")
    nll = nll_loss(logp, target, weight, ignore_index, reduction)
    if label_smoothing <= 0:
        return nll
    # PyTorch's smoothing term: the (weighted) mean of -log p over all classes.
    valid = (target != ignore_index).to(logp.dtype)
    smooth = -(logp if weight is None else logp * weight.reshape(wshape)).sum(class_dim) * valid
    if reduction == "mean":
        if weight is None:
            denom = valid.sum()
        else:
            denom = (weight.take(where(target != ignore_index, target, 0), 0) * valid).sum()
        smooth = smooth.sum() / denom
    else:
        smooth = _reduce(smooth, reduction, "cross_entropy")
    return nll * (1 - label_smoothing) + smooth * (label_smoothing / c)


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """Mean squared error."""
    _check_same_shape(input, target, "mse_loss")
    d = input - target
    return _reduce(d * d, reduction, "mse_loss")


def l1_loss(input, target, reduction="mean"):
    """Mean absolute error."""
    _check_same_shape(input, target, "l1_loss")
    return _reduce((input - target).abs(), reduction, "l1_loss")


def huber_loss(input, target, reduction="mean", delta=1.0):
    """Quadratic for |x - y| < delta, linear beyond: ``delta * (|d| - delta/2)``."""
    _check_same_shape(input, target, "huber_loss")
    d = (input - target).abs()
    return _reduce(where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta)), reduction, "huber_loss")


def smooth_l1_loss(input, target, reduction="mean", beta=1.0):
    """``0.5 d^2 / beta`` for |d| < beta, else ``|d| - beta/2`` (Huber divided by beta)."""
    _check_same_shape(input, target, "smooth_l1_loss")
    d = (input - target).abs()
    if beta == 0:
        return _reduce(d, reduction, "smooth_l1_loss")
    return _reduce(where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta), reduction, "smooth_l1_loss")


def binary_cross_entropy_with_logits(input, target, weight=None, reduction="mean", pos_weight=None):
    """Sigmoid + binary cross-entropy in one stable formula:
    ``(1 - y) x + (1 + (pw - 1) y) (log(1 + e^-|x|) + max(-x, 0))``.

    >>> import ember
    >>> round(binary_cross_entropy_with_logits(ember.tensor([0.0]), ember.tensor([1.0])).item(), 4)
    0.6931
    """
    _check_same_shape(input, target, "binary_cross_entropy_with_logits")
    softplus_neg = (-input.abs()).exp().log1p() + (-input).relu()  # log(1 + e^-x), stably
    if pos_weight is None:
        loss = (1 - target) * input + softplus_neg
    else:
        loss = (1 - target) * input + ((pos_weight - 1) * target + 1) * softplus_neg
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction, "binary_cross_entropy_with_logits")


def binary_cross_entropy(input, target, weight=None, reduction="mean"):
    """``-(y log p + (1 - y) log(1 - p))`` with each log clamped at -100, as in PyTorch."""
    _check_same_shape(input, target, "binary_cross_entropy")
    loss = -(target * input.log().clamp(min=-100.0) + (1 - target) * (1 - input).log().clamp(min=-100.0))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction, "binary_cross_entropy")


# ============================================================================== the fused op
def _cross_entropy_reference(logits, target, *, ignore_index=-100):
    """Mean negative log-likelihood of integer class ``target`` (N,) under ``logits`` (N, C),
    over the rows whose target is not ``ignore_index`` (PyTorch's ``F.cross_entropy``)."""
    return nll_loss(logits.log_softmax(-1), target, ignore_index=ignore_index)


def _cross_entropy_backward(grad, logits, target, *, ignore_index=-100):
    """d cross_entropy / d logits times the scalar ``grad``: ``(softmax - one_hot) * grad / n``
    on the ``n`` rows that count, zero on the ignored ones (all of them when ``n`` is 0, as in
    PyTorch, though the loss is then NaN)."""
    valid = target != ignore_index
    w = valid.to(logits.dtype)
    one_hot = where(valid, target, 0).reshape(-1, 1) == arange(logits.shape[-1], backend=logits.backend)
    return (logits.softmax(-1) - one_hot.to(logits.dtype)) * (w * (grad / w.sum().maximum(1))).reshape(-1, 1)


def _cross_entropy_vjp(g, out, logits, target, *, ignore_index=-100):
    return (fused.run("cross_entropy_backward", g, logits, target, ignore_index=ignore_index), None)


fused.defop("cross_entropy_backward", _cross_entropy_backward)
fused.defop("cross_entropy", _cross_entropy_reference, "cross_entropy_backward", _cross_entropy_vjp)

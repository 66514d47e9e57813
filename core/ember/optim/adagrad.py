"""Adagrad and Adadelta: per-coordinate learning rates from the history of squared gradients.

The update rules are plain functions of tensors (like functional.py's), written operation by
operation as PyTorch's single-tensor CPU implementation, so the two agree to float rounding.
They are not fused ops: no backend declares a kernel for them, so they run as Tensor ops.
"""

from __future__ import annotations

from typing import Any

from ..creation import full_like, zeros_like
from ..tensor import Tensor
from .functional import _with_decay
from .optimizer import Optimizer, ParamsT, flag, nonnegative


def adagrad_step(
    param: Tensor,
    grad: Tensor,
    state_sum: Tensor,
    *,
    lr: float,
    step: int,
    lr_decay: float = 0.0,
    weight_decay: float = 0.0,
    eps: float = 1e-10,
    maximize: bool = False,
) -> tuple[Tensor, Tensor]:
    """One Adagrad step (``step`` counts from 1). Returns ``(param, state_sum)``.

    >>> import ember
    >>> p, s = adagrad_step(ember.tensor([1.0]), ember.tensor([2.0]), ember.zeros(1), lr=0.1, step=1)
    >>> s.tolist(), round(p.item(), 6)
    ([4.0], 0.9)
    """
    grad = _with_decay(param, grad, weight_decay, maximize)
    clr = lr / (1 + (step - 1) * lr_decay)
    state_sum = state_sum + grad * grad
    return param + (grad * -clr) / (state_sum.sqrt() + eps), state_sum


def adadelta_step(
    param: Tensor,
    grad: Tensor,
    square_avg: Tensor,
    acc_delta: Tensor,
    *,
    lr: float = 1.0,
    rho: float = 0.9,
    eps: float = 1e-6,
    weight_decay: float = 0.0,
    maximize: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:
    """One Adadelta step. Returns ``(param, square_avg, acc_delta)``.

    >>> import ember
    >>> p, sq, acc = adadelta_step(ember.tensor([1.0]), ember.tensor([2.0]), ember.zeros(1), ember.zeros(1))
    >>> round(sq.item(), 6), round(p.item(), 6)
    (0.4, 0.996838)
    """
    grad = _with_decay(param, grad, weight_decay, maximize)
    square_avg = square_avg * rho + (grad * (1 - rho)) * grad
    delta = (acc_delta + eps).sqrt() / (square_avg + eps).sqrt() * grad
    acc_delta = acc_delta * rho + (delta * (1 - rho)) * delta
    return param + delta * -lr, square_avg, acc_delta


class Adagrad(Optimizer):
    """Adagrad (Duchi et al., 2011), as ``torch.optim.Adagrad``: each coordinate's step is
    ``lr * g / (sqrt(sum of its squared gradients) + eps)``, with ``lr`` decayed as
    ``lr / (1 + (step - 1) * lr_decay)``.

    >>> import ember
    >>> w = ember.tensor([1.0], requires_grad=True)
    >>> opt = ember.optim.Adagrad([w], lr=0.1)
    >>> (w * w).sum().backward(); opt.step(); round(w.item(), 6)
    0.9
    """

    rules = {
        "lr": nonnegative,
        "lr_decay": nonnegative,
        "weight_decay": nonnegative,
        "initial_accumulator_value": nonnegative,
        "eps": nonnegative,
        "maximize": flag,
    }

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-2,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
        *,
        maximize: bool = False,
    ) -> None:
        super().__init__(
            params,
            dict(
                lr=lr,
                lr_decay=lr_decay,
                weight_decay=weight_decay,
                initial_accumulator_value=initial_accumulator_value,
                eps=eps,
                maximize=maximize,
            ),
        )

    def _update(self, param: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        if not state:
            state["step"] = 0
            state["sum"] = full_like(param, group["initial_accumulator_value"])
        state["step"] += 1
        new_param, state_sum = adagrad_step(
            param,
            grad,
            state["sum"],
            lr=group["lr"],
            step=state["step"],
            lr_decay=group["lr_decay"],
            weight_decay=group["weight_decay"],
            eps=group["eps"],
            maximize=group["maximize"],
        )
        self._assign(param, new_param)
        self._assign(state["sum"], state_sum)


class Adadelta(Optimizer):
    """Adadelta (Zeiler, 2012), as ``torch.optim.Adadelta``: the step is the gradient scaled by
    ``sqrt(running mean of squared steps + eps) / sqrt(running mean of squared gradients + eps)``,
    times ``lr`` (1.0 by default: the method needs no learning rate).

    >>> import ember
    >>> w = ember.tensor([1.0], requires_grad=True)
    >>> opt = ember.optim.Adadelta([w])
    >>> (w * w).sum().backward(); opt.step(); round(w.item(), 6)
    0.996838
    """

    rules = {
        "lr": nonnegative,
        "rho": lambda v: None if nonnegative(v) is None and v <= 1 else "a number in [0, 1]",
        "eps": nonnegative,
        "weight_decay": nonnegative,
        "maximize": flag,
    }

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        *,
        maximize: bool = False,
    ) -> None:
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize))

    def _update(self, param: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        if not state:
            state["step"] = 0
            state["square_avg"] = zeros_like(param)
            state["acc_delta"] = zeros_like(param)
        state["step"] += 1
        new_param, square_avg, acc_delta = adadelta_step(
            param,
            grad,
            state["square_avg"],
            state["acc_delta"],
            lr=group["lr"],
            rho=group["rho"],
            eps=group["eps"],
            weight_decay=group["weight_decay"],
            maximize=group["maximize"],
        )
        self._assign(param, new_param)
        self._assign(state["square_avg"], square_avg)
        self._assign(state["acc_delta"], acc_delta)

"""RMSprop: divide the gradient by a running root mean square of its recent values."""

from __future__ import annotations

from typing import Any

from ..creation import zeros_like
from ..tensor import Tensor
from .optimizer import Optimizer, ParamsT, flag, nonnegative


class RMSprop(Optimizer):
    """RMSprop (Hinton's lecture 6e), as ``torch.optim.RMSprop``.

    ``square_avg = alpha * square_avg + (1 - alpha) * g**2``; the step is
    ``lr * g / (sqrt(square_avg) + eps)``. ``centered`` subtracts the squared running mean of
    the gradient first (an estimate of its variance); ``momentum`` accumulates the steps.

    >>> import ember
    >>> w = ember.tensor([1.0], requires_grad=True)
    >>> opt = ember.optim.RMSprop([w], lr=0.01, alpha=0.75)
    >>> (w * w).sum().backward(); opt.step(); round(w.item(), 4)
    0.98
    """

    rules = {
        "lr": nonnegative,
        "alpha": nonnegative,
        "eps": nonnegative,
        "weight_decay": nonnegative,
        "momentum": nonnegative,
        "centered": flag,
        "maximize": flag,
    }

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        super().__init__(
            params,
            dict(
                lr=lr,
                alpha=alpha,
                eps=eps,
                weight_decay=weight_decay,
                momentum=momentum,
                centered=centered,
                maximize=maximize,
            ),
        )

    rule = "rmsprop_step"

    def _inputs(self, param: Tensor, state: dict[str, Any], group: dict[str, Any]) -> tuple[Any, ...]:
        if not state:
            state["step"] = 0
            state["square_avg"] = zeros_like(param)
        momentum, centered = group["momentum"], group["centered"]
        if momentum > 0 and state.get("momentum_buffer") is None:
            state["momentum_buffer"] = zeros_like(param)
        if centered and state.get("grad_avg") is None:
            state["grad_avg"] = zeros_like(param)
        state["step"] += 1
        return (
            (
                state["square_avg"],
                state["grad_avg"] if centered else None,
                state["momentum_buffer"] if momentum > 0 else None,
            ),
            dict(
                lr=group["lr"],
                alpha=group["alpha"],
                eps=group["eps"],
                weight_decay=group["weight_decay"],
                momentum=momentum,
                centered=centered,
                maximize=group["maximize"],
            ),
        )

    def _store(self, param: Tensor, state: dict[str, Any], group: dict[str, Any], results: tuple[Any, ...]) -> None:
        new_param, square_avg, grad_avg, buf = results
        self._assign(param, new_param)
        self._assign(state["square_avg"], square_avg)
        if group["centered"]:
            self._assign(state["grad_avg"], grad_avg)
        if group["momentum"] > 0:
            self._assign(state["momentum_buffer"], buf)

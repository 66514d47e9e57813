"""SGD: stochastic gradient descent with momentum, Nesterov momentum and weight decay."""

from __future__ import annotations

from typing import Any

from ..tensor import Tensor
from .optimizer import Optimizer, ParamsT, flag, nonnegative, number


class SGD(Optimizer):
    """Stochastic gradient descent, as ``torch.optim.SGD``.

    With momentum ``m`` and dampening ``d`` the buffer is ``b = m * b + (1 - d) * g`` (the
    first step sets ``b = g``), and the step is ``p -= lr * b`` (or ``lr * (g + m * b)`` with
    ``nesterov``). ``weight_decay`` adds ``weight_decay * p`` to the gradient first.

    >>> import ember
    >>> w = ember.tensor([1.0, -2.0], requires_grad=True)
    >>> opt = ember.optim.SGD([w], lr=0.1, momentum=0.9)
    >>> for _ in range(2):
    ...     opt.zero_grad(); (w * w).sum().backward(); opt.step()
    >>> [round(v, 4) for v in w.tolist()]
    [0.46, -0.92]
    """

    rules = {
        "lr": nonnegative,
        "momentum": nonnegative,
        "dampening": number,
        "weight_decay": nonnegative,
        "nesterov": flag,
        "maximize": flag,
    }

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        super().__init__(
            params,
            dict(
                lr=lr,
                momentum=momentum,
                dampening=dampening,
                weight_decay=weight_decay,
                nesterov=nesterov,
                maximize=maximize,
            ),
        )

    def _check_group(self, group: dict[str, Any]) -> str | None:
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            return (
                f"nesterov=True needs momentum > 0 and dampening = 0, got momentum="
                f"{group['momentum']} and dampening={group['dampening']}"
            )
        return None

    rule = "sgd_step"

    def _inputs(self, param: Tensor, state: dict[str, Any], group: dict[str, Any]) -> tuple[Any, ...]:
        momentum = group["momentum"]
        return (
            (state.get("momentum_buffer") if momentum != 0 else None,),
            dict(
                lr=group["lr"],
                momentum=momentum,
                dampening=group["dampening"],
                nesterov=group["nesterov"],
                weight_decay=group["weight_decay"],
                maximize=group["maximize"],
            ),
        )

    def _store(self, param: Tensor, state: dict[str, Any], group: dict[str, Any], results: tuple[Any, ...]) -> None:
        new_param, buf = results
        self._assign(param, new_param)
        self._keep(state, "momentum_buffer", buf)

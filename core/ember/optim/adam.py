"""Adam and AdamW: adaptive moment estimation, with coupled or decoupled weight decay."""

from __future__ import annotations

from typing import Any

from ..creation import zeros_like
from ..tensor import Tensor
from .optimizer import Optimizer, ParamsT, beta_pair, flag, nonnegative


class Adam(Optimizer):
    """Adam (Kingma & Ba, 2015), as ``torch.optim.Adam``.

    Keeps running averages of the gradient (``exp_avg``) and of its square (``exp_avg_sq``),
    bias-corrects both, and steps by ``lr * m / (sqrt(v) + eps)``. ``amsgrad`` divides by the
    largest ``v`` seen so far; ``weight_decay`` is L2 (added to the gradient) unless
    ``decoupled_weight_decay``, which is AdamW.

    >>> import ember
    >>> w = ember.tensor([1.0, -2.0], requires_grad=True)
    >>> opt = ember.optim.Adam([w], lr=0.1)
    >>> (w * w).sum().backward(); opt.step()
    >>> [round(v, 4) for v in w.tolist()]
    [0.9, -1.9]
    >>> opt.state[w]["step"]
    1
    """

    rules = {
        "lr": nonnegative,
        "betas": beta_pair,
        "eps": nonnegative,
        "weight_decay": nonnegative,
        "amsgrad": flag,
        "maximize": flag,
        "decoupled_weight_decay": flag,
    }

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        decoupled_weight_decay: bool = False,
    ) -> None:
        super().__init__(
            params,
            dict(
                lr=lr,
                betas=betas,
                eps=eps,
                weight_decay=weight_decay,
                amsgrad=amsgrad,
                maximize=maximize,
                decoupled_weight_decay=decoupled_weight_decay,
            ),
        )

    rule = "adam_step"

    def _inputs(self, param: Tensor, state: dict[str, Any], group: dict[str, Any]) -> tuple[Any, ...]:
        if not state:
            state["step"] = 0
            state["exp_avg"] = zeros_like(param)
            state["exp_avg_sq"] = zeros_like(param)
        amsgrad = group["amsgrad"]
        if amsgrad and state.get("max_exp_avg_sq") is None:
            state["max_exp_avg_sq"] = zeros_like(param)
        state["step"] += 1
        beta1, beta2 = group["betas"]
        return (
            (state["exp_avg"], state["exp_avg_sq"], state["max_exp_avg_sq"] if amsgrad else None),
            dict(
                step=state["step"],
                lr=group["lr"],
                beta1=beta1,
                beta2=beta2,
                eps=group["eps"],
                weight_decay=group["weight_decay"],
                amsgrad=amsgrad,
                maximize=group["maximize"],
                decoupled_weight_decay=group["decoupled_weight_decay"],
            ),
        )

    def _store(self, param: Tensor, state: dict[str, Any], group: dict[str, Any], results: tuple[Any, ...]) -> None:
        new_param, exp_avg, exp_avg_sq, max_sq = results
        self._assign(param, new_param)
        self._assign(state["exp_avg"], exp_avg)
        self._assign(state["exp_avg_sq"], exp_avg_sq)
        if group["amsgrad"]:
            self._assign(state["max_exp_avg_sq"], max_sq)


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter, 2019), as ``torch.optim.AdamW``:
    each step first shrinks the parameter by ``lr * weight_decay``, outside the moments.

    >>> import ember
    >>> w = ember.tensor([1.0], requires_grad=True)
    >>> opt = ember.optim.AdamW([w], lr=0.1, weight_decay=0.5)
    >>> w.grad = ember.tensor([0.0]); opt.step(); w.tolist()     # zero gradient: decay alone
    [0.949999988079071]
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize, decoupled_weight_decay=True)

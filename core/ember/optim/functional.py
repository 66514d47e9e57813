"""The update rules, as plain functions: the reference decompositions of the fused optimizer ops.

Each rule takes a parameter, its gradient and its state tensors, and returns new tensors
``(param, *state)``; it never writes into its inputs. The optimizers (sgd.py, adam.py,
rmsprop.py) call them through :func:`run_step` and copy the results back in place.

The arithmetic follows PyTorch's single-tensor CPU implementation operation by operation
(``lerp`` with its two-sided formula, ``addcmul`` as ``(value * a) * b``, ``addcdiv`` as
``(value * a) / b``), so that ember and torch agree to float rounding.

Fused path (ember/fused.py): a backend that lists a rule's name (``"adam_step"``) in
``capabilities().fused`` provides ``fused_impls[name]``, the same function over buffers
instead of tensors. It returns the new buffers; it may update its inputs in place and return
them, which saves the optimizer's copy-back. The conformance suite checks a backend's kernels
against the rules here (ember.conformance.optimizers).

Multi-tensor path: each rule also has a ``_foreach`` form (``"adam_step_foreach"``) over
*lists*, one entry per parameter, returning lists. Its reference is the loop over the rule;
a backend declaring it updates a whole param group in one or two kernel launches, writing
into the buffers it was given and returning them (the optimizer then copies nothing back).

>>> import ember
>>> p, g = ember.tensor([1.0, 2.0]), ember.tensor([0.5, -0.5])
>>> new_p, buf = sgd_step(p, g, None, lr=0.1, momentum=0.9)
>>> [round(v, 6) for v in new_p.tolist()]
[0.95, 2.05]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import fused
from ..tensor import Tensor


def _lerp(start: Tensor, end: Tensor, weight: float) -> Tensor:
    """``start + weight * (end - start)``, with torch's form for large weights (exact at 1)."""
    if abs(weight) < 0.5:
        return start + (end - start) * weight
    return end - (end - start) * (1 - weight)


def _with_decay(param: Tensor, grad: Tensor, weight_decay: float, maximize: bool) -> Tensor:
    """The gradient the rule sees: negated to maximize, plus classic L2 weight decay."""
    grad = -grad if maximize else grad
    return grad + param * weight_decay if weight_decay != 0 else grad


# --------------------------------------------------------------------------------------- rules
def sgd_step(
    param: Tensor,
    grad: Tensor,
    momentum_buffer: Any,
    *,
    lr: float,
    momentum: float = 0.0,
    dampening: float = 0.0,
    nesterov: bool = False,
    weight_decay: float = 0.0,
    maximize: bool = False,
) -> tuple[Tensor, Any]:
    """One SGD step. ``momentum_buffer`` is None before the first step with momentum.

    Returns ``(param, momentum_buffer)``; the buffer stays None without momentum.

    >>> import ember
    >>> p, buf = sgd_step(ember.tensor([1.0]), ember.tensor([2.0]), None, lr=0.5)
    >>> p.tolist(), buf
    ([0.0], None)
    """
    d_p = _with_decay(param, grad, weight_decay, maximize)
    if momentum != 0:
        if momentum_buffer is None:
            # A copy: the gradient's buffer may be shared with other leaves or read-only.
            momentum_buffer = d_p.clone()
        else:
            momentum_buffer = momentum_buffer * momentum + (d_p if dampening == 0 else d_p * (1 - dampening))
        d_p = d_p + momentum_buffer * momentum if nesterov else momentum_buffer
    return param + d_p * (-lr), momentum_buffer


def adam_step(
    param: Tensor,
    grad: Tensor,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    max_exp_avg_sq: Any,
    *,
    step: int,
    lr: float,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    amsgrad: bool = False,
    maximize: bool = False,
    decoupled_weight_decay: bool = False,
) -> tuple[Tensor, Tensor, Tensor, Any]:
    """One Adam (or, with ``decoupled_weight_decay``, AdamW) step; ``step`` counts from 1.

    Returns ``(param, exp_avg, exp_avg_sq, max_exp_avg_sq)``; the last stays None unless
    ``amsgrad``.

    >>> import ember
    >>> z = ember.zeros(1)
    >>> p, *_ = adam_step(ember.tensor([1.0]), ember.tensor([3.0]), z, z, None, step=1, lr=0.1)
    >>> round(p.item(), 6)      # the first Adam step moves by lr, whatever the gradient's size
    0.9
    """
    grad = -grad if maximize else grad
    if weight_decay != 0:
        if decoupled_weight_decay:
            param = param * (1 - lr * weight_decay)
        else:
            grad = grad + param * weight_decay
    exp_avg = _lerp(exp_avg, grad, 1 - beta1)
    exp_avg_sq = exp_avg_sq * beta2 + grad * (1 - beta2) * grad
    if amsgrad:
        max_exp_avg_sq = max_exp_avg_sq.maximum(exp_avg_sq)
    bias_correction1 = 1 - beta1**step
    bias_correction2_sqrt = (1 - beta2**step) ** 0.5
    step_size = lr / bias_correction1
    second = max_exp_avg_sq if amsgrad else exp_avg_sq
    denom = second.sqrt() / bias_correction2_sqrt + eps
    return param + exp_avg * (-step_size) / denom, exp_avg, exp_avg_sq, max_exp_avg_sq


def rmsprop_step(
    param: Tensor,
    grad: Tensor,
    square_avg: Tensor,
    grad_avg: Any,
    momentum_buffer: Any,
    *,
    lr: float,
    alpha: float = 0.99,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    momentum: float = 0.0,
    centered: bool = False,
    maximize: bool = False,
) -> tuple[Tensor, Tensor, Any, Any]:
    """One RMSprop step. ``grad_avg`` is used only if ``centered``, ``momentum_buffer`` only
    with momentum (pass None otherwise; they come back None).

    Returns ``(param, square_avg, grad_avg, momentum_buffer)``.

    >>> import ember
    >>> p, sq, _, _ = rmsprop_step(ember.tensor([1.0]), ember.tensor([2.0]), ember.zeros(1),
    ...                            None, None, lr=0.01, alpha=0.75)
    >>> round(sq.item(), 6), round(p.item(), 4)
    (1.0, 0.98)
    """
    grad = _with_decay(param, grad, weight_decay, maximize)
    square_avg = square_avg * alpha + grad * (1 - alpha) * grad
    if centered:
        grad_avg = _lerp(grad_avg, grad, 1 - alpha)
        avg = (square_avg - grad_avg * grad_avg).sqrt() + eps
    else:
        avg = square_avg.sqrt() + eps
    if momentum > 0:
        momentum_buffer = momentum_buffer * momentum + grad / avg
        return param + momentum_buffer * (-lr), square_avg, grad_avg, momentum_buffer
    return param + grad * (-lr) / avg, square_avg, grad_avg, momentum_buffer


#: The reference decomposition of every fused optimizer op a backend may declare.
REFERENCE: dict[str, Callable[..., Any]] = {"sgd_step": sgd_step, "adam_step": adam_step, "rmsprop_step": rmsprop_step}


# --------------------------------------------------------------------------------------- multi-tensor rules
def _each(
    rule: Any, params: list[Tensor], grads: list[Tensor], *states: list[Any], **hyper: Any
) -> tuple[list[Any], ...]:
    """``rule`` applied to each parameter in turn; its results transposed into lists."""
    outs = [rule(p, g, *s, **hyper) for p, g, *s in zip(params, grads, *states, strict=True)]
    return tuple(list(column) for column in zip(*outs)) if outs else tuple([] for _ in range(1 + len(states)))


def sgd_step_foreach(
    params: list[Tensor], grads: list[Tensor], momentum_buffers: list[Any], **hyper: Any
) -> tuple[list[Any], ...]:
    """:func:`sgd_step` over lists, one entry per parameter (a buffer may be None: that
    parameter's first step); the keywords are sgd_step's, shared by all. Returns
    ``(params, momentum_buffers)`` as lists.

    >>> import ember
    >>> ps, bufs = sgd_step_foreach([ember.tensor([1.0]), ember.tensor([2.0, 3.0])],
    ...                             [ember.tensor([1.0]), ember.tensor([1.0, -1.0])], [None, None], lr=0.5)
    >>> [p.tolist() for p in ps], bufs
    ([[0.5], [1.5, 3.5]], [None, None])
    """
    return _each(sgd_step, params, grads, momentum_buffers, **hyper)


def adam_step_foreach(
    params: list[Tensor],
    grads: list[Tensor],
    exp_avgs: list[Tensor],
    exp_avg_sqs: list[Tensor],
    max_exp_avg_sqs: list[Any],
    **hyper: Any,
) -> tuple[list[Any], ...]:
    """:func:`adam_step` over lists (``max_exp_avg_sqs`` holds None entries unless
    ``amsgrad``); one ``step`` for all, so the optimizer calls it once per step count.
    Returns ``(params, exp_avgs, exp_avg_sqs, max_exp_avg_sqs)`` as lists."""
    return _each(adam_step, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, **hyper)


def rmsprop_step_foreach(
    params: list[Tensor],
    grads: list[Tensor],
    square_avgs: list[Tensor],
    grad_avgs: list[Any],
    momentum_buffers: list[Any],
    **hyper: Any,
) -> tuple[list[Any], ...]:
    """:func:`rmsprop_step` over lists. Returns ``(params, square_avgs, grad_avgs,
    momentum_buffers)`` as lists."""
    return _each(rmsprop_step, params, grads, square_avgs, grad_avgs, momentum_buffers, **hyper)


#: Multi-tensor op -> its reference; the per-parameter rule it loops over is the name minus
#: ``_foreach``.
FOREACH: dict[str, Callable[..., Any]] = {
    "sgd_step_foreach": sgd_step_foreach,
    "adam_step_foreach": adam_step_foreach,
    "rmsprop_step_foreach": rmsprop_step_foreach,
}


# --------------------------------------------------------------------------------------- dispatch
# The rules are ember.fused's optimizer ops: a backend may declare a kernel for any of them.
for _name, _rule in REFERENCE.items():
    fused.defop(_name, _rule)
for _name, _rule in FOREACH.items():
    fused.defop(_name, _rule, each=_name.removesuffix("_foreach"))


def run_step(name: str, param: Tensor, grad: Tensor, *state: Any, **hyper: Any) -> Any:
    """Run rule ``name`` as the backend's fused kernel if it declares one (see ember.fused),
    else as the reference decomposition above.

    >>> import ember
    >>> p, _ = run_step("sgd_step", ember.tensor([1.0]), ember.tensor([1.0]), None, lr=0.5)
    >>> p.tolist()
    [0.5]
    """
    return fused.run(name, param, grad, *state, **hyper)


def run_foreach(name: str, params: list[Tensor], grads: list[Tensor], *states: list[Any], **hyper: Any) -> Any:
    """Run multi-tensor rule ``name`` (``"sgd_step_foreach"``) over lists of tensors on one
    backend: the backend's kernel if it declares one (and ember.jit is not tracing), else
    :func:`run_step` for each parameter (ember.fused.run_foreach). An output the kernel wrote
    in place comes back as the input tensor itself.

    >>> import ember
    >>> (p,), (buf,) = run_foreach("sgd_step_foreach", [ember.tensor([1.0])], [ember.tensor([1.0])],
    ...                            [None], lr=0.5, momentum=0.9)
    >>> p.tolist(), buf.tolist()
    ([0.5], [1.0])
    """
    return fused.run_foreach(name, params, grads, *states, **hyper)

"""Gradient clipping: by global norm (``clip_grad_norm_``) or elementwise (``clip_grad_value_``).

Both rebind ``p.grad`` to a new tensor rather than writing into the old one (torch writes in
place): a gradient tensor set by hand may be shared by two leaves, or be a read-only broadcast
view, and scaling such a buffer in place would clip it twice or fail. ``ember.nn.utils``
re-exports both.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from ..autodiff import no_grad
from ..errors import located
from ..tensor import Tensor, stack, tensor
from .optimizer import OptimizerError, _real


def _with_grads(parameters: Tensor | Iterable[Tensor]) -> list[Tensor]:
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    return [p for p in params if p.grad is not None]


def clip_grad_norm_(
    parameters: Tensor | Iterable[Tensor], max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False
) -> Tensor:
    """Scale all gradients together so that their global ``norm_type``-norm is at most
    ``max_norm``, as ``torch.nn.utils.clip_grad_norm_``. Returns the norm before clipping.

    >>> import ember
    >>> w = ember.tensor([3.0, 4.0], requires_grad=True)
    >>> w.grad = ember.tensor([3.0, 4.0])
    >>> ember.optim.clip_grad_norm_([w], max_norm=1.0).item()
    5.0
    >>> [round(v, 4) for v in w.grad.tolist()]
    [0.6, 0.8]
    """
    if not _real(max_norm) or max_norm < 0:
        raise located(OptimizerError, f"clip_grad_norm_: max_norm must be a finite number >= 0, got {max_norm!r}")
    norm_type = float(norm_type)
    if not norm_type > 0:
        raise located(OptimizerError, f"clip_grad_norm_: norm_type must be > 0 or inf, got {norm_type!r}")
    params = _with_grads(parameters)
    if not params:
        return tensor(0.0)
    with no_grad():
        grads = [g for p in params if (g := p.grad) is not None and g.numel()]
        if not grads:
            return tensor(0.0, backend=params[0].backend)
        if norm_type == math.inf:
            total = stack([g.abs().amax() for g in grads]).amax()
        else:
            total = stack([g.norm(norm_type) for g in grads]).norm(norm_type)
        if error_if_nonfinite and not bool(total.isfinite()):
            raise located(
                OptimizerError,
                f"clip_grad_norm_: the total {norm_type:g}-norm of the gradients "
                f"is {total.item()}; a loss or gradient went non-finite. Pass "
                f"error_if_nonfinite=False to clip anyway",
            )
        coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
        for p in params:
            if (g := p.grad) is not None:  # _with_grads kept only these
                p.grad = g * coef.to(g.dtype)
    return total


def clip_grad_value_(parameters: Tensor | Iterable[Tensor], clip_value: float) -> None:
    """Clamp every gradient element to ``[-clip_value, clip_value]``.

    >>> import ember
    >>> w = ember.zeros(3, requires_grad=True); w.grad = ember.tensor([-5.0, 0.5, 5.0])
    >>> ember.optim.clip_grad_value_([w], 1.0); w.grad.tolist()
    [-1.0, 0.5, 1.0]
    """
    if not _real(clip_value) or clip_value < 0:
        raise located(OptimizerError, f"clip_grad_value_: clip_value must be a finite number >= 0, got {clip_value!r}")
    with no_grad():
        for p in _with_grads(parameters):
            if (g := p.grad) is not None:
                p.grad = g.clamp(-clip_value, clip_value)

"""``ember.autograd``: torch's names for ember's autodiff (``grad``, ``Function``) and
``inference_mode``.

``Function`` is torch's way to give an operation a hand-written gradient: subclass it with
static ``forward(ctx, *args)`` and ``backward(ctx, *grad_outputs)`` and call ``.apply``. It is
built on :func:`ember.autodiff.custom_vjp`: one graph node per call whose rule is your
``backward``; ``ctx`` travels with the node, so what ``forward`` saved is there in
``backward``. ``backward`` is written in Tensor ops, so second derivatives differentiate it.

>>> import ember
>>> class Exp(ember.autograd.Function):
...     @staticmethod
...     def forward(ctx, x):
...         y = x.exp()
...         ctx.save_for_backward(y)
...         return y
...     @staticmethod
...     def backward(ctx, grad_output):
...         (y,) = ctx.saved_tensors
...         return grad_output * y
>>> x = ember.tensor([0.0, 1.0], requires_grad=True)
>>> Exp.apply(x).sum().backward()
>>> [round(v, 4) for v in x.grad.tolist()]
[1.0, 2.7183]
"""

from __future__ import annotations

import itertools

from . import dispatch
from .autodiff import VJP, custom_vjp, grad_of as grad, no_grad
from .errors import GradError, located

_SERIAL = itertools.count(2)


class FunctionCtx:
    """What ``forward`` hands to ``backward``: saved tensors and any attributes you set."""

    def __init__(self, needs_input_grad):
        self.needs_input_grad = needs_input_grad
        self.saved_tensors = ()

    def save_for_backward(self, *tensors) -> None:
        """Keep ``tensors`` for ``backward`` (read them back from ``ctx.saved_tensors``)."""
        self.saved_tensors = tensors

    def mark_non_differentiable(self, *tensors) -> None:
        """Accepted for torch's sake; ember asks ``backward`` only for the one output's gradient."""


class Function:
    """Base class of operations with a hand-written gradient (module doc); call ``.apply(*args)``.

    ``forward`` returns one tensor. ``backward`` returns one gradient per argument of
    ``forward`` (a single value if there is one argument), ``None`` for arguments that have none.
    """

    @staticmethod
    def forward(ctx, *args):
        raise NotImplementedError("subclasses of ember.autograd.Function define forward(ctx, *args)")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("subclasses of ember.autograd.Function define backward(ctx, grad_output)")

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        name = f"autograd.Function:{cls.__module__}.{cls.__qualname__}"
        if name in VJP:  # another class of the same name (defined in a function called twice)
            name += f"#{next(_SERIAL)}"

        def run(*args, ctx):
            out = cls.forward(ctx, *args)
            if not isinstance(out, dispatch.Tensor):
                raise located(
                    TypeError,
                    f"{cls.__name__}.forward must return one Tensor, got "
                    f"{type(out).__name__} (several outputs are not supported yet)",
                )
            return out

        def rule(g, out, *args, ctx):
            grads = cls.backward(ctx, g)
            grads = grads if isinstance(grads, tuple) else (grads,)
            if len(grads) != len(args):
                raise located(
                    GradError,
                    f"{cls.__name__}.backward returned {len(grads)} gradients for "
                    f"{len(args)} inputs of forward; return None for inputs without one",
                )
            for i, (a, ga) in enumerate(zip(args, grads)):
                if ga is not None and isinstance(a, dispatch.Tensor) and tuple(ga.shape) != tuple(a.shape):
                    raise located(
                        GradError,
                        f"{cls.__name__}.backward: gradient {i} has shape "
                        f"{tuple(ga.shape)} but input {i} has shape {tuple(a.shape)}",
                    )
            return grads

        cls._node = staticmethod(custom_vjp(run, rule, name=name))

    @classmethod
    def apply(cls, *args):
        """Run ``forward`` on ``args`` and record one node whose gradient is ``backward``."""
        if cls.forward is Function.forward:
            raise NotImplementedError(f"{cls.__name__} does not define forward(ctx, *args)")
        needs = tuple(isinstance(a, dispatch.Tensor) and a.requires_grad for a in args)
        return cls._node(*args, ctx=FunctionCtx(needs))


class inference_mode(no_grad):  # noqa: N801 - torch's name
    """``torch.inference_mode``: run without recording graphs, as a context or a decorator.

    In ember it is :class:`~ember.no_grad` (ember keeps no version counters for it to skip);
    ``inference_mode(False)`` leaves grad mode as it is.

    >>> import ember
    >>> x = ember.ones(2, requires_grad=True)
    >>> with ember.inference_mode():
    ...     (x * 2).requires_grad
    False
    """

    def __init__(self, mode: bool = True):
        super().__init__()
        self.enabled = bool(mode)

    def _recreate_cm(self):
        return type(self)(self.enabled)  # as a decorator: a fresh instance with the same mode

    def __enter__(self):
        self.mode = False if self.enabled else dispatch.is_grad_enabled()
        super().__enter__()


__all__ = ["Function", "FunctionCtx", "grad", "inference_mode"]

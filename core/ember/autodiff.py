"""Reverse-mode autodiff: the backward walk over the VJP rules.

A primitive's rule is in its record (``P.exp.vjp``, see ember.primitives):
``vjp(g, out, *inputs, **params)`` returns one cotangent per input (``None`` where an input has
no gradient). Rules are written in Tensor operations, so running them with grad mode on records
*their* graph too: that is all higher-order differentiation needs. A function that is not a
primitive can bring a rule of its own (:func:`custom_vjp`); it is then one node, whose rule
lives in :data:`VJP`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any, overload

from . import dispatch
from .errors import GradError, located
from .primitives import PRIMITIVES, Primitive
from .primitives.adjoint import unbroadcast  # noqa: F401 - rules outside the records (fused.py) use it

#: node name -> VJP rule, for nodes that are not primitives (custom_vjp, ember.fused); it is
#: consulted first, so a rule registered here for a primitive's name overrides the record's.
VJP: dict[str, Callable[..., Any]] = {}

# id(leaf) -> callback(leaf), called the moment a leaf's .grad is final during backward().
# Leaves are visited once, after every path into them, so "final" is exact. Data-parallel
# training uses it to start each bucket's all-reduce while the rest of backward still runs.
GRAD_READY_HOOKS: dict[int, Callable[[Any], None]] = {}


def defvjp(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the VJP rule of node ``name`` (decorator); primitives carry theirs in their record."""

    def register(rule: Callable[..., Any]) -> Callable[..., Any]:
        VJP[name] = rule
        return rule

    return register


def custom_vjp(fn: Callable[..., Any], vjp: Callable[..., Any], name: str | None = None) -> Callable[..., Any]:
    """``fn`` with a hand-written gradient, in the spirit of ``jax.custom_vjp``.

    The result runs ``fn`` (which returns one Tensor) without recording its operations and,
    when grad mode is on and an argument requires a gradient, records a single node named
    ``name`` instead. Backward calls ``vjp(g, out, *args, **params)``, which returns one
    cotangent per argument like a primitive's rule (``None`` for arguments without one). The
    rule is written in Tensor ops, so a second derivative differentiates the rule in turn.
    ember.fused uses it to train with a backend's fused kernels: the forward kernel computes
    the value, the rule calls the backward kernel.

    >>> import ember
    >>> def cube(x):
    ...     return x * x * x
    >>> cube = custom_vjp(cube, lambda g, out, x: (g * 3 * x * x,), name="doc.cube")
    >>> x = ember.tensor([2.0], requires_grad=True)
    >>> y = cube(x)
    >>> y._ctx[0]                       # one node, not the two multiplications
    'doc.cube'
    >>> ember.grad(lambda x: cube(x).sum())(x).tolist(), ember.grad(ember.grad(lambda x: cube(x).sum()))(x).item()
    ([12.0], 12.0)
    """
    name = name or f"{fn.__module__}.{fn.__qualname__}"
    if name in PRIMITIVES:
        raise ValueError(f"custom_vjp: {name!r} is a primitive; give the function a name of its own")
    VJP[name] = vjp

    def wrapped(*args: Any, **params: Any) -> Any:
        prev = dispatch.set_grad_enabled(False)
        try:
            out = fn(*args, **params)
        finally:
            dispatch.set_grad_enabled(prev)
        if prev and any(isinstance(a, dispatch.Tensor) and a.requires_grad for a in args):
            return dispatch.wrap(out._data, out._backend, (name, args, params))
        return out

    wrapped.__name__, wrapped.__doc__ = getattr(fn, "__name__", name), fn.__doc__
    return wrapped


# ----------------------------------------------------------------------------- grad mode
class no_grad(contextlib.ContextDecorator):
    """Run without recording graphs (inference, optimizer updates). Grad mode belongs to the
    current context (dispatch.is_grad_enabled): other threads keep theirs.

    >>> import ember
    >>> x = ember.ones(2, requires_grad=True)
    >>> with ember.no_grad():
    ...     (x * 2).requires_grad
    False
    """

    mode = False

    def __init__(self) -> None:
        self._prev: list[bool] = []  # a stack: one instance is re-entered when a `with` block recurses

    def _recreate_cm(self) -> no_grad:
        # As a decorator, one instance per call: threads running the function at once must
        # not pop each other's saved modes.
        return type(self)()

    def __enter__(self) -> None:
        self._prev.append(dispatch.set_grad_enabled(self.mode))

    def __exit__(self, *exc: object) -> None:
        dispatch.set_grad_enabled(self._prev.pop())


class enable_grad(no_grad):
    """Record graphs again inside a ``no_grad`` block."""

    mode = True


is_grad_enabled = dispatch.is_grad_enabled


# ----------------------------------------------------------------------------- the walk
def _topo_order(roots: list[Any]) -> list[Any]:
    """Tensors reachable from ``roots`` through recorded ops, each after everything it feeds."""
    order: list[Any] = []
    seen: set[int] = set()
    stack = [(r, False) for r in roots]
    while stack:  # iterative: a 10,000-op chain must not hit recursion limits
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        if node._ctx is not None:
            for a in node._ctx[1]:
                if isinstance(a, dispatch.Tensor) and a.requires_grad and id(a) not in seen:
                    stack.append((a, False))
    order.reverse()
    return order


def _rule(name: str) -> Callable[..., Any] | None:
    """The VJP rule of node ``name``: the one registered in ``VJP`` for it, else its record's."""
    if isinstance(name, Primitive) and name not in VJP:
        return name.vjp
    rule = VJP.get(name)
    if rule is None and name in PRIMITIVES:  # a primitive named by a plain string
        rule = PRIMITIVES[name].vjp
    return rule


def _accumulate(grads: dict[int, Any], t: Any, g: Any) -> None:
    key = id(t)
    prev = grads.get(key)
    grads[key] = g if prev is None else prev + g


@overload
def backprop(outputs: list[Any], cotangents: list[Any], inputs: None = None, create_graph: bool = False) -> None: ...
@overload
def backprop(outputs: list[Any], cotangents: list[Any], inputs: list[Any], create_graph: bool = False) -> list[Any]: ...
def backprop(
    outputs: list[Any], cotangents: list[Any], inputs: list[Any] | None = None, create_graph: bool = False
) -> list[Any] | None:
    """Push ``cotangents`` back from ``outputs``. With ``inputs`` return their gradients;
    without, accumulate into the ``.grad`` of every leaf that requires one."""
    prev = dispatch.set_grad_enabled(create_graph)
    try:
        grads: dict[int, Any] = {}
        rules: dict[str, Any] = {}  # node name -> its rule, looked up once per walk
        for o, c in zip(outputs, cotangents):
            _accumulate(grads, o, c)
        wanted = None if inputs is None else {id(t) for t in inputs}
        for node in _topo_order(outputs):
            g = grads.get(id(node))
            if g is None:
                continue
            if node._ctx is None:
                if wanted is None:
                    # A fresh buffer: g may be shared with another leaf's grad or be a read-only
                    # broadcast view, and optimizers update .grad in place.
                    node.grad = g.clone() if node.grad is None else node.grad + g
                    if GRAD_READY_HOOKS:
                        hook = GRAD_READY_HOOKS.get(id(node))
                        if hook is not None:
                            hook(node)
                continue
            if wanted is None or id(node) not in wanted:
                del grads[id(node)]  # free each cotangent as soon as it is pushed back
            name, args, params = node._ctx
            rule = rules.get(name)
            if rule is None:
                rule = rules[name] = _rule(name)
            if rule is None:
                raise located(GradError, f"primitive {name!r} has no gradient rule")
            for a, ga in zip(args, rule(g, node, *args, **params)):
                if ga is not None and isinstance(a, dispatch.Tensor) and a.requires_grad:
                    _accumulate(grads, a, ga)
        if inputs is not None:
            return [grads.get(id(t)) for t in inputs]
        return None
    finally:
        dispatch.set_grad_enabled(prev)


def backward(tensor: Any, gradient: Any = None, create_graph: bool = False) -> None:
    """``tensor.backward()``: accumulate d tensor / d leaf into each leaf's ``.grad``."""
    if not tensor.requires_grad:
        raise located(
            GradError,
            "backward() on a tensor that does not require grad: no input of its "
            "computation had requires_grad=True (or it was computed under no_grad)",
        )
    if gradient is None:
        if tensor.numel() != 1:
            raise located(
                GradError,
                f"backward() without a gradient needs a scalar output, got shape "
                f"{tensor.shape}; pass gradient= or reduce first (e.g. .sum())",
            )
        gradient = dispatch.Tensor._ones_like(tensor)
    backprop([tensor], [gradient], create_graph=create_graph)


def grad_of(
    outputs: Any, inputs: Any, grad_outputs: Any = None, create_graph: bool = False, allow_unused: bool = False
) -> Any:
    """Gradients of ``outputs`` with respect to ``inputs`` (like ``torch.autograd.grad``)."""
    outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    single = not isinstance(inputs, (list, tuple))
    inputs = [inputs] if single else list(inputs)
    if grad_outputs is None:
        grad_outputs = [dispatch.Tensor._ones_like(o) for o in outputs]
    elif not isinstance(grad_outputs, (list, tuple)):
        grad_outputs = [grad_outputs]
    gs = backprop(outputs, grad_outputs, inputs, create_graph=create_graph)
    for i, (t, g) in enumerate(zip(inputs, gs)):
        if g is None:
            if not allow_unused:
                raise located(
                    GradError,
                    f"input {i} (shape {t.shape}) was not used to compute the output; "
                    f"pass allow_unused=True to get zeros",
                )
            gs[i] = dispatch.Tensor._zeros_like(t)
    return gs[0] if single else gs


# ----------------------------------------------------------------------------- functional API
def _prepare(given: tuple[Any, ...], argnums: tuple[int, ...]) -> tuple[list[Any], bool]:
    """Mark the differentiated arguments. Inside an outer differentiation they stay connected
    to its graph (that is what makes grad(grad(f)) work); otherwise they become fresh leaves."""
    args = list(given)
    nested = False
    for i in argnums:
        a = args[i]
        if a.requires_grad and dispatch.is_grad_enabled():
            nested = True
        else:
            args[i] = a.detach().requires_grad_()
    return args, nested


def value_and_grad(
    f: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False
) -> Callable[..., tuple[Any, Any]]:
    """``value_and_grad(f)(*args)`` returns ``(f(*args), df/dargs[argnums])``.

    >>> import ember
    >>> v, g = ember.value_and_grad(lambda x: (x * x).sum())(ember.tensor([1.0, 2.0]))
    >>> g.tolist()
    [2.0, 4.0]
    """
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)

    def wrapped(*given: Any, **kwargs: Any) -> tuple[Any, Any]:
        args, nested = _prepare(given, nums)
        with enable_grad():
            out = f(*args, **kwargs)
        value, aux = out if has_aux else (out, None)
        if value.numel() != 1:
            raise located(GradError, f"grad needs f to return a scalar, got shape {value.shape}")
        if not value.requires_grad:
            gs = [dispatch.Tensor._zeros_like(args[i]) for i in nums]
        else:
            gs = grad_of(value, [args[i] for i in nums], create_graph=nested, allow_unused=True)
        g = gs[0] if isinstance(argnums, int) else tuple(gs)
        if not nested:
            value = value.detach()
        return ((value, aux), g) if has_aux else (value, g)

    return wrapped


def grad(f: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable[..., Any]:
    """``grad(f)(*args)``: the gradient of scalar ``f`` with respect to ``args[argnums]``.
    Composes: ``grad(grad(f))`` is the second derivative.

    >>> import ember
    >>> d2 = ember.grad(ember.grad(lambda x: (x ** 3).sum()))
    >>> d2(ember.tensor(2.0)).item()
    12.0
    """
    vg = value_and_grad(f, argnums, has_aux)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        (value, g) = vg(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    return wrapped

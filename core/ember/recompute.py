"""``ember.checkpoint(fn, *args)``: trade compute for memory by recomputing ``fn`` in backward.

Training keeps every intermediate tensor of the forward pass for the backward pass. Wrapped in
``checkpoint``, ``fn``'s intermediates are dropped as soon as its output is computed; the
graph keeps one node holding ``fn``, its inputs and the parameters it used. When the gradient
reaches that node, ``fn`` runs again with grad on (same random numbers: the generator is
rewound) and the gradient is pushed through the recomputed graph, which is then dropped too.
Checkpointing each block of a deep network keeps one block's intermediates alive at a time.

Tensors ``fn`` reads must be its arguments or leaves (parameters): as with torch's reentrant
checkpoint, no gradient flows to an intermediate tensor that ``fn`` captures from outside.

Buffers a module changes in training (BatchNorm's running statistics) are put back after the
recomputation, so a checkpointed module ends a step exactly as an ordinary one does. For a
plain function that updates state of its own, that is the caller's business.

>>> import ember
>>> from ember import nn
>>> block = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4))
>>> x = ember.randn(2, 4, requires_grad=True)
>>> ember.checkpoint(block, x).sum().backward()
>>> g = x.grad.clone(); x.grad = None
>>> block.zero_grad(); block(x).sum().backward()
>>> bool((g == x.grad).all())
True
"""

from __future__ import annotations

from . import dispatch
from .autodiff import VJP, enable_grad, grad_of
from .errors import located
from .random import default_generator

NAME = "checkpoint"


def checkpoint(fn, *args, use_reentrant=None, **kwargs):
    """``fn(*args, **kwargs)``, keeping none of its intermediates for backward (module doc).

    ``fn`` returns one tensor. ``use_reentrant`` is accepted for torch's sake and ignored:
    there is one way here, and it works with ``backward()`` and ``ember.grad`` alike.
    """
    if not (dispatch.is_grad_enabled() and dispatch.interpreter().evaluates):
        return fn(*args, **kwargs)  # nothing is kept without grad; under ember.jit the graph is static
    rng = default_generator.get_state()
    out = fn(*args, **kwargs)  # recorded, so we can see which parameters fn reads ...
    if not isinstance(out, dispatch.Tensor):
        raise located(TypeError, f"ember.checkpoint: fn must return one Tensor, got {type(out).__name__}")
    if not out.requires_grad:
        return out
    inputs = [a for a in args if isinstance(a, dispatch.Tensor)]
    leaves = _leaves(out, inputs)
    # ... and then let its graph go: only the output's buffer and the inputs stay alive
    params = dict(fn=fn, args=args, kwargs=kwargs, rng=rng, buffers=_buffers(fn), n=len(inputs))
    return dispatch.wrap(out._data, out._backend, (NAME, tuple(inputs) + tuple(leaves), params))


def _rule(g, out, *tensors, fn, args, kwargs, rng, buffers, n):
    """Recompute ``fn`` with grad on, from detached copies of its tensor inputs, and pull ``g``
    back to those inputs and to the parameters ``fn`` read."""
    inputs, leaves = tensors[:n], tensors[n:]
    copies = iter([t.detach().requires_grad_(t.requires_grad) for t in inputs])
    replay = [next(copies) if isinstance(a, dispatch.Tensor) else a for a in args]
    fresh = [a for a in replay if isinstance(a, dispatch.Tensor)]
    saved_rng, saved_buffers = default_generator.get_state(), [b.clone() for b in buffers]
    default_generator.set_state(rng)
    try:
        with enable_grad():
            again = fn(*replay, **kwargs)
    finally:
        default_generator.set_state(saved_rng)
        for b, value in zip(buffers, saved_buffers):
            b.copy_(value)
    wanted = [t for t in fresh + list(leaves) if t.requires_grad]
    grads = iter(
        grad_of(again, wanted, g, create_graph=dispatch.is_grad_enabled(), allow_unused=True) if wanted else []
    )
    return tuple(next(grads) if t.requires_grad else None for t in fresh + list(leaves))


def _leaves(out, inputs):
    """The leaves requiring grad that ``out``'s graph reaches without passing through ``inputs``:
    the parameters ``fn`` read."""
    stop = {id(t) for t in inputs}
    seen, found, stack = set(stop), [], [out]
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        if t._ctx is None:
            found.append(t)
        else:
            stack.extend(a for a in t._ctx[1] if isinstance(a, dispatch.Tensor) and a.requires_grad)
    return found


def _buffers(fn):
    """The buffers of the module ``fn`` is (or is a method of), to restore after recomputing."""
    from .nn.module import Module

    module = fn if isinstance(fn, Module) else getattr(fn, "__self__", None)
    return [b for b in module.buffers() if b is not None] if isinstance(module, Module) else []


VJP[NAME] = _rule

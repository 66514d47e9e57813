"""Optional fused ops: the mechanism. A registry of named ops, each with a reference
decomposition in Tensor ops; a backend that declares one runs its own kernel instead.

The ops themselves live with the code that uses them: ``ember.nn.functional`` registers
softmax, log_softmax, cross_entropy, layer_norm, gelu, scaled_dot_product_attention,
max_pool2d and batch_norm (and their backward ops), ``ember.optim.functional`` the optimizer
steps. Each calls :func:`defop` when it is imported, so :data:`FUSED` holds the ops of the
modules imported so far; this module never imports them (the import-direction test checks).

A backend declares a fused op by listing its name in ``capabilities().fused`` and putting a
function over its own buffers in ``Backend.fused_impls[name]``, with the reference's
signature (tensors become buffers, ``None`` stays ``None``, keyword parameters pass through).
It returns a buffer, or a tuple of buffers where the reference returns a tuple. A backend
that declares nothing still runs every op: :func:`run` falls back to the decomposition. The
conformance suite (tier 4) checks each declared op against its decomposition.

Gradients: a forward op may name its backward op (``softmax_backward``, itself a fused op
with a decomposition) and a VJP rule that calls ``run(<backward op>)``. When an input needs
a gradient and the backend declares both ops, :func:`run` runs the forward kernel and
records one autodiff node (autodiff.custom_vjp) whose rule is that VJP: the backward kernel
in plain training, the backward op's decomposition when a higher derivative is being
recorded (its primitives have VJP rules). Otherwise :func:`run` takes the forward
decomposition. ember.jit follows the same rules while it traces, recording one graph node
per kernel (jit.trace.Tracer.fused) where the graph's backend declares the ops. An op
registered with ``saves=True`` (``batch_norm``) returns ``(out, *saved)``; trained on its
kernel, only ``out`` is differentiable and its node keeps the saved buffers for the rule.

Multi-tensor ops (``adam_step_foreach``) take lists, one entry per parameter, and are run by
:func:`run_foreach`; ``each=`` names the per-parameter op they loop over.

>>> import ember
>>> _ = defop("double", lambda x: x * 2)
>>> run("double", ember.tensor([1.0, 2.0])).tolist()
[2.0, 4.0]
>>> undef("double")
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from . import dispatch
from .autodiff import VJP, custom_vjp, no_grad

#: name -> reference decomposition: the names a backend may list in ``capabilities().fused``.
FUSED: dict = {}

#: forward op -> (the backward op its VJP runs, the VJP rule in autodiff's signature: the
#: output gradient, the output, the op's arguments, its parameters). A backend that declares
#: both gets its kernels used in training too.
VJPS: dict = {}

#: forward ops that return ``(out, *saved)``: on the kernel path only ``out`` is
#: differentiable, and the saved buffers reach the VJP rule after the op's arguments.
SAVES: set = set()

#: multi-tensor op -> the per-parameter op its reference loops over.
FOREACH: dict = {}

_DIFFERENTIABLE: dict = {}  # forward op -> its kernel as one autodiff node
_DECLARED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


# ----------------------------------------------------------------------------- the registry
def defop(
    name: str,
    reference: Callable[..., Any],
    backward: str | None = None,
    vjp: Callable[..., Any] | None = None,
    *,
    saves: bool = False,
    each: str | None = None,
) -> Callable[..., Any]:
    """Register fused op ``name`` with its ``reference`` decomposition (a function of Tensors)
    and return the reference. ``backward`` names the fused op that ``vjp`` (autodiff's rule
    signature) runs, so training can use a backend's kernels for both; ``saves``: the op
    returns ``(out, *saved)``; ``each``: a multi-tensor op looping over that per-parameter op.

    >>> import ember
    >>> def square(x):
    ...     return x * x
    >>> def square_vjp(g, out, x):
    ...     return (run("square_backward", g, x),)
    >>> _ = defop("square_backward", lambda g, x: g * x * 2)
    >>> _ = defop("square", square, backward="square_backward", vjp=square_vjp)
    >>> x = ember.tensor([3.0], requires_grad=True)
    >>> run("square", x).sum().backward(); x.grad.tolist()
    [6.0]
    >>> for n in ("square", "square_backward"): undef(n)
    """
    if (backward is None) != (vjp is None):
        raise ValueError(f"fused op {name!r}: give both backward= and vjp=, or neither")
    FUSED[name] = reference
    if backward is not None and vjp is not None:  # both or neither, checked above
        VJPS[name] = (backward, vjp)
        if saves:
            SAVES.add(name)
        _DIFFERENTIABLE[name] = _saving(name, vjp) if saves else custom_vjp(_kernel_of(name), vjp, name=f"fused.{name}")
    if each is not None:
        FOREACH[name] = each
    _DECLARED.clear()  # a backend's declaration may name the new op
    return reference


def undef(name) -> None:
    """Remove fused op ``name`` (tests and throw-away ops)."""
    for table in (FUSED, VJPS, FOREACH, _DIFFERENTIABLE):
        table.pop(name, None)
    SAVES.discard(name)
    _DECLARED.clear()


def declared(backend) -> frozenset:
    """The fused ops ``backend`` declares and provides (cached per backend object).

    >>> import ember
    >>> sorted(declared(ember.get_backend("python")))     # the pure-Python backend declares none
    []
    """
    names = _DECLARED.get(backend)
    if names is None:
        kernels = backend.fused_impls or {}  # a plugin may have set None: the old lookup took it
        names = _DECLARED[backend] = frozenset(n for n in backend.capabilities().fused if n in FUSED and n in kernels)
    return names


@contextlib.contextmanager
def decomposed(backends: Iterable[Any]) -> Iterator[None]:
    """Inside the block, ``backends`` declare no fused op, so every fused op runs (or traces) as
    its decomposition into primitives: ONNX export wants primitives, whatever kernels a backend has.

    >>> import ember
    >>> numpy = ember.get_backend("numpy")
    >>> with decomposed([numpy]):
    ...     sorted(declared(numpy))
    []
    """
    backends = list(backends)
    try:
        for b in backends:
            _DECLARED[b] = frozenset()
        yield
    finally:
        for b in backends:
            _DECLARED.pop(b, None)  # declared() fills it again from the backend's capabilities


# ----------------------------------------------------------------------------- dispatch
def run(name: str, *args: Any, **params: Any) -> Any:
    """Run fused op ``name``: the backend's kernel if it declares one, else the reference
    decomposition. When an input needs a gradient, the kernel runs only if the backend also
    declares the op's backward op (:data:`VJPS`); the result is then one autodiff node.

    >>> import ember
    >>> import ember.nn.functional      # registers cross_entropy
    >>> logits = ember.tensor([[2.0, 0.0], [0.0, 2.0]])
    >>> round(run("cross_entropy", logits, ember.tensor([0, 1])).item(), 4)
    0.1269
    """
    tensors = [a for a in args if isinstance(a, dispatch.Tensor)]
    # Under ember.jit: the backend the graph runs on if the op becomes one node there
    # (jit.trace.Tracer.fused), else None for its decomposition (compile() may fuse it again).
    backend = dispatch.interpreter().fused_backend(name, tensors[0]._backend)
    if backend is None:
        return FUSED[name](*args, **params)
    names = declared(backend)
    if name not in names:
        return FUSED[name](*args, **params)
    if dispatch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        if name not in VJPS or VJPS[name][0] not in names:
            return FUSED[name](*args, **params)
        return _DIFFERENTIABLE[name](*args, **params)
    return _kernel(name, backend, args, params)


def run_foreach(name: str, params: list[Any], grads: list[Any], *states: Any, **hyper: Any) -> Any:
    """Run multi-tensor op ``name`` (``"sgd_step_foreach"``) over lists of tensors on one
    backend: the backend's kernel if it declares one (and ember.jit is not tracing), else
    :func:`run` of the per-parameter op for each parameter. An output the kernel wrote in
    place comes back as the input tensor itself. Returns a tuple of lists.
    """
    backend = params[0]._backend if params else None
    if backend is None or dispatch.interpreter().fused_backend(name, backend) is None or name not in declared(backend):
        outs = [run(FOREACH[name], p, g, *s, **hyper) for p, g, *s in zip(params, grads, *states, strict=True)]
        return tuple(list(column) for column in zip(*outs)) if outs else tuple([] for _ in range(1 + len(states)))
    inputs = (params, *states)
    out = backend.fused_impls[name](
        [p._data for p in params],
        [g._data for g in grads],
        *([None if t is None else t._data for t in column] for column in states),
        **hyper,
    )
    return tuple([_rewrap(b, t, backend) for b, t in zip(column, given)] for column, given in zip(out, inputs))


def _rewrap(buf, given, backend):
    if buf is None:
        return None
    if given is not None and buf is given._data:
        return given  # updated in place: the optimizer's copy-back then copies nothing
    return dispatch.wrap(buf, backend)


def _kernel(name, backend, args, params):
    """The backend's kernel for ``name`` on the arguments' buffers, wrapped as tensors (under
    ember.jit, a node run later)."""
    return dispatch.interpreter().fused(name, backend, args, params)


def _kernel_of(name):
    def kernel(*args, **params):
        backend = next(a for a in args if isinstance(a, dispatch.Tensor))._backend
        return _kernel(name, backend, args, params)

    kernel.__name__ = name
    return kernel


def _saving(name, rule):
    """Op ``name`` (registered with ``saves=True``) as one autodiff node for its first
    output, whose recorded inputs are its arguments followed by the saved outputs (constants
    to autodiff)."""
    node = f"fused.{name}"
    VJP[node] = rule

    def differentiable(*args, **params):
        backend = next(a for a in args if isinstance(a, dispatch.Tensor))._backend
        with no_grad():
            out, *saved = _kernel(name, backend, args, params)
        return (dispatch.wrap(out._data, out._backend, (node, args + tuple(saved), params)), *saved)

    differentiable.__name__ = name
    return differentiable

"""Applying a primitive: the one door every Tensor operation goes through.

``apply("add", a, b)`` looks up the backend of its tensor arguments, runs the backend's
implementation on their buffers, wraps the result in a Tensor and — if any input requires a
gradient and grad mode is on — remembers ``(primitive, inputs, params)`` on the output so
autodiff.py can walk back. That record is the whole graph: it lives and dies with the tensors,
so there is no global tape to reset.

The fast path does no checking; when a backend raises, the primitive's abstract rule is run
to explain the failure in shapes and dtypes, located at the user's line.
"""
from __future__ import annotations

from . import primitives
from .errors import BackendError, EmberError, NotImplementedByBackend, located

Tensor = None            # set by tensor.py (the two modules need each other)
GRAD_ENABLED = [True]    # a list so that every importer shares the one flag
# Comparisons, argmax, logical ops: their outputs never require grad (as in torch), so they
# hold no graph alive and backward never meets them.
NO_GRAD = primitives.NON_DIFFERENTIABLE
# ember.jit: the active Tracer while a function is being traced, else None. Tracing swaps
# the real backends' impls for a table that refuses, so an op on concrete tensors lands in
# the error path below, where the tracer records it instead: the fast path has no check.
TRACER = [None]


def _wrap(data, backend, ctx):
    t = Tensor.__new__(Tensor)
    t._data = data
    t._backend = backend
    t.grad = None
    if ctx is None:
        t._ctx = None
        t.requires_grad = False
    else:
        t._ctx = ctx
        t.requires_grad = True
    return t


def _explain(name, backend, args, params, exc):
    """Turn a backend failure into an ember error that names shapes and the user's line.
    While ember.jit traces, first offer the op to the tracer: it returns ``(data, backend)``."""
    if TRACER[0] is not None:
        lifted = TRACER[0].apply(name, backend, args, params)
        if lifted is not None:
            return lifted
    if isinstance(exc, EmberError):
        raise exc
    if name not in backend.impls:
        raise NotImplementedByBackend(backend.name, name) from None
    avals = [a if not isinstance(a, Tensor) else (a.shape, a.dtype) for a in args]
    try:
        primitives.abstract_eval(name, *avals, **params)
    except EmberError as err:
        raise located(type(err), f"{name}: {err}") from None
    raise located(BackendError, f"{name} failed on backend {backend.name!r} for inputs "
                  f"{', '.join(str(a) for a in avals)}: {type(exc).__name__}: {exc}") from exc


def apply1(name, x, **params):
    """Apply a primitive of one tensor argument (unary ops, reductions, movement)."""
    backend = x._backend
    try:
        data = backend.impls[name](x._data, **params)
    except Exception as exc:  # noqa: BLE001
        data, backend = _explain(name, backend, (x,), params, exc)
    if x.requires_grad and GRAD_ENABLED[0] and name not in NO_GRAD:
        return _wrap(data, backend, (name, (x,), params))
    return _wrap(data, backend, None)


def apply2(name, a, b):
    """Apply a binary primitive; ``b`` may be a Python scalar."""
    backend = a._backend
    bt = isinstance(b, Tensor)
    try:
        if bt and b._backend is not backend:
            raise located(BackendError, f"{name}: operands live on backends {backend.name!r} and "
                          f"{b._backend.name!r}; move one with .to({backend.name!r})")
        data = backend.impls[name](a._data, b._data if bt else b)
    except Exception as exc:  # noqa: BLE001
        data, backend = _explain(name, backend, (a, b), {}, exc)
    if GRAD_ENABLED[0] and (a.requires_grad or (bt and b.requires_grad)) and name not in NO_GRAD:
        return _wrap(data, backend, (name, (a, b), {}))
    return _wrap(data, backend, None)


def apply(name, *args, **params):
    """Apply any primitive; tensors among ``args`` must share one backend."""
    backend = None
    grad = False
    for a in args:
        if isinstance(a, Tensor):
            if backend is None:
                backend = a._backend
            elif a._backend is not backend:
                if TRACER[0] is None:
                    raise located(BackendError, f"{name}: inputs live on backends {backend.name!r} and "
                                  f"{a._backend.name!r}; move them to one with .to(name)")
                backend = None     # ember.jit: traced meets concrete; the error path below lifts it
            grad = grad or a.requires_grad
    bufs = [a._data if isinstance(a, Tensor) else a for a in args]
    try:
        data = backend.impls[name](*bufs, **params)
    except Exception as exc:  # noqa: BLE001
        data, backend = _explain(name, backend, args, params, exc)
    if grad and GRAD_ENABLED[0] and name not in NO_GRAD:
        return _wrap(data, backend, (name, args, params))
    return _wrap(data, backend, None)


def create(name, backend, **params):
    """Run a creation primitive (full, arange, random_bits) on ``backend``."""
    try:
        data = backend.impls[name](**params)
    except Exception as exc:  # noqa: BLE001
        data, backend = _explain(name, backend, (), params, exc)
    return _wrap(data, backend, None)

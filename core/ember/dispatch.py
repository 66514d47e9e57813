"""Applying a primitive: the one door every Tensor operation goes through.

``apply("add", a, b)`` hands the primitive to the *current interpreter*, as in JAX's
autodidax. The bottom interpreter, :class:`Eager`, is always there: it runs the backend's
implementation on the inputs' buffers, wraps the result in a Tensor and — if an input requires
a gradient and grad mode is on — remembers ``(primitive, inputs, params)`` on the output so
autodiff.py can walk back. That record is the whole graph: it lives and dies with the tensors,
so there is no global tape to reset. ember.jit pushes a second interpreter while it traces
(jit/trace.py's ``Tracer``), which records each primitive into a graph instead of running it.

The current interpreter and grad mode are context-local (:mod:`contextvars`): a thread that
traces a function and another that trains eagerly at the same time do not see each other's
state, and a new thread starts eager with grad mode on.

>>> import ember
>>> interpreter() is EAGER
True
>>> x = ember.ones(2, requires_grad=True)
>>> y = apply2("mul", x, 3.0)
>>> y.tolist(), y._ctx[0]
([3.0, 3.0], 'mul')

Eager's fast path does no checking; when a backend raises, the primitive's abstract rule is run
to explain the failure in shapes and dtypes, located at the user's line (:func:`explain`).
That slow path is also where a storage dtype (bfloat16) is upcast to float32 for computing.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator
from typing import Any, Protocol, TypeVar

from . import primitives
from .dtypes import KEEPS, storage_upcast
from .errors import BackendError, EmberError, NotImplementedByBackend, located

# Comparisons, argmax, logical ops: their outputs never require grad (as in torch), so they
# hold no graph alive and backward never meets them.
NO_GRAD = primitives.NON_DIFFERENTIABLE


#: a Tensor: the door's result is of its input's class (tensor.py's, which this module cannot name)
class _Buffered(Protocol):
    """What the door reads of a tensor."""

    _data: Any
    _backend: Any
    requires_grad: bool


T = TypeVar("T", bound=_Buffered)

# ----------------------------------------------------------------------------- building tensors
#: The Tensor class, registered by tensor.py with :func:`register_tensor_class` (tensor.py
#: imports this module, so this module cannot import it).
Tensor: Any = None


def register_tensor_class(cls: type[T]) -> type[T]:
    """Make ``cls`` the class of the tensors dispatch builds (tensor.py's ``Tensor`` registers
    itself when it is defined); returns ``cls``."""
    global Tensor
    Tensor = cls
    return cls


def _new(data: Any, backend: Any, ctx: Any) -> Any:
    """A Tensor over ``data`` (a ``backend`` buffer), recording ``ctx`` for backward if given."""
    # ``Tensor()``, not ``Tensor.__new__(Tensor)``: the class has no __init__, and a call of the
    # class skips the checks ``__new__`` makes (~40 ns, 4% of a small eager add).
    t = Tensor()
    t._data = data
    t._backend = backend
    t._grad = None
    t._ctx = ctx
    t.requires_grad = ctx is not None
    return t


def wrap(data: Any, backend: Any, ctx: Any = None) -> Any:
    """The Tensor holding buffer ``data`` of ``backend``: how code outside dispatch (a backend
    plugin's kernels, autodiff's custom rules, checkpoint loading) turns buffers into tensors.
    ``ctx`` — ``(name, inputs, params)`` — makes it an autodiff node.

    >>> import ember
    >>> b = ember.get_backend("numpy")
    >>> wrap(b.from_list([1.0, 2.0], (2,), ember.float32), b).tolist()
    [1.0, 2.0]
    """
    if _open:
        return _current().wrap(data, backend, ctx)
    return _new(data, backend, ctx)


_wrap = wrap  # the name backend plugins used before ember 0.2; kept for one API version


# ----------------------------------------------------------------------------- grad mode
_GRAD_ENABLED = contextvars.ContextVar("ember.grad_enabled", default=True)
_grad_enabled = _GRAD_ENABLED.get  # bound once: the eager path reads it on every op


def is_grad_enabled() -> bool:
    """Whether operations in this context record graphs (see ``ember.no_grad``).

    >>> is_grad_enabled()
    True
    """
    return _GRAD_ENABLED.get()


def set_grad_enabled(mode: bool) -> bool:
    """Turn graph recording on or off in this context; returns the previous mode, to restore.
    ``ember.no_grad`` and ``ember.enable_grad`` are the usual way."""
    prev = _GRAD_ENABLED.get()
    _GRAD_ENABLED.set(bool(mode))
    return prev


# ----------------------------------------------------------------------------- interpreters
class Interpreter:
    """What the current interpreter is asked: the primitives (``apply1``, ``apply2``,
    ``apply``, ``create``), building tensors (``wrap``), and the few operations that touch
    state outside the tensors' values: in-place writes (``assign``), random draws
    (``random_bits``), ``.grad`` reads and writes, ember.fused's kernels (``fused_backend``,
    ``fused``). ``evaluates`` says whether values exist now (so a check may read them)."""

    evaluates = True

    # Tensors are Any here: their class is tensor.py's, which this module cannot import.
    def apply1(self, name: str, x: Any, params: dict[str, Any]) -> Any:
        raise NotImplementedError

    def apply2(self, name: str, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def apply(self, name: str, args: tuple[Any, ...], params: dict[str, Any]) -> Any:
        raise NotImplementedError

    def create(self, name: str, backend: Any, params: dict[str, Any]) -> Any:
        raise NotImplementedError

    def wrap(self, data: Any, backend: Any, ctx: Any) -> Any:
        return _new(data, backend, ctx)

    def assign(self, dst: Any, src: Any) -> Any:
        raise NotImplementedError

    def random_bits(self, generator: Any, shape: tuple[int, ...], backend: Any) -> Any:
        raise NotImplementedError

    def read_grad(self, t: Any) -> Any:
        return t._grad

    def write_grad(self, t: Any, value: Any) -> None:
        t._grad = value

    def fused_backend(self, name: str, backend: Any) -> Any:
        """The backend whose kernel for fused op ``name`` would run, or None for the op's
        reference decomposition."""
        return backend

    def fused(self, name: str, backend: Any, args: tuple[Any, ...], params: dict[str, Any]) -> Any:
        raise NotImplementedError


class Eager(Interpreter):
    """The bottom interpreter: run each primitive now, on its inputs' backend.

    Its rules for the primitives are the bodies of dispatch's ``apply1/apply2/apply/create``:
    when Eager is current they run them inline, because a method call more would cost ~4% of
    a small eager ``add``. The methods below complete the protocol by calling those functions,
    which is what they mean while Eager is current."""

    def apply1(self, name: str, x: Any, params: dict[str, Any]) -> Any:
        return apply1(name, x, **params)

    def apply2(self, name: str, a: Any, b: Any) -> Any:
        return apply2(name, a, b)

    def apply(self, name: str, args: tuple[Any, ...], params: dict[str, Any]) -> Any:
        return apply(name, *args, **params)

    def create(self, name: str, backend: Any, params: dict[str, Any]) -> Any:
        return create(name, backend, **params)

    def assign(self, dst: Any, src: Any) -> Any:
        if src._backend is not dst._backend:
            src = src.to(dst._backend)
        dst._backend.assign(dst._data, src._data)
        return dst

    def random_bits(self, generator: Any, shape: tuple[int, ...], backend: Any) -> Any:
        return self.create("random_bits", backend, {"shape": shape, "seed": generator.seed, "offset": generator.offset})

    def fused(self, name: str, backend: Any, args: tuple[Any, ...], params: dict[str, Any]) -> Any:
        out = backend.fused_impls[name](*(a._data if isinstance(a, Tensor) else a for a in args), **params)
        if isinstance(out, tuple):
            return tuple(None if b is None else _new(b, backend, None) for b in out)
        return _new(out, backend, None)


EAGER = Eager()
_INTERPRETER: contextvars.ContextVar[Interpreter] = contextvars.ContextVar("ember.interpreter", default=EAGER)
_current = _INTERPRETER.get  # bound once: every op asks it

# How many ``interpreting`` blocks are open, in all threads together. While it is 0 every
# context's interpreter is EAGER, so the door functions skip the context-variable read: an
# eager program that never traces pays one global read per op. A thread that traces makes
# the others read their (eager) context again until it is done, which is correct, only slower.
_open = 0
_open_lock = threading.Lock()


def interpreter() -> Interpreter:
    """The interpreter that primitives go to in this context (:data:`EAGER` unless ember.jit
    is tracing here)."""
    return _INTERPRETER.get()


@contextlib.contextmanager
def interpreting(interp: Interpreter) -> Iterator[Interpreter]:
    """Make ``interp`` the current interpreter of this context for the ``with`` block; the one
    before it is current again afterwards (the stack is the chain of these blocks)."""
    global _open
    with _open_lock:
        _open += 1
    token = _INTERPRETER.set(interp)
    try:
        yield interp
    finally:
        _INTERPRETER.reset(token)
        with _open_lock:
            _open -= 1


# ----------------------------------------------------------------------------- the door
# Each function hands the primitive to the current interpreter unless that is Eager, whose
# rule it then runs inline (see Eager). They are the hot path of every eager program, so
# they read attributes once and look nothing up twice.
def apply1(name: str, x: T, **params: Any) -> T:
    """Apply a primitive of one tensor argument (unary ops, reductions, movement)."""
    if _open:
        interp = _current()
        if interp is not EAGER:
            return interp.apply1(name, x, params)
    backend = x._backend
    try:
        data = backend.impls[name](x._data, **params)
    except Exception as exc:  # noqa: BLE001
        return explain(name, backend, (x,), params, exc)
    if x.requires_grad and _grad_enabled() and name not in NO_GRAD:
        return _new(data, backend, (name, (x,), params))
    return _new(data, backend, None)


def apply2(name: str, a: T, b: Any) -> T:
    """Apply a binary primitive; ``b`` may be a Python scalar."""
    if _open:
        interp = _current()
        if interp is not EAGER:
            return interp.apply2(name, a, b)
    backend = a._backend
    bt = isinstance(b, Tensor)
    try:
        if bt and b._backend is not backend:
            raise located(
                BackendError,
                f"{name}: operands live on backends {backend.name!r} and "
                f"{b._backend.name!r}; move one with .to({backend.name!r})",
            )
        data = backend.impls[name](a._data, b._data if bt else b)
    except Exception as exc:  # noqa: BLE001
        return explain(name, backend, (a, b), {}, exc)
    if (a.requires_grad or (bt and b.requires_grad)) and _grad_enabled() and name not in NO_GRAD:
        return _new(data, backend, (name, (a, b), {}))
    return _new(data, backend, None)


def apply(name: str, *args: Any, **params: Any) -> Any:
    """Apply any primitive; tensors among ``args`` must share one backend."""
    if _open:
        interp = _current()
        if interp is not EAGER:
            return interp.apply(name, args, params)
    backend: Any = None
    grad = False
    for a in args:
        if isinstance(a, Tensor):
            if backend is None:
                backend = a._backend
            elif a._backend is not backend:
                raise located(
                    BackendError,
                    f"{name}: inputs live on backends {backend.name!r} and "
                    f"{a._backend.name!r}; move them to one with .to(name)",
                )
            grad = grad or a.requires_grad
    bufs = [a._data if isinstance(a, Tensor) else a for a in args]
    try:
        data = backend.impls[name](*bufs, **params)
    except Exception as exc:  # noqa: BLE001
        return explain(name, backend, args, params, exc)
    if grad and _grad_enabled() and name not in NO_GRAD:
        return _new(data, backend, (name, args, params))
    return _new(data, backend, None)


def create(name: str, backend: Any, **params: Any) -> Any:
    """Run a creation primitive (full, arange, random_bits) on ``backend``."""
    if _open:
        interp = _current()
        if interp is not EAGER:
            return interp.create(name, backend, params)
    try:
        data = backend.impls[name](**params)
    except Exception as exc:  # noqa: BLE001
        return explain(name, backend, (), params, exc)
    return _new(data, backend, None)


def explain(name: str, backend: Any, args: tuple[Any, ...], params: dict[str, Any], exc: BaseException) -> Any:
    """Raise an ember error for a failure of ``backend`` on primitive ``name``, naming shapes,
    dtypes and the user's line; or, where an operand has a storage dtype the backend cannot
    compute on (bfloat16), apply ``name`` again to the operands cast to float32 and return that."""
    upcast = None if name in KEEPS else storage_upcast(args)
    if upcast is not None:
        return apply(name, *upcast, **params)
    if isinstance(exc, EmberError):
        raise exc
    if name not in backend.impls:
        raise NotImplementedByBackend(backend.name, name) from None
    avals = [a if not isinstance(a, Tensor) else (a.shape, a.dtype) for a in args]
    try:
        primitives.abstract_eval(name, *avals, **params)
    except EmberError as err:
        raise located(type(err), f"{name}: {err}") from None
    raise located(
        BackendError,
        f"{name} failed on backend {backend.name!r} for inputs "
        f"{', '.join(str(a) for a in avals)}: {type(exc).__name__}: {exc}",
    ) from exc

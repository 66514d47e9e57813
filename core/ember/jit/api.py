"""``ember.jit(fn)``: trace once per input signature, optimize, run the compiled graph.

A call computes a *key* — the shapes, dtypes and backends of the tensor arguments, the values
of the other arguments, the grad mode, and the train/eval flags and hyperparameters of the
modules and optimizers among the arguments or near the function (its closure, or the object
of a bound method). A new key traces the function (trace.py), optimizes the graph
(passes.py) and lowers it to a program (runner.py's, or the one ``Backend.jit_runner`` names);
a known key only runs the program. Guards checked at every call (captured tensors keep their
shape and dtype; ``.grad`` attributes the graph reads are still there) send a call back to
tracing if broken.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, overload

from .. import dispatch, dtypes as D
from ..errors import BackendError, located
from ..registry import get_backend
from ..tensor import Tensor
from . import buffers, passes
from .effects import TENSOR
from .pytree import flatten
from .runner import Program
from .trace import is_tracing, trace

#: How many compiled signatures one jitted function keeps (least recently used go first).
CACHE_SIZE = 16


def enabled() -> bool:
    """False when the environment sets ``EMBER_JIT=0`` (jit then calls the function as is)."""
    return os.environ.get("EMBER_JIT", "1") != "0"


class Compiled:
    """One traced signature: the optimized graph, its fusion groups and its program."""

    one_shot = False  # a trace that leaked tensors into Python state: run once, then retrace

    def __init__(self, traced: Any, backend: Any, optimize: bool = True) -> None:
        self.traced, self.backend = traced, backend
        graph = traced.graph
        if optimize:
            graph = passes.optimize(graph, backend.impls, backend.to_list)
        self.graph = graph
        self.groups = passes.fusion_groups(graph)
        self.program = (backend.jit_runner() or Program)(graph, self.groups, backend)
        self.live_captures = [(slot, var) for slot, _, var in self.program.captures]
        self.grad_flags = [
            (src.obj, var.params["requires_grad"])
            for src, var in zip(graph.captures, traced.capture_vars)
            if src.kind == "tensor"
        ]
        # Two Python objects must not share a buffer unless eager mode would share it too:
        # after CSE two gradients (or two new optimizer buffers) may be one value, and
        # constants live in the program. Such outputs are copied; the first holder keeps it.
        root, taken = buffers.roots(graph.nodes), set()
        self.copy_out = []
        for (kind, _), var in zip(traced.bindings, graph.outputs):
            r = root.get(var.id, var.id)
            escapes = kind in ("result", "grad", "rebind")
            self.copy_out.append(escapes and (r in taken or var.op == "const"))
            if escapes:
                taken.add(r)

    def stats(self) -> dict[str, Any]:
        """Counts for reports and tests: ``primitives`` traced, ``nodes`` left after the passes,
        fusion ``groups`` (``fused``: those of several ops), ``kernels`` (groups that are not
        views: what a backend that compiles groups launches), ``calls`` (backend calls one run
        of this program makes: one per op where groups run op by op), reused ``buffers``."""
        return {
            "primitives": self.traced.n_primitives,
            "nodes": len(self.graph.primitives),
            "groups": len(self.groups),
            "fused": sum(g.fused and len(g.nodes) > 1 for g in self.groups),
            "kernels": sum(g.kind != "view" for g in self.groups),
            "calls": self.program.calls,
            "buffers": len(getattr(self.program, "buffers", ())),
        }

    def format(self) -> str:
        text: str = self.graph.format(self.groups)
        return text

    # -- a call -------------------------------------------------------------------------------------
    def read_captures(self, tensors: list[Any]) -> list[Any] | None:
        """Capture buffers for this call, or None if a guard fails (the caller retraces)."""
        backend = self.backend
        for t, was_none in self.traced.grad_guards:
            if (t._grad is None) != was_none:
                return None
        for container, key, value in self.traced.python_guards:
            if _python_value(container, key) != value:
                return None
        buffers = [None] * len(self.graph.captures)
        for slot, var in self.live_captures:
            source = self.graph.captures[slot]
            buf = source.read(tensors, backend)
            if buf is None or tuple(backend.shape(buf)) != var.shape or backend.dtype(buf) is not var.dtype:
                return None
            buffers[slot] = buf
        for t, flag in self.grad_flags:
            if t.requires_grad is not flag:
                return None  # a layer frozen or unfrozen: backward must see it
        return buffers

    def run(self, tensors: list[Any], captures: list[Any], only_rebind: bool = False) -> Any:
        traced, backend = self.traced, self.backend
        gens = traced.generators
        outs = self.program.run([t._data for t in tensors], captures, [(g.seed, g.offset) for g, _ in gens])
        results = []
        for buf, (kind, target), var, copy in zip(outs, traced.bindings, self.graph.outputs, self.copy_out):
            if copy:
                buf = backend.impls["cast"](buf, dtype=var.dtype)
            if kind == "rebind":
                target._data, target._backend, target._ctx = buf, backend, None
            elif only_rebind:
                continue
            elif kind == "result":
                results.append(dispatch.wrap(buf, backend))
            elif kind == "grad":
                _resolve(target, tensors)._grad = dispatch.wrap(buf, backend)
            elif kind == "assign":
                if buf is not captures[target]:  # not computed in place (donated) already
                    backend.assign(captures[target], buf)
            elif kind == "arg_data":
                backend.assign(tensors[target]._data, buf)
            elif kind == "python":
                container, key, typ = target
                value = backend.to_list(buf)[0]
                container[key] = round(value) if typ is int else typ(value)
        if only_rebind:
            return None
        for target, value in traced.grad_effects:
            _resolve(target, tensors)._grad = value
        for container, key, value in traced.python_effects:
            container[key] = value
        for g, used in gens:
            g.offset += used
        it = iter(results)
        return traced.rebuild([next(it) if s is TENSOR else s for s in traced.statics])


def _python_value(container: Any, key: Any) -> Any:
    try:
        return container[key]
    except (KeyError, IndexError):
        return None


def _resolve(target: tuple[str, Any], tensors: list[Any]) -> Any:
    kind, what = target
    return tensors[what] if kind == "arg" else what


# ----------------------------------------------------------------------------- keys
_NOT_KEYS = ("params", "param_names", "lr", "initial_lr")


def _hyper(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_hyper(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _hyper(x)) for k, x in v.items()))
    return v


def _is_module(x: Any) -> bool:
    return hasattr(x, "training") and callable(getattr(x, "modules", None))


def _is_optimizer(x: Any) -> bool:
    return hasattr(x, "param_groups") and hasattr(x, "state")


def static_key(x: Any) -> tuple[Any, ...]:
    """What a non-tensor argument contributes to the cache key (see the module doc)."""
    if x is None or isinstance(x, (bool, int, float, str, bytes, D.DType)):
        return (type(x).__name__, x)
    if _is_module(x):
        # Train/eval flags change what forward does; the tensors' identities catch a layer
        # replaced by another (the graph would still read the old one's weights).
        if hasattr(x, "_modules"):
            return ("module", x, *_module_walk(x))
        return (
            "module",
            x,
            tuple(m.training for m in x.modules()),
            tuple(map(id, x.parameters())),
            tuple(map(id, x.buffers())),
        )
    if _is_optimizer(x):
        # The lr and the numbers in the state are read at each call (scalars.py): not keys. The
        # identities of the dicts and tensors the graph reads are: load_state_dict replaces them.
        groups = tuple(
            tuple(sorted((k, _hyper(v)) for k, v in g.items() if k not in _NOT_KEYS)) for g in x.param_groups
        )
        state = tuple(
            (id(s), tuple((k, id(v) if isinstance(v, Tensor) else type(v).__name__) for k, v in s.items()))
            for s in x.state.values()
        )
        return ("optimizer", x, groups, tuple(map(id, x.param_groups)), id(x.state), state)
    try:
        hash(x)
        return ("object", x)
    except TypeError:
        return ("object", id(x))


def _module_walk(root: Any) -> tuple[tuple[Any, ...], ...]:
    """The train flags of ``root``'s modules and the ids of their parameters and buffers, in
    the order ``modules()``, ``parameters()`` and ``buffers()`` give them (depth first, each
    once), from one walk of the tree: the three generators with their dotted names cost a
    W1 step ~11 µs, this ~3."""
    mods: list[Any] = []
    seen: set[int] = set()

    def walk(m: Any) -> None:
        seen.add(id(m))
        mods.append(m)
        for c in m._modules.values():
            if c is not None and id(c) not in seen:
                walk(c)

    walk(root)

    def ids(table: str) -> tuple[int, ...]:
        found: dict[int, None] = {}
        for m in mods:
            for v in getattr(m, table).values():
                if v is not None:
                    found.setdefault(id(v))
        return tuple(found)

    return tuple(m.training for m in mods), ids("_parameters"), ids("_buffers")


def _tensor_key(t: Any) -> tuple[Any, ...]:
    return (t.shape, t.dtype, id(t._backend), t.requires_grad, t._grad is None)


def _nearby(fn: Any) -> list[Any]:
    """Modules and optimizers the function can reach without arguments: its closure, its
    defaults, and the attributes of the object it is a bound method of."""
    found = []
    owner = getattr(fn, "__self__", None)
    candidates = list(vars(owner).values()) if owner is not None and hasattr(owner, "__dict__") else []
    code = getattr(fn, "__func__", fn)
    for cell in getattr(code, "__closure__", None) or ():
        try:
            candidates.append(cell.cell_contents)
        except ValueError:  # an empty cell
            pass
    candidates += list(getattr(code, "__defaults__", None) or ())
    for c in candidates:
        if _is_module(c) or _is_optimizer(c):
            found.append(c)
    return found


# ----------------------------------------------------------------------------- the jit object
class Jit:
    """A jitted function. Call it like the function; inspect it with :meth:`graph`,
    :meth:`stats` and :attr:`trace_count`.

    >>> import ember
    >>> f = ember.jit(lambda x, y: (x * y + 1.0).relu().sum())
    >>> f(ember.ones(3), ember.ones(3)).item()
    6.0
    >>> f(ember.ones(3), ember.ones(3)).item(), f.trace_count       # same signature: no retrace
    (6.0, 1)
    >>> f(ember.ones(4), ember.ones(4)).item(), f.trace_count       # new shape: traced again
    (8.0, 2)
    """

    def __init__(self, fn: Callable[..., Any], *, optimize: bool = True, cache_size: int = CACHE_SIZE) -> None:
        self.fn, self.optimize, self.cache_size = fn, optimize, cache_size
        self.__name__ = getattr(fn, "__name__", "f")
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn
        self.trace_count = 0
        self._cache: OrderedDict[Any, Any] = OrderedDict()
        self._leaky: set[Any] = set()

    def __repr__(self) -> str:
        return f"<ember.jit of {self.__name__}: {self.trace_count} trace(s), {len(self._cache)} cached>"

    def __get__(self, obj: Any, owner: Any = None) -> Any:  # @ember.jit on a method: one Jit per instance
        if obj is None:
            return self
        import types

        slot = f"_jit_{self.__name__}"
        bound = obj.__dict__.get(slot) if hasattr(obj, "__dict__") else None
        if bound is None:
            bound = Jit(types.MethodType(self.fn, obj), optimize=self.optimize, cache_size=self.cache_size)
            if hasattr(obj, "__dict__"):
                obj.__dict__[slot] = bound
        return bound

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if is_tracing() or not enabled():
            return self.fn(*args, **kwargs)  # inside another trace: inline
        entry, key, tensors, captures = self._entry(args, kwargs)
        out = entry.run(tensors, captures)
        if getattr(entry, "one_shot", False):
            self._cache.pop(key, None)
        return out

    # -- inspection ---------------------------------------------------------------------------------
    def lower(self, *args: Any, **kwargs: Any) -> Compiled:
        """The compiled form for these arguments (traced now unless cached; runs nothing, except
        to settle tensors the trace left in Python state, see ember.jit's docs)."""
        entry, key, tensors, captures = self._entry(args, kwargs)
        if getattr(entry, "one_shot", False):
            entry.run(tensors, captures, only_rebind=True)
            self._cache.pop(key, None)
        compiled: Compiled = entry
        return compiled

    def graph(self, *args: Any, **kwargs: Any) -> str:
        """A text dump of the optimized graph for these arguments: one line per node with its
        shape, dtype and fusion group, then the groups."""
        return self.lower(*args, **kwargs).format()

    def groups(self, *args: Any, **kwargs: Any) -> list[Any]:
        """The fusion groups (passes.Group) for these arguments, in execution order."""
        return self.lower(*args, **kwargs).groups

    def stats(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Counts for these arguments: see :meth:`Compiled.stats`."""
        return self.lower(*args, **kwargs).stats()

    def kernel_count(self, *args: Any, **kwargs: Any) -> int:
        """Kernels one run needs: fusion groups that are not views (see Compiled.stats)."""
        return int(self.stats(*args, **kwargs)["kernels"])

    # -- the cache ------------------------------------------------------------------------------------
    def _entry(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        leaves, _, desc = flatten((tuple(args), dict(kwargs)))
        tensors = [x for x in leaves if isinstance(x, Tensor)]
        key = (
            desc,
            dispatch.is_grad_enabled(),
            D.default_float,
            tuple(_tensor_key(x) if isinstance(x, Tensor) else static_key(x) for x in leaves),
            tuple(static_key(x) for x in _nearby(self.fn)),
        )
        entry = self._cache.get(key)
        if entry is not None:
            self._cache.move_to_end(key)
            captures = entry.read_captures(tensors)
            if captures is not None:
                return entry, key, tensors, captures
        entry = self._compile(args, kwargs, tensors)
        if entry.traced.leaked and key not in self._leaky:
            # The trace left traced tensors in Python state (typically an optimizer creating
            # its state on the first step): use it once, then trace again with that state.
            self._leaky.add(key)
            entry.one_shot = True
        elif not entry.traced.leaked:
            self._leaky.discard(key)
        self._cache[key] = entry
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        captures = entry.read_captures(tensors)
        if captures is None:
            raise located(
                BackendError,
                f"ember.jit: the guards of a fresh trace of {self.__name__} "
                f"fail at once (a captured tensor changes shape while tracing?)",
            )
        return entry, key, tensors, captures

    def _compile(self, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[Any]) -> Compiled:
        backends = {id(t._backend): t._backend for t in tensors}
        if len(backends) > 1:
            names = sorted({b.name for b in backends.values()})
            raise located(
                BackendError,
                f"ember.jit({self.__name__}): tensor arguments live on backends "
                f"{', '.join(names)}; move them to one with .to(name)",
            )
        backend = next(iter(backends.values())) if backends else get_backend()
        optimizers = [x for x in flatten((tuple(args), dict(kwargs)))[0] if _is_optimizer(x)]
        optimizers += [x for x in _nearby(self.fn) if _is_optimizer(x) and x not in optimizers]
        traced = trace(self.fn, args, kwargs, backend, self.__name__, optimizers)
        self.trace_count += 1
        return Compiled(traced, backend, self.optimize)


@overload
def jit(fn: Callable[..., Any], *, optimize: bool = ..., cache_size: int = ...) -> Jit: ...
@overload
def jit(fn: None = None, *, optimize: bool = ..., cache_size: int = ...) -> Callable[[Callable[..., Any]], Jit]: ...
def jit(
    fn: Callable[..., Any] | None = None, *, optimize: bool = True, cache_size: int = CACHE_SIZE
) -> Jit | Callable[[Callable[..., Any]], Jit]:
    """Compile ``fn``: trace it with abstract tensors, optimize the graph, run it fast.

    Usable as ``ember.jit(fn)`` or as a decorator (``@ember.jit``). See :class:`Jit`.

    >>> import ember
    >>> @ember.jit
    ... def f(x):
    ...     return (x * 2).exp().sum()
    >>> round(f(ember.zeros(3)).item(), 4)
    3.0
    """
    if fn is None:
        return lambda f: Jit(f, optimize=optimize, cache_size=cache_size)
    return Jit(fn, optimize=optimize, cache_size=cache_size)

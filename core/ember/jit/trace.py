"""Tracing: run the user's function once on abstract tensors and record a Graph.

Tracing is an interpreter (dispatch.Interpreter). While a :class:`Tracer` is the current
interpreter of a context, every primitive applied there becomes a node of the graph, its
output's shape and dtype computed by the primitive's abstract rule, running nothing. Traced
tensors live on :class:`TraceBackend`, whose buffers are :class:`~.graph.Var` objects. So
Tensor methods, the VJP table, layers and optimizers run unchanged on traced tensors, and a
shape mismatch raises at trace time, naming the lines that made the operands.

Everything else the function touches is *concrete* (model parameters, optimizer state held in
Python objects). The tracer is asked, as the current interpreter:

* to apply primitives: a concrete tensor among the operands is lifted into a ``capture`` node,
  read by reference at each call, so even an op on concrete tensors alone is recorded, not run
  (and not baked in);
* to ``assign`` (``t.copy_(src)``): on a concrete ``t`` an in-place update at each call;
* to read and write ``.grad``: a gradient left on a tensor becomes an output bound to its
  ``.grad`` at each call;
* to draw random bits (``Generator.bits``): the offset is recorded relative to the
  generator's state when tracing began, so each call draws the numbers an eager call would;
* to build tensors: the traced ones are noted, so that one still referenced from Python state
  when tracing ends (an optimizer creating its state on the first step) is found and made
  concrete (leaks.py).

What the trace left behind (gradients, writes, draws, leaks) becomes outputs and effects in
effects.py; nested arguments and results are flattened by pytree.py.

Other threads and contexts keep their own interpreter (eager): a data loader's thread runs
its ops while a trace is active, and its tensors are not captured.
"""

from __future__ import annotations

import contextlib
import os
import sys
import weakref

from .. import dispatch, primitives
from ..backend import Backend, Capabilities
from ..dtypes import KEEPS, float64, storage_upcast, uint32
from ..errors import BackendError, DTypeError, EmberError, ShapeError, _internal, located, user_frame
from ..tensor import Tensor
from . import leaks, scalars
from .effects import TENSOR, Traced, finish, undo
from .graph import Var
from .pytree import flatten
from .scalars import Scalar


class TraceError(EmberError, RuntimeError):
    """Something a traced function did cannot be compiled (a data-dependent Python value, a
    traced tensor used after its trace ended)."""


class Source:
    """Where a capture node reads its buffer at each call: a tensor's own buffer
    (``kind="tensor"``, ``obj`` the tensor), its ``.grad``'s buffer (``"grad"``), the ``.grad``
    of tensor argument ``key`` (``"arg_grad"``), or a Python number ``obj[key]`` in an
    optimizer's state or param group (``"python"``, read as a 0-d float64 buffer)."""

    __slots__ = ("kind", "obj", "key")

    def __init__(self, kind, obj=None, key=None):
        self.kind, self.obj, self.key = kind, obj, key

    def read(self, args, backend):
        """The buffer now, or None when it is gone (a ``.grad`` reset to None)."""
        kind = self.kind
        if kind == "tensor":
            return self.obj._data
        if kind == "python":
            v = self.obj.get(self.key) if isinstance(self.obj, dict) else self.obj[self.key]
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                return None
            return backend.from_list([float(v)], (), float64)
        t = (args[self.key] if kind == "arg_grad" else self.obj).grad
        return None if t is None else t._data

    def __repr__(self):
        if self.kind == "python":
            return f"python[{self.key!r}]"
        what = f"argument {self.key}" if self.kind == "arg_grad" else f"tensor {tuple(self.obj.shape)}"
        return f"{what}.grad" if self.kind != "tensor" else what


# ----------------------------------------------------------------------------- the backend
class TraceBackend(Backend):
    """The backend of traced tensors. Its buffers are Vars; its ``impls`` only refuse: the
    tracer records primitives itself, so an implementation runs only when a traced tensor is
    used outside its trace (kept past the end of tracing, or handed to another thread)."""

    name = "jit-trace"

    def __init__(self, tracer):
        self.tracer = tracer
        self.device = tracer.real.device
        self.impls = {name: _outside(name) for name in primitives.PRIMITIVES}

    def capabilities(self):
        # traced tensors hold the dtypes of the backend the trace runs on
        dtypes = frozenset(self.tracer.real.capabilities().dtypes)
        return Capabilities(ops=frozenset(self.impls), dtypes=dtypes, devices=(self.device,))

    def shape(self, buf):
        return buf.shape

    def dtype(self, buf):
        return buf.dtype

    # Host data entering a trace is a constant; host data leaving it is only possible for values
    # that do not depend on the inputs (they are evaluated now, at trace time).
    def from_list(self, flat, shape, dtype):
        return self.tracer.const(self.tracer.real.from_list(flat, shape, dtype))

    def from_bytes(self, data, shape, dtype):
        return self.tracer.const(self.tracer.real.from_bytes(data, shape, dtype))

    def from_numpy(self, array):
        return self.tracer.const(self.tracer.real.from_numpy(array))

    def to_list(self, buf):
        return self.tracer.real.to_list(self.tracer.concrete(buf))

    def to_bytes(self, buf):
        return self.tracer.real.to_bytes(self.tracer.concrete(buf))

    def to_numpy(self, buf):
        return self.tracer.real.to_numpy(self.tracer.concrete(buf))

    def assign(self, dst, src):
        raise located(TraceError, "in-place write into a traced buffer outside Tensor.copy_ under ember.jit")


def _outside(name):
    def refuse(*args, **params):
        raise located(
            TraceError,
            f"{name}: a traced tensor was used outside its trace (kept after "
            f"ember.jit finished tracing, or used from another thread); return it from the "
            f"jitted function instead",
        )

    return refuse


# ----------------------------------------------------------------------------- the tracer
class Tracer(dispatch.Interpreter):
    """The interpreter of one trace: the nodes recorded so far and everything met on the way."""

    evaluates = False

    def __init__(self, real, name="f"):
        self.real, self.name = real, name
        self.real_impls = real.impls  # the real table, for values known at trace time
        self.backend = TraceBackend(self)
        self.nodes: list = []
        self.captures: list = []  # slot -> Source
        self.capture_var: dict = {}  # id(buffer) -> the capture Var of that buffer
        self.current: dict = {}  # id(buffer) -> the Var holding its value now (after writes)
        self.keep: list = []  # lifted tensors, kept alive so that ids stay unique
        self.grad_source: dict = {}  # id(concrete .grad tensor) -> Source
        self.grad_before: dict = {}  # id(t) -> (t, .grad before the trace first wrote it)
        self.grad_guards: dict = {}  # id(t) -> (t, was None): .grad read before written
        self.assigns: dict = {}  # capture Var id -> (capture Var, new value Var)
        self.generators: list = []  # [generator, offset when first drawn from]
        self.placeholders: list = []  # traced stand-ins of the tensor arguments
        self.python_numbers: list = []  # (container, key, value before, its Scalar)
        self.python_guards: list = []  # (container, key, value): Python values the trace used
        self.made: list = []  # weak references to the traced tensors made
        self._next = 0

    # -- nodes --------------------------------------------------------------------------------------
    def new_var(self, op, args, params, shape, dtype, where=None, value=None):
        v = Var(self._next, op, args, params, shape, dtype, where or _site(), value)
        self._next += 1
        self.nodes.append(v)
        return v

    # -- the primitives: dispatch's questions ------------------------------------------------------------
    def apply(self, name, args, params):
        """Record ``name`` on the operands (concrete tensors lifted); the result is a traced
        tensor, an autodiff node where eager mode would make one. Operands of a storage dtype
        are cast to their compute dtype first, as eager mode does (dtypes.STORAGE)."""
        upcast = None if name in KEEPS else storage_upcast(args)
        if upcast is not None:
            return self.apply(name, tuple(upcast), params)
        bufs = [self.lift(a) if isinstance(a, Tensor) else a for a in args]
        ctx = None
        if (
            dispatch.is_grad_enabled()
            and name not in dispatch.NO_GRAD
            and any(isinstance(a, Tensor) and a.requires_grad for a in args)
        ):
            ctx = (name, args, params)
        return self.wrap(self.record(name, bufs, params), self.backend, ctx)

    def apply1(self, name, x, params):
        return self.apply(name, (x,), params)

    def apply2(self, name, a, b):
        return self.apply(name, (a, b), {})

    def create(self, name, backend, params):
        if name == "random_bits":
            raise located(TraceError, "random bits must come from an ember.Generator under ember.jit")
        return self.wrap(self.record(name, (), params), self.backend, None)

    def wrap(self, data, backend, ctx):
        """A tensor over ``data``; the traced ones are noted (weakly) for leak detection."""
        t = super().wrap(data, backend, ctx)
        if backend is self.backend:
            self.made.append(weakref.ref(t))
        return t

    def tensor(self, var, requires_grad=False):
        """A traced tensor standing for ``var``."""
        t = self.wrap(var, self.backend, None)
        t.requires_grad = requires_grad
        return t

    def record(self, name, args, params):
        """One node, its aval from the primitive's abstract rule."""
        if any(isinstance(a, Scalar) for a in args) or any(isinstance(p, Scalar) for p in params.values()):
            args, params = self._unscalar(args, params)
        avals = [a.aval if isinstance(a, Var) else a for a in args]
        try:
            shape, dtype = primitives.abstract_eval(name, *avals, **params)
        except (ShapeError, DTypeError) as err:
            made = "; ".join(f"{a.type_str()} {_made(a)}" for a in args if isinstance(a, Var))
            raise located(type(err), f"{name}: {err}. Operands: {made}") from None
        return self.new_var(name, args, params, shape, dtype)

    def _unscalar(self, args, params):
        """Scalars handed straight to a primitive: operands become traced 0-d tensors of the
        other operand's dtype (what the spec says of Python scalars); parameters are fixed
        at their value now, guarded."""
        dtype = next((a.dtype for a in args if isinstance(a, Var)), float64)
        args = [scalars.operand(a, dtype)._data if isinstance(a, Scalar) else a for a in args]
        params = {k: v.concrete() if isinstance(v, Scalar) else v for k, v in params.items()}
        return args, params

    def python_number(self, container, key):
        """Make ``container[key]`` (a Python number) a Scalar read at every call."""
        value = container[key]
        source = Source("python", container, key)
        slot = len(self.captures)
        self.captures.append(source)
        v = self.new_var("capture", (), {"slot": slot, "label": repr(source)}, (), float64)
        s = Scalar(value, self.tensor(v), frozenset((source,)), self)
        self.python_numbers.append((container, key, value, s))
        container[key] = s
        return s

    def const(self, buf):
        return self.new_var("const", (), {}, self.real.shape(buf), self.real.dtype(buf), value=buf)

    # -- ember.fused's ops ---------------------------------------------------------------------------
    def takes_fused(self, name) -> bool:
        """Does fused op ``name`` become one node (:meth:`fused`) in this trace? Yes when the
        backend the graph runs on declares it and it is a forward op with a VJP rule in
        ember.fused or such a rule's backward op. Not the optimizer steps: elementwise work
        that the fusion groups compile, writing each parameter in its own buffer."""
        from .. import fused

        if name not in fused.declared(self.real):
            return False
        return name in fused.VJPS or any(name == bw for bw, _ in fused.VJPS.values())

    def fused_backend(self, name, backend):
        return self.real if self.takes_fused(name) else None

    def fused(self, name, backend, args, params):
        """Fused op ``name`` of ember.fused as one node: ``fused`` with params ``{"name",
        "params"}``, run by ``backend.fused_impls[name]``. The output shapes and dtypes come
        from running the op's decomposition now (its nodes are then dropped). An op returning
        several tensors gets one ``fused_output`` node (params ``{"index"}``) per tensor.
        Returns what the kernel would: a traced tensor, or a tuple of them (None where the
        decomposition gives None)."""
        from ..autodiff import no_grad
        from ..fused import FUSED

        if any(isinstance(p, Scalar) for p in params.values()):
            _, params = self._unscalar((), params)  # a kernel parameter: fixed now, guarded
        mark = len(self.nodes)
        with no_grad():
            ref = FUSED[name](*args, **params)
        # Keep the captures it lifted (their slots are taken); drop everything else.
        self.nodes[mark:] = [v for v in self.nodes[mark:] if v.op == "capture"]
        bufs = [self.lift(a) if isinstance(a, Tensor) else a for a in args]
        if isinstance(ref, Tensor):
            return self.tensor(
                self.new_var("fused", bufs, {"name": name, "params": dict(params)}, ref.shape, ref.dtype)
            )
        node = self.new_var("fused", bufs, {"name": name, "params": dict(params)}, (), None)
        return tuple(
            None if t is None else self.tensor(self.new_var("fused_output", (node,), {"index": i}, t.shape, t.dtype))
            for i, t in enumerate(ref)
        )

    # -- concrete tensors met while tracing -----------------------------------------------------------
    def lift(self, t) -> Var:
        """The Var standing for tensor ``t`` in the graph (a capture node for concrete ones)."""
        if t._backend is self.backend:
            return t._data
        if t._backend is not self.real:
            raise located(
                BackendError,
                f"ember.jit traces on backend {self.real.name!r} but met a tensor "
                f"on backend {t._backend.name!r}; move it with .to({self.real.name!r})",
            )
        key = id(t._data)
        v = self.current.get(key)
        if v is None:
            source = self.grad_source.get(id(t)) or Source("tensor", t)
            slot = len(self.captures)
            self.captures.append(source)
            self.keep.append(t)
            v = self.new_var(
                "capture",
                (),
                {"slot": slot, "label": repr(source), "requires_grad": t.requires_grad},
                self.real.shape(t._data),
                self.real.dtype(t._data),
            )
            self.capture_var[key] = self.current[key] = v
        return v

    def assign(self, dst, src):
        """Tensor.copy_: ``dst`` now holds ``src`` (same shape and dtype)."""
        value = self.lift(src)
        if dst._backend is self.backend:  # a traced tensor: just rebind it (SSA)
            dst._data = value
            return dst
        self.lift(dst)
        key = id(dst._data)
        cap = self.capture_var[key]
        if value is not cap:
            self.current[key] = value
            self.assigns[cap.id] = (cap, value)
        return dst

    def random_bits(self, generator, shape, backend=None):
        """Generator.bits: bits at an offset relative to the generator's state at each call."""
        for slot, (g, start) in enumerate(self.generators):  # noqa: B007 - used after break
            if g is generator:
                break
        else:
            slot, start = len(self.generators), generator.offset
            self.generators.append([generator, start])
        var = self.new_var(
            "random_bits",
            (),
            {"shape": tuple(shape), "generator": slot, "offset": generator.offset - start},
            shape,
            uint32,
        )
        return self.tensor(var)

    def concrete(self, var):
        """The value of ``var`` if it depends on no input, capture or random draw (it is then
        computed now, at trace time); else a TraceError naming the line that asked."""
        if var.value is not None:
            return var.value
        stack, seen = [var], set()
        while stack:
            v = stack.pop()
            if v.op in ("input", "capture", "random_bits"):
                also = "" if v is var else f", which depends on {v.type_str()} {_made(v)}"
                raise located(
                    TraceError,
                    f"ember.jit cannot give a Python value (item(), tolist(), numpy(), "
                    f"bool(), an `if` on a tensor, print) for the traced tensor {var.type_str()} "
                    f"{_made(var)}{also}: its value is known only when the graph runs. Keep it in "
                    f"tensor ops (ember.where instead of if), move it out of the jitted function, "
                    f"or turn jit off with EMBER_JIT=0",
                )
            if v.id not in seen and v.value is None:
                seen.add(v.id)
                stack.extend(v.inputs)
        args = [self.concrete(a) if isinstance(a, Var) else a for a in var.args]
        if var.op == "fused":
            var.value = self.real.fused_impls[var.params["name"]](*args, **var.params["params"])
        elif var.op == "fused_output":
            var.value = args[0][var.params["index"]]
        else:
            var.value = self.real_impls[var.op](*args, **var.params)
        return var.value

    # -- .grad writes and reads -------------------------------------------------------------------------
    def _local(self, t) -> bool:
        """A traced tensor made during the trace: its .grad is the trace's own business."""
        return t._backend is self.backend and not any(p is t for p in self.placeholders)

    def read_grad(self, t):
        value = t._grad
        if not self._local(t):
            self._grad_read(t, value)
        return value

    def write_grad(self, t, value):
        if id(t) not in self.grad_before and not self._local(t):
            self.grad_before[id(t)] = (t, t._grad)
        t._grad = value

    def _grad_read(self, t, value):
        if id(t) not in self.grad_before and id(t) not in self.grad_guards:
            self.grad_guards[id(t)] = (t, value is None)
        if value is not None and value._backend is not self.backend and id(value) not in self.grad_source:
            self.grad_source[id(value)] = self._grad_source_of(t)

    def _grad_source_of(self, t):
        for i, p in enumerate(self.placeholders):
            if p is t:
                return Source("arg_grad", key=i)
        return Source("grad", t)

    # -- the tracing context ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def active(self):
        """Make this tracer the current interpreter of this context for the trace's duration."""
        if is_tracing():
            raise TraceError("ember.jit cannot trace while another trace is active")
        with dispatch.interpreting(self):
            yield self

    def leaks(self, keep=()) -> list:
        """Traced tensors made by this trace and still held by Python state, other than
        ``keep`` (see leaks.py)."""
        return leaks.leaked(self.made, self.backend, keep)


_INTERNAL_CODE: dict = {}


def _site():
    """``(filename, lineno, None)`` of the innermost frame outside ember: errors.user_frame
    without its per-frame path work (tracing asks this of every node); the source line is
    read only if a message needs it (graph.Var.origin)."""
    f = sys._getframe(2)
    while f is not None:
        code = f.f_code
        internal = _INTERNAL_CODE.get(code)
        if internal is None:
            internal = _INTERNAL_CODE[code] = _internal(os.path.abspath(code.co_filename))
        if not internal:
            return code.co_filename, f.f_lineno, None
        f = f.f_back
    return None


def _made(v: Var) -> str:
    if v.op == "input":
        return f"(tensor argument {v.params['index']}, passed at {v.origin()})"
    if v.op == "capture":
        return f"(captured {v.params.get('label', 'tensor')}, first used at {v.origin()})"
    return f"(made at {v.origin()})"


def _with_operands(err, tracer):
    """A shape/dtype error raised by a front-end check (not by the trace's own abstract rules)
    gets the lines that made the traced tensors the failing function was looking at."""
    if "Operands:" in str(err):
        return err
    tb, frames = err.__traceback__, []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        seen, made = set(), []
        for value in frame.f_locals.values():
            if isinstance(value, Tensor) and value._backend is tracer.backend and value._data.id not in seen:
                seen.add(value._data.id)
                made.append(f"{value._data.type_str()} {_made(value._data)}")
        if made:
            try:
                return type(err)(f"{err}. Operands: {'; '.join(made)}")
            except TypeError:
                return err
    return err


def is_traced(t) -> bool:
    """True if ``t`` is a tensor being traced by ember.jit (its values are not known yet).

    >>> import ember
    >>> is_traced(ember.ones(2))
    False
    """
    return isinstance(t, Tensor) and isinstance(t._backend, TraceBackend)


def is_tracing() -> bool:
    """True while ember.jit traces a function."""
    return isinstance(dispatch.interpreter(), Tracer)


# ----------------------------------------------------------------------------- one trace
def trace(fn, args, kwargs, real, name="f", optimizers=()) -> Traced:
    """Run ``fn`` on traced stand-ins of its tensor arguments; return the recorded :class:`Traced`.

    The learning rates and the numbers in the state of ``optimizers`` become Scalars (see
    scalars.py): read at every call rather than fixed now."""
    tracer = Tracer(real, name)
    leaves, rebuild_args, _ = flatten((tuple(args), dict(kwargs)))
    where = user_frame()
    with tracer.active():
        stand_ins = list(leaves)
        k = 0
        for i, t in enumerate(leaves):
            if isinstance(t, Tensor):
                var = tracer.new_var("input", (), {"index": k}, t.shape, t.dtype, where=where)
                p = tracer.tensor(var, t.requires_grad)
                g = t._grad
                if g is not None:  # the stand-in starts with the argument's gradient
                    tracer.grad_source[id(g)] = Source("arg_grad", key=k)
                p._grad = g
                tracer.placeholders.append(p)
                stand_ins[i] = p
                k += 1
        a, kw = rebuild_args(stand_ins)
        del stand_ins
        for opt in optimizers:
            _symbolize(tracer, opt)
        try:
            out = fn(*a, **kw)
        except (ShapeError, DTypeError) as err:
            undo(tracer)
            raise _with_operands(err, tracer) from None
        except BaseException:
            undo(tracer)
            raise
        del a, kw
        out_leaves, rebuild_out, _ = flatten(out)
        del out
        outputs, bindings, statics = [], [], []
        leaf = None
        for leaf in out_leaves:
            if isinstance(leaf, Tensor):
                statics.append(TENSOR)
                outputs.append(tracer.lift(leaf))
                bindings.append(("result", None))
            else:
                statics.append(leaf)
        del out_leaves, leaf
    return finish(tracer, outputs, bindings, statics, rebuild_out)


def _symbolize(tracer, opt):
    """Learning rates and numbers in optimizer state become Scalars for the trace."""
    for group in opt.param_groups:
        lr = group.get("lr")
        if isinstance(lr, (int, float)) and not isinstance(lr, bool):
            tracer.python_number(group, "lr")
    for state in opt.state.values():
        for key, value in list(state.items()):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                tracer.python_number(state, key)

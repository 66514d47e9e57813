"""Running a compiled graph: a flat list of steps over an environment of buffers.

A :class:`Program` lowers the fusion groups, in schedule order, to steps ``(fn, out, args,
free)``: call ``fn`` on the buffers in slots ``args``, put the result in slot ``out``, then
drop the buffers in slots ``free`` (their last use). Backends are called through their plain
``impls`` — no Tensor objects, no autodiff records — which is where most of the speed over
eager execution comes from; a ``fused`` node (one of ember.fused's ops, see
trace.Tracer.fused) calls ``backend.fused_impls[name]``. A fused group whose backend's
``compile(group)`` returns a callable runs as one step; otherwise its nodes run one by one.
A compiled group that computes a parameter's new value writes it straight into the
parameter's buffer when the callable takes destinations (``accepts_out``) and
passes.group_donations says it is safe.

Subclasses change how single nodes are lowered and give compiled groups more destinations:
the numpy backend's (backends/numpy/jit_runner.py) computes into planned, reused buffers with
``out=``.
"""

from __future__ import annotations

import operator

from ..errors import BackendError, EmberError
from .buffers import group_donations
from .graph import VIEWS, Var

#: Nodes that make no backend call (views share memory; fused_output picks a result).
NO_CALL = VIEWS | {"fused_output"}


class Program:
    """The steps for one graph on one backend. ``run`` maps input/capture buffers to outputs."""

    def __init__(self, graph, groups, backend):
        self.graph, self.groups, self.backend = graph, groups, backend
        self.impls = backend.impls
        self.order = [v for g in groups for v in g.nodes]
        self.rng: list = []  # per generator: [seed, offset at the start of the call]
        self.donations = group_donations(groups, graph) if graph.donate else {}
        self.kernels = {id(g): backend.compile(g) if g.fused and len(g.nodes) > 1 else None for g in groups}
        self.build()

    def build(self):
        """(Re)lower the graph: slots, steps, and the frees after last uses."""
        self.slot: dict = {}
        self.template: list = []
        self.inputs: list = []  # (input index, slot)
        self.captures: list = []  # (capture slot, env slot, Var)
        self.steps: list = []
        self.origin: list = []  # step -> the Var it computes (for run-time errors)
        self.compiled = 0  # groups run by a backend kernel
        self.calls = 0  # backend calls per run (views excluded)
        self._leaves()
        self._lower()
        self.out_slots = [self.slot[o.id] for o in self.graph.outputs]
        self._frees()

    # -- building ---------------------------------------------------------------------------------
    def new_slot(self, value=None) -> int:
        self.template.append(value)
        return len(self.template) - 1

    def arg_slot(self, a) -> int:
        return self.slot[a.id] if isinstance(a, Var) else self.new_slot(a)

    def _leaves(self):
        for v in self.graph.nodes:
            if v.op == "input":
                self.slot[v.id] = s = self.new_slot()
                self.inputs.append((v.params["index"], s))
            elif v.op == "capture":
                self.slot[v.id] = s = self.new_slot()
                self.captures.append((v.params["slot"], s, v))
            elif v.op == "const":
                self.slot[v.id] = self.new_slot(v.value)

    def _lower(self):
        for g in self.groups:
            kernel = self.kernels[id(g)]
            if kernel is None:
                for v in g.nodes:
                    self.emit(self.lower(v), v, [self.arg_slot(a) for a in v.args])
                    self.calls += v.op not in NO_CALL
            else:
                self.emit_kernel(g, kernel, self.destinations(g, kernel))

    def destinations(self, g, kernel) -> list:
        """Per output of compiled group ``g``: where its kernel should write it — a capture
        Var (a parameter's buffer, passes.group_donations), a buffer, or None (anywhere)."""
        if not getattr(kernel, "accepts_out", False):
            return [None] * len(g.outputs)
        return [self.donations.get(o.id) for o in g.outputs]

    def emit_kernel(self, g, kernel, into):
        """One step running compiled group ``g``, then one per output picking it from the
        tuple; ``into`` as :meth:`destinations` gives it."""
        self.compiled += 1
        self.calls += 1
        pack = self.new_slot()
        args = [self.slot[a.id] for a in g.inputs]
        if any(d is not None for d in into):
            fixed = [None if isinstance(d, Var) else d for d in into]
            slots = [i for i, d in enumerate(into) if isinstance(d, Var)]
            args += [self.slot[into[i].id] for i in slots]
            kernel = _writing_into(kernel, len(g.inputs), fixed, slots)
        self.emit(kernel, g.nodes[-1], args, out=pack)
        for i, o in enumerate(g.outputs):
            self.emit(operator.itemgetter(i), o, [pack])

    def emit(self, fn, var, args, out=None):
        if out is None:
            out = self.slot[var.id] = self.new_slot()
        self.steps.append((fn, out, tuple(args), ()))
        self.origin.append(var)

    def lower(self, v):
        """A function of the argument buffers computing node ``v`` (the backend's impl)."""
        if v.op == "random_bits":
            impl, rng, k, rel, shape = (
                self.impls["random_bits"],
                self.rng,
                v.params["generator"],
                v.params["offset"],
                v.params["shape"],
            )
            while len(rng) <= k:
                rng.append([0, 0])
            return lambda: impl(shape=shape, seed=rng[k][0], offset=rng[k][1] + rel)
        if v.op == "fused":
            impl, params = self.backend.fused_impls[v.params["name"]], v.params["params"]
        elif v.op == "fused_output":
            return operator.itemgetter(v.params["index"])
        else:
            impl, params = self.impls[v.op], v.params
        if not params:
            return impl
        return lambda *bufs: impl(*bufs, **params)

    def _frees(self):
        """Drop each intermediate buffer from the environment after its last use, so memory
        returns early (a view keeps its base alive by itself, so no alias analysis is needed)."""
        outs = set(self.out_slots)
        produced = {step[1] for step in self.steps}
        last = {}
        for i, step in enumerate(self.steps):
            for a in step[2]:
                last[a] = i
        frees: dict = {}
        for s, i in last.items():
            if s in produced and s not in outs:
                frees.setdefault(i, []).append(s)
        self.steps = [(fn, out, args, tuple(frees.get(i, ()))) for i, (fn, out, args, _) in enumerate(self.steps)]

    # -- running ------------------------------------------------------------------------------------
    def start(self, inputs, captures, rng) -> list:
        """A fresh environment for one call."""
        for cell, (seed, offset) in zip(self.rng, rng):
            cell[0], cell[1] = seed, offset
        env = self.template.copy()
        for index, s in self.inputs:
            env[s] = inputs[index]
        for cslot, s, _ in self.captures:
            env[s] = captures[cslot]
        return env

    def run(self, inputs, captures, rng):
        """Output buffers, given the input buffers, capture buffers (by capture slot) and the
        generators' ``(seed, offset)`` at the start of the call."""
        env = self.start(inputs, captures, rng)
        i = 0
        try:
            for i, (fn, out, args, free) in enumerate(self.steps):  # noqa: B007 - i names the failed step
                env[out] = fn(*[env[a] for a in args])
                for f in free:
                    env[f] = None
        except Exception as exc:  # noqa: BLE001
            self.failed(i, exc)
        return [env[s] for s in self.out_slots]

    def failed(self, i, exc):
        """Re-raise a run-time failure of step ``i`` naming the op and the line that made it."""
        v = self.origin[i]
        if isinstance(exc, EmberError):
            raise exc
        raise BackendError(
            f"ember.jit: {v.op} -> {v.type_str()} failed on backend {self.backend.name!r} "
            f"at run time: {type(exc).__name__}: {exc} (the op was made at {v.origin()})"
        ) from exc


def _writing_into(kernel, n_in, fixed, slots):
    """``kernel`` given destinations: called on ``n_in`` input buffers followed by the
    destination buffers of outputs ``slots`` (positions among its outputs), it gets
    ``out=fixed`` with those filled in (``fixed``: per output, a buffer or None)."""

    def run(*buffers):
        out = list(fixed)
        for i, b in zip(slots, buffers[n_in:]):
            out[i] = b
        return kernel(*buffers[:n_in], out=out)

    return run

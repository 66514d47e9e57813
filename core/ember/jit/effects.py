"""What a trace leaves behind, made into graph outputs and effects replayed at each call.

A traced function does more than return values: it writes gradients into ``.grad``
(``loss.backward()``), overwrites tensors (``p.copy_(...)``, an optimizer's update), counts
in Python state (Adam's ``step += 1``), draws random numbers and may leave new traced tensors
in Python objects (leaks.py). When the trace ends, :func:`finish` turns each of these into an
output of the graph bound back at each call, or an effect replayed as is, and restores the
state the trace touched; a trace that fails is undone by :func:`undo`.
"""

from __future__ import annotations

from typing import Any

from .graph import Graph
from .scalars import Scalar

TENSOR = object()  # marks where a tensor goes among the Python values of a result


class Traced:
    """What one trace produced: the graph and how its outputs bind back at each call.

    ``bindings[i]`` says what output ``i`` of the graph is: ``("result", None)`` (a leaf of the
    function's return value), ``("grad", target)`` (a gradient to store in ``.grad``),
    ``("arg_data", k)`` (new contents of tensor argument k), ``("assign", slot)`` (new contents
    of a captured tensor) or ``("rebind", tensor)`` (a traced tensor left in Python state,
    made concrete). A target is ``("arg", k)`` or ``("tensor", t)``.
    """

    # set by trace_function after construction: the trace's Python-side effects and guards,
    # and the graph's capture nodes by slot
    python_effects: list[Any]
    python_guards: list[Any]
    capture_vars: list[Any]

    def __init__(self, graph, bindings, rebuild, statics, grad_effects, grad_guards, generators, leaked, n_primitives):
        self.graph, self.bindings, self.rebuild, self.statics = graph, bindings, rebuild, statics
        self.grad_effects, self.grad_guards = grad_effects, grad_guards
        self.generators, self.leaked, self.n_primitives = generators, leaked, n_primitives


def undo(tracer):
    """A trace that failed leaves no traced values behind in the state it touched."""
    for container, key, before, _ in tracer.python_numbers:
        container[key] = before
    for t, before in tracer.grad_before.values():
        t._grad = before
    for g, start in tracer.generators:
        g.offset = start


def finish(tracer, outputs, bindings, statics, rebuild_out) -> Traced:
    """Turn what the trace left behind (gradients, writes, draws, leaks) into outputs and effects."""
    placeholders = {id(p): k for k, p in enumerate(tracer.placeholders)}

    def target(t):
        return ("arg", placeholders[id(t)]) if id(t) in placeholders else ("tensor", t)

    grad_effects = []
    for t, before in tracer.grad_before.values():
        final = t._grad
        t._grad = before
        if t._backend is tracer.backend and id(t) not in placeholders:
            continue  # a tensor local to the trace
        if final is not None and final._backend is tracer.backend:  # computed by the trace
            outputs.append(final._data)
            bindings.append(("grad", target(t)))
        else:
            grad_effects.append((target(t), final))
    final = t = None  # hold no traced tensor while looking for leaks
    for p in tracer.placeholders:
        p._grad = None
    grad_guards = [(t, none) for t, none in tracer.grad_guards.values() if t._backend is not tracer.backend]
    for k, p in enumerate(tracer.placeholders):
        if p._data.op != "input" or p._data.params["index"] != k:
            outputs.append(p._data)
            bindings.append(("arg_data", k))
    donate = {}
    for cap, value in tracer.assigns.values():
        donate[len(outputs)] = cap
        outputs.append(value)
        bindings.append(("assign", cap.params["slot"]))
    python_effects = []
    for container, key, before, s in tracer.python_numbers:
        now = container[key]
        container[key] = before
        if isinstance(now, Scalar) and now is not s:  # e.g. step += 1: written at each call
            outputs.append(now.t._data)
            bindings.append(("python", (container, key, type(now.value))))
        elif not isinstance(now, Scalar) and now is not before:
            python_effects.append((container, key, now))
    tracer.python_numbers = now = s = None
    generators = []
    for g, start in tracer.generators:
        generators.append((g, g.offset - start))
        g.offset = start
    leaked = tracer.leaks(keep=tracer.placeholders)
    for t in leaked:
        outputs.append(t._data)
        bindings.append(("rebind", t))
    n_primitives = sum(v.op not in ("input", "capture", "const") for v in tracer.nodes)
    graph = Graph(tracer.nodes, outputs, tracer.captures, donate, tracer.name)
    traced = Traced(
        graph, bindings, rebuild_out, statics, grad_effects, grad_guards, generators, bool(leaked), n_primitives
    )
    traced.python_effects, traced.python_guards = python_effects, tracer.python_guards
    traced.capture_vars = [v for v in tracer.nodes if v.op == "capture"]  # by slot
    return traced

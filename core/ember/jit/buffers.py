"""Buffer plans: when each value of a graph dies, and which buffers its successors reuse.

The runners ask these questions of the graph after fusion (passes.py): :func:`liveness` (the
last step that reads each value), :func:`roots` (the buffer a view reads), :func:`plan_buffers`
(which nodes write into a buffer freed earlier, and which outputs are computed in place of the
tensor they overwrite: donation) and :func:`group_donations` (the same donation for whole fused
groups, whose kernels write their outputs element by element, for backends that compile
groups).
"""

from __future__ import annotations

from typing import Any

from .graph import ELEMENTWISE, VIEWS, Graph, Var


def liveness(order: list, graph: Graph, aliases=VIEWS, steps=None) -> dict:
    """var id -> position in ``order`` of its last use (len(order) for graph outputs).

    A view shares its argument's memory, so a use of the view counts as a use of the value it
    views (its *root*): a buffer dies only when nothing that looks into it is needed.
    ``steps`` (var id -> step) counts positions in steps instead, for nodes that run together
    (a compiled group: see plan_buffers)."""
    step = steps or {v.id: i for i, v in enumerate(order)}
    last: dict = {}
    end = max(step.values(), default=-1) + 1
    root = roots(order, aliases)
    for v in order:
        pos = step[v.id]
        for a in v.inputs:
            r = root.get(a.id, a.id)
            last[r] = max(last.get(r, -1), pos)
            last[a.id] = max(last.get(a.id, -1), pos)
    for o in graph.outputs:
        last[root.get(o.id, o.id)] = end
        last[o.id] = end
    return last


def roots(order: list, aliases=VIEWS) -> dict:
    """var id -> id of the value whose memory it views (itself when it is not a view)."""
    root: dict = {}
    for v in order:
        root[v.id] = root.get(v.args[0].id, v.args[0].id) if v.op in aliases and isinstance(v.args[0], Var) else v.id
    return root


def steps_of(order: list, together=()) -> dict:
    """var id -> step: one step per node of ``order``, except that the nodes of each group in
    ``together`` (Groups run as one kernel) share one.

    >>> from ember.jit.graph import Var
    >>> a, b, c = (Var(i, "exp", (), {}, (2,), "float32") for i in range(3))
    >>> from ember.jit.passes import Group
    >>> steps_of([a, b, c], together=[Group("elementwise", [a, b], (2,))])
    {0: 0, 1: 0, 2: 1}
    """
    kernel = {v.id: i for i, g in enumerate(together) for v in g.nodes}
    steps, n, prev = {}, -1, None
    for v in order:
        k = kernel.get(v.id)
        if k is None or k != prev:
            n += 1
        steps[v.id], prev = n, k
    return steps


def plan_buffers(
    order: list, graph: Graph, writes_into, aliases=VIEWS, in_place=ELEMENTWISE, key=None, donatable=None, together=()
):
    """A buffer plan: which nodes write into a reused buffer, and which into a donated one.

    ``writes_into(var)`` says whether the backend can compute ``var`` into a given buffer;
    ``key(var)`` which values may share a buffer (default: same shape and dtype; a backend
    adds the memory layout); ``donatable(var, capture)`` whether ``var`` may be computed in
    the captured tensor's buffer (default: yes, when the rules below allow it).
    ``in_place`` names the ops whose kernels read an element of each input before they write
    that element of the output, so they may write over an input (a function of the node where
    a name is not enough: the NumPy runner's rewritten kernels share one op name).
    ``together`` lists groups whose nodes run as one kernel (compiled fusion groups): the
    kernel reads all its inputs while it writes all its outputs, so none of its outputs may
    take the buffer of a value that dies inside it.
    Returns ``(assignment, buffers)``: ``assignment[var.id]`` is ``("pool", k)`` (buffer k of
    ``buffers``, a list of ``(shape, dtype)`` reused across the graph and across calls) or
    ``("donate", capture_var)`` (the captured tensor that the node's value overwrites at the end
    of the call: computing it there saves the copy). Values that leave the call (outputs and
    anything they view) never live in pooled buffers.
    """
    position = steps_of(order, together)
    last = liveness(order, graph, aliases, position)
    root = roots(order, aliases)
    escaping = {root.get(o.id, o.id) for o in graph.outputs}
    out_count: dict = {}
    for o in graph.outputs:
        out_count[o.id] = out_count.get(o.id, 0) + 1
    assignment: dict[Any, Any] = {}
    buffers: list[Any] = []
    free: dict[Any, Any] = {}
    donated = set()
    elementwise = in_place if callable(in_place) else (lambda v: v.op in in_place)
    for i, cap in graph.donate.items():
        v = graph.outputs[i]
        if v.id not in position or out_count[v.id] != 1 or not writes_into(v) or v.id in assignment:
            continue
        if donatable is not None and not donatable(v, cap):
            continue
        pos = position[v.id]
        if cap.id in escaping or cap.id in donated:
            continue
        reads = last.get(cap.id, -1)
        direct = [a for a in v.inputs if a is cap]
        if reads < pos or (
            reads == pos
            and elementwise(v)
            and direct
            and cap.shape == v.shape
            and not any(root.get(a.id) == cap.id and a is not cap for a in v.inputs)
        ):
            assignment[v.id] = ("donate", cap)
            donated.add(cap.id)
    dying: dict = {}
    for r, p in last.items():
        dying.setdefault(p, []).append(r)
    for i, v in enumerate(order):
        if v.id not in assignment and v.id not in escaping and writes_into(v):
            kind = (v.shape, v.dtype) if key is None else key(v)
            pool = free.get(kind)
            if pool:
                k = pool.pop()
            else:
                k = len(buffers)
                buffers.append(kind)
            assignment[v.id] = ("pool", k)
        pos = position[v.id]
        if i + 1 < len(order) and position[order[i + 1].id] == pos:
            continue  # the step goes on: its inputs are still being read
        for r in dying.get(pos, ()):  # release after assigning: no op reads its own output
            a = assignment.get(r)
            if a is not None and a[0] == "pool" and root.get(r, r) == r:
                free.setdefault(buffers[a[1]], []).append(a[1])
    return assignment, buffers


def group_donations(groups: list, graph: Graph, aliases=VIEWS) -> dict:
    """Outputs of fused elementwise groups that a kernel may write straight into the captured
    tensor they overwrite at the end of the call: ``{var id: capture Var}``.

    An elementwise kernel reads every input at an element before it writes its outputs
    there, so writing a parameter's new value over the old one is safe when the group reads
    the old value only at the element it writes (the capture itself, of the output's shape:
    not broadcast, not through a view) and no later group reads it. The SGD update
    ``p - lr * g`` is the typical case: its kernel then writes into ``p`` and the copy
    into the parameter disappears.

    >>> from ember.jit.graph import Var, Graph
    >>> from ember.jit.passes import fusion_groups
    >>> p = Var(0, "capture", (), {"slot": 0}, (8,), "float32")
    >>> g = Var(1, "input", (), {"index": 0}, (8,), "float32")
    >>> new = Var(3, "sub", (p, Var(2, "mul", (g, 0.1), {}, (8,), "float32")), {}, (8,), "float32")
    >>> graph = Graph([p, g, new.args[1], new], [new], donate={0: p})
    >>> group_donations(fusion_groups(graph), graph)
    {3: %0}
    """
    order = [v for g in groups for v in g.nodes]
    last = liveness(order, graph, aliases)
    root = roots(order, aliases)
    escaping = {root.get(o.id, o.id) for o in graph.outputs}
    count: dict = {}
    for o in graph.outputs:
        count[o.id] = count.get(o.id, 0) + 1
    group_of, end, pos = {}, {}, -1
    for g in groups:
        pos += len(g.nodes)
        for v in g.nodes:
            group_of[v.id], end[v.id] = g, pos
    found, taken = {}, set()
    for i, cap in graph.donate.items():
        v = graph.outputs[i]
        g = group_of.get(v.id)
        if g is None or g.kind != "elementwise" or count[v.id] != 1 or cap.id in escaping or cap.id in taken:
            continue
        if v.shape != cap.shape or v.dtype != cap.dtype or tuple(g.shape) != v.shape:
            continue
        if last.get(cap.id, -1) > end[v.id]:
            continue  # a later group reads the old value
        if any(a is not cap and root.get(a.id, a.id) == cap.id for a in g.inputs):
            continue  # the group reads it through a view: other elements
        found[v.id] = cap
        taken.add(cap.id)
    return found

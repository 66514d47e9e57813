"""Graph passes: each a small function from Graph to Graph (or to a plan), tested alone.

In the order :func:`optimize` runs them:

* :func:`simplify`       — algebraic identities (x*1, x+0, x-0, x/1, --x, reshape to the same
  shape, identity permute, permute of permute, ...);
* :func:`fold_constants` — nodes whose inputs are all constants are computed now;
* :func:`cse`            — common-subexpression elimination: one node per (op, args, params);
* :func:`transpose_matmuls` — ``(a @ b).mT`` as ``b.mT @ a.mT``, in the layout it is read in;
* :func:`dce`            — dead-code elimination: drop what no output needs;
* :func:`elide_copies`   — drop copies (``clone()``) that nobody can tell from their source;
* :func:`fusion_groups`  — elementwise chains + at most one reduce + an elementwise tail;
* :func:`liveness` and :func:`plan_buffers` — when each value dies, which buffers can be
  reused, and which outputs can be computed in place of the tensor they overwrite (donation);
* :func:`group_donations` — the same donation for whole fused groups, whose kernels write
  their outputs element by element (for backends that compile groups).
"""
from __future__ import annotations

from ..primitives import GROUPS
from .graph import LEAVES, Graph, Var

ELEMENTWISE = frozenset(GROUPS["unary"] + GROUPS["binary"] + GROUPS["compare"] + GROUPS["logical"]
                        + GROUPS["select"] + GROUPS["cast"])
REDUCE = frozenset(("sum", "max", "min"))
#: Movement ops that a strided backend does by changing metadata only (no kernel, no copy).
VIEWS = frozenset(("reshape", "permute", "expand", "slice", "flip"))
#: Ops whose result is not a function of their arguments alone.
STATEFUL = frozenset(("random_bits",))
#: A backend's fused op (ember.fused) recorded as one node, and the pick of one of its results
#: when it returns several (see trace.Tracer.fused): opaque to every pass.
FUSED = frozenset(("fused", "fused_output"))
#: Constant folding stops at results larger than this (they would live in memory for good).
FOLD_LIMIT = 1 << 14


# ----------------------------------------------------------------------------- rewriting
def _rewrite(graph: Graph, visit) -> Graph:
    """Rebuild ``graph`` calling ``visit(var)`` on each node (arguments already rewritten).

    ``visit`` returns the Var that stands for the node from now on: the node itself, an
    earlier Var (the node disappears), or a new Var (it takes the node's place)."""
    sub: dict = {}
    nodes, emitted = [], set()
    known = {v.id for v in graph.nodes}

    def emit_new(r):             # nodes a rewrite created (their ids are new): before their users
        for a in r.inputs:
            if a.id not in known and id(a) not in emitted:
                emit_new(a)
                emitted.add(id(a))
                nodes.append(a)

    for v in graph.nodes:
        if any(isinstance(a, Var) and a.id in sub for a in v.args):
            v2 = Var(v.id, v.op, [sub.get(a.id, a) if isinstance(a, Var) else a for a in v.args],
                     v.params, v.shape, v.dtype, v.where, v.value)
        else:
            v2 = v
        r = visit(v2)
        if r is not v:
            sub[v.id] = r
        if id(r) not in emitted and (r is v2 or r.id == v.id):
            emit_new(r)
            emitted.add(id(r))
            nodes.append(r)
    outputs = [sub.get(o.id, o) for o in graph.outputs]
    return graph.replace(nodes, outputs, {i: sub.get(c.id, c) for i, c in graph.donate.items()})


def dce(graph: Graph) -> Graph:
    """Dead-code elimination: keep only the nodes some output depends on.

    >>> from ember.jit.graph import Var, Graph
    >>> x = Var(0, "input", (), {"index": 0}, (2,), "float32")
    >>> y, z = Var(1, "exp", (x,), {}, (2,), "float32"), Var(2, "neg", (x,), {}, (2,), "float32")
    >>> [v.op for v in dce(Graph([x, y, z], [z])).nodes]
    ['input', 'neg']
    """
    live = set()
    stack = list(graph.outputs)
    while stack:
        v = stack.pop()
        if v.id not in live:
            live.add(v.id)
            stack.extend(v.inputs)
    return graph.replace([v for v in graph.nodes if v.id in live or v.op == "input"], graph.outputs)


def _frozen(x):
    if isinstance(x, (list, tuple)):
        return tuple(_frozen(y) for y in x)
    if isinstance(x, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in x.items()))
    return (type(x).__name__, x) if isinstance(x, (int, float, bool)) else x


def cse(graph: Graph) -> Graph:
    """Common-subexpression elimination: a node equal to an earlier one (same op, same
    arguments, same parameters) is replaced by it.

    >>> from ember.jit.graph import Var, Graph
    >>> x = Var(0, "input", (), {"index": 0}, (2,), "float32")
    >>> a, b = Var(1, "exp", (x,), {}, (2,), "float32"), Var(2, "exp", (x,), {}, (2,), "float32")
    >>> s = Var(3, "add", (a, b), {}, (2,), "float32")
    >>> cse(Graph([x, a, b, s], [s])).outputs[0].args
    (%1, %1)
    """
    seen: dict = {}

    def visit(v):
        if v.op in LEAVES:
            return v
        key = (v.op, tuple(("%", a.id) if isinstance(a, Var) else _frozen(a) for a in v.args),
               _frozen(v.params))
        try:
            return seen.setdefault(key, v)
        except TypeError:           # an unhashable parameter: leave the node alone
            return v
    return _rewrite(graph, visit)


def fold_constants(graph: Graph, impls) -> Graph:
    """Compute now, with ``impls`` (a backend's table), every node whose inputs are all
    constants — including creation ops such as ``full`` and ``arange`` — up to FOLD_LIMIT
    elements (views of constants have no limit: they cost no memory)."""
    def visit(v):
        if v.op in LEAVES or v.op in STATEFUL or v.op in FUSED \
                or any(isinstance(a, Var) and a.op != "const" for a in v.args):
            return v
        if v.size > FOLD_LIMIT and v.op not in VIEWS:
            return v
        value = impls[v.op](*[a.value if isinstance(a, Var) else a for a in v.args], **v.params)
        return Var(v.id, "const", (), {"repr": f"{v.op}"}, v.shape, v.dtype, v.where, value)
    return _rewrite(graph, visit)


# ----------------------------------------------------------------------------- simplification
def _scalar_value(a, impls_to_list=None):
    """The number ``a`` stands for, if it is a Python scalar or a one-element constant."""
    if isinstance(a, bool):
        return None
    if isinstance(a, (int, float)):
        return a
    if isinstance(a, Var) and a.op == "const" and a.size == 1 and impls_to_list is not None:
        return impls_to_list(a.value)[0]
    return None


def simplify(graph: Graph, to_list=None) -> Graph:
    """Algebraic simplification of obvious identities. ``to_list`` (a backend's) lets it read
    one-element constants too. A rewrite applies only if it keeps the node's shape and dtype.

    >>> from ember.jit.graph import Var, Graph
    >>> x = Var(0, "input", (), {"index": 0}, (2,), "float32")
    >>> y = Var(1, "mul", (x, 1), {}, (2,), "float32")
    >>> z = Var(2, "neg", (Var(3, "neg", (y,), {}, (2,), "float32"),), {}, (2,), "float32")
    >>> g = Graph([x, y, z.args[0], z], [z])
    >>> simplify(g).outputs
    [%0]
    """
    def same(v, x):
        return isinstance(x, Var) and x.shape == v.shape and x.dtype == v.dtype

    def value(a):
        return _scalar_value(a, to_list)

    def visit(v):
        op, args = v.op, v.args
        if op in ("add", "sub", "mul", "div", "pow"):
            a, b = args
            if op in ("add", "sub") and value(b) == 0 and same(v, a):
                return a
            if op == "add" and value(a) == 0 and same(v, b):
                return b
            if op in ("mul", "div", "pow") and value(b) == 1 and same(v, a):
                return a
            if op == "mul" and value(a) == 1 and same(v, b):
                return b
        elif op == "neg" and args[0].op == "neg":
            return args[0].args[0]
        elif op in ("reshape", "expand") and same(v, args[0]):
            return args[0]
        elif op == "reshape" and args[0].op == "reshape":
            return Var(v.id, "reshape", args[0].args, v.params, v.shape, v.dtype, v.where)
        elif op == "permute":
            axes = tuple(v.params["axes"])
            if args[0].op == "permute":
                inner = args[0].params["axes"]
                axes = tuple(inner[a] for a in axes)
                if axes != tuple(range(len(axes))):
                    return Var(v.id, "permute", args[0].args, {"axes": axes}, v.shape, v.dtype, v.where)
                return args[0].args[0]
            if axes == tuple(range(len(axes))):
                return args[0]
        elif op == "slice" and same(v, args[0]) and all(s == 1 for s in v.params["steps"]):
            return args[0]
        elif op == "pad" and not any(lo or hi for lo, hi in v.params["widths"]):
            return args[0]
        elif op in ("sum", "max", "min") and not v.params["axes"] and same(v, args[0]):
            return args[0]
        elif op == "flip" and not v.params["axes"]:
            return args[0]
        elif op == "where" and args[1] is args[2] and same(v, args[1]):
            return args[1]
        return v
    return _rewrite(graph, visit)


def elide_copies(graph: Graph) -> Graph:
    """Drop copies nobody can tell apart from their source.

    A copy (``cast`` to the same dtype: what ``clone()`` records) matters only when two
    holders could see each other's in-place writes. Inside a graph values are immutable; the
    copy is needed only if its source's memory is also visible outside the call — an input, a
    capture or a constant, or another output sharing that memory. Otherwise (a gradient cloned
    before it is stored in ``.grad``) the copy is dropped.

    >>> from ember.jit.graph import Var, Graph
    >>> x = Var(0, "input", (), {"index": 0}, (2,), "float32")
    >>> e = Var(1, "exp", (x,), {}, (2,), "float32")
    >>> c = Var(2, "cast", (e,), {"dtype": "float32"}, (2,), "float32")
    >>> elide_copies(Graph([x, e, c], [c])).outputs
    [%1]
    """
    root = roots(graph.nodes)
    byid = {v.id: v for v in graph.nodes}
    claimed = {}
    for o in graph.outputs:
        claimed[root.get(o.id, o.id)] = claimed.get(root.get(o.id, o.id), 0) + 1

    def visit(v):
        if v.op != "cast" or v.params["dtype"] != v.args[0].dtype:
            return v
        r = root.get(v.args[0].id, v.args[0].id)
        if byid[r].op in LEAVES or claimed.get(r, 0):
            return v
        if claimed.get(v.id, 0) != 1 and v.id in claimed:
            return v
        claimed[r] = claimed.pop(v.id, 0)
        return v.args[0]
    return _rewrite(graph, visit)


def transpose_matmuls(graph: Graph) -> Graph:
    """Compute a transposed matrix product in the layout it is read in: ``(a @ b).mT`` becomes
    ``b.mT @ a.mT`` when nothing else reads ``a @ b``.

    The weight gradient of ``x @ w.T`` is such a product; computed this way it comes out
    C-ordered like the weight, and the optimizer's elementwise updates no longer mix memory
    layouts (several times faster on NumPy). The same products, summed in the same order by
    BLAS in practice; equal to float32 rounding in any case.

    >>> from ember.jit.graph import Var, Graph
    >>> a, b = Var(0, "input", (), {"index": 0}, (3, 4), "f"), Var(1, "input", (), {"index": 1}, (4, 5), "f")
    >>> m = Var(2, "matmul", (a, b), {}, (3, 5), "f")
    >>> t = Var(3, "permute", (m,), {"axes": (1, 0)}, (5, 3), "f")
    >>> out = transpose_matmuls(Graph([a, b, m, t], [t])).outputs[0]
    >>> out.op, [x.op for x in out.args], out.args[0].args[0] is b
    ('matmul', ['permute', 'permute'], True)
    """
    users = graph.consumers()
    outputs = {o.id for o in graph.outputs}
    fresh = [max((v.id for v in graph.nodes), default=0) + 1]

    def mT(x):
        n = len(x.shape)
        axes = tuple(range(n - 2)) + (n - 1, n - 2)
        v = Var(fresh[0], "permute", (x,), {"axes": axes}, tuple(x.shape[a] for a in axes), x.dtype, x.where)
        fresh[0] += 1
        return v

    def visit(v):
        if v.op != "permute" or v.args[0].op != "matmul":
            return v
        m, n = v.args[0], len(v.shape)
        if v.params["axes"] != tuple(range(n - 2)) + (n - 1, n - 2) or len(users.get(m.id, ())) != 1 \
                or m.id in outputs:
            return v
        a, b = m.args
        return Var(v.id, "matmul", (mT(b), mT(a)), {}, v.shape, v.dtype, v.where)
    return _rewrite(graph, visit)


def optimize(graph: Graph, impls=None, to_list=None) -> Graph:
    """The standard pipeline: simplify, fold constants, CSE, transposed products, simplify
    again, elide copies, DCE."""
    g = simplify(graph, to_list)
    if impls is not None:
        g = fold_constants(g, impls)
    g = cse(g)
    g = transpose_matmuls(g)
    g = simplify(g, to_list)
    g = dce(g)
    return dce(elide_copies(g))


# ----------------------------------------------------------------------------- fusion
class Group:
    """A unit of execution: what a backend's ``compile(group)`` receives.

    ``kind`` is ``"elementwise"`` (elementwise ops over one shape), ``"reduce"`` (elementwise
    ops over ``shape``, one reduction ``reduce``, then elementwise ops over its result shape),
    ``"view"`` (one metadata-only movement op) or ``"opaque"`` (any other single op: matmul,
    convolution, creation, gather, a ``fused`` node with the ``fused_output`` nodes picking
    its results...). ``nodes`` are in execution order; ``inputs`` are the Vars
    read from outside the group (other groups' outputs, inputs, captures, constants); ``outputs``
    are the members needed outside it — the only values a fused kernel must write to memory.
    """

    __slots__ = ("kind", "nodes", "inputs", "outputs", "shape", "reduce", "_stage")

    def __init__(self, kind, nodes, shape, reduce=None):
        self.kind, self.nodes, self.shape, self.reduce = kind, list(nodes), tuple(shape), reduce
        self.inputs, self.outputs, self._stage = [], [], {}

    @property
    def fused(self) -> bool:
        return self.kind in ("elementwise", "reduce")

    def __repr__(self):
        ops = " ".join(v.op for v in self.nodes)
        return (f"{self.kind}{tuple(self.shape)}: [{ops}] in ({', '.join(map(repr, self.inputs))}) "
                f"out ({', '.join(map(repr, self.outputs))})")


def fusion_groups(graph: Graph) -> list:
    """Partition the computing nodes of ``graph`` into :class:`Group` s, in an order that
    runs every group after the groups it reads from.

    An elementwise node joins the group of one of its arguments when it has the group's shape
    (before the group's reduce) or the reduce's result shape (after it, in the tail); a reduce
    joins when the group has none yet and it reduces the group's shape. A join never makes a
    cycle between groups. Values with consumers outside their group are materialized.

    >>> import ember
    >>> from ember.jit import jit
    >>> a, b, c = ember.ones(4, 3), ember.ones(4, 3), ember.ones(4, 3)
    >>> [g.kind for g in jit(lambda a, b, c: ((a * b + c).relu()).sum()).groups(a, b, c)]
    ['reduce']
    """
    groups: list = []
    group_of: dict = {}           # var id -> group index
    deps: list = []               # group index -> set of group indices it depends on
    for v in graph.nodes:
        if v.op in LEAVES:
            continue
        producers = [group_of[a.id] for a in v.inputs if a.id in group_of]
        chosen = None
        if v.op == "fused_output":              # with the fused op it picks from: one opaque group
            chosen = group_of[v.args[0].id]
        elif v.op in ELEMENTWISE or v.op in REDUCE:
            for gi in dict.fromkeys(producers):
                if _fits(groups[gi], v) and not any(
                        gi in deps[group_of[a.id]] for a in v.inputs
                        if a.id in group_of and group_of[a.id] != gi):
                    chosen = gi
                    break
        if chosen is None:
            kind = "elementwise" if v.op in ELEMENTWISE else "reduce" if v.op in REDUCE else \
                "view" if v.op in VIEWS else "opaque"
            shape = v.args[0].shape if v.op in REDUCE else v.shape
            g = Group(kind, [], shape)
            groups.append(g)
            deps.append(set())
            chosen = len(groups) - 1
        g = groups[chosen]
        _add(g, v)
        group_of[v.id] = chosen
        for a in v.inputs:
            h = group_of.get(a.id)
            if h is not None and h != chosen:
                deps[chosen].add(h)
                deps[chosen] |= deps[h]
    users = graph.consumers()
    needed = {o.id for o in graph.outputs}
    for gi, g in enumerate(groups):
        members = {v.id for v in g.nodes}
        seen = set()
        for v in g.nodes:
            for a in v.inputs:
                if a.id not in members and a.id not in seen:
                    seen.add(a.id)
                    g.inputs.append(a)
        g.outputs = [v for v in g.nodes if v.id in needed
                     or any(group_of.get(u.id) != gi for u in users.get(v.id, ()))]
    return _schedule(groups, group_of, graph)


def _fits(g: Group, v: Var) -> bool:
    """Can node ``v`` join fused group ``g`` (see fusion_groups)?"""
    if not g.fused:
        return False
    post = any(g._stage.get(a.id) == "post" for a in v.inputs)
    if v.op in REDUCE:
        x = v.args[0]
        return g.reduce is None and g._stage.get(x.id) == "pre" and x.shape == g.shape
    if g.reduce is None:
        return v.shape == g.shape
    if post:
        return v.shape == g.reduce.shape
    return v.shape == g.shape


def _add(g: Group, v: Var) -> None:
    g.nodes.append(v)
    if v.op in REDUCE:
        g.reduce, g.kind, g._stage[v.id] = v, "reduce", "post"
        if not g.nodes[:-1]:
            g.shape = v.args[0].shape
    elif any(g._stage.get(a.id) == "post" for a in v.inputs):
        g._stage[v.id] = "post"
    else:
        g._stage[v.id] = "pre"


def _schedule(groups, group_of, graph) -> list:
    """Groups in dependency order, ties broken by program order (Kahn's algorithm)."""
    import heapq
    first = {}
    for pos, v in enumerate(graph.nodes):
        if v.id in group_of:
            first.setdefault(group_of[v.id], pos)
    preds = [set() for _ in groups]
    succs = [set() for _ in groups]
    for gi, g in enumerate(groups):
        for a in g.inputs:
            h = group_of.get(a.id)
            if h is not None and h != gi:
                preds[gi].add(h)
                succs[h].add(gi)
    ready = [(first[gi], gi) for gi in range(len(groups)) if not preds[gi]]
    heapq.heapify(ready)
    order = []
    while ready:
        _, gi = heapq.heappop(ready)
        order.append(groups[gi])
        for s in succs[gi]:
            preds[s].discard(gi)
            if not preds[s]:
                heapq.heappush(ready, (first[s], s))
    assert len(order) == len(groups), "fusion made a cycle between groups"
    return order


# ----------------------------------------------------------------------------- buffers
def liveness(order: list, graph: Graph, aliases=VIEWS, steps=None) -> dict:
    """var id -> position in ``order`` of its last use (len(order) for graph outputs).

    A view shares its argument's memory, so a use of the view counts as a use of the value it
    views (its *root*): a buffer dies only when nothing that looks into it is needed.
    ``steps`` (var id -> step) counts positions in steps instead, for nodes that run together
    (a compiled group: see plan_buffers)."""
    step = steps or {v.id: i for i, v in enumerate(order)}
    last = {}
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
    root = {}
    for v in order:
        root[v.id] = root.get(v.args[0].id, v.args[0].id) if v.op in aliases and isinstance(v.args[0], Var) else v.id
    return root


def steps_of(order: list, together=()) -> dict:
    """var id -> step: one step per node of ``order``, except that the nodes of each group in
    ``together`` (Groups run as one kernel) share one.

    >>> from ember.jit.graph import Var
    >>> a, b, c = (Var(i, "exp", (), {}, (2,), "float32") for i in range(3))
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


def plan_buffers(order: list, graph: Graph, writes_into, aliases=VIEWS, in_place=ELEMENTWISE,
                 key=None, donatable=None, together=()):
    """A buffer plan: which nodes write into a reused buffer, and which into a donated one.

    ``writes_into(var)`` says whether the backend can compute ``var`` into a given buffer;
    ``key(var)`` which values may share a buffer (default: same shape and dtype; a backend
    adds the memory layout); ``donatable(var, capture)`` whether ``var`` may be computed in
    the captured tensor's buffer (default: yes, when the rules below allow it).
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
    assignment, buffers, free = {}, [], {}
    donated = set()
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
        if reads < pos or (reads == pos and v.op in in_place and direct and cap.shape == v.shape
                           and not any(root.get(a.id) == cap.id and a is not cap for a in v.inputs)):
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
            continue                         # the step goes on: its inputs are still being read
        for r in dying.get(pos, ()):         # release after assigning: no op reads its own output
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
            continue                     # a later group reads the old value
        if any(a is not cap and root.get(a.id, a.id) == cap.id for a in g.inputs):
            continue                     # the group reads it through a view: other elements
        found[v.id] = cap
        taken.add(cap.id)
    return found

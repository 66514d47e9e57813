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

then the runners plan memory with buffers.py (``liveness``, ``plan_buffers``,
``group_donations``; importable from here too).
"""

from __future__ import annotations

from typing import Any

from ..dtypes import STORAGE, TEXT
from .buffers import group_donations, liveness, plan_buffers, roots, steps_of  # noqa: F401 - importable from here too
from .graph import ELEMENTWISE, FUSED, LEAVES, REDUCE, STATEFUL, VIEWS, Graph, Var  # noqa: F401

_STORED = frozenset(d.name for d in (*STORAGE, *TEXT))  # no arithmetic a kernel could fuse
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

    def emit_new(r):  # nodes a rewrite created (their ids are new): before their users
        for a in r.inputs:
            if a.id not in known and id(a) not in emitted:
                emit_new(a)
                emitted.add(id(a))
                nodes.append(a)

    for v in graph.nodes:
        if any(isinstance(a, Var) and a.id in sub for a in v.args):
            v2 = Var(
                v.id,
                v.op,
                [sub.get(a.id, a) if isinstance(a, Var) else a for a in v.args],
                v.params,
                v.shape,
                v.dtype,
                v.where,
                v.value,
            )
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
        key = (v.op, tuple(("%", a.id) if isinstance(a, Var) else _frozen(a) for a in v.args), _frozen(v.params))
        try:
            return seen.setdefault(key, v)
        except TypeError:  # an unhashable parameter: leave the node alone
            return v

    return _rewrite(graph, visit)


def fold_constants(graph: Graph, impls) -> Graph:
    """Compute now, with ``impls`` (a backend's table), every node whose inputs are all
    constants — including creation ops such as ``full`` and ``arange`` — up to FOLD_LIMIT
    elements (views of constants have no limit: they cost no memory)."""

    def visit(v):
        if (
            v.op in LEAVES
            or v.op in STATEFUL
            or v.op in FUSED
            or any(isinstance(a, Var) and a.op != "const" for a in v.args)
        ):
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
        elif (
            op == "slice"
            and same(v, args[0])
            and all(s == 1 for s in v.params["steps"])
            or op == "pad"
            and not any(lo or hi for lo, hi in v.params["widths"])
            or op in ("sum", "max", "min")
            and not v.params["axes"]
            and same(v, args[0])
            or op == "flip"
            and not v.params["axes"]
        ):
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
    claimed: dict = {}
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
        if v.params["axes"] != tuple(range(n - 2)) + (n - 1, n - 2) or len(users.get(m.id, ())) != 1 or m.id in outputs:
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
        return (
            f"{self.kind}{tuple(self.shape)}: [{ops}] in ({', '.join(map(repr, self.inputs))}) "
            f"out ({', '.join(map(repr, self.outputs))})"
        )


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
    group_of: dict = {}  # var id -> group index
    deps: list = []  # group index -> set of group indices it depends on
    for v in graph.nodes:
        if v.op in LEAVES:
            continue
        producers = [group_of[a.id] for a in v.inputs if a.id in group_of]
        chosen = None
        # a storage dtype (bfloat16) or text has no arithmetic in a kernel: its nodes run alone
        fusible = (v.op in ELEMENTWISE or v.op in REDUCE) and not any(str(a.dtype) in _STORED for a in (v, *v.inputs))
        if v.op == "fused_output":  # with the fused op it picks from: one opaque group
            chosen = group_of[v.args[0].id]
        elif fusible:
            for gi in dict.fromkeys(producers):
                if _fits(groups[gi], v) and not any(
                    gi in deps[group_of[a.id]] for a in v.inputs if a.id in group_of and group_of[a.id] != gi
                ):
                    chosen = gi
                    break
        if chosen is None:
            kind = (
                ("elementwise" if v.op in ELEMENTWISE else "reduce")
                if fusible
                else "view"
                if v.op in VIEWS
                else "opaque"
            )
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
        g.outputs = [v for v in g.nodes if v.id in needed or any(group_of.get(u.id) != gi for u in users.get(v.id, ()))]
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

    first: dict = {}
    for pos, v in enumerate(graph.nodes):
        if v.id in group_of:
            first.setdefault(group_of[v.id], pos)
    preds: list[set[Any]] = [set() for _ in groups]
    succs: list[set[Any]] = [set() for _ in groups]
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

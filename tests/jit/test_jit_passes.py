"""Each graph pass on small graphs built by hand (and a few traced ones)."""

import numpy as np
import pytest

import ember
from ember.backends.numpy.backend import IMPLS
from ember.jit import passes
from ember.jit.graph import Graph, Var

F32 = ember.float32


class G:
    """A tiny graph builder: ``g.x = g.input((2, 3))``, ``g.op("exp", x)``..."""

    def __init__(self):
        self.nodes = []

    def _var(self, op, args, params, shape, dtype=F32, value=None):
        v = Var(len(self.nodes), op, args, params, shape, dtype, value=value)
        self.nodes.append(v)
        return v

    def input(self, shape, dtype=F32):
        return self._var("input", (), {"index": sum(v.op == "input" for v in self.nodes)}, shape, dtype)

    def capture(self, shape, dtype=F32):
        return self._var("capture", (), {"slot": sum(v.op == "capture" for v in self.nodes)}, shape, dtype)

    def const(self, value):
        value = np.asarray(value, dtype=np.float32)
        return self._var("const", (), {}, value.shape, F32, value)

    def op(self, name, *args, **params):
        avals = [a.aval if isinstance(a, Var) else a for a in args]
        shape, dtype = ember.primitives.abstract_eval(name, *avals, **params)
        return self._var(name, args, params, shape, dtype)

    def graph(self, *outputs, donate=None):
        return Graph(self.nodes, outputs, donate=donate)


def ops(graph):
    return [v.op for v in graph.nodes if v.op not in ("input", "capture", "const")]


# ----------------------------------------------------------------------------- dce, cse
def test_dce_drops_what_no_output_needs_and_keeps_inputs():
    g = G()
    x, y = g.input((3,)), g.input((3,))
    used = g.op("exp", x)
    g.op("log", y)  # dead
    g.op("neg", g.op("sin", x))  # dead chain
    out = passes.dce(g.graph(used))
    assert ops(out) == ["exp"]
    assert [v.op for v in out.nodes].count("input") == 2  # input indices stay stable


def test_cse_merges_equal_nodes_but_not_different_params_or_scalars():
    g = G()
    x = g.input((2, 3))
    a, b = g.op("sum", x, axes=(0,)), g.op("sum", x, axes=(0,))
    c = g.op("sum", x, axes=(1,))
    d, e = g.op("mul", x, 2), g.op("mul", x, 2.0)  # 2 and 2.0 differ in type: kept apart
    s = g.op("add", a, b)
    out = passes.cse(g.graph(s, c, d, e))
    assert out.outputs[0].args[0] is out.outputs[0].args[1]
    assert ops(passes.dce(out)).count("sum") == 2
    assert out.outputs[2] is not out.outputs[3]


def test_cse_does_not_merge_inputs_or_captures():
    g = G()
    x, y = g.input((2,)), g.input((2,))
    c1, c2 = g.capture((2,)), g.capture((2,))
    out = passes.cse(g.graph(g.op("add", x, y), g.op("add", c1, c2)))
    assert out.outputs[0].args == (x, y) and out.outputs[1].args == (c1, c2)


# ----------------------------------------------------------------------------- constants
def test_fold_constants_computes_all_constant_subgraphs_with_the_backend():
    g = G()
    x = g.input((3,))
    k = g.op("full", shape=(3,), value=2.0, dtype=F32)
    k2 = g.op("exp", g.op("mul", k, g.const([1.0, 2.0, 3.0])))
    out = passes.dce(passes.fold_constants(g.graph(g.op("add", x, k2)), IMPLS))
    assert ops(out) == ["add"]
    folded = out.outputs[0].args[1]
    assert folded.op == "const"
    np.testing.assert_allclose(folded.value, np.exp([2.0, 4.0, 6.0]).astype(np.float32), rtol=1e-6)


def test_fold_constants_leaves_random_bits_captures_and_big_results():
    g = G()
    r = g.op("random_bits", shape=(4,), seed=0, offset=0)
    c = g.op("exp", g.capture((2,)))
    big = g.op("full", shape=(passes.FOLD_LIMIT + 1,), value=0.0, dtype=F32)
    view = g.op("expand", g.const(1.0), shape=(passes.FOLD_LIMIT + 1,))  # a view: no memory cost
    out = passes.fold_constants(g.graph(r, c, big, view), IMPLS)
    assert [o.op for o in out.outputs] == ["random_bits", "exp", "full", "const"]


# ----------------------------------------------------------------------------- simplify
@pytest.mark.parametrize(
    "build",
    [
        lambda g, x: g.op("mul", x, 1),
        lambda g, x: g.op("mul", 1.0, x),
        lambda g, x: g.op("add", x, 0),
        lambda g, x: g.op("add", 0.0, x),
        lambda g, x: g.op("sub", x, 0),
        lambda g, x: g.op("div", x, 1.0),
        lambda g, x: g.op("pow", x, 1),
        lambda g, x: g.op("neg", g.op("neg", x)),
        lambda g, x: g.op("reshape", x, shape=(2, 3)),
        lambda g, x: g.op("expand", x, shape=(2, 3)),
        lambda g, x: g.op("permute", x, axes=(0, 1)),
        lambda g, x: g.op("permute", g.op("permute", x, axes=(1, 0)), axes=(1, 0)),
        lambda g, x: g.op("slice", x, starts=(0, 0), stops=(2, 3), steps=(1, 1)),
        lambda g, x: g.op("pad", x, widths=((0, 0), (0, 0))),
        lambda g, x: g.op("sum", x, axes=()),
        lambda g, x: g.op("flip", x, axes=()),
        lambda g, x: g.op("mul", x, g.const(1.0)),
    ],
    ids=[
        "x*1",
        "1*x",
        "x+0",
        "0+x",
        "x-0",
        "x/1",
        "x**1",
        "--x",
        "reshape-same",
        "expand-same",
        "permute-id",
        "permute-permute",
        "slice-all",
        "pad-0",
        "sum-no-axes",
        "flip-none",
        "x*const1",
    ],
)
def test_simplify_removes_identities(build):
    g = G()
    x = g.input((2, 3))
    out = passes.simplify(g.graph(build(g, x)), to_list=lambda b: np.asarray(b).reshape(-1).tolist())
    assert out.outputs[0] is x


@pytest.mark.parametrize(
    "build",
    [
        lambda g, x: g.op("mul", x, 2),
        lambda g, x: g.op("add", x, 1),
        lambda g, x: g.op("mul", x, g.op("full", shape=(4, 2, 3), value=1.0, dtype=F32)),  # broadcasts x
        lambda g, x: g.op("sub", 0, x),
        lambda g, x: g.op("div", 1.0, x),
        lambda g, x: g.op("cast", x, dtype=F32),  # a copy (clone) is not an identity
    ],
    ids=["x*2", "x+1", "broadcast", "0-x", "1/x", "clone"],
)
def test_simplify_keeps_what_is_not_an_identity(build):
    g = G()
    x = g.input((2, 3))
    out = passes.simplify(g.graph(build(g, x)))
    assert out.outputs[0] is not x


def test_simplify_composes_reshapes_and_permutes():
    g = G()
    x = g.input((2, 3, 4))
    r = g.op("reshape", g.op("reshape", x, shape=(6, 4)), shape=(4, 6))
    p = g.op("permute", g.op("permute", x, axes=(1, 2, 0)), axes=(1, 2, 0))
    out = passes.dce(passes.simplify(g.graph(r, p)))
    r2, p2 = out.outputs
    assert r2.op == "reshape" and r2.args[0] is x and r2.params["shape"] == (4, 6)
    assert p2.op == "permute" and p2.args[0] is x and p2.shape == (4, 2, 3)
    ref = np.arange(24).reshape(2, 3, 4)
    np.testing.assert_array_equal(ref.transpose(1, 2, 0).transpose(1, 2, 0), ref.transpose(p2.params["axes"]))


def test_elide_copies_keeps_copies_of_visible_memory():
    g = G()
    x, c = g.input((3,)), g.capture((3,))
    e = g.op("exp", x)
    clone_e = g.op("cast", e, dtype=F32)  # invisible: dropped
    clone_x = g.op("cast", x, dtype=F32)  # copy of an input: kept
    clone_c = g.op("cast", g.op("reshape", c, shape=(3, 1)), dtype=F32)  # copy of a capture's view
    out = passes.elide_copies(g.graph(clone_e, clone_x, clone_c))
    assert out.outputs[0] is e
    assert [o.op for o in out.outputs[1:]] == ["cast", "cast"]


def test_elide_copies_keeps_one_copy_when_two_outputs_share_a_source():
    g = G()
    e = g.op("exp", g.input((3,)))
    a, b = g.op("cast", e, dtype=F32), g.op("cast", e, dtype=F32)
    out = passes.elide_copies(g.graph(a, b))
    assert sum(o is e for o in out.outputs) == 1


# ----------------------------------------------------------------------------- fusion
def test_relu_of_a_times_b_plus_c_summed_is_one_fused_group():
    a, b, c = (ember.randn(4, 5) for _ in range(3))
    f = ember.jit(lambda a, b, c: (a * b + c).relu().sum())
    groups = f.groups(a, b, c)
    assert len(groups) == 1
    (g,) = groups
    assert g.kind == "reduce" and g.reduce.op == "sum" and g.fused
    assert [v.op for v in g.nodes] == ["mul", "add", "gt", "where", "sum"]
    assert [v.op for v in g.inputs] == ["input"] * 3 and g.outputs == [g.reduce]
    assert f.kernel_count(a, b, c) == 1 and f.stats(a, b, c)["fused"] == 1


def test_fusion_allows_one_reduce_then_an_elementwise_tail_only():
    g = G()
    x = g.input((4, 8))
    m = g.op("max", x, axes=(1,), keepdims=True)
    tail = g.op("neg", m)  # tail on the reduced shape: same group
    shifted = g.op("sub", x, tail)  # back on the full shape after the reduce: new group
    e = g.op("exp", shifted)
    s = g.op("sum", e, axes=(1,), keepdims=True)  # a second reduce: in the new group
    out = g.graph(g.op("log", s))
    groups = passes.fusion_groups(out)
    assert [[v.op for v in grp.nodes] for grp in groups] == [["max", "neg"], ["sub", "exp", "sum", "log"]]
    assert groups[0].outputs == [tail]


def test_values_used_outside_their_group_are_materialized():
    g = G()
    x, w = g.input((4, 8)), g.input((8, 2))
    h = g.op("exp", x)
    y = g.op("add", h, 1.0)
    mm = g.op("matmul", h, w)  # h is needed by an opaque op too
    groups = passes.fusion_groups(g.graph(y, mm))
    ew = next(grp for grp in groups if grp.fused)
    assert [v.op for v in ew.nodes] == ["exp", "add"]
    assert set(ew.outputs) == {h, y}


def test_fusion_never_creates_a_cycle_between_groups():
    # e = exp(x) could take the add, but the add also reads matmul(e, ...), which reads e's group.
    g = G()
    x, w = g.input((4, 4)), g.input((4, 4))
    e = g.op("exp", x)
    mm = g.op("matmul", e, w)
    out = g.graph(g.op("add", e, mm))
    groups = passes.fusion_groups(out)
    pos = {v.id: i for i, grp in enumerate(groups) for v in grp.nodes}
    for i, grp in enumerate(groups):
        for a in grp.inputs:
            assert a.id not in pos or pos[a.id] < i  # every input is computed by an earlier group
    assert len(groups) == 3


def test_broadcasting_elementwise_op_starts_a_new_group():
    g = G()
    x = g.input((4, 1))
    e = g.op("exp", x)
    big = g.op("mul", e, g.input((4, 8)))
    groups = passes.fusion_groups(g.graph(big))
    assert [[v.op for v in grp.nodes] for grp in groups] == [["exp"], ["mul"]]


# ----------------------------------------------------------------------------- buffers
def _always(v):
    return v.op in passes.ELEMENTWISE


def test_plan_buffers_reuses_dead_buffers_of_the_same_shape():
    g = G()
    x = g.input((16,))
    chain = x
    for _ in range(6):
        chain = g.op("exp", chain)
    graph = g.graph(g.op("sum", chain, axes=(0,)))
    order = [v for v in graph.nodes if v.op != "input"]
    assignment, buffers = passes.plan_buffers(order, graph, _always)
    assert len(buffers) == 2  # ping-pong between two buffers for six values
    ks = [assignment[v.id][1] for v in order if v.op == "exp"]
    assert all(a != b for a, b in zip(ks, ks[1:]))  # never read and write the same buffer


def test_plan_buffers_keeps_outputs_and_their_views_out_of_the_pool():
    g = G()
    x = g.input((4, 4))
    e = g.op("exp", x)
    t = g.op("permute", e, axes=(1, 0))  # the output views e's memory
    n = g.op("neg", x)
    graph = g.graph(t, g.op("sum", n, axes=(0, 1)))
    order = [v for v in graph.nodes if v.op != "input"]
    assignment, _ = passes.plan_buffers(order, graph, _always)
    assert e.id not in assignment and n.id in assignment


def test_donation_writes_the_new_value_into_the_captured_buffer_when_nothing_reads_it_later():
    g = G()
    p, grad = g.capture((8,)), g.input((8,))
    new = g.op("sub", p, g.op("mul", grad, 0.1))
    graph = g.graph(new, donate={0: p})
    order = [v for v in graph.nodes if v.op not in ("input", "capture")]
    assignment, _ = passes.plan_buffers(order, graph, _always)
    assert assignment[new.id] == ("donate", p)


def test_no_donation_when_the_old_value_is_read_after_the_update():
    g = G()
    p, grad = g.capture((8,)), g.input((8,))
    new = g.op("sub", p, grad)
    late = g.op("mul", p, 2.0)  # reads the old p after new is computed
    graph = g.graph(new, late, donate={0: p})
    order = [v for v in graph.nodes if v.op not in ("input", "capture")]
    assignment, _ = passes.plan_buffers(order, graph, _always)
    assert assignment.get(new.id, ("pool",))[0] != "donate"


def test_no_donation_through_a_view_of_the_captured_buffer():
    g = G()
    p = g.capture((4, 4))
    new = g.op("add", p, g.op("permute", p, axes=(1, 0)))  # reads p transposed: not in place
    graph = g.graph(new, donate={0: p})
    order = [v for v in graph.nodes if v.op != "capture"]
    assignment, _ = passes.plan_buffers(order, graph, _always)
    assert assignment.get(new.id, ("pool",))[0] != "donate"


def test_a_compiled_groups_outputs_never_take_the_buffer_of_a_value_dying_inside_it():
    g = G()
    x = g.input((16,))
    a = g.op("exp", x)  # dies at its last reader, inside the kernel
    b = g.op("neg", a)  # the kernel: [neg mul], writing only c
    c = g.op("mul", b, 2.0)
    graph = g.graph(g.op("sum", c, axes=(0,)))
    order = [v for v in graph.nodes if v.op != "input"]
    kernel = passes.Group("elementwise", [b, c], (16,))

    def writes(v):
        return v is not b and v.op in passes.ELEMENTWISE

    apart, _ = passes.plan_buffers(order, graph, writes)
    assert apart[c.id] == apart[a.id]  # op by op, c may reuse a's buffer
    together, _ = passes.plan_buffers(order, graph, writes, together=[kernel])
    assert together[c.id] != together[a.id]  # one kernel reads a while it writes c


# ----------------------------------------------------------------------------- group donation
def _donations(graph):
    return passes.group_donations(passes.fusion_groups(graph), graph)


def test_group_donation_writes_an_update_into_the_parameter_it_overwrites():
    g = G()
    p, grad = g.capture((4, 8)), g.input((4, 8))
    new = g.op("sub", p, g.op("mul", grad, 0.1))
    assert _donations(g.graph(new, donate={0: p})) == {new.id: p}


def test_group_donation_allows_reads_of_the_old_value_inside_the_group():
    g = G()
    p, grad = g.capture((8,)), g.input((8,))
    new = g.op("sub", p, grad)
    both = g.op("mul", new, p)  # same group, same element: read before written
    graph = g.graph(new, both, donate={0: p})
    assert len(passes.fusion_groups(graph)) == 1
    assert _donations(graph) == {new.id: p}


def test_no_group_donation_when_a_later_group_reads_the_old_value():
    g = G()
    p, grad, w = g.capture((4, 4)), g.input((4, 4)), g.input((4, 4))
    new = g.op("sub", p, grad)
    late = g.op("matmul", p, w)  # another group, after the update
    assert _donations(g.graph(new, late, donate={0: p})) == {}


def test_no_group_donation_when_the_group_reads_a_view_of_the_parameter():
    g = G()
    p = g.capture((4, 4))
    new = g.op("add", p, g.op("permute", p, axes=(1, 0)))  # element (i, j) reads (j, i)
    assert _donations(g.graph(new, donate={0: p})) == {}


def test_no_group_donation_across_shapes_or_outside_elementwise_groups():
    g = G()
    p, x = g.capture((8,)), g.input((4, 8))
    wide = g.op("add", p, x)  # p broadcast over 4 rows
    assert _donations(g.graph(wide, donate={0: p})) == {}
    g = G()
    p, x = g.capture((8,)), g.input((4, 8))
    new = g.op("sub", p, g.op("mul", g.op("sum", x, axes=(0,)), 0.1))  # the tail of a reduce group
    graph = g.graph(new, donate={0: p})
    assert [grp.kind for grp in passes.fusion_groups(graph)] == ["reduce"]
    assert _donations(graph) == {}
    g = G()
    p, grad = g.capture((8,)), g.input((8,))
    new = g.op("sub", p, grad)
    assert _donations(g.graph(new, new, donate={0: p})) == {}  # also returned: must stay apart


# ----------------------------------------------------------------------------- fused ops
def _fused(g, name, args, shape, **params):
    return g._var("fused", args, {"name": name, "params": params}, shape)


def test_a_fused_node_is_one_opaque_group_with_the_results_it_gives():
    g = G()
    x = g.input((4, 3))
    sm = _fused(g, "softmax", (x,), (4, 3), dim=-1)
    bn = g._var("fused", (x, None, None), {"name": "batch_norm", "params": {"eps": 1e-5}}, (), None)
    out, mean = (g._var("fused_output", (bn,), {"index": i}, s) for i, s in enumerate([(4, 3), (3,)]))
    graph = g.graph(g.op("add", sm, out), mean)
    groups = passes.fusion_groups(graph)
    assert [(grp.kind, [v.op for v in grp.nodes]) for grp in groups] == [
        ("opaque", ["fused"]),
        ("opaque", ["fused", "fused_output", "fused_output"]),
        ("elementwise", ["add"]),
    ]
    assert groups[1].outputs == [out, mean]
    assert "fused.softmax(%0, dim=-1)" in graph.format() and "tuple" in graph.format()


def test_cse_dce_and_folding_treat_fused_nodes_as_opaque():
    g = G()
    x = g.input((4, 3))
    one, two = _fused(g, "softmax", (x,), (4, 3), dim=-1), _fused(g, "softmax", (x,), (4, 3), dim=-1)
    other = _fused(g, "softmax", (x,), (4, 3), dim=0)
    _fused(g, "softmax", (x,), (4, 3), dim=1)  # dead
    folded = _fused(g, "softmax", (g.const(np.ones((2, 2))),), (2, 2), dim=-1)
    graph = passes.optimize(g.graph(g.op("add", one, two), other, folded), IMPLS)
    assert [v.params["params"]["dim"] for v in graph.nodes if v.op == "fused"] == [-1, 0, -1]

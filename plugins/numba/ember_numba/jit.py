"""``compile(group)`` for ember.jit: a fusion group becomes one generated, cached numba kernel.

ember.jit hands the backend each fusion group (ember.jit.passes.Group): an *elementwise*
group (a chain of elementwise primitives over one shape) or a *reduce* group (elementwise
work over a shape, one sum/max/min over some of its axes, then elementwise work over the
result). This module translates the group's nodes into a render.Program — SSA names for its
values, literals for its scalar arguments — renders the kernel source, and returns a
function of the group's input buffers that returns its output buffers. Only the values the
group's consumers need are written to memory; everything else lives in registers. A reduce
group's loop order follows its layout (render.render_reduce: rows or columns). Kernels take
destinations (``out=``): ember.jit has them write into its planned, reused buffers, and an
elementwise kernel write a parameter's new value into the parameter's own buffer.

Returns None (ember.jit then runs the group op by op) for what the kernels do not cover:
float16, integer ``pow``/``div``, max/min of integers, reductions whose kept and reduced axes
interleave (keep, reduce, keep), or inputs that cannot be addressed by one stride per
collapsed dim.

>>> import ember, numpy as np
>>> f = ember.jit(lambda a, b: (a * b + 1.0).relu().sum(1))
>>> a = ember.ones(4, 3, backend="numba")
>>> f(a, a).tolist(), f.stats(a, a)["fused"]
([6.0, 6.0, 6.0, 6.0], 1)
"""

from __future__ import annotations

import os

import numpy as np

from . import background, launch
from .render import EXPR, Program, element_strides, partials, render_reduce

_KERNELS: dict = {}  # rendered source -> module (one per distinct group structure)


class Unsupported(Exception):
    """The group has something the generated kernels do not handle."""


# ----------------------------------------------------------------------------- what to compile
# Compiling is most of a cold first step (W1's MLP: ~0.2-0.5 s per parallel kernel on the
# 2-core development machine, against milliseconds per step), so only what pays is compiled,
# and no more than it needs. Both rules below depend on the group alone, never on timing or on
# what the disk cache holds: a cold process and a warm one run the same code.

#: Elements of work below which a group is left to run op by op (ember.jit then calls NumPy
#: into its planned buffers): a kernel call spends a few µs passing its arguments, what NumPy
#: takes for a few ops on a few thousand elements, and compiling it costs 0.1-0.5 s.
#: ``EMBER_NUMBA_GROUP_MIN``; 0 compiles every group.
MIN_WORK = int(os.environ.get("EMBER_NUMBA_GROUP_MIN", 1 << 12))

_THREADED: set = set()  # programs compiled for threads in this process (their keys)


def threaded(work: int, key=None) -> bool:
    """Is a group of ``work`` elements compiled for threads? From launch.PAR_MIN on, where
    launch.run may give it more than one; below, ``prange`` would be compiled for nothing, and
    numba compiles a parallel kernel 2-3x slower than a plain loop. A program (``key``)
    already compiled for threads serves smaller groups too: on one thread it costs ~1 µs more
    than a plain loop, far less than compiling a second kernel. The two give the same bits
    (the same tasks, each summed in the same order).

    >>> threaded(launch.PAR_MIN - 1), threaded(launch.PAR_MIN)      # 2^18 elements by default
    (False, True)
    >>> threaded(launch.PAR_MIN, "doc"), threaded(1, "doc")
    (True, True)
    """
    if work >= launch.PAR_MIN:
        if key is not None:
            _THREADED.add(key)
        return True
    return key is not None and key in _THREADED


def compile_group(group):
    """A function ``run(*input_buffers) -> tuple of output buffers`` for ``group``, or None
    (too small to pay for compiling, see MIN_WORK, or not covered)."""
    if int(np.prod(group.shape)) < MIN_WORK:
        return None
    try:
        if group.kind == "elementwise":
            return _elementwise(group)
        if group.kind == "reduce":
            return _reduce(group)
    except Unsupported:
        return None
    return None


def _ahead(kernel, prefix, in_dtypes, out_dtypes):
    """Hand ``kernel``'s compile to the background worker (background.py): ember.jit lowers
    every group before it runs the first, so the worker compiles the later groups' kernels
    while this process compiles the first. A kernel's arguments are ``prefix`` (sizes and
    strides), then one flat C-contiguous buffer per input and output."""
    background.soon(kernel, *prefix, *[np.empty(0, d) for d in (*in_dtypes, *out_dtypes)])


# ----------------------------------------------------------------------------- translation
def _dtype(v) -> str:
    name = str(v.dtype)
    if name == "float16":
        raise Unsupported("float16")
    return name


def _check(v):
    if v.op not in EXPR:
        raise Unsupported(v.op)
    if v.op in ("pow", "div", "floor") and _dtype(v)[0] != "f":
        raise Unsupported(f"integer {v.op}")


def _node(v, names, dtype=None):
    """The Program node of Var ``v``; its Var arguments are looked up in ``names``."""
    _check(v)
    args = []
    for a in v.args:
        if isinstance(a, (bool, int, float)):
            args.append(a)
        elif a.id in names:
            args.append(names[a.id])
        else:
            raise Unsupported("an argument from outside the group that is not one of its inputs")
    return (names[v.id], v.op, tuple(args), dict(v.params), dtype or _dtype(v))


def _inputs(group):
    names = {a.id: f"x{i}" for i, a in enumerate(group.inputs)}
    return names, [("array", _dtype(a)) for a in group.inputs]


def _elementwise(group):
    names, inputs = _inputs(group)
    for i, v in enumerate(group.nodes):
        names[v.id] = f"t{i}"
    program = Program(inputs, [_node(v, names) for v in group.nodes], [names[o.id] for o in group.outputs])
    key = repr((program.inputs, program.nodes, program.outputs))
    kernel = launch.Kernel(program, parallel=threaded(int(np.prod(group.shape)), key))
    shapes = tuple(tuple(a.shape) for a in group.inputs)
    plan = kernel.plan(shapes, force=True)
    if plan is None or plan.out_shape != tuple(group.shape):
        raise Unsupported("the inputs do not broadcast to the group's shape in at most 4 dims")

    shape = tuple(group.shape)
    dtypes = kernel.out_dtypes
    _ahead(plan.fn, plan.prefix, [dt for _, dt in program.inputs], dtypes)

    def run(*bufs, out=None):
        ins = [np.ascontiguousarray(b) for b in bufs]
        if out is not None:
            # Destinations (a parameter's buffer for its new value, see ember.jit's
            # group_donations) that the flat kernel can write: C-contiguous, of the output's
            # shape and dtype. Others are allocated; the caller sees which from what it gets.
            out = [
                o
                if o is not None and o.shape == shape and o.dtype == dt and o.flags.c_contiguous and o.flags.writeable
                else np.empty(shape, dt)
                for o, dt in zip(out, dtypes)
            ]
        return kernel(*ins, out=out, force=True)

    run.accepts_out = True
    return run


# ----------------------------------------------------------------------------- reduce groups
def _groups_of_dims(shape, axes):
    """Each non-unit dim of ``shape`` labelled "a" (reduced, before the kept ones), "b" (kept)
    or "c" (reduced, after them; without kept dims, the last one); Unsupported if they
    interleave otherwise.

    >>> _groups_of_dims((128, 512), {0}), _groups_of_dims((4, 3, 5), {0, 1, 2})
    ({0: 'a', 1: 'b'}, {0: 'a', 1: 'a', 2: 'c'})
    """
    labels, seen_kept = {}, False
    for d, n in enumerate(shape):
        if n == 1:
            continue
        if d in axes:
            labels[d] = "c" if seen_kept else "a"
        else:
            if seen_kept and any(labels[e] == "c" for e in labels):
                raise Unsupported("kept axes on both sides of a reduced one")
            labels[d] = "b"
            seen_kept = True
    if labels and not seen_kept:
        # A reduction over everything: its last dim is the contiguous inner run (C).
        labels[max(labels)] = "c"
    return labels


def _collapsed(shape, strides, dims):
    """One stride for the collapsed run of ``dims`` (0 when broadcast along all of them)."""
    dims = [d for d in dims if shape[d] != 1]
    if not dims:
        return 0
    for d, e in zip(dims, dims[1:]):
        if strides[d] != strides[e] * shape[e]:
            raise Unsupported("an input that is not one stride per collapsed dim")
    return strides[dims[-1]]


#: Kept indices per task in the column layout: wide enough for the inner loop to vectorize,
#: its accumulators (8 bytes each) small enough to stay in the L1 cache.
TILE = 256
#: Column counts up to which a kernel is generated for the count itself (render_reduce's
#: ``width``): fewer columns than a vector's lanes leave a loop of a few iterations per row.
NARROW = 16
#: Tasks a reduction large enough for threads is cut into, splitting the reduced rows (A)
#: when the kept indices alone give fewer. Fixed, not the thread count: the partial sums,
#: hence the rounding, depend on the shapes (and PAR_MIN), not on how many threads run.
TASKS = 16


def tiles(A, B, C, layout):
    """(AT, BT): rows of A per chunk and kept indices per task (see render.render_reduce).

    >>> tiles(128, 8192, 1, "columns"), tiles(128, 8192, 1, "rows")    # enough tasks
    ((128, 256), (128, 1))
    >>> launch.PAR_MIN <= 1 << 22 and tiles(1 << 16, 64, 1, "columns") == (4096, 64)   # 16 chunks
    True
    """
    BT = min(B, TILE) if layout == "columns" else 1
    AT = A
    tasks = -(-B // BT)
    if A * B * C >= launch.PAR_MIN and tasks < TASKS and A > 1:
        AT = -(-A // min(A, -(-TASKS // tasks)))
    return AT, BT


def _reduce(group):
    red = group.reduce
    shape = tuple(group.shape)
    axes = {a % max(len(shape), 1) for a in red.params["axes"]}
    if not axes:
        raise Unsupported("an empty reduction")
    dt = _dtype(red)
    if red.op != "sum" and dt[0] != "f":
        raise Unsupported("max/min of integers")
    labels = _groups_of_dims(shape, axes)
    size = {k: int(np.prod([shape[d] for d in labels if labels[d] == k])) for k in "abc"}
    if 0 in size.values():
        raise Unsupported("an empty reduction")  # the reference knows sum() == 0

    post_ids, names = set(), {}
    for i, v in enumerate(group.nodes):
        if v is red:
            names[v.id] = "r"
            post_ids.add(v.id)
        elif any(not isinstance(a, (bool, int, float)) and a.id in post_ids for a in v.args):
            post_ids.add(v.id)
            names[v.id] = f"t{i}"
        else:
            names[v.id] = f"t{i}"
    in_names, inputs = _inputs(group)
    names.update(in_names)
    pre_nodes = [v for v in group.nodes if v.id not in post_ids]
    post_nodes = [v for v in group.nodes if v.id in post_ids and v is not red]
    pre_names = {names[v.id] for v in pre_nodes}
    for v in post_nodes:
        if any(not isinstance(a, (bool, int, float)) and names.get(a.id) in pre_names for a in v.args):
            raise Unsupported("a post-reduction op reading a pre-reduction value")

    pre = Program(inputs, [_node(v, names) for v in pre_nodes], [])
    post = Program(inputs, [_node(v, names) for v in post_nodes], [])
    post.dtypes["r"] = dt
    red_arg = red.args[0]
    if isinstance(red_arg, (bool, int, float)) or red_arg.id not in names:
        raise Unsupported("a reduction of a scalar")
    red_arg = names[red_arg.id]

    # Strides: pre-stage inputs over (A, B, C) of the group's shape, post-stage ones over B.
    pre_reads = {a for _, _, args, _, _ in pre.nodes for a in args if isinstance(a, str)} | {red_arg}
    post_reads = {a for _, _, args, _, _ in post.nodes for a in args if isinstance(a, str)}
    post_inputs = sorted(int(n[1:]) for n in post_reads if n.startswith("x"))
    # The loop order follows the layout (render.render_reduce): with reduced dims after the
    # kept ones the reduced run is innermost ("rows"); without, the kept run is ("columns").
    layout = "rows" if size["c"] > 1 or size["b"] == 1 else "columns"
    walk = 2 if layout == "rows" else 1  # the run the inner loop walks: C or B
    stride_args, inner, expand = [], [], set()
    full = element_strides(shape, shape)
    for k, a in enumerate(group.inputs):
        sa = sb = sc = 0  # inputs read only after the reduction have no pre strides
        if f"x{k}" in pre_reads:
            try:
                st = element_strides(tuple(a.shape), shape)
                sa, sb, sc = (_collapsed(shape, st, [d for d in labels if labels[d] == g]) for g in "abc")
                if (sa, sb, sc)[walk] not in (0, 1):
                    raise Unsupported("an input that does not walk the inner loop's dims contiguously")
            except Unsupported:
                # Broadcast in a way one stride per run cannot express: give the kernel a full copy.
                if k in post_inputs:
                    raise
                expand.add(k)
                sa, sb, sc = (_collapsed(shape, full, [d for d in labels if labels[d] == g]) for g in "abc")
        stride_args += [sa, sb, sc]
        inner.append((sa, sb, sc)[walk] == 1)
    rshape = tuple(red.shape)
    kept = [d for d, n in enumerate(rshape) if n != 1]
    for k in post_inputs:
        a = group.inputs[k]
        st = element_strides(tuple(a.shape), rshape)
        stride_args.append(_collapsed(rshape, st, kept))

    pre_outs = [o for o in group.outputs if o.id not in post_ids]
    post_outs = [o for o in group.outputs if o.id in post_ids]
    for o in post_outs:
        if int(np.prod(o.shape)) != size["b"]:
            raise Unsupported("a post-reduction output of another size")
    acc = ("float64" if dt[0] == "f" else "int64") if red.op == "sum" else dt
    A, B, C = size["a"], size["b"], size["c"]
    AT, BT = tiles(A, B, C, layout)
    tasks = -(-A // AT) * -(-B // BT)
    work = A * B * C if tasks >= 2 else 0  # one task: no threads to share it
    args = (
        pre,
        red.op,
        red_arg,
        post,
        post_inputs,
        [names[o.id] for o in pre_outs],
        [names[o.id] for o in post_outs],
        tuple(inner),
        acc,
        layout,
        size["b"] if layout == "columns" and size["b"] <= NARROW else 0,
    )
    parallel = threaded(work, render_reduce(*args, parallel=False))
    source = render_reduce(*args, parallel=parallel)
    module = _KERNELS.get(source)
    if module is None:
        from . import cache

        module = _KERNELS[source] = cache.load(source)
    prefix = (A, B, C, AT, BT, *stride_args)
    out_specs = [(tuple(o.shape), np.dtype(str(o.dtype))) for o in pre_outs + post_outs]
    order = [(pre_outs + post_outs).index(o) for o in group.outputs]
    part = (partials(A, B, AT, layout), np.dtype(acc))  # the kernel's scratch
    _ahead(module.kernel, prefix, [str(a.dtype) for a in group.inputs], [d for _, d in out_specs] + [part[1]])

    def run(*bufs, out=None):
        outs = [None] * len(out_specs)
        if out is not None:
            # Destinations (ember.jit's planned buffers, never one of the inputs) that the
            # kernel can write: C-contiguous, of the output's shape and dtype.
            for i, o in zip(order, out):
                if (
                    o is not None
                    and o.shape == out_specs[i][0]
                    and o.dtype == out_specs[i][1]
                    and o.flags.c_contiguous
                    and o.flags.writeable
                ):
                    outs[i] = o
        outs = [np.empty(s, d) if o is None else o for o, (s, d) in zip(outs, out_specs)]
        ins = [
            np.ascontiguousarray(np.broadcast_to(b, shape) if k in expand else b).reshape(-1)
            for k, b in enumerate(bufs)
        ]
        launch.run(module.kernel, work, *prefix, *ins, *[o.reshape(-1) for o in outs], np.empty(*part))
        return tuple(outs[i] for i in order)

    run.accepts_out = True
    return run

"""Control flow: If, Loop and Scan run their body graphs with ember's interpreter.

A body is a :class:`~ember.onnx.graph.Program` built at load (its unsupported nodes are
reported with the rest); it sees the enclosing graph's values (``node.scope``) as ONNX's
lexical scoping says, plus its own inputs.
"""

from __future__ import annotations

from ... import dtypes as D
from ...tensor import stack
from .common import body, const, movedim, scalar


def if_(node, cond):
    """The outputs of then_branch or else_branch."""
    return tuple(body(node, "then_branch" if bool(scalar(cond)) else "else_branch", []))


def loop(node, trip=None, cond=None, *carried):
    """Run the body while the condition holds and fewer than `trip` iterations ran; the body's
    extra outputs (scan outputs) are stacked along a new first axis."""
    n = int(scalar(trip)) if trip is not None else None
    go = bool(scalar(cond)) if cond is not None else True
    k = len(carried)
    scans, i = None, 0
    like = carried[0] if carried else (trip if trip is not None else cond)
    while go and (n is None or i < n):
        it = const(i, like, D.int64)
        c = const(go, like, D.bool_)
        outs = body(node, "body", [it, c, *carried])
        go, carried = bool(scalar(outs[0])), tuple(outs[1 : 1 + k])
        if scans is None:
            scans = [[] for _ in outs[1 + k :]]
        for s, v in zip(scans, outs[1 + k :]):
            s.append(v)
        i += 1
    if scans is None:
        scans = [[] for _ in range(len(node.outputs) - k)]
        if scans:
            raise node.error("a Loop that runs no iteration cannot give its scan outputs a shape")
    return (*carried, *[stack(s, 0) for s in scans])


def scan(node, *args):
    m = node.attr("num_scan_inputs")
    if node.version < 9:
        # Scan-8: a leading batch axis on everything, and optional sequence_lens first.
        lens, args = args[0], args[1:]
        if lens is not None:
            raise node.error("Scan-8 with sequence_lens is not supported")
        states, xs = args[: len(args) - m], args[len(args) - m :]
        per = [_scan(node, [s[b] for s in states], [x[b] for x in xs], m) for b in range(xs[0].shape[0])]
        return tuple(stack([p[i] for p in per], 0) for i in range(len(per[0])))
    states, xs = list(args[: len(args) - m]), args[len(args) - m :]
    return _scan(node, states, xs, m)


def _scan(node, states, xs, m):
    in_axes = list(node.attr("scan_input_axes") or [0] * m)
    in_dirs = list(node.attr("scan_input_directions") or [0] * m)
    xs = [movedim(x, a % x.ndim, 0) for x, a in zip(xs, in_axes)]
    xs = [x.flip(0) if d else x for x, d in zip(xs, in_dirs)]
    steps = xs[0].shape[0]
    k = len(states)
    ys = None
    for t in range(steps):
        outs = body(node, "body", [*states, *[x[t] for x in xs]])
        states = list(outs[:k])
        if ys is None:
            ys = [[] for _ in outs[k:]]
        for y, v in zip(ys, outs[k:]):
            y.append(v)
    n_out = len(ys or [])
    out_axes = list(node.attr("scan_output_axes") or [0] * n_out)
    out_dirs = list(node.attr("scan_output_directions") or [0] * n_out)
    results = []
    for y, a, d in zip(ys or [], out_axes, out_dirs):
        s = stack(y[::-1] if d else y, 0)
        results.append(movedim(s, 0, a % s.ndim))
    return (*states, *results)


OPS = {"If": (if_, 1), "Loop": (loop, 1), "Scan": (scan, 8)}

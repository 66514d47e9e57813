"""Sequence operators: a sequence value is a Python list of ember tensors.

The interpreter's value table holds lists as happily as tensors, so sequences cost nothing
beyond these handlers; positions are host integers (negative counts from the end).
"""

from __future__ import annotations

from ... import dtypes as D
from ...tensor import cat, stack
from .common import axis, body, const, ints, scalar


def _position(node, seq, pos, default, insert=False):
    n = len(seq)
    p = default if pos is None else int(scalar(pos))
    p = p + n if p < 0 else p
    if not 0 <= p <= (n if insert else n - 1):
        raise node.error(f"position {p} is outside a sequence of {n}")
    return p


def sequence_empty(node):
    return []


def sequence_construct(node, *xs):
    return list(xs)


def sequence_insert(node, seq, x, pos=None):
    p = _position(node, seq, pos, len(seq), insert=True)
    return seq[:p] + [x] + seq[p:]


def sequence_erase(node, seq, pos=None):
    p = _position(node, seq, pos, len(seq) - 1)
    return seq[:p] + seq[p + 1 :]


def sequence_at(node, seq, pos):
    return seq[_position(node, seq, pos, 0)]


def sequence_length(node, seq):
    return const(len(seq), seq, D.int64)


def split_to_sequence(node, x, split=None):
    a = axis(node.attr("axis", 0), x.ndim)
    n = x.shape[a]
    if split is None:
        parts = [x.narrow(a, i, 1) for i in range(n)]
        return parts if node.attr("keepdims", 1) else [p.squeeze(a) for p in parts]
    sizes = ints(split)
    if split.ndim == 0:
        sizes = [min(sizes[0], n - i) for i in range(0, n, sizes[0])]
    out, start = [], 0
    for s in sizes:
        out.append(x.narrow(a, start, s))
        start += s
    return out


def concat_from_sequence(node, seq):
    a = node.attr("axis")
    if node.attr("new_axis", 0):
        return stack(seq, axis(a, seq[0].ndim + 1))
    return cat(seq, axis(a, seq[0].ndim))


def sequence_map(node, *args):
    """Run the body on the i-th element of every sequence input (tensors pass whole)."""
    outs = [[] for _ in node.graphs["body"].outputs]
    for i in range(len(args[0])):
        for out, value in zip(outs, body(node, "body", [a[i] if isinstance(a, list) else a for a in args])):
            out.append(value)
    return tuple(outs)


OPS = {
    "SequenceEmpty": (sequence_empty, 11),
    "SequenceConstruct": (sequence_construct, 11),
    "SequenceInsert": (sequence_insert, 11),
    "SequenceErase": (sequence_erase, 11),
    "SequenceAt": (sequence_at, 11),
    "SequenceLength": (sequence_length, 11),
    "SplitToSequence": (split_to_sequence, 11),
    "ConcatFromSequence": (concat_from_sequence, 11),
    "SequenceMap": (sequence_map, 17),
}

"""The ``ai.onnx.ml`` domain's numeric operators: ArrayFeatureExtractor, Binarizer and
TreeEnsemble (the string ones, LabelEncoder over strings, need string tensors ember lacks).

A tree ensemble runs as ember tensor operations, so it runs on every backend: every sample
walks every tree at once, one level per step. The walk's state is a node or leaf number per
(sample, tree); a step looks up each state's feature, threshold and comparison, compares, and
moves to the true or the false child. Leaves move to themselves, so after as many steps as the
deepest tree every walk has stopped at its leaf.
"""

from __future__ import annotations

import math

import numpy as np

from ...tensor import arange, where
from .common import const

# TreeEnsemble's enumerations (ONNX ai.onnx.ml opset 5)
LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)
AVERAGE, SUM, MIN, MAX = range(4)
NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT = range(5)

COMPARE = {  # mode → (value, threshold) → bool tensor
    LEQ: lambda v, s: v <= s,
    LT: lambda v, s: v < s,
    GTE: lambda v, s: v >= s,
    GT: lambda v, s: v > s,
    EQ: lambda v, s: v == s,
    NEQ: lambda v, s: v != s,
}


def array_feature_extractor(node, x, indices):
    """``x[..., indices]``; a vector input gives one row, as onnxruntime does."""
    flat = indices.reshape(-1)
    out = x.take(flat, x.ndim - 1)
    return out.reshape(1, -1) if x.ndim == 1 else out


def binarizer(node, x):
    return where(x > node.attr("threshold", 0.0), 1, 0).to(x.dtype)


def _values(node, name):
    """A list or tensor attribute as a NumPy array (TreeEnsemble gives both kinds)."""
    v = node.attr(name)
    return None if v is None else np.asarray(v)


def _walk_tables(node):
    """Host tables over the states ``0..n_nodes-1`` (nodes) and ``n_nodes + j`` (leaf j): the
    true and false successor of each state, and the deepest walk from the roots."""
    true_ids, false_ids = _values(node, "nodes_truenodeids"), _values(node, "nodes_falsenodeids")
    true_leaf, false_leaf = _values(node, "nodes_trueleafs"), _values(node, "nodes_falseleafs")
    n_nodes, n_leaves = len(true_ids), len(_values(node, "leaf_weights"))
    leaves = np.arange(n_nodes, n_nodes + n_leaves)
    on_true = np.concatenate([np.where(true_leaf != 0, true_ids + n_nodes, true_ids), leaves])
    on_false = np.concatenate([np.where(false_leaf != 0, false_ids + n_nodes, false_ids), leaves])
    if ((on_true < 0) | (on_true >= n_nodes + n_leaves) | (on_false < 0) | (on_false >= n_nodes + n_leaves)).any():
        raise node.error("a true or false id points past the nodes or leaves")
    roots = []
    for r in map(int, _values(node, "tree_roots")):
        # a tree that is one leaf: both branches name the same leaf
        lone = true_leaf[r] and false_leaf[r] and true_ids[r] == false_ids[r]
        roots.append(int(true_ids[r]) + n_nodes if lone else r)
    depth, level = 0, set(roots)
    while any(s < n_nodes for s in level):
        depth += 1
        if depth > n_nodes:
            raise node.error("the trees have a cycle")
        level = {int(t[s]) for s in level for t in (on_true, on_false)}
    return n_nodes, on_true, on_false, roots, depth


def _members(node, modes, n_nodes):
    """(n_nodes + 1, widest set) array of each MEMBER node's set, NaN-padded (NaN equals nothing)."""
    values = _values(node, "membership_values")
    sets: list[list[float]] = [[] for _ in range(n_nodes + 1)]
    if (modes == MEMBER).any():
        if values is None:
            raise node.error("a BRANCH_MEMBER node needs membership_values")
        groups = np.split(values, np.flatnonzero(np.isnan(values)) + 1)
        members = [g[~np.isnan(g)] for g in groups][: int((modes == MEMBER).sum())]
        for i, m in zip(np.flatnonzero(modes == MEMBER), members):
            sets[i] = list(m)
    width = max(1, max(len(s) for s in sets))
    return np.array([s + [math.nan] * (width - len(s)) for s in sets])


def tree_ensemble(node, x):
    """TreeEnsemble (ai.onnx.ml 5): sum, average, min or max of the leaves' weights per target."""
    n_nodes, on_true, on_false, roots, depth = _walk_tables(node)
    modes = _values(node, "nodes_modes").astype(np.int64)
    features = _values(node, "nodes_featureids").astype(np.int64)
    splits = _values(node, "nodes_splits").astype(np.float64)
    missing = _values(node, "nodes_missing_value_tracks_true")
    missing = np.zeros(n_nodes, bool) if missing is None else missing.astype(bool)
    if x.ndim != 2:
        raise node.error(f"X must be (samples, features), got shape {x.shape}")
    pad = on_true.size - n_nodes  # leaves compare nothing: feature 0, any threshold
    table = lambda a, fill: const(np.concatenate([a, np.full(pad, fill, a.dtype)]), x)  # noqa: E731
    feature_t, split_t = table(features, 0), table(splits, 0.0).to(x.dtype)
    mode_t, missing_t = table(modes, LEQ), table(missing, False)
    true_t, false_t = const(on_true, x), const(on_false, x)
    members = _members(node, modes, n_nodes)
    member_t = const(np.concatenate([members[:n_nodes], np.full((pad, members.shape[1]), math.nan)]), x).to(x.dtype)
    used = sorted(set(modes.tolist()))
    state = const(np.array(roots, np.int64), x).reshape(1, -1).expand(x.shape[0], len(roots))
    for _ in range(depth):
        value = x.gather(1, feature_t.take(state))
        mode = mode_t.take(state)
        go = None
        for m in used:
            hit = (
                (value.unsqueeze(-1) == member_t.take(state, 0)).any(-1)
                if m == MEMBER
                else COMPARE[m](value, split_t.take(state))
            )
            go = hit if go is None else where(mode == m, hit, go)
        assert go is not None
        go = go | (value.isnan() & missing_t.take(state))
        state = where(go, true_t.take(state), false_t.take(state))
    return _aggregate(node, x, state - n_nodes, len(roots))


def _aggregate(node, x, leaf, n_trees):
    weights = _values(node, "leaf_weights")
    targets = const(_values(node, "leaf_targetids").astype(np.int64), x)
    n_targets = node.attr("n_targets")
    if n_targets is None:
        n_targets = int(targets.max().item()) + 1
    w = const(weights, x).to(x.dtype).take(leaf)  # (samples, trees)
    hit = targets.take(leaf).unsqueeze(-1) == arange(n_targets, backend=x.backend)  # (samples, trees, targets)
    kind = node.attr("aggregate_function", SUM)
    if kind in (SUM, AVERAGE):
        out = where(hit, w.unsqueeze(-1), 0.0).sum(1)
        out = out / n_trees if kind == AVERAGE else out
    elif kind in (MIN, MAX):
        # a target no tree reaches keeps the start value, the dtype's largest (min) or lowest (max)
        info = np.finfo(x.dtype.name)
        start = float(info.max if kind == MIN else info.min)
        picked = where(hit, w.unsqueeze(-1), start)
        out = picked.amin(1) if kind == MIN else picked.amax(1)
    else:
        raise node.error(f"aggregate_function {kind} is not one of 0-3 (AVERAGE, SUM, MIN, MAX)")
    return _post_transform(node, out)


def _post_transform(node, out):
    kind = node.attr("post_transform", NONE)
    if kind == NONE:
        return out
    if kind == SOFTMAX:
        return out.softmax(-1)
    if kind == LOGISTIC:
        return out.sigmoid()
    if kind == SOFTMAX_ZERO:  # softmax over the non-zero scores; zeros stay zero
        nonzero = out != 0
        e = where(nonzero, (out - out.amax(-1, keepdim=True)).exp(), 0.0)
        return e / e.sum(-1, keepdim=True).clamp(min=1e-38)
    raise node.error(f"post_transform {kind} (PROBIT) is not supported by ember")


OPS = {
    "ArrayFeatureExtractor": (array_feature_extractor, 1),
    "Binarizer": (binarizer, 1),
    "TreeEnsemble": (tree_ensemble, 5),
}

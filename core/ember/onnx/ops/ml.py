"""The ``ai.onnx.ml`` domain's numeric operators: what scikit-learn models become through
skl2onnx (tree ensembles, linear models, Scaler, Normalizer) plus ArrayFeatureExtractor and
Binarizer. The string operators (LabelEncoder over strings, ZipMap) need string tensors and maps,
which ember lacks: convert classifiers with ``options={"zipmap": False}`` and integer labels.

A tree ensemble runs as ember tensor operations, so it runs on every backend: every sample
walks every tree at once, one level per step. The walk's state is a node number per (sample,
tree); a step looks up each state's feature, threshold and comparison, compares, and moves to
the true or the false child. Leaves move to themselves, so after as many steps as the deepest
tree every walk has stopped at its leaf, whose row of per-target weights is then aggregated.
Both encodings of a forest, TreeEnsemble (opset 5: leaves in their own arrays, one target
each) and TreeEnsembleRegressor/Classifier (opset 1-3: leaves are nodes of mode LEAF, weights
listed by (tree, node)), become the same tables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ... import dtypes as D
from ...tensor import cat, where
from .common import const

# Comparison modes, by their TreeEnsemble (opset 5) numbers and their older names.
LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)
MODE_NAMES = {
    "BRANCH_LEQ": LEQ,
    "BRANCH_LT": LT,
    "BRANCH_GTE": GTE,
    "BRANCH_GT": GT,
    "BRANCH_EQ": EQ,
    "BRANCH_NEQ": NEQ,
}
COMPARE = {  # mode → (value, threshold) → bool tensor
    LEQ: lambda v, s: v <= s,
    LT: lambda v, s: v < s,
    GTE: lambda v, s: v >= s,
    GT: lambda v, s: v > s,
    EQ: lambda v, s: v == s,
    NEQ: lambda v, s: v != s,
}
AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")  # TreeEnsemble's aggregate_function numbers 0-3
TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")  # post_transform numbers 0-4


def array_feature_extractor(node, x, indices):
    """``x[..., indices]``; a vector input gives one row, as onnxruntime does."""
    out = x.take(indices.reshape(-1), x.ndim - 1)
    return out.reshape(1, -1) if x.ndim == 1 else out


def binarizer(node, x):
    return where(x > node.attr("threshold", 0.0), 1, 0).to(x.dtype)


def scaler(node, x):
    """``(x - offset) * scale``, as float32 (the operator's output type)."""
    offset, scale = (attribute_array(node, k, [0.0]).astype(np.float32) for k in ("offset", "scale"))
    x = x.to(D.float32)
    return (x - const(offset, x)) * const(scale, x)


def normalizer(node, x):
    """Each row divided by its largest magnitude, L1 or L2 norm (at least 1e-30), as float32."""
    x = x.to(D.float32)
    norm = node.attr("norm", "MAX")
    if norm == "MAX":
        div = x.abs().amax(1, keepdim=True)
    elif norm == "L1":
        div = x.abs().sum(1, keepdim=True)
    elif norm == "L2":
        div = (x * x).sum(1, keepdim=True).sqrt()
    else:
        raise node.error(f"norm {norm!r} is not one of MAX, L1, L2")
    return x / div.clamp(min=1e-30)


def linear_regressor(node, x):
    coefficients = attribute_array(node, "coefficients").astype(np.float32)
    targets = node.attr("targets", 1)
    w = const(coefficients.reshape(targets, -1).T, x)
    y = x.to(D.float32) @ w
    intercepts = attribute_array(node, "intercepts")
    y = y if intercepts is None else y + const(intercepts.astype(np.float32), x)
    return post_transform(node, y)


def linear_classifier(node, x):
    """(labels, scores): one score per class, or a binary model's one score s as (-s, s)."""
    labels = class_labels(node, "classlabels_ints")
    coefficients = attribute_array(node, "coefficients").astype(np.float32)
    w = const(coefficients.reshape(-1, x.shape[1]).T, x)
    scores = x.to(D.float32) @ w
    intercepts = attribute_array(node, "intercepts")
    scores = scores if intercepts is None else scores + const(intercepts.astype(np.float32), x)
    if scores.shape[1] == 1 and len(labels) == 2:
        scores = _pair(-scores, scores)
    scores = post_transform(node, scores)
    if scores.shape[1] > 1:
        return _pick(scores, labels, x), scores
    threshold = 0.0 if node.attr("post_transform", "NONE") == "NONE" else 0.5
    return where(scores.reshape(-1) >= threshold, int(labels[0]), 0), scores


def imputer(node, x):
    """Entries equal to the replaced value (NaN by default for floats) take their column's imputed value."""
    floating = x.dtype.is_floating_point
    fill = attribute_array(node, "imputed_value_floats" if floating else "imputed_value_int64s")
    if fill is None or fill.size == 0:
        raise node.error("imputed_value_floats or imputed_value_int64s is missing")
    old = node.attr("replaced_value_float", 0.0) if floating else node.attr("replaced_value_int64", 0)
    hit = x.isnan() if floating and math.isnan(old) else x == old
    return where(hit, const(fill, x).to(x.dtype), x)


def one_hot_encoder(node, x):
    """(..., categories) float32 indicators of each entry's category; an unknown entry is all
    zeros (``zeros=1``) or an error."""
    cats = attribute_array(node, "cats_int64s")
    if cats is None:
        if node.attr("cats_strings") is not None:
            raise node.error("string categories: ember has no string tensors")
        raise node.error("cats_int64s is missing")
    hit = x.to(D.int64).unsqueeze(-1) == const(cats.astype(np.int64), x)
    if not node.attr("zeros", 1) and not bool(hit.any(-1).all().item()):
        raise node.error("an input value is not one of the categories (and zeros=0)")
    return hit.to(D.float32)


def label_encoder(node, x):
    """Each entry mapped through keys → values; a missing key gives the default (NaN keys match NaN)."""
    keys, values, default = (_mapping_part(node, part) for part in ("keys", "values", "default"))
    if keys is None or values is None:
        raise node.error("string keys or values: ember has no string tensors")
    key_t = const(keys, x).to(x.dtype)
    match = x.unsqueeze(-1) == key_t
    if x.dtype.is_floating_point:
        match = match | (x.isnan().unsqueeze(-1) & key_t.isnan())
    found = const(values, x).take(match.to(D.int32).argmax(-1))
    if default is None:
        default = np.array(-1 if values.dtype.kind in "iu" else -0.0, values.dtype)  # the spec's defaults
    return where(match.any(-1), found, const(default.reshape(()), x).to(found.dtype))


def _mapping_part(node, part):
    """LabelEncoder's keys, values or default as a NumPy array: the ``*_tensor`` attribute (opset
    4) or the typed lists; None for strings (or an absent default)."""
    tensor = node.attr(f"{part}_tensor")
    if tensor is not None:
        return None if tensor.dtype.kind in "OUS" else np.asarray(tensor)
    suffix = "s" if part != "default" else ""
    for kind, dtype in (("int64", np.int64), ("float", np.float32)):
        v = node.attr(f"{part}_{kind}{suffix}")
        if v is not None:
            return np.asarray(v, dtype)
    return None


# ------------------------------------------------------------------ tree ensembles
@dataclass
class Forest:
    """A forest as per-state tables (states: every node, leaves included) plus each tree's root."""

    feature: np.ndarray  # int64, per state
    split: np.ndarray  # float64
    mode: np.ndarray  # int64 (a leaf: LEQ, never consulted)
    missing: np.ndarray  # bool: NaN goes the true way
    on_true: np.ndarray  # int64: next state when the comparison holds (a leaf: itself)
    on_false: np.ndarray
    members: np.ndarray  # (states, widest set) float64, NaN-padded: BRANCH_MEMBER's sets
    weights: np.ndarray  # (states, targets) float64: what each leaf adds per target
    hits: np.ndarray  # (states, targets) bool: which targets a leaf has a weight for
    roots: list

    def depth(self, node) -> int:
        """Steps until every walk from the roots has reached a leaf."""
        is_leaf = self.on_true == np.arange(self.on_true.size)
        depth, level = 0, set(self.roots)
        while any(not is_leaf[s] for s in level):
            depth += 1
            if depth > self.on_true.size:
                raise node.error("the trees have a cycle")
            level = {int(t[s]) for s in level for t in (self.on_true, self.on_false)}
        return depth


def _walk(node, forest: Forest, x):
    """The leaf state each (sample, tree) reaches: one tensor step per tree level."""
    if x.ndim != 2:
        raise node.error(f"X must be (samples, features), got shape {x.shape}")
    feature_t, split_t = const(forest.feature, x), const(forest.split, x).to(x.dtype)
    mode_t, missing_t = const(forest.mode, x), const(forest.missing, x)
    true_t, false_t = const(forest.on_true, x), const(forest.on_false, x)
    member_t = const(forest.members, x).to(x.dtype)
    used = sorted(set(forest.mode[forest.on_true != np.arange(forest.on_true.size)].tolist()))
    state = const(np.array(forest.roots, np.int64), x).reshape(1, -1).expand(x.shape[0], len(forest.roots))
    for _ in range(forest.depth(node)):
        value = x.gather(1, feature_t.take(state))
        mode = mode_t.take(state)
        go = None
        for m in used:
            if m == MEMBER:
                hit = (value.unsqueeze(-1) == member_t.take(state, 0)).any(-1)
            else:
                hit = COMPARE[m](value, split_t.take(state))
            go = hit if go is None else where(mode == m, hit, go)
        if go is None:  # every tree is a single leaf
            break
        go = go | (value.isnan() & missing_t.take(state))
        state = where(go, true_t.take(state), false_t.take(state))
    return state


def _aggregate(node, forest: Forest, state, x, kind: str, base=None):
    """Per sample and target: the trees' leaf weights summed, averaged, or their min or max
    (a target no tree reaches keeps the dtype's extreme), then ``base`` added."""
    rows = const(forest.weights, x).to(x.dtype).take(state, 0)  # (samples, trees, targets)
    hits = const(forest.hits, x).take(state, 0)
    if kind in ("SUM", "AVERAGE"):
        out = rows.sum(1)
        out = out / len(forest.roots) if kind == "AVERAGE" else out
    elif kind in ("MIN", "MAX"):
        info = np.finfo(x.dtype.name)
        start = float(info.max if kind == "MIN" else info.min)
        picked = where(hits, rows, start)
        out = picked.amin(1) if kind == "MIN" else picked.amax(1)
    else:
        raise node.error(f"aggregate_function {kind!r} is not one of {', '.join(AGGREGATES)}")
    return out if base is None else out + const(np.asarray(base, np.float64), x).to(x.dtype)


def tree_ensemble(node, x):
    """TreeEnsemble (ai.onnx.ml 5): leaves in their own arrays, each one (target, weight)."""
    true_ids, false_ids = attribute_array(node, "nodes_truenodeids"), attribute_array(node, "nodes_falsenodeids")
    true_leaf, false_leaf = attribute_array(node, "nodes_trueleafs"), attribute_array(node, "nodes_falseleafs")
    targets = attribute_array(node, "leaf_targetids").astype(np.int64)
    n_nodes, n_leaves = len(true_ids), len(targets)
    n_targets = node.attr("n_targets") or int(targets.max()) + 1
    leaves = np.arange(n_nodes, n_nodes + n_leaves)
    on_true = np.concatenate([np.where(true_leaf != 0, true_ids + n_nodes, true_ids), leaves])
    on_false = np.concatenate([np.where(false_leaf != 0, false_ids + n_nodes, false_ids), leaves])
    if ((on_true < 0) | (on_true > leaves[-1]) | (on_false < 0) | (on_false > leaves[-1])).any():
        raise node.error("a true or false id points past the nodes or leaves")
    roots = []
    for r in map(int, attribute_array(node, "tree_roots")):
        lone = true_leaf[r] and false_leaf[r] and true_ids[r] == false_ids[r]  # a tree that is one leaf
        roots.append(int(true_ids[r]) + n_nodes if lone else r)
    modes = attribute_array(node, "nodes_modes").astype(np.int64)
    weights = np.zeros((n_nodes + n_leaves, n_targets))
    weights[leaves, targets] = attribute_array(node, "leaf_weights")
    hits = np.zeros(weights.shape, bool)
    hits[leaves, targets] = True
    forest = Forest(
        feature=_pad(attribute_array(node, "nodes_featureids").astype(np.int64), n_leaves, 0),
        split=_pad(attribute_array(node, "nodes_splits").astype(np.float64), n_leaves, 0.0),
        mode=_pad(modes, n_leaves, LEQ),
        missing=_pad(
            attribute_array(node, "nodes_missing_value_tracks_true", np.zeros(n_nodes)).astype(bool), n_leaves, False
        ),
        on_true=on_true,
        on_false=on_false,
        members=_members(node, modes, n_leaves),
        weights=weights,
        hits=hits,
        roots=roots,
    )
    state = _walk(node, forest, x)
    kind = AGGREGATES[node.attr("aggregate_function", 1)]
    return post_transform(node, _aggregate(node, forest, state, x, kind))


def tree_ensemble_regressor(node, x):
    """TreeEnsembleRegressor (ai.onnx.ml 1-3): leaves are nodes of mode LEAF."""
    forest = _legacy_forest(node, "target", node.attr("n_targets", 1))
    x = x if x.dtype in (D.float32, D.float64) else x.to(D.float32)
    state = _walk(node, forest, x)
    out = _aggregate(node, forest, state, x, node.attr("aggregate_function", "SUM"), _base(node))
    return post_transform(node, out)


def tree_ensemble_classifier(node, x):
    """TreeEnsembleClassifier (ai.onnx.ml 1-3): (labels, per-class scores). A binary model
    scores one class, s; it reports (1 - s, s), or (-s, s) before a LOGISTIC or SOFTMAX."""
    labels = class_labels(node, "classlabels_int64s")
    forest = _legacy_forest(node, "class", len(labels))
    x = x if x.dtype in (D.float32, D.float64) else x.to(D.float32)
    state = _walk(node, forest, x)
    scores = _aggregate(node, forest, state, x, "SUM", _base(node)).to(D.float32)
    if len(set(attribute_array(node, "class_ids").tolist())) == 1:  # binary
        one = scores.narrow(1, 0, 1)
        other = 1 - one if node.attr("post_transform", "NONE") in ("NONE", "PROBIT") else -one
        scores = _pair(other, one)
    scores = post_transform(node, scores)
    return _pick(scores, labels, x), scores


def _legacy_forest(node, prefix: str, n_targets: int) -> Forest:
    trees, ids = (
        attribute_array(node, "nodes_treeids").astype(np.int64),
        attribute_array(node, "nodes_nodeids").astype(np.int64),
    )
    where_is = {(int(t), int(i)): k for k, (t, i) in enumerate(zip(trees, ids))}
    names = node.attr("nodes_modes")
    unknown = sorted(set(names) - set(MODE_NAMES) - {"LEAF"})
    if unknown:
        raise node.error(f"nodes_modes {', '.join(unknown)}: ember knows {', '.join(MODE_NAMES)} and LEAF")
    leaf = np.array([m == "LEAF" for m in names])
    modes = np.array([MODE_NAMES.get(m, LEQ) for m in names], np.int64)
    n = len(names)

    def successor(key):
        out = np.arange(n)
        for k, (t, i) in enumerate(zip(trees, attribute_array(node, key).astype(np.int64))):
            if not leaf[k]:
                if (int(t), int(i)) not in where_is:
                    raise node.error(f"{key}: tree {t} has no node {i}")
                out[k] = where_is[int(t), int(i)]
        return out

    weights, hits = np.zeros((n, n_targets)), np.zeros((n, n_targets), bool)
    for t, i, target, w in zip(
        attribute_array(node, f"{prefix}_treeids"),
        attribute_array(node, f"{prefix}_nodeids"),
        attribute_array(node, f"{prefix}_ids"),
        attribute_array(node, f"{prefix}_weights", attribute_array(node, f"{prefix}_weights_as_tensor")),
    ):
        k = where_is[int(t), int(i)]
        weights[k, int(target)] += w
        hits[k, int(target)] = True
    first: dict[int, int] = {}  # each tree's root: its first node
    for k, t in enumerate(trees.tolist()):
        first.setdefault(t, k)
    split = attribute_array(node, "nodes_values", attribute_array(node, "nodes_values_as_tensor"))
    return Forest(
        feature=attribute_array(node, "nodes_featureids").astype(np.int64),
        split=np.asarray(split, np.float64),
        mode=modes,
        missing=attribute_array(node, "nodes_missing_value_tracks_true", np.zeros(n)).astype(bool),
        on_true=successor("nodes_truenodeids"),
        on_false=successor("nodes_falsenodeids"),
        members=np.full((n, 1), math.nan),
        weights=weights,
        hits=hits,
        roots=list(first.values()),
    )


# ------------------------------------------------------------------ helpers
def attribute_array(node, name, default=None):
    """A list or tensor attribute as a NumPy array (TreeEnsemble gives both kinds)."""
    v = node.attr(name)
    return default if v is None else np.asarray(v)


def _pad(a, n, fill):
    return np.concatenate([a, np.full(n, fill, a.dtype)])


def _members(node, modes, n_leaves):
    """(states, widest set) array of each BRANCH_MEMBER node's set, NaN-padded (NaN equals nothing)."""
    values = attribute_array(node, "membership_values")
    sets: list[list[float]] = [[] for _ in range(len(modes) + n_leaves)]
    if (modes == MEMBER).any():
        if values is None:
            raise node.error("a BRANCH_MEMBER node needs membership_values")
        groups = np.split(values, np.flatnonzero(np.isnan(values)) + 1)
        for i, g in zip(np.flatnonzero(modes == MEMBER), groups):
            sets[i] = list(g[~np.isnan(g)])
    width = max(1, max(len(s) for s in sets))
    return np.array([s + [math.nan] * (width - len(s)) for s in sets])


def _base(node):
    return attribute_array(node, "base_values", attribute_array(node, "base_values_as_tensor"))


def class_labels(node, key):
    labels = attribute_array(node, key)
    if labels is None:
        if node.attr("classlabels_strings") is not None:
            raise node.error("string class labels: ember has no string tensors (convert the model with integer labels)")
        raise node.error(f"{key} is missing")
    return labels.astype(np.int64)


def _pick(scores, labels, x):
    """The label of each row's highest score."""
    return const(labels, x).take(scores.argmax(1))


def _pair(a, b):
    return cat([a, b], 1)


def post_transform(node, out):
    kind = node.attr("post_transform", "NONE")
    kind = TRANSFORMS[kind] if isinstance(kind, int) else kind
    if kind == "NONE":
        return out
    if kind == "SOFTMAX":
        return out.softmax(-1)
    if kind == "LOGISTIC":
        return out.sigmoid()
    if kind == "SOFTMAX_ZERO":  # softmax over the non-zero scores; zeros stay zero; all zero: 0.5 each
        nonzero = out.abs() > 1e-7
        e = where(nonzero, (out - out.amax(-1, keepdim=True)).exp(), 0.0)
        total = e.sum(-1, keepdim=True)
        return where(total == 0, 0.5, e / where(total == 0, 1.0, total))
    raise node.error(f"post_transform {kind} is not supported by ember")


OPS = {
    "ArrayFeatureExtractor": (array_feature_extractor, 1),
    "Binarizer": (binarizer, 1),
    "Scaler": (scaler, 1),
    "Imputer": (imputer, 1),
    "OneHotEncoder": (one_hot_encoder, 1),
    "LabelEncoder": (label_encoder, 2),
    "Normalizer": (normalizer, 1),
    "LinearRegressor": (linear_regressor, 1),
    "LinearClassifier": (linear_classifier, 1),
    "TreeEnsembleRegressor": (tree_ensemble_regressor, 1),
    "TreeEnsembleClassifier": (tree_ensemble_classifier, 1),
    "TreeEnsemble": (tree_ensemble, 5),
}

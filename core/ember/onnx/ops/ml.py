"""The ``ai.onnx.ml`` domain's numeric operators: what scikit-learn models become through
skl2onnx (tree ensembles, linear models, Scaler, Normalizer, Imputer, OneHotEncoder, numeric
LabelEncoder; the support vector machines are in svm.py) plus ArrayFeatureExtractor and
Binarizer. LabelEncoder and OneHotEncoder also take string tensors (ember.string), classifiers
give string labels (``classlabels_strings``), and ZipMap's sequence of maps is a Python list of
dicts, as onnxruntime returns it.

A tree ensemble runs as ember tensor operations, so it runs on every backend: every sample
walks every tree at once, one level per step. The walk's state is a node number per (sample,
tree); a step looks up each state's feature, threshold and comparison, compares, and moves to
the true or the false child. Leaves move to themselves, so after as many steps as the deepest
tree every walk has stopped at its leaf, whose row of per-target weights is then aggregated.
Both encodings of a forest, TreeEnsemble (opset 5: leaves in their own arrays, one target
each) and TreeEnsembleRegressor/Classifier (opset 1-3: leaves are nodes of mode LEAF, weights
listed by (tree, node)), become the same tables. The tables are built on the host with Python
lists: no numpy here, since the browser build runs these handlers where numpy may be missing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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
LARGEST = {"float16": 65504.0, "float32": 3.4028234663852886e38, "float64": 1.7976931348623157e308}


def array_feature_extractor(node, x, indices):
    """``x[..., indices]``; a vector input gives one row, as onnxruntime does."""
    out = x.take(indices.reshape(-1), x.ndim - 1)
    return out.reshape(1, -1) if x.ndim == 1 else out


def binarizer(node, x):
    return where(x > node.attr("threshold", 0.0), 1, 0).to(x.dtype)


def scaler(node, x):
    """``(x - offset) * scale``, as float32 (the operator's output type)."""
    x = x.to(D.float32)
    offset, scale = (const(attribute_list(node, k, [0.0]), x, D.float32) for k in ("offset", "scale"))
    return (x - offset) * scale


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


def _affine(node, x, shape):
    """``x @ W.T + intercepts`` in float32, W the coefficients reshaped to ``shape``."""
    w = const(attribute_list(node, "coefficients"), x, D.float32).reshape(*shape)
    y = x.to(D.float32) @ w.T
    intercepts = attribute_list(node, "intercepts")
    return y if intercepts is None else y + const(intercepts, x, D.float32)


def linear_regressor(node, x):
    return post_transform(node, _affine(node, x, (node.attr("targets", 1), -1)))


def linear_classifier(node, x):
    """(labels, scores): one score per class, or a binary model's one score s as (-s, s)."""
    labels = class_labels(node, "classlabels_ints")
    scores = _affine(node, x, (-1, x.shape[1]))
    if scores.shape[1] == 1 and len(labels) == 2:
        scores = cat([-scores, scores], 1)
    scores = post_transform(node, scores)
    if scores.shape[1] > 1:
        return pick(scores, labels, x), scores
    threshold = 0.0 if node.attr("post_transform", "NONE") == "NONE" else 0.5
    other = label_tensor(["" if isinstance(labels[0], str) else 0], x).reshape(())
    return where(scores.reshape(-1) >= threshold, label_tensor(labels[:1], x).reshape(()), other), scores


def imputer(node, x):
    """Entries equal to the replaced value (NaN by default for floats) take their column's imputed value."""
    floating = x.dtype.is_floating_point
    fill = attribute_list(node, "imputed_value_floats" if floating else "imputed_value_int64s")
    if not fill:
        raise node.error("imputed_value_floats or imputed_value_int64s is missing")
    old = node.attr("replaced_value_float", 0.0) if floating else node.attr("replaced_value_int64", 0)
    hit = x.isnan() if floating and math.isnan(old) else x == old
    return where(hit, const(fill, x, x.dtype), x)


def one_hot_encoder(node, x):
    """(..., categories) float32 indicators of each entry's category; an unknown entry is all
    zeros (``zeros=1``) or an error."""
    cats, dtype = attribute_list(node, "cats_int64s"), D.int64
    if cats is None:
        cats, dtype = attribute_list(node, "cats_strings"), D.string
    if cats is None:
        raise node.error("cats_int64s or cats_strings is missing")
    if (x.dtype is D.string) != (dtype is D.string):
        raise node.error(f"categories of {dtype} cannot match an input of {x.dtype}")
    hit = x.to(dtype).unsqueeze(-1) == const(cats, x, dtype)
    if not node.attr("zeros", 1) and not bool(hit.any(-1).all().item()):
        raise node.error("an input value is not one of the categories (and zeros=0)")
    return hit.to(D.float32)


def label_encoder(node, x):
    """Each entry mapped through keys → values; a missing key gives the default (NaN keys match NaN)."""
    keys, values, default = (_mapping_part(node, part, x) for part in ("keys", "values", "default"))
    if keys is None or values is None:
        raise node.error("the keys or the values are missing")
    if (keys.dtype is D.string) != (x.dtype is D.string):
        raise node.error(f"keys of {keys.dtype} cannot match an input of {x.dtype}")
    keys = keys.to(x.dtype)
    match = x.unsqueeze(-1) == keys
    if x.dtype.is_floating_point:
        match = match | (x.isnan().unsqueeze(-1) & keys.isnan())
    found = values.take(match.to(D.int32).argmax(-1))
    if default is None:  # the spec's defaults
        default = const(LABEL_DEFAULTS.get(found.dtype, -0.0 if found.dtype.is_floating_point else -1), x, found.dtype)
    return where(match.any(-1), found, default.reshape(()).to(found.dtype))


def _mapping_part(node, part, x):
    """LabelEncoder's keys, values or default as a tensor: the ``*_tensor`` attribute (opset 4)
    or the typed lists; None for an absent default."""
    t = node.attr(f"{part}_tensor")
    if t is not None:
        return const(t, x)  # a NumPy array of text becomes a string tensor (ember.text)
    suffix = "s" if part != "default" else ""
    for kind, dtype in (("int64", D.int64), ("float", D.float32), ("string", D.string)):
        v = node.attr(f"{part}_{kind}{suffix}")
        if v is not None:
            return const(v, x, dtype)
    return None


# the specification's default of each value type, where the model gives none
LABEL_DEFAULTS = {D.string: "_Unused", D.int64: -1}


# ------------------------------------------------------------------ tree ensembles
@dataclass
class Forest:
    """A forest as per-state tables (states: every node, leaves included) plus each tree's root."""

    feature: list  # per state: the feature compared
    split: list  # the threshold
    mode: list  # the comparison (a leaf: LEQ, never consulted)
    missing: list  # NaN goes the true way
    on_true: list  # next state when the comparison holds (a leaf: itself)
    on_false: list
    members: list  # per state, BRANCH_MEMBER's set, NaN-padded to the widest (NaN equals nothing)
    weights: list  # per state, what the leaf adds to each target
    hits: list  # per state, which targets the leaf has a weight for
    roots: list

    def depth(self, node) -> int:
        """Steps until every walk from the roots has reached a leaf."""
        depth, level = 0, set(self.roots)
        while any(self.on_true[s] != s for s in level):
            depth += 1
            if depth > len(self.on_true):
                raise node.error("the trees have a cycle")
            level = {t[s] for s in level for t in (self.on_true, self.on_false)}
        return depth


def _walk(node, forest: Forest, x):
    """The leaf state each (sample, tree) reaches: one tensor step per tree level."""
    if x.ndim != 2:
        raise node.error(f"X must be (samples, features), got shape {x.shape}")
    if forest.feature and max(forest.feature) >= x.shape[1]:
        raise node.error(f"X has {x.shape[1]} features, but the trees compare feature {max(forest.feature)}")
    feature_t, split_t = const(forest.feature, x, D.int64), const(forest.split, x, x.dtype)
    mode_t, missing_t = const(forest.mode, x, D.int64), const(forest.missing, x, D.bool_)
    true_t, false_t = const(forest.on_true, x, D.int64), const(forest.on_false, x, D.int64)
    member_t = const(forest.members, x, x.dtype)
    used = sorted({m for k, m in enumerate(forest.mode) if forest.on_true[k] != k})
    state = const(forest.roots, x, D.int64).reshape(1, -1).expand(x.shape[0], len(forest.roots))
    for _ in range(node.cached("depth", lambda: forest.depth(node))):
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
    rows = const(forest.weights, x, x.dtype).take(state, 0)  # (samples, trees, targets)
    if kind in ("SUM", "AVERAGE"):
        out = rows.sum(1)
        out = out / len(forest.roots) if kind == "AVERAGE" else out
    elif kind in ("MIN", "MAX"):
        hits = const(forest.hits, x, D.bool_).take(state, 0)
        largest = LARGEST.get(x.dtype.name, LARGEST["float32"])
        picked = where(hits, rows, largest if kind == "MIN" else -largest)
        out = picked.amin(1) if kind == "MIN" else picked.amax(1)
    else:
        raise node.error(f"aggregate_function {kind!r} is not one of {', '.join(AGGREGATES)}")
    return out if base is None else out + const(base, x, x.dtype)


def tree_ensemble(node, x):
    """TreeEnsemble (ai.onnx.ml 5): leaves in their own arrays, each one (target, weight)."""
    forest = node.cached("forest", lambda: _forest(node))
    state = _walk(node, forest, x)
    kind = AGGREGATES[node.attr("aggregate_function", 1)]
    return post_transform(node, _aggregate(node, forest, state, x, kind))


def _forest(node) -> Forest:
    """TreeEnsemble's arrays as a Forest: leaf j is state n_nodes + j."""
    true_ids, false_ids = attribute_list(node, "nodes_truenodeids"), attribute_list(node, "nodes_falsenodeids")
    true_leaf, false_leaf = attribute_list(node, "nodes_trueleafs"), attribute_list(node, "nodes_falseleafs")
    targets = [int(t) for t in attribute_list(node, "leaf_targetids")]
    leaf_weights = attribute_list(node, "leaf_weights")
    n_nodes, n_leaves = len(true_ids), len(targets)
    n_targets = node.attr("n_targets") or max(targets) + 1
    states = n_nodes + n_leaves
    on_true = [int(i) + n_nodes * bool(leaf) for i, leaf in zip(true_ids, true_leaf)] + list(range(n_nodes, states))
    on_false = [int(i) + n_nodes * bool(leaf) for i, leaf in zip(false_ids, false_leaf)] + list(range(n_nodes, states))
    if not all(0 <= s < states for s in on_true + on_false):
        raise node.error("a true or false id points past the nodes or leaves")
    roots = []
    for r in map(int, attribute_list(node, "tree_roots")):
        lone = true_leaf[r] and false_leaf[r] and true_ids[r] == false_ids[r]  # a tree that is one leaf
        roots.append(on_true[r] if lone else r)
    modes = [int(m) for m in attribute_list(node, "nodes_modes")]
    weights = [[0.0] * n_targets for _ in range(states)]
    hits = [[False] * n_targets for _ in range(states)]
    for j, (t, w) in enumerate(zip(targets, leaf_weights)):
        weights[n_nodes + j][t], hits[n_nodes + j][t] = float(w), True
    pad = [0] * n_leaves
    return Forest(
        feature=[int(f) for f in attribute_list(node, "nodes_featureids")] + pad,
        split=[float(v) for v in attribute_list(node, "nodes_splits")] + pad,
        mode=modes + [LEQ] * n_leaves,
        missing=[bool(m) for m in attribute_list(node, "nodes_missing_value_tracks_true", [0] * n_nodes)]
        + [False] * n_leaves,
        on_true=on_true,
        on_false=on_false,
        members=_members(node, modes, n_leaves),
        weights=weights,
        hits=hits,
        roots=roots,
    )


def tree_ensemble_regressor(node, x):
    """TreeEnsembleRegressor (ai.onnx.ml 1-3): leaves are nodes of mode LEAF."""
    forest = node.cached("forest", lambda: _legacy_forest(node, "target", node.attr("n_targets", 1)))
    x = x if x.dtype in (D.float32, D.float64) else x.to(D.float32)
    state = _walk(node, forest, x)
    out = _aggregate(node, forest, state, x, node.attr("aggregate_function", "SUM"), _base(node))
    return post_transform(node, out)


def tree_ensemble_classifier(node, x):
    """TreeEnsembleClassifier (ai.onnx.ml 1-3): (labels, per-class scores). A binary model
    scores one class, s; it reports (1 - s, s), or (-s, s) before a LOGISTIC or SOFTMAX."""
    labels = class_labels(node, "classlabels_int64s")
    forest = node.cached("forest", lambda: _legacy_forest(node, "class", len(labels)))
    x = x if x.dtype in (D.float32, D.float64) else x.to(D.float32)
    state = _walk(node, forest, x)
    scores = _aggregate(node, forest, state, x, "SUM", _base(node)).to(D.float32)
    if len(set(attribute_list(node, "class_ids"))) == 1:  # binary
        one = scores.narrow(1, 0, 1)
        other = 1 - one if node.attr("post_transform", "NONE") in ("NONE", "PROBIT") else -one
        scores = cat([other, one], 1)
    scores = post_transform(node, scores)
    return pick(scores, labels, x), scores


def _legacy_forest(node, prefix: str, n_targets: int) -> Forest:
    trees = [int(t) for t in attribute_list(node, "nodes_treeids")]
    ids = [int(i) for i in attribute_list(node, "nodes_nodeids")]
    where_is = {(t, i): k for k, (t, i) in enumerate(zip(trees, ids))}
    names = node.attr("nodes_modes")
    unknown = sorted(set(names) - set(MODE_NAMES) - {"LEAF"})
    if unknown:
        raise node.error(f"nodes_modes {', '.join(unknown)}: ember knows {', '.join(MODE_NAMES)} and LEAF")
    n = len(names)

    def successor(key):
        out = list(range(n))
        for k, (t, i) in enumerate(zip(trees, attribute_list(node, key))):
            if names[k] != "LEAF":
                if (t, int(i)) not in where_is:
                    raise node.error(f"{key}: tree {t} has no node {int(i)}")
                out[k] = where_is[t, int(i)]
        return out

    weights = [[0.0] * n_targets for _ in range(n)]
    hits = [[False] * n_targets for _ in range(n)]
    listed = attribute_list(node, f"{prefix}_weights") or attribute_list(node, f"{prefix}_weights_as_tensor")
    for t, i, target, w in zip(
        attribute_list(node, f"{prefix}_treeids"),
        attribute_list(node, f"{prefix}_nodeids"),
        attribute_list(node, f"{prefix}_ids"),
        listed,
    ):
        k = where_is[int(t), int(i)]
        weights[k][int(target)] += float(w)
        hits[k][int(target)] = True
    first: dict[int, int] = {}  # each tree's root: its first node
    for k, t in enumerate(trees):
        first.setdefault(t, k)
    split = attribute_list(node, "nodes_values") or attribute_list(node, "nodes_values_as_tensor")
    return Forest(
        feature=[int(f) for f in attribute_list(node, "nodes_featureids")],
        split=[float(v) for v in split],
        mode=[MODE_NAMES.get(m, LEQ) for m in names],
        missing=[bool(m) for m in attribute_list(node, "nodes_missing_value_tracks_true", [0] * n)],
        on_true=successor("nodes_truenodeids"),
        on_false=successor("nodes_falsenodeids"),
        members=[[math.nan]] * n,
        weights=weights,
        hits=hits,
        roots=list(first.values()),
    )


# ------------------------------------------------------------------ helpers
def attribute_list(node, name, default=None):
    """A list or tensor attribute as a flat Python list (tensor attributes arrive as NumPy
    arrays, or as ember tensors where numpy is missing)."""
    v = node.attr(name)
    if v is None:
        return default
    if hasattr(v, "tolist"):  # a NumPy array or an ember tensor
        v = v.reshape(-1).tolist()
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _members(node, modes, n_leaves):
    """Per state, its BRANCH_MEMBER set, NaN-padded to the widest."""
    values = attribute_list(node, "membership_values")
    sets: list[list[float]] = [[] for _ in range(len(modes) + n_leaves)]
    if MEMBER in modes:
        if values is None:
            raise node.error("a BRANCH_MEMBER node needs membership_values")
        groups, group = [], []
        for v in values:  # the sets, in node order, each ended by a NaN
            if math.isnan(v):
                groups.append(group)
                group = []
            else:
                group.append(float(v))
        member_nodes = [k for k, m in enumerate(modes) if m == MEMBER]
        for k, g in zip(member_nodes, groups + [group]):
            sets[k] = g
    width = max(1, max(len(s) for s in sets))
    return [s + [math.nan] * (width - len(s)) for s in sets]


def _base(node):
    return attribute_list(node, "base_values") or attribute_list(node, "base_values_as_tensor")


def class_labels(node, key):
    """A classifier's labels: ints from ``key`` (classlabels_ints, ...) or str from classlabels_strings."""
    labels = attribute_list(node, key)
    if labels is not None:
        return [int(v) for v in labels]
    labels = attribute_list(node, "classlabels_strings")
    if labels is None:
        raise node.error(f"{key} or classlabels_strings is missing")
    return [str(v) for v in labels]


def label_tensor(labels, x):
    """``labels`` as an int64 or a string tensor (ember.string) on ``x``'s backend."""
    return const(labels, x, D.string if labels and isinstance(labels[0], str) else D.int64)


def pick(scores, labels, x):
    """The label of each row's highest score."""
    return label_tensor(labels, x).take(scores.argmax(1))


def zip_map(node, x):
    """ZipMap: a Python list with one dict per row of ``x``, class label → probability (a
    Python float), as onnxruntime returns ONNX's sequence of maps."""
    labels = class_labels(node, "classlabels_int64s")
    rows = x.to(D.float32).tolist()
    if x.ndim != 2 or x.shape[1] != len(labels):
        raise node.error(f"input of shape {list(x.shape)} does not have one column per label ({len(labels)})")
    return [dict(zip(labels, row)) for row in rows]


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
    "ZipMap": (zip_map, 1),
}

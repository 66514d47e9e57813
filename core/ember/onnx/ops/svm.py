"""The ``ai.onnx.ml`` support vector machines: SVMRegressor and SVMClassifier (scikit-learn's SVR,
SVC, NuSVC, OneClassSVM through skl2onnx).

Everything is a few products: the kernel between every sample and every support vector is one
(samples, vectors) matrix; the one-against-one decision values of all class pairs are that
matrix times one (vectors, pairs) matrix of dual coefficients; the votes are the signs times
0/1 matrices. Probabilities follow libsvm: each pair's decision value through its fitted
sigmoid, then the pairwise coupling solved by libsvm's fixed-point iteration, for all samples at
once (a sample stops where libsvm stops it, so the result is libsvm's).
"""

from __future__ import annotations

from ... import dtypes as D
from ...tensor import cat, where
from .common import const
from .ml import attribute_list, class_labels, label_tensor, pick, post_transform


def _kernel(node, x, vectors: list, n: int):
    """(samples, vectors) kernel values; kernel_params are (gamma, coef0, degree)."""
    gamma, coef0, degree = (list(node.attr("kernel_params") or []) + [0.0, 0.0, 0.0])[:3]
    kind = node.attr("kernel_type", "LINEAR")
    if x.ndim != 2 or x.shape[1] * n != len(vectors):
        raise node.error(f"X must be (samples, {len(vectors) // n}) like the support vectors, got shape {x.shape}")
    sv = const(vectors, x, D.float32).reshape(n, -1)
    dot = x @ sv.T
    if kind == "LINEAR":
        return dot
    if kind == "POLY":
        return (gamma * dot + coef0) ** int(degree)
    if kind == "SIGMOID":
        return (gamma * dot + coef0).tanh()
    if kind == "RBF":  # |x - v|² expanded: one product instead of a (samples, vectors, features) difference
        square = (x * x).sum(1, keepdim=True) - 2 * dot + (sv * sv).sum(1)
        return (-gamma * square.clamp(min=0)).exp()
    raise node.error(f"kernel_type {kind!r} is not one of LINEAR, POLY, RBF, SIGMOID")


def svm_regressor(node, x):
    x = x.to(D.float32)
    coefficients = const(attribute_list(node, "coefficients"), x, D.float32).reshape(-1, 1)
    rho = float(attribute_list(node, "rho")[0])
    n = node.attr("n_supports", 0)
    if n > 0:
        y = _kernel(node, x, attribute_list(node, "support_vectors"), n) @ coefficients + rho
    else:  # liblinear: the coefficients are the weight vector
        y = x @ coefficients + rho
    if node.attr("one_class", 0):
        y = where(y > 0, 1.0, -1.0)
    return post_transform(node, y)


def svm_classifier(node, x):
    """(labels, scores): the class with the most one-against-one votes; the scores are the
    coupled probabilities where the model has them, else the pairs' decision values."""
    x = x.to(D.float32)
    labels = class_labels(node, "classlabels_ints")
    k = max(len(labels), 1)
    n, pairs, mix, win, lose = node.cached("pairs", lambda: _pair_tables(node, k))
    kernel = _kernel(node, x, attribute_list(node, "support_vectors"), n)
    decision = kernel @ const(mix, x, D.float32) + const(attribute_list(node, "rho"), x, D.float32)
    positive = (decision > 0).to(D.float32)
    votes = positive @ const(win, x, D.float32) + (1 - positive) @ const(lose, x, D.float32)
    label = pick(votes, labels, x) if labels else votes.argmax(1)
    probabilities = bool(attribute_list(node, "prob_a"))
    if len(pairs) == 1 and not probabilities and min(attribute_list(node, "coefficients")) >= 0:
        label = where(
            votes.amax(1) >= 0.5, label_tensor(labels[1:2], x).reshape(()), label
        )  # libsvm's rule for all-positive weights
    if probabilities:
        scores = _coupled(node, decision, pairs, k, x)
    elif len(pairs) == 1:  # one decision value s, reported as (-s, s) before the transform
        scores = cat([-decision, decision], 1)
    else:
        scores = decision
    return label, post_transform(node, scores)


def _pair_tables(node, k):
    """(support vectors, class pairs, the (vectors, pairs) dual-coefficient matrix, and the
    (pairs, classes) 0/1 matrices of each pair's winner when its value is positive or not)."""
    per_class = [int(c) for c in attribute_list(node, "vectors_per_class", [])]
    coefficients = [float(c) for c in attribute_list(node, "coefficients")]
    n = sum(per_class)
    if n == 0:
        raise node.error("a linear SVMClassifier (no support vectors) is not supported by ember")
    start = [sum(per_class[:c]) for c in range(k)]
    pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
    # decision value of pair (i, j): class i's vectors weighted by row j-1 of the dual
    # coefficients, class j's by row i
    mix = [[0.0] * len(pairs) for _ in range(n)]
    win = [[0.0] * k for _ in pairs]
    lose = [[0.0] * k for _ in pairs]
    for e, (i, j) in enumerate(pairs):
        for v in range(start[i], start[i] + per_class[i]):
            mix[v][e] = coefficients[(j - 1) * n + v]
        for v in range(start[j], start[j] + per_class[j]):
            mix[v][e] = coefficients[i * n + v]
        win[e][i], lose[e][j] = 1.0, 1.0
    return n, pairs, mix, win, lose


def _coupled(node, decision, pairs, k, x):
    """libsvm's multiclass_probability for every sample: min_p p'Qp with sum p = 1, by its
    fixed-point sweep, each sample stopped once its error is under 0.005 / k."""
    a = const(attribute_list(node, "prob_a"), x, decision.dtype)
    b = const(attribute_list(node, "prob_b"), x, decision.dtype)
    r = (1 - (decision * a + b).sigmoid()).clamp(1e-7, 1 - 1e-7)  # P(class i | pair (i, j))
    m = x.shape[0]
    rows: list[list] = [[None] * k for _ in range(k)]  # rows[s][t] = R[s, t], per sample
    for e, (i, j) in enumerate(pairs):
        rows[i][j] = r.narrow(1, e, 1)
        rows[j][i] = 1 - rows[i][j]
    zero = r.narrow(1, 0, 1) * 0
    q = [[zero] * k for _ in range(k)]  # q[t][u]: Q[t, u] per sample, (samples, 1) each
    for t in range(k):
        q[t][t] = sum((rows[s][t] * rows[s][t] for s in range(k) if s != t), zero)
        for u in range(k):
            if u != t:
                q[t][u] = -rows[u][t] * rows[t][u]
    qm = cat([cat(q[t], 1).unsqueeze(1) for t in range(k)], 1)  # (samples, k, k)
    p = (zero + 1.0 / k).expand(m, k)
    eps, done = 0.005 / k, zero > 1  # done: all False, per sample
    for _ in range(max(100, k)):
        qp = (qm @ p.unsqueeze(-1)).squeeze(-1)
        pqp = (p * qp).sum(1, keepdim=True)
        done = done | ((qp - pqp).abs().amax(1, keepdim=True) < eps)
        if bool(done.all().item()):
            break
        cols = [p.narrow(1, t, 1) for t in range(k)]
        qps = [qp.narrow(1, t, 1) for t in range(k)]
        for t in range(k):
            diff = (pqp - qps[t]) / q[t][t]
            cols[t] = cols[t] + diff
            pqp = (pqp + diff * (diff * q[t][t] + 2 * qps[t])) / ((1 + diff) * (1 + diff))
            cols = [c / (1 + diff) for c in cols]
            qps = [(qps[u] + diff * q[t][u]) / (1 + diff) for u in range(k)]
        p = where(done, p, cat(cols, 1))
    return p


OPS = {
    "SVMRegressor": (svm_regressor, 1),
    "SVMClassifier": (svm_classifier, 1),
}

"""The training domain's optimizer steps (ai.onnx.preview.training): Adagrad, Adam, Momentum.

Each takes a learning rate R, a step count T and one or more groups of tensors (X, G, state);
the update rules are those of ONNX's specification, in ember tensor ops.
"""

from __future__ import annotations

import math

from .common import scalar


def _groups(args, per):
    """Split (X1..Xn, G1..Gn, S1..Sn, ...) into n tuples of `per` tensors."""
    n = len(args) // per
    return [tuple(args[k * n + i] for k in range(per)) for i in range(n)]


def adagrad(node, r, t, *args):
    r, t = float(scalar(r)), float(scalar(t))
    decay, eps, norm = node.attr("decay_factor", 0.0), node.attr("epsilon", 0.0), node.attr("norm_coefficient", 0.0)
    rate = r / (1 + t * decay)
    xs, hs = [], []
    for x, g, h in _groups(args, 3):
        g = norm * x + g
        h = h + g * g
        xs.append((x - rate * g / (h.sqrt() + eps)).to(x.dtype))
        hs.append(h.to(x.dtype))
    return (*xs, *hs)


def adam(node, r, t, *args):
    r, t = float(scalar(r)), int(scalar(t))
    alpha, beta = node.attr("alpha", 0.9), node.attr("beta", 0.999)
    eps, norm, post = (
        node.attr("epsilon", 0.0),
        node.attr("norm_coefficient", 0.0),
        node.attr("norm_coefficient_post", 0.0),
    )
    rate = r * math.sqrt(1 - beta**t) / (1 - alpha**t) if t > 0 else r
    xs, vs, hs = [], [], []
    for x, g, v, h in _groups(args, 4):
        g = norm * x + g
        v = alpha * v + (1 - alpha) * g
        h = beta * h + (1 - beta) * g * g
        xs.append(((1 - post) * (x - rate * (v / (h.sqrt() + eps)))).to(x.dtype))
        vs.append(v.to(x.dtype))
        hs.append(h.to(x.dtype))
    return (*xs, *vs, *hs)


def momentum(node, r, t, *args):
    r, t = float(scalar(r)), int(scalar(t))
    alpha, beta, norm = node.attr("alpha"), node.attr("beta"), node.attr("norm_coefficient")
    nesterov = node.attr("mode", "standard") == "nesterov"
    b = beta if t > 0 else 1.0
    xs, vs = [], []
    for x, g, v in _groups(args, 3):
        g = norm * x + g
        v = alpha * v + b * g
        xs.append((x - r * (g + alpha * v) if nesterov else x - r * v).to(x.dtype))
        vs.append(v.to(x.dtype))
    return (*xs, *vs)


def gradient(node, *_):
    """d y / d x for each x in the attribute `xs` (the sum of y's elements when y is not a
    scalar): the nodes before this one run again with the xs as fresh leaves, under autodiff."""
    from ... import autodiff

    xs, y = list(node.attr("xs")), node.attr("y")
    env = dict(node.scope)
    leaves = [env[x].detach().requires_grad_() for x in xs]
    env.update(zip(xs, leaves))
    with autodiff.enable_grad():
        node.program.run_before(node, env)
        return tuple(autodiff.grad_of(env[y], leaves, allow_unused=True))


OPS = {"Adagrad": (adagrad, 1), "Adam": (adam, 1), "Momentum": (momentum, 1), "Gradient": (gradient, 1)}

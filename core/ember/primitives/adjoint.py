"""Helpers the VJP rules share (written in Tensor ops, like the rules)."""

from __future__ import annotations


def unbroadcast(g, shape):
    """Sum ``g`` down to ``shape``: the adjoint of broadcasting."""
    if g.shape == tuple(shape):
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, s in enumerate(shape) if s == 1 and g.shape[i + lead] != 1)
    out = g.sum(axes, keepdim=True) if axes else g
    return out.reshape(shape)


def needs(x) -> bool:
    """Does input ``x`` want a cotangent? Skipping the others costs nothing to check and saves
    real work: the data side of ``x @ w`` would be a whole GEMM per layer. (A Python scalar
    operand has no ``requires_grad``.)"""
    return getattr(x, "requires_grad", False)


def binary_vjp(rule_a, rule_b):
    """A binary primitive's VJP from one rule per operand (as in HIPS autograd), each giving a
    full-shape cotangent that is then unbroadcast to its operand's shape."""

    def vjp(g, out, a, b):
        return (
            unbroadcast(rule_a(g, out, a, b), a.shape) if needs(a) else None,
            unbroadcast(rule_b(g, out, a, b), b.shape) if needs(b) else None,
        )

    return vjp


def keepdims_shape(shape, axes):
    """``shape`` with the reduced ``axes`` kept as 1s."""
    axes = {a % max(len(shape), 1) for a in axes}
    return tuple(1 if i in axes else s for i, s in enumerate(shape))

"""Optional fused ops: a table from name to the reference decomposition, in Tensor ops.

A backend may run some compositions faster as one kernel (softmax, layer norm, an Adam step).
It says so by listing the name in ``capabilities().fused`` and putting a function over its
own buffers in ``backend.fused_impls[name]``, with the reference's signature (tensors become
buffers, ``None`` stays ``None``, keyword parameters pass through). It returns a buffer, or a
tuple of buffers where the reference returns a tuple. A backend that declares nothing still
runs every op here: :func:`run` falls back to the decomposition.

The conformance suite (tier 4) checks each declared fused op against its decomposition.
Gradients never go through a fused kernel: when an input needs one, :func:`run` takes the
decomposition, whose primitives have VJP rules.

>>> import ember
>>> x = ember.tensor([[1.0, 2.0, 3.0]])
>>> [round(v, 4) for v in run("softmax", x, dim=-1).tolist()[0]]
[0.09, 0.2447, 0.6652]
"""
from __future__ import annotations

import math
import weakref

from . import dispatch


# ----------------------------------------------------------------------------- decompositions
def softmax(x, *, dim=-1):
    """``exp(x) / sum(exp(x))`` along ``dim``, shifted by the max for stability."""
    return x.softmax(dim)


def log_softmax(x, *, dim=-1):
    """``x - logsumexp(x)`` along ``dim``."""
    return x.log_softmax(dim)


def cross_entropy(logits, target):
    """Mean negative log-likelihood of integer class ``target`` (N,) under ``logits`` (N, C)."""
    picked = logits.log_softmax(-1).gather(1, target.reshape(-1, 1))
    return -picked.mean()


def layer_norm(x, weight, bias, *, normalized_shape, eps=1e-5):
    """Normalize over the trailing ``normalized_shape`` dims (biased variance, as PyTorch),
    then scale by ``weight`` and shift by ``bias`` (either may be None)."""
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    mean = x.mean(axes, keepdim=True)
    centered = x - mean
    var = (centered * centered).mean(axes, keepdim=True)
    out = centered * (var + eps).rsqrt()
    if weight is not None:
        out = out * weight
    return out + bias if bias is not None else out


def gelu(x, *, approximate="none"):
    """GELU: ``x * Phi(x)`` with the exact erf, or PyTorch's tanh approximation."""
    if approximate == "tanh":
        inner = (x + x * x * x * 0.044715) * math.sqrt(2 / math.pi)
        return x * 0.5 * (inner.tanh() + 1)
    return x * 0.5 * ((x * (1 / math.sqrt(2))).erf() + 1)


def scaled_dot_product_attention(q, k, v, *, causal=False, scale=None):
    """``softmax(q @ k^T * scale) @ v`` over (..., L, E) inputs; ``causal`` masks the future."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.mT) * scale
    if causal:
        from .tensor import arange
        n, m = scores.shape[-2], scores.shape[-1]
        keep = arange(n, backend=q.backend).unsqueeze(1) >= arange(m, backend=q.backend)
        scores = scores.masked_fill(~keep, -math.inf)
    return scores.softmax(-1) @ v


def _optimizer_rule(name):
    # The optimizer rules live with the optimizers; one decomposition, two users.
    def rule(*args, **params):
        from .optim import functional
        return getattr(functional, name)(*args, **params)
    rule.__name__ = name
    rule.__doc__ = f"The reference ``{name}`` of ember.optim.functional (returns new tensors)."
    return rule


#: name -> reference decomposition. The names a backend may list in ``capabilities().fused``.
FUSED = {
    "softmax": softmax,
    "log_softmax": log_softmax,
    "cross_entropy": cross_entropy,
    "layer_norm": layer_norm,
    "gelu": gelu,
    "scaled_dot_product_attention": scaled_dot_product_attention,
    "sgd_step": _optimizer_rule("sgd_step"),
    "adam_step": _optimizer_rule("adam_step"),
    "rmsprop_step": _optimizer_rule("rmsprop_step"),
}


# ----------------------------------------------------------------------------- dispatch
_DECLARED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def declared(backend) -> frozenset:
    """The fused ops ``backend`` declares and provides (cached per backend object).

    >>> import ember
    >>> sorted(declared(ember.get_backend("numpy")))
    []
    """
    names = _DECLARED.get(backend)
    if names is None:
        impls = getattr(backend, "fused_impls", {}) or {}
        names = _DECLARED[backend] = frozenset(n for n in backend.capabilities().fused
                                               if n in FUSED and n in impls)
    return names


def run(name, *args, **params):
    """Run fused op ``name``: the backend's kernel if it declares one and no gradient is
    needed, else the reference decomposition.

    >>> import ember
    >>> logits = ember.tensor([[2.0, 0.0], [0.0, 2.0]])
    >>> round(run("cross_entropy", logits, ember.tensor([0, 1])).item(), 4)
    0.1269
    """
    tensors = [a for a in args if isinstance(a, dispatch.Tensor)]
    backend = tensors[0]._backend
    needs_grad = dispatch.GRAD_ENABLED[0] and any(t.requires_grad for t in tensors)
    # While ember.jit traces, buffers are graph nodes, not arrays: record the decomposition
    # (the backend's compile() fuses it again).
    if needs_grad or dispatch.TRACER[0] is not None or name not in declared(backend):
        return FUSED[name](*args, **params)
    out = backend.fused_impls[name](*(a._data if isinstance(a, dispatch.Tensor) else a for a in args),
                                    **params)
    if isinstance(out, tuple):
        return tuple(None if b is None else dispatch._wrap(b, backend, None) for b in out)
    return dispatch._wrap(out, backend, None)

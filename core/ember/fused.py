"""Optional fused ops: a table from name to the reference decomposition, in Tensor ops.

A backend may run some compositions faster as one kernel (softmax, layer norm, an Adam step).
It says so by listing the name in ``capabilities().fused`` and putting a function over its
own buffers in ``backend.fused_impls[name]``, with the reference's signature (tensors become
buffers, ``None`` stays ``None``, keyword parameters pass through). It returns a buffer, or a
tuple of buffers where the reference returns a tuple. A backend that declares nothing still
runs every op here: :func:`run` falls back to the decomposition.

The conformance suite (tier 4) checks each declared fused op against its decomposition.

Gradients: the backward passes are fused ops too (``softmax_backward``, ...), each with its
own decomposition. :data:`VJPS` says which backward op gives a forward op's VJP. When an input
needs a gradient and the backend declares both ops, :func:`run` runs the forward kernel and
records one autodiff node (autodiff.custom_vjp) whose rule calls ``run(<backward op>)``: the
backward kernel in plain training, the backward op's decomposition when a higher derivative
is being recorded (its primitives have VJP rules). Otherwise :func:`run` takes the forward
decomposition. ember.jit follows the same rules while it traces, recording one graph node per
kernel (jit.trace.Tracer.fused) where the graph's backend declares the ops. An op in
:data:`SAVES` (``batch_norm``) returns ``(out, *saved)``; trained on its kernel, only ``out``
is differentiable and its node keeps the saved buffers (the batch statistics) for the rule,
so that the backward kernel need not recompute them.

>>> import ember
>>> x = ember.tensor([[1.0, 2.0, 3.0]])
>>> [round(v, 4) for v in run("softmax", x, dim=-1).tolist()[0]]
[0.09, 0.2447, 0.6652]
"""
from __future__ import annotations

import math
import weakref

from . import dispatch
from .autodiff import VJP, custom_vjp, no_grad


# ----------------------------------------------------------------------------- decompositions
def softmax(x, *, dim=-1):
    """``exp(x) / sum(exp(x))`` along ``dim``, shifted by the max for stability."""
    return x.softmax(dim)


def log_softmax(x, *, dim=-1):
    """``x - logsumexp(x)`` along ``dim``."""
    return x.log_softmax(dim)


def cross_entropy(logits, target, *, ignore_index=-100):
    """Mean negative log-likelihood of integer class ``target`` (N,) under ``logits`` (N, C),
    over the rows whose target is not ``ignore_index`` (PyTorch's ``F.cross_entropy``)."""
    # One decomposition, two users: ember.nn.functional's (its target checks included).
    from .nn.functional import nll_loss
    return nll_loss(logits.log_softmax(-1), target, ignore_index=ignore_index)


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


def pool_geometry(size, kernel, stride, padding, dilation, ceil_mode):
    """(output size, extra cells on the far side) of one spatial dim of a pool: PyTorch's rule,
    for kernels that compute the output shape themselves.

    >>> pool_geometry(5, 2, 2, 0, 1, False), pool_geometry(5, 2, 2, 0, 1, True)
    ((2, 0), (3, 1))
    """
    from .nn.functional import _pool_geometry
    return _pool_geometry(size, kernel, stride, padding, dilation, ceil_mode)


def _max_pool_index(x, kernel_size, stride, padding, dilation, ceil_mode):
    """``(padded, index, widths)``: ``x`` padded with -inf (ceil_mode's extra cells included);
    per output element, the flat index into ``padded`` of its window's first maximum (a later
    NaN replaces the choice, as in PyTorch); the pad widths. Computed without recording a graph."""
    from .nn.functional import _kernel_slices, _pool_input
    from .tensor import arange
    padded, k, s, d, (oh, ow), widths = _pool_input(x, kernel_size, stride, padding, dilation, ceil_mode,
                                                    -math.inf, "max_pool2d")
    *lead, hp, wp = padded.shape
    with no_grad():
        slices = _kernel_slices(padded.detach(), k, s, d, (oh, ow))
        best, arg = slices[0], 0
        for n, piece in enumerate(slices[1:], 1):
            # arithmetic select: np.where is several times slower on unpredictable masks
            better = ((piece > best) | (piece != piece)).long()
            arg = arg + better * ((n // k[1]) * d[0] * wp + (n % k[1]) * d[1] - arg)
            best = best.maximum(piece)
        be = x.backend
        corner = arange(oh, backend=be).unsqueeze(1) * (s[0] * wp) + arange(ow, backend=be) * s[1]
        plane = arange(math.prod(lead), backend=be).reshape(tuple(lead) + (1, 1)) * (hp * wp)
        index = plane + corner + arg
    return padded, index, widths


def max_pool2d(x, *, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """Max over sliding windows of the last two dims (padding counts as -inf; NaN wins).

    Without a gradient to record it is the elementwise maximum of the k*k kernel-position
    slices. With one, it finds each window's first maximum the same way (unrecorded), then
    gathers it with one ``take``: the gradient goes to that single element, as in PyTorch, and
    the backward pass is one scatter-add instead of k*k tie-splitting rules.
    """
    from .autodiff import is_grad_enabled
    from .nn.functional import _kernel_slices, _pool_input, _total
    if not (x.requires_grad and is_grad_enabled()):
        padded, k, s, d, out_size, _ = _pool_input(x, kernel_size, stride, padding, dilation, ceil_mode,
                                                   -math.inf, "max_pool2d")
        return _total(_kernel_slices(padded, k, s, d, out_size), dispatch.Tensor.maximum)
    padded, index, _ = _max_pool_index(x, kernel_size, stride, padding, dilation, ceil_mode)
    return padded.reshape(-1).take(index, 0)


def _batch_stats(x):
    """Per-channel mean and biased variance of ``x`` (N, C, ...) over every dim but 1, keepdim."""
    axes = (0,) + tuple(range(2, x.ndim))
    mean = x.mean(axes, keepdim=True)
    centered = x - mean
    return mean, centered, (centered * centered).mean(axes, keepdim=True)


def batch_norm(x, weight, bias, *, eps=1e-5):
    """Batch normalization in training mode over ``x`` (N, C, ...): normalize each channel by
    its batch mean and biased variance, then scale by ``weight`` and shift by ``bias`` (C,)
    (either may be None). Returns ``(out, mean, var)``, the statistics of shape (C,) for the
    running averages; a kernel's statistics carry no gradient (F.batch_norm uses them so)."""
    mean, centered, var = _batch_stats(x)
    out = centered * (var + eps).rsqrt()
    shape = (1, -1) + (1,) * (x.ndim - 2)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out, mean.reshape(-1), var.reshape(-1)


# ----------------------------------------------------------------------------- backward ops
# Each takes the upstream gradient first (PyTorch's *_backward order) and returns the
# forward op's input gradient(s).
def softmax_backward(grad, out, *, dim=-1):
    """The VJP of softmax from its output ``out``: ``out * (grad - sum(grad * out))``."""
    return out * (grad - (grad * out).sum(dim, keepdim=True))


def log_softmax_backward(grad, out, *, dim=-1):
    """The VJP of log_softmax from its output ``out``: ``grad - exp(out) * sum(grad)``."""
    return grad - out.exp() * grad.sum(dim, keepdim=True)


def cross_entropy_backward(grad, logits, target, *, ignore_index=-100):
    """d cross_entropy / d logits times the scalar ``grad``: ``(softmax - one_hot) * grad / n``
    on the ``n`` rows that count, zero on the ignored ones (all of them when ``n`` is 0, as in
    PyTorch, though the loss is then NaN)."""
    from .tensor import arange, where
    valid = target != ignore_index
    w = valid.to(logits.dtype)
    one_hot = (where(valid, target, 0).reshape(-1, 1) == arange(logits.shape[-1], backend=logits.backend))
    return (logits.softmax(-1) - one_hot.to(logits.dtype)) * (w * (grad / w.sum().maximum(1))).reshape(-1, 1)


def gelu_backward(grad, x, *, approximate="none"):
    """d gelu / dx times ``grad``: ``Phi(x) + x * phi(x)``, or the tanh form's derivative."""
    if approximate == "tanh":
        k = math.sqrt(2 / math.pi)
        t = ((x + x * x * x * 0.044715) * k).tanh()
        slope = (x * x * (3 * 0.044715) + 1) * k
        return grad * ((t + 1) * 0.5 + x * 0.5 * (1 - t * t) * slope)
    cdf = ((x * (1 / math.sqrt(2))).erf() + 1) * 0.5
    pdf = (x * x * -0.5).exp() * (1 / math.sqrt(2 * math.pi))
    return grad * (cdf + x * pdf)


def layer_norm_backward(grad, x, weight, bias, *, normalized_shape, eps=1e-5):
    """The gradients of layer_norm for ``(x, weight, bias)`` (None for an absent parameter):
    ``dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))`` with ``gw = grad * weight``."""
    from .autodiff import unbroadcast
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    centered = x - x.mean(axes, keepdim=True)
    rstd = ((centered * centered).mean(axes, keepdim=True) + eps).rsqrt()
    xhat = centered * rstd
    gw = grad if weight is None else grad * weight
    dx = (gw - gw.mean(axes, keepdim=True) - xhat * (gw * xhat).mean(axes, keepdim=True)) * rstd
    return (dx, None if weight is None else unbroadcast(grad * xhat, weight.shape),
            None if bias is None else unbroadcast(grad, bias.shape))


def max_pool2d_backward(grad, x, *, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """The VJP of max_pool2d: each output's ``grad`` added to its window's first maximum in
    ``x`` (overlapping windows accumulate; a window whose maximum is padding gives nothing)."""
    padded, index, widths = _max_pool_index(x, kernel_size, stride, padding, dilation, ceil_mode)
    flat = padded._full_like(0.0, shape=(padded.numel(),)).index_add(0, index, grad)
    lo = [w[0] for w in widths]
    return flat.reshape(padded.shape)._slice(lo, [a + n for a, n in zip(lo, x.shape)], [1] * x.ndim)


def batch_norm_backward(grad, x, weight, bias, mean, var, *, eps=1e-5):
    """The gradients of batch_norm for ``(x, weight, bias)`` (None for an absent parameter),
    given the batch statistics it returned: with ``xhat = (x - mean) / sqrt(var + eps)`` and
    ``gw = grad * weight``, ``dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))`` over every
    dim but the channel dim, ``dweight = sum(grad * xhat)``, ``dbias = sum(grad)``."""
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    rstd = (var + eps).rsqrt().reshape(shape)
    xhat = (x - mean.reshape(shape)) * rstd
    gw = grad if weight is None else grad * weight.reshape(shape)
    dx = (gw - gw.mean(axes, keepdim=True) - xhat * (gw * xhat).mean(axes, keepdim=True)) * rstd
    return (dx, None if weight is None else (grad * xhat).sum(axes), None if bias is None else grad.sum(axes))


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
    "max_pool2d": max_pool2d,
    "batch_norm": batch_norm,
    "softmax_backward": softmax_backward,
    "log_softmax_backward": log_softmax_backward,
    "cross_entropy_backward": cross_entropy_backward,
    "gelu_backward": gelu_backward,
    "layer_norm_backward": layer_norm_backward,
    "max_pool2d_backward": max_pool2d_backward,
    "batch_norm_backward": batch_norm_backward,
    "sgd_step": _optimizer_rule("sgd_step"),
    "adam_step": _optimizer_rule("adam_step"),
    "rmsprop_step": _optimizer_rule("rmsprop_step"),
    # Multi-tensor forms: lists of tensors in, lists out (ember.optim.functional.FOREACH);
    # called by Optimizer.step through optim.functional.run_foreach, never through run().
    "sgd_step_foreach": _optimizer_rule("sgd_step_foreach"),
    "adam_step_foreach": _optimizer_rule("adam_step_foreach"),
    "rmsprop_step_foreach": _optimizer_rule("rmsprop_step_foreach"),
}


# ----------------------------------------------------------------------------- gradients
# VJP rules (autodiff's signature: g, the output, the inputs, the parameters) that hand the
# work to a backward op through run(): its kernel, or its decomposition when a higher
# derivative is being recorded.
def _softmax_vjp(g, out, x, *, dim=-1):
    return (run("softmax_backward", g, out, dim=dim),)


def _log_softmax_vjp(g, out, x, *, dim=-1):
    return (run("log_softmax_backward", g, out, dim=dim),)


def _cross_entropy_vjp(g, out, logits, target, *, ignore_index=-100):
    return (run("cross_entropy_backward", g, logits, target, ignore_index=ignore_index), None)


def _gelu_vjp(g, out, x, *, approximate="none"):
    return (run("gelu_backward", g, x, approximate=approximate),)


def _layer_norm_vjp(g, out, x, weight, bias, *, normalized_shape, eps=1e-5):
    return run("layer_norm_backward", g, x, weight, bias, normalized_shape=normalized_shape, eps=eps)


def _max_pool2d_vjp(g, out, x, **params):
    return (run("max_pool2d_backward", g, x, **params),)


def _batch_norm_vjp(g, out, x, weight, bias, mean, var, *, eps=1e-5):
    # mean and var are the kernel's saved statistics (constants). For a higher derivative their
    # dependence on x counts: recompute them in Tensor ops, which run() then differentiates.
    if dispatch.is_grad_enabled() and x.requires_grad:
        mean, _, var = _batch_stats(x)
    return run("batch_norm_backward", g, x, weight, bias, mean.reshape(-1), var.reshape(-1), eps=eps) + (None, None)


#: forward fused op -> (the backward fused op its VJP runs, the VJP rule). A backend that
#: declares both gets its kernels used in training too.
VJPS = {
    "softmax": ("softmax_backward", _softmax_vjp),
    "log_softmax": ("log_softmax_backward", _log_softmax_vjp),
    "cross_entropy": ("cross_entropy_backward", _cross_entropy_vjp),
    "gelu": ("gelu_backward", _gelu_vjp),
    "layer_norm": ("layer_norm_backward", _layer_norm_vjp),
    "max_pool2d": ("max_pool2d_backward", _max_pool2d_vjp),
    "batch_norm": ("batch_norm_backward", _batch_norm_vjp),
}

#: forward ops that return ``(out, *saved)``: on the kernel path only ``out`` is differentiable,
#: and the saved buffers (batch norm's statistics) reach the VJP rule after the op's arguments.
SAVES = {"batch_norm"}


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
    """Run fused op ``name``: the backend's kernel if it declares one, else the reference
    decomposition. When an input needs a gradient, the kernel runs only if the backend also
    declares the op's backward op (:data:`VJPS`); the result is then one autodiff node.

    >>> import ember
    >>> logits = ember.tensor([[2.0, 0.0], [0.0, 2.0]])
    >>> round(run("cross_entropy", logits, ember.tensor([0, 1])).item(), 4)
    0.1269
    """
    tensors = [a for a in args if isinstance(a, dispatch.Tensor)]
    # Under ember.jit: the backend the graph runs on if the op becomes one node there
    # (jit.trace.Tracer.fused), else None for its decomposition (compile() may fuse it again).
    backend = dispatch.interpreter().fused_backend(name, tensors[0]._backend)
    names = frozenset() if backend is None else declared(backend)
    if name not in names:
        return FUSED[name](*args, **params)
    if dispatch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        if name not in VJPS or VJPS[name][0] not in names:
            return FUSED[name](*args, **params)
        return _DIFFERENTIABLE[name](*args, **params)
    return _kernel(name, backend, args, params)


def _kernel(name, backend, args, params):
    """The backend's kernel for ``name`` on the arguments' buffers, wrapped as tensors (under
    ember.jit, a node run later)."""
    return dispatch.interpreter().fused(name, backend, args, params)


def _kernel_of(name):
    def kernel(*args, **params):
        backend = next(a for a in args if isinstance(a, dispatch.Tensor))._backend
        return _kernel(name, backend, args, params)
    kernel.__name__ = name
    return kernel


def _saving(name, rule):
    """Op ``name`` of :data:`SAVES` as one autodiff node for its first output, whose recorded
    inputs are its arguments followed by the saved outputs (constants to autodiff)."""
    node = f"fused.{name}"
    VJP[node] = rule

    def differentiable(*args, **params):
        backend = next(a for a in args if isinstance(a, dispatch.Tensor))._backend
        with no_grad():
            out, *saved = _kernel(name, backend, args, params)
        return (dispatch.wrap(out._data, out._backend, (node, args + tuple(saved), params)), *saved)
    differentiable.__name__ = name
    return differentiable


#: forward op -> its kernel as one autodiff node, named ``fused.<op>``, whose rule is VJPS[op].
_DIFFERENTIABLE = {name: _saving(name, rule) if name in SAVES
                   else custom_vjp(_kernel_of(name), rule, name=f"fused.{name}")
                   for name, (_, rule) in VJPS.items()}

"""Fused ops (ember.fused): one kernel where the reference decomposition makes several passes.

* ``softmax``, ``log_softmax``, ``cross_entropy``, ``layer_norm``: one task per row (the
  normalized dims flattened), reading the row two or three times while it is in cache, sums
  in float64;
* ``gelu`` and the optimizer steps ``sgd_step``, ``adam_step``, ``rmsprop_step``: elementwise
  programs (render.py) built from the same arithmetic as the references, operation for
  operation and rounded to the tensor's dtype at each step, so they agree with them to the
  last bit or so. The optimizer kernels write the new parameter and state into the buffers
  they were given (when those are writable and contiguous), which saves the optimizer's
  copy-back; hyperparameters are kernel arguments, so a learning-rate schedule compiles
  nothing new.

Each function takes the reference's arguments with buffers for tensors and falls back to the
reference (run on this backend through ember's Tensor ops) for what its kernel does not
cover: float16 and integer inputs, unusual shapes.

Gradients never come here (ember.fused runs the decomposition when an input needs one), so
these kernels serve inference, evaluation and optimizer updates.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from numba import prange, uint64

from . import launch
from .render import Program

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
JIT = dict(cache=True, nogil=True, error_model="numpy")


def _reference(name, *args, **params):
    """Run the reference decomposition of fused op ``name`` on buffers of this backend."""
    import ember
    from ember import dispatch
    from ember.fused import FUSED
    backend = ember.get_backend("numba")
    wrapped = [dispatch._wrap(a, backend, None) if isinstance(a, np.ndarray) else a for a in args]
    with ember.no_grad():
        out = FUSED[name](*wrapped, **params)
    if isinstance(out, tuple):
        return tuple(None if t is None else t._data for t in out)
    return out._data


# ============================================================================ row kernels
@numba.njit(inline="always", **JIT)
def _row_max_sumexp(x, base, c_n):
    """(max, sum of exp(x - max)) of one row; NaN wins the max so it propagates."""
    m = x[base]
    for c in range(c_n):
        v = x[base + c]
        if v > m or v != v:
            m = v
    s = 0.0
    for c in range(c_n):
        s += math.exp(x[base + c] - m)
    return m, s


@numba.njit(parallel=True, **JIT)
def softmax_rows(x, R, C, log, out):
    """Softmax (or log-softmax) of each row of a contiguous (R, C) x, shifted by its max."""
    c_n = uint64(C)
    for r in prange(R):
        base = uint64(r * C)
        m, s = _row_max_sumexp(x, base, c_n)
        if log:
            ls = math.log(s)
            for c in range(c_n):
                out[base + c] = (x[base + c] - m) - ls
        else:
            for c in range(c_n):
                out[base + c] = math.exp(x[base + c] - m) / s


@numba.njit(parallel=True, **JIT)
def cross_entropy_rows(x, target, R, C, losses):
    """losses[r] = logsumexp(x[r]) - x[r, target[r]]."""
    c_n = uint64(C)
    for r in prange(R):
        base = uint64(r * C)
        m, s = _row_max_sumexp(x, base, c_n)
        losses[r] = (m + math.log(s)) - x[base + uint64(target[r])]


@numba.njit(parallel=True, **JIT)
def layer_norm_rows(x, w, b, R, C, eps, has_w, has_b, out):
    """Each row normalized by its mean and biased variance, then scaled and shifted."""
    c_n = uint64(C)
    for r in prange(R):
        base = uint64(r * C)
        s = 0.0
        for c in range(c_n):
            s += x[base + c]
        mean = s / C
        q = 0.0
        for c in range(c_n):
            d = x[base + c] - mean
            q += d * d
        rstd = 1.0 / math.sqrt(q / C + eps)
        for c in range(c_n):
            v = (x[base + c] - mean) * rstd
            if has_w:
                v = v * w[c]
            if has_b:
                v = v + b[c]
            out[base + c] = v


def _rows(x, dim):
    """x with ``dim`` moved last, contiguous, as (R, C); and how to put a result back."""
    dim %= max(x.ndim, 1)
    moved = np.moveaxis(x, dim, -1) if x.ndim else x.reshape(1)
    rows = np.ascontiguousarray(moved)
    C = rows.shape[-1] if rows.ndim else 1
    shape = rows.shape

    def back(flat):
        y = flat.reshape(shape)
        return np.ascontiguousarray(np.moveaxis(y, -1, dim)) if x.ndim else y.reshape(())
    return rows.reshape(-1, C) if C else rows.reshape(0, 0), back


def _softmax_like(name, log):
    def impl(x, *, dim=-1):
        if x.dtype not in FLOATS or x.size == 0 or not launch.hot((name, x.shape, x.dtype.num, dim)):
            return _reference(name, x, dim=dim)
        rows, back = _rows(x, dim)
        out = np.empty_like(rows)
        launch.run(softmax_rows, rows.size, rows.reshape(-1), rows.shape[0], rows.shape[1], log, out.reshape(-1))
        return back(out)
    impl.__name__ = f"numba_{name}"
    return impl


def cross_entropy(logits, target):
    if logits.dtype not in FLOATS or logits.ndim != 2 or target.shape != logits.shape[:1] \
            or target.dtype.kind not in "iu" or logits.shape[0] == 0 or logits.shape[1] == 0 \
            or not launch.hot(("cross_entropy", logits.shape, logits.dtype.num)):
        return _reference("cross_entropy", logits, target)
    R, C = logits.shape
    t = np.ascontiguousarray(target, dtype=np.int64)
    if t.min() < 0 or t.max() >= C:
        return _reference("cross_entropy", logits, target)   # the reference's error names it
    losses = np.empty(R, np.float64)
    launch.run(cross_entropy_rows, logits.size, np.ascontiguousarray(logits).reshape(-1), t, R, C, losses)
    return np.asarray(losses.mean(), dtype=logits.dtype)


def layer_norm(x, weight, bias, *, normalized_shape, eps=1e-5):
    normalized_shape = tuple(normalized_shape)
    k = len(normalized_shape)
    ok = x.dtype in FLOATS and x.size > 0 and k <= x.ndim and tuple(x.shape[x.ndim - k:]) == normalized_shape \
        and all(p is None or (p.dtype == x.dtype and tuple(p.shape) == normalized_shape) for p in (weight, bias))
    if not ok or not launch.hot(("layer_norm", x.shape, x.dtype.num, normalized_shape)):
        return _reference("layer_norm", x, weight, bias, normalized_shape=normalized_shape, eps=eps)
    C = math.prod(normalized_shape)
    rows = np.ascontiguousarray(x).reshape(-1, C)
    out = np.empty_like(rows)
    dummy = np.zeros(1, x.dtype)
    w = dummy if weight is None else np.ascontiguousarray(weight).reshape(-1)
    b = dummy if bias is None else np.ascontiguousarray(bias).reshape(-1)
    launch.run(layer_norm_rows, rows.size, rows.reshape(-1), w, b, rows.shape[0], C, float(eps),
               weight is not None, bias is not None, out.reshape(-1))
    return out.reshape(x.shape)


# ============================================================================ programs
class Builder:
    """Writes an elementwise Program one operation at a time, in the reference's order.

    >>> b = Builder("float32"); x = b.array(); y = b.op("mul", x, b.scalar())
    >>> b.program([y]).nodes
    [('t0', 'mul', ('x0', 'x1'), {}, 'float32')]
    """

    def __init__(self, dtype):
        self.dtype, self.inputs, self.nodes = dtype, [], []

    def array(self, dtype=None):
        self.inputs.append(("array", dtype or self.dtype))
        return f"x{len(self.inputs) - 1}"

    def scalar(self):
        self.inputs.append(("scalar", self.dtype))
        return f"x{len(self.inputs) - 1}"

    def op(self, op, *args):
        name = f"t{len(self.nodes)}"
        self.nodes.append((name, op, tuple(args), {}, self.dtype))
        return name

    def program(self, outputs):
        return Program(list(self.inputs), list(self.nodes), list(outputs))


_KERNELS: dict = {}


def _kernel(key, build):
    k = _KERNELS.get(key)
    if k is None:
        k = _KERNELS[key] = launch.Kernel(build())
    return k


def gelu(x, *, approximate="none"):
    if x.dtype not in FLOATS or x.size == 0 or approximate not in ("none", "tanh") \
            or not launch.hot(("gelu", x.shape, x.dtype.num)):
        return _reference("gelu", x, approximate=approximate)

    def build():
        b = Builder(x.dtype.name)
        v = b.array()
        if approximate == "tanh":     # (x + x*x*x*0.044715) * sqrt(2/pi); x * 0.5 * (tanh + 1)
            cube = b.op("mul", b.op("mul", b.op("mul", v, v), v), 0.044715)
            inner = b.op("mul", b.op("add", v, cube), math.sqrt(2 / math.pi))
            out = b.op("mul", b.op("mul", v, 0.5), b.op("add", b.op("tanh", inner), 1))
        else:                         # x * 0.5 * (erf(x * (1/sqrt(2))) + 1)
            out = b.op("mul", b.op("mul", v, 0.5), b.op("add", b.op("erf", b.op("mul", v, 1 / math.sqrt(2))), 1))
        return b.program([out])
    k = _kernel(("gelu", approximate, x.dtype.name), build)
    return k(np.ascontiguousarray(x), force=True)[0]


def _writable(*bufs):
    return all(b.flags.writeable and b.flags.c_contiguous for b in bufs)


def _run_step(key, build, arrays, scalars, outputs):
    """Run an optimizer program: arrays then scalars in, results into ``outputs`` (the state
    buffers themselves where possible) or into new arrays."""
    k = _kernel(key, build)
    args = [np.ascontiguousarray(a) for a in arrays] + [float(s) for s in scalars]
    return k(*args, out=outputs, force=True)


def _step_ok(name, *bufs):
    first = bufs[0]
    return first.dtype in FLOATS and first.size > 0 and all(
        b is None or (b.dtype == first.dtype and b.shape == first.shape) for b in bufs) \
        and launch.hot((name, first.shape, first.dtype.num))


def sgd_step(param, grad, momentum_buffer, *, lr, momentum=0.0, dampening=0.0, nesterov=False,
             weight_decay=0.0, maximize=False):
    if not _step_ok("sgd_step", param, grad, momentum_buffer):
        return _reference("sgd_step", param, grad, momentum_buffer, lr=lr, momentum=momentum, dampening=dampening,
                          nesterov=nesterov, weight_decay=weight_decay, maximize=maximize)
    first = momentum != 0 and momentum_buffer is None
    flags = (momentum != 0, first, dampening != 0, bool(nesterov), weight_decay != 0, bool(maximize))

    def build():
        b = Builder(param.dtype.name)
        p, g = b.array(), b.array()
        buf = b.array() if momentum != 0 and not first else None
        s_lr, s_m, s_damp, s_wd = b.scalar(), b.scalar(), b.scalar(), b.scalar()
        d = b.op("neg", g) if maximize else g
        if weight_decay != 0:
            d = b.op("add", d, b.op("mul", p, s_wd))
        outs = []
        if momentum != 0:
            if first:
                buf = d
            else:
                buf = b.op("add", b.op("mul", buf, s_m), d if dampening == 0 else b.op("mul", d, s_damp))
            d = b.op("add", d, b.op("mul", buf, s_m)) if nesterov else buf
            outs = [buf]
        return b.program([b.op("add", p, b.op("mul", d, s_lr))] + outs)

    arrays = [param, grad] + ([momentum_buffer] if momentum != 0 and not first else [])
    scalars = [-lr, momentum, 1 - dampening, weight_decay]
    if momentum == 0:
        outputs = [param] if _writable(param) else None
    elif first:
        outputs = [param, np.empty_like(param)] if _writable(param) else None
    else:
        outputs = [param, momentum_buffer] if _writable(param, momentum_buffer) else None
    out = _run_step(("sgd",) + flags + (param.dtype.name,), build, arrays, scalars, outputs)
    return out[0], (out[1] if momentum != 0 else None)


def adam_step(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, *, step, lr, beta1=0.9, beta2=0.999,
              eps=1e-8, weight_decay=0.0, amsgrad=False, maximize=False, decoupled_weight_decay=False):
    if not _step_ok("adam_step", param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq if amsgrad else None) or \
            (amsgrad and max_exp_avg_sq is None):
        return _reference("adam_step", param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step=step, lr=lr,
                          beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                          maximize=maximize, decoupled_weight_decay=decoupled_weight_decay)
    small_weight = abs(1 - beta1) < 0.5          # which of _lerp's two forms the reference takes
    flags = (weight_decay != 0, bool(decoupled_weight_decay), bool(amsgrad), bool(maximize), small_weight)

    def build():
        b = Builder(param.dtype.name)
        p, g, m, v = b.array(), b.array(), b.array(), b.array()
        vmax = b.array() if amsgrad else None
        s_decay, s_wd, s_w, s_1mw, s_b2, s_1mb2, s_bc2, s_eps, s_step = (b.scalar() for _ in range(9))
        if maximize:
            g = b.op("neg", g)
        if weight_decay != 0:
            if decoupled_weight_decay:
                p = b.op("mul", p, s_decay)
            else:
                g = b.op("add", g, b.op("mul", p, s_wd))
        diff = b.op("sub", g, m)
        m = b.op("add", m, b.op("mul", diff, s_w)) if small_weight else b.op("sub", g, b.op("mul", diff, s_1mw))
        v = b.op("add", b.op("mul", v, s_b2), b.op("mul", b.op("mul", g, s_1mb2), g))
        outs = [m, v]
        second = v
        if amsgrad:
            vmax = second = b.op("maximum", vmax, v)
            outs.append(vmax)
        denom = b.op("add", b.op("div", b.op("sqrt", second), s_bc2), s_eps)
        new_p = b.op("add", p, b.op("div", b.op("mul", m, s_step), denom))
        return b.program([new_p] + outs)

    bc1 = 1 - beta1 ** step
    scalars = [1 - lr * weight_decay, weight_decay, 1 - beta1, 1 - (1 - beta1), beta2, 1 - beta2,
               (1 - beta2 ** step) ** 0.5, eps, -(lr / bc1)]
    arrays = [param, grad, exp_avg, exp_avg_sq] + ([max_exp_avg_sq] if amsgrad else [])
    state = [param, exp_avg, exp_avg_sq] + ([max_exp_avg_sq] if amsgrad else [])
    outputs = state if _writable(*state) else None
    out = _run_step(("adam",) + flags + (param.dtype.name,), build, arrays, scalars, outputs)
    return out[0], out[1], out[2], (out[3] if amsgrad else max_exp_avg_sq)


def rmsprop_step(param, grad, square_avg, grad_avg, momentum_buffer, *, lr, alpha=0.99, eps=1e-8,
                 weight_decay=0.0, momentum=0.0, centered=False, maximize=False):
    needs = [param, grad, square_avg] + ([grad_avg] if centered else []) + ([momentum_buffer] if momentum > 0 else [])
    if any(x is None for x in needs) or not _step_ok("rmsprop_step", *needs):
        return _reference("rmsprop_step", param, grad, square_avg, grad_avg, momentum_buffer, lr=lr, alpha=alpha,
                          eps=eps, weight_decay=weight_decay, momentum=momentum, centered=centered,
                          maximize=maximize)
    small_weight = abs(1 - alpha) < 0.5
    flags = (weight_decay != 0, momentum > 0, bool(centered), bool(maximize), small_weight)

    def build():
        b = Builder(param.dtype.name)
        p, g, sq = b.array(), b.array(), b.array()
        ga = b.array() if centered else None
        mb = b.array() if momentum > 0 else None
        s_wd, s_alpha, s_1ma, s_w, s_1mw, s_eps, s_m, s_lr = (b.scalar() for _ in range(8))
        if maximize:
            g = b.op("neg", g)
        if weight_decay != 0:
            g = b.op("add", g, b.op("mul", p, s_wd))
        sq = b.op("add", b.op("mul", sq, s_alpha), b.op("mul", b.op("mul", g, s_1ma), g))
        outs = [sq]
        if centered:
            diff = b.op("sub", g, ga)
            ga = b.op("add", ga, b.op("mul", diff, s_w)) if small_weight else b.op("sub", g, b.op("mul", diff, s_1mw))
            avg = b.op("add", b.op("sqrt", b.op("sub", sq, b.op("mul", ga, ga))), s_eps)
            outs.append(ga)
        else:
            avg = b.op("add", b.op("sqrt", sq), s_eps)
        if momentum > 0:
            mb = b.op("add", b.op("mul", mb, s_m), b.op("div", g, avg))
            new_p = b.op("add", p, b.op("mul", mb, s_lr))
            outs.append(mb)
        else:
            new_p = b.op("add", p, b.op("div", b.op("mul", g, s_lr), avg))
        return b.program([new_p] + outs)

    scalars = [weight_decay, alpha, 1 - alpha, 1 - alpha, 1 - (1 - alpha), eps, momentum, -lr]
    state = [param, square_avg] + ([grad_avg] if centered else []) + ([momentum_buffer] if momentum > 0 else [])
    outputs = state if _writable(*state) else None
    out = _run_step(("rmsprop",) + flags + (param.dtype.name,), build, needs, scalars, outputs)
    out = list(out)
    new_p, new_sq = out[0], out[1]
    new_ga = out[2] if centered else grad_avg
    new_mb = out[-1] if momentum > 0 else momentum_buffer
    return new_p, new_sq, new_ga, new_mb


IMPLS = {
    "softmax": _softmax_like("softmax", False),
    "log_softmax": _softmax_like("log_softmax", True),
    "cross_entropy": cross_entropy,
    "layer_norm": layer_norm,
    "gelu": gelu,
    "sgd_step": sgd_step,
    "adam_step": adam_step,
    "rmsprop_step": rmsprop_step,
}

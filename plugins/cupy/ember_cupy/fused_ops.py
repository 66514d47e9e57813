"""The fused ops ember.fused lets a backend provide: one kernel where the decomposition runs many.

Each entry has the signature of the reference in ember.fused (buffers for tensors) and
computes what it computes, in the same order of operations where rounding can tell:

* ``softmax`` / ``log_softmax``: one block per row (max, sum of exponentials, write);
* ``cross_entropy``: one block per row picks ``log_softmax(x)[target]`` (0 for an ignored
  row); CuPy divides their sum by the rows that count (a few launches, no host sync);
* ``layer_norm``: one block per row, mean and variance in double;
* ``gelu``: one elementwise kernel (exact erf or the tanh form);
* the backward ops ember trains with: ``softmax_backward`` / ``log_softmax_backward`` and
  ``cross_entropy_backward`` (one block per row), ``gelu_backward`` (elementwise),
  ``layer_norm_backward`` (one block per row for the input gradient, then one thread per
  column for the weight and bias gradients);
* ``max_pool2d`` (one thread per output) and ``max_pool2d_backward`` (one thread per input
  element, gathering the gradients of the windows whose first maximum it is: no atomics,
  the reference's order of addition);
* ``batch_norm`` (training mode) and ``batch_norm_backward``: one block per channel, sums in
  double;
* ``scaled_dot_product_attention``: two cuBLAS GEMMs around the fused softmax;
* ``sgd_step`` / ``adam_step`` / ``rmsprop_step``: one elementwise kernel updating parameter
  and state in place (when they are contiguous; else into new buffers) and returning them.

float16 runs the float32 kernels on upcast copies (kernels/ has no half type).
"""

from __future__ import annotations

import math

from . import kernels
from .runtime import contiguous

KERNEL_DTYPES = ("float32", "float64")


def make_fused(rt) -> dict:
    """The fused-op table for runtime ``rt``."""
    xp = rt.xp

    def wide(x):
        return x.astype(xp.float32) if x.dtype == xp.float16 else x

    def rows_op(x, dim, kernel_of):
        """Run a row kernel over dim ``dim`` of ``x`` (moved last and made contiguous)."""
        out_dtype = x.dtype
        x = wide(x)
        moved = contiguous(xp.moveaxis(x, dim, -1))
        y = xp.empty(moved.shape, dtype=moved.dtype)
        c = moved.shape[-1] if moved.ndim else 1
        if moved.size:
            rt.launch(kernel_of(moved.dtype.name), moved.size // c, moved, y, c)
        y = xp.moveaxis(y, -1, dim)
        return y if y.dtype == out_dtype else y.astype(out_dtype)

    def softmax(x, *, dim=-1):
        if x.ndim == 0:
            return xp.ones_like(x)
        return rows_op(x, dim, lambda dt: kernels.softmax_kernel(dt, log=False))

    def log_softmax(x, *, dim=-1):
        if x.ndim == 0:
            return xp.zeros_like(x)
        return rows_op(x, dim, lambda dt: kernels.softmax_kernel(dt, log=True))

    def rows_op2(y, g, dim, kernel_of):
        """Run a row kernel over dim ``dim`` of ``y`` and ``g`` (same shape; moved last, contiguous)."""
        out_dtype = y.dtype
        y = wide(y)
        g = wide(g).astype(y.dtype, copy=False)
        ym, gm = contiguous(xp.moveaxis(y, dim, -1)), contiguous(xp.moveaxis(g, dim, -1))
        dx = xp.empty(ym.shape, dtype=ym.dtype)
        c = ym.shape[-1] if ym.ndim else 1
        if ym.size:
            rt.launch(kernel_of(ym.dtype.name), ym.size // c, ym, gm, dx, c)
        dx = xp.moveaxis(dx, -1, dim)
        return dx if dx.dtype == out_dtype else dx.astype(out_dtype)

    def softmax_backward(grad, out, *, dim=-1):
        if out.ndim == 0:  # softmax of a scalar is 1 whatever the input
            return xp.zeros_like(out)
        return rows_op2(out, grad, dim, lambda dt: kernels.softmax_backward_kernel(dt, log=False))

    def log_softmax_backward(grad, out, *, dim=-1):
        if out.ndim == 0:
            return xp.zeros_like(out)
        return rows_op2(out, grad, dim, lambda dt: kernels.softmax_backward_kernel(dt, log=True))

    def class_targets(target):
        if target.dtype.name not in ("int32", "int64"):
            target = target.astype(xp.int64)
        return contiguous(target.reshape(-1))

    def cross_entropy(logits, target, *, ignore_index=-100):
        out_dtype = logits.dtype
        x = contiguous(wide(logits))
        n, c = x.shape
        target = class_targets(target)
        picked = xp.empty((n,), dtype=x.dtype)
        rt.launch(kernels.cross_entropy_kernel(x.dtype.name, target.dtype.name), n, x, target, picked, c, ignore_index)
        counted = (target != ignore_index).sum().astype(picked.dtype)
        loss = xp.negative(xp.asarray(picked.sum(dtype=picked.dtype) / counted, dtype=picked.dtype))
        return xp.asarray(loss, dtype=out_dtype)

    def cross_entropy_backward(grad, logits, target, *, ignore_index=-100):
        out_dtype = logits.dtype
        x = contiguous(wide(logits))
        n, c = x.shape
        target = class_targets(target)
        counted = xp.maximum((target != ignore_index).sum(), 1).astype(x.dtype)
        scale = contiguous(xp.asarray(grad, dtype=x.dtype).reshape(1) / counted)  # stays on the device
        dx = xp.empty(x.shape, dtype=x.dtype)
        rt.launch(
            kernels.cross_entropy_backward_kernel(x.dtype.name, target.dtype.name),
            n,
            x,
            target,
            scale,
            dx,
            c,
            ignore_index,
        )
        return dx if dx.dtype == out_dtype else dx.astype(out_dtype)

    def layer_norm(x, weight, bias, *, normalized_shape, eps=1e-5):
        out_dtype = x.dtype
        x = contiguous(wide(x))
        d = math.prod(normalized_shape)
        y = xp.empty(x.shape, dtype=x.dtype)
        args = [x, y]
        if weight is not None:
            args.append(contiguous(weight.astype(x.dtype, copy=False)).reshape(-1))
        if bias is not None:
            args.append(contiguous(bias.astype(x.dtype, copy=False)).reshape(-1))
        if x.size:
            rt.launch(
                kernels.layer_norm_kernel(x.dtype.name, weight is not None, bias is not None),
                x.size // d,
                *args,
                d,
                eps,
            )
        return y if y.dtype == out_dtype else y.astype(out_dtype)

    def gelu(x, *, approximate="none"):
        out_dtype = x.dtype
        x = contiguous(wide(x))
        y = xp.empty(x.shape, dtype=x.dtype)
        rt.launch(kernels.gelu_kernel(x.dtype.name, approximate), x.size, x, y)
        return y if y.dtype == out_dtype else y.astype(out_dtype)

    def layer_norm_backward(grad, x, weight, bias, *, normalized_shape, eps=1e-5):
        out_dtype = x.dtype
        x = contiguous(wide(x))
        g = contiguous(wide(grad).astype(x.dtype, copy=False))
        d = math.prod(normalized_shape)
        rows = x.size // d if d else 0
        dx = xp.empty(x.shape, dtype=x.dtype)
        mean, rstd = xp.empty((rows,), dtype=xp.float64), xp.empty((rows,), dtype=xp.float64)
        args = [x, g] + ([contiguous(weight.astype(x.dtype, copy=False)).reshape(-1)] if weight is not None else [])
        if x.size:
            rt.launch(
                kernels.layer_norm_backward_kernel(x.dtype.name, weight is not None),
                rows,
                *args,
                dx,
                mean,
                rstd,
                d,
                eps,
            )
        dw = db = None
        if weight is not None or bias is not None:
            dw, db = xp.zeros((d,), dtype=x.dtype), xp.zeros((d,), dtype=x.dtype)
            if x.size:
                rt.launch(kernels.layer_norm_params_kernel(x.dtype.name), d, x, g, mean, rstd, dw, db, rows, d)

        def back(b, like):
            return None if like is None else b.reshape(like.shape).astype(out_dtype, copy=False)

        return dx.astype(out_dtype, copy=False), back(dw, weight), back(db, bias)

    def gelu_backward(grad, x, *, approximate="none"):
        out_dtype = x.dtype
        x = contiguous(wide(x))
        g = contiguous(wide(grad).astype(x.dtype, copy=False))
        y = xp.empty(x.shape, dtype=x.dtype)
        rt.launch(kernels.gelu_backward_kernel(x.dtype.name, approximate), x.size, g, x, y)
        return y if y.dtype == out_dtype else y.astype(out_dtype)

    def attention(q, k, v, *, causal=False, scale=None):
        scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
        scores = xp.matmul(q, xp.swapaxes(k, -1, -2))
        scores = scores * xp.asarray(scale, dtype=scores.dtype)
        if causal:
            n, m = scores.shape[-2], scores.shape[-1]
            keep = xp.arange(n)[:, None] >= xp.arange(m)[None, :]
            scores = xp.where(keep, scores, xp.asarray(-math.inf, dtype=scores.dtype))
        return xp.matmul(softmax(scores, dim=-1), v)

    # -- pooling and batch norm --------------------------------------------------------------------
    def pool_args(x, kernel_size, stride, padding, dilation, ceil_mode):
        """The pool kernels' (H, W, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW)."""
        from ember.nn.functional import pool_geometry

        def pair(v):
            return (int(v), int(v)) if isinstance(v, int) else tuple(int(a) for a in v)

        k, p, d = pair(kernel_size), pair(padding), pair(dilation)
        s = k if stride is None or stride == () else pair(stride)
        h, w = x.shape[-2:]
        (oh, _), (ow, _) = (pool_geometry(n, k[i], s[i], p[i], d[i], bool(ceil_mode)) for i, n in enumerate((h, w)))
        return (h, w, oh, ow) + k + s + p + d

    def max_pool2d(x, *, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
        out_dtype = x.dtype
        x = contiguous(wide(x))
        args = pool_args(x, kernel_size, stride, padding, dilation, ceil_mode)
        y = xp.empty(x.shape[:-2] + args[2:4], dtype=x.dtype)
        rt.launch(kernels.max_pool_kernel(x.dtype.name), y.size, x, y, *args)
        return y if y.dtype == out_dtype else y.astype(out_dtype)

    def max_pool2d_backward(grad, x, *, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
        out_dtype = x.dtype
        x = contiguous(wide(x))
        g = contiguous(wide(grad).astype(x.dtype, copy=False))
        args = pool_args(x, kernel_size, stride, padding, dilation, ceil_mode)
        dx = xp.empty(x.shape, dtype=x.dtype)
        rt.launch(kernels.max_pool_backward_kernel(x.dtype.name), x.size, x, g, dx, *args)
        return dx if dx.dtype == out_dtype else dx.astype(out_dtype)

    def channels(x, *params):
        """x contiguous (N, C, L) in a kernel dtype, its channel parameters too (None kept)."""
        n, c = x.shape[:2]
        xs = contiguous(wide(x))
        return (
            xs,
            n,
            c,
            xs.size // (n * c) if n * c else 0,
            [None if q is None else contiguous(wide(q).astype(xs.dtype, copy=False)) for q in params],
        )

    def batch_norm(x, weight, bias, *, eps=1e-5):
        out_dtype = x.dtype
        xs, n, c, length, (w, b) = channels(x, weight, bias)
        y = xp.empty(xs.shape, dtype=xs.dtype)
        mean, var = xp.empty((c,), dtype=xs.dtype), xp.empty((c,), dtype=xs.dtype)
        if xs.size:
            rt.launch(
                kernels.batch_norm_kernel(xs.dtype.name, w is not None, b is not None),
                c,
                xs,
                y,
                mean,
                var,
                *[q for q in (w, b) if q is not None],
                n,
                length,
                float(eps),
            )
        return tuple(a if a.dtype == out_dtype else a.astype(out_dtype) for a in (y, mean, var))

    def batch_norm_backward(grad, x, weight, bias, mean, var, *, eps=1e-5):
        out_dtype = x.dtype
        xs, n, c, length, (g, w, m, v) = channels(x, grad, weight, mean, var)
        dx = xp.empty(xs.shape, dtype=xs.dtype)
        dw, db = xp.empty((c,), dtype=xs.dtype), xp.empty((c,), dtype=xs.dtype)
        if xs.size:
            rt.launch(
                kernels.batch_norm_backward_kernel(xs.dtype.name, w is not None),
                c,
                xs,
                g,
                m,
                v,
                *([w] if w is not None else []),
                dx,
                dw,
                db,
                n,
                length,
                float(eps),
            )

        def back(a):
            return a if a.dtype == out_dtype else a.astype(out_dtype)

        return back(dx), None if weight is None else back(dw), None if bias is None else back(db)

    # -- optimizer steps ----------------------------------------------------------------------------
    def run_step(rule, flags, scalars, tensors):
        """Launch ``rule`` over ``tensors`` (param, grad, *state; the kernel's pointer order),
        in place where that is safe, else on copies. Returns the updated buffers in order."""
        dtype = tensors[0].dtype
        writable = [i for i in range(len(tensors)) if i != 1]
        targets = [tensors[i] for i in writable]
        in_place = (
            dtype.name in KERNEL_DTYPES
            and all(t.dtype == dtype and t.flags.c_contiguous and t.shape == tensors[0].shape for t in tensors)
            and len({id(t) for t in targets}) == len(targets)
            and not _overlap(xp, targets)
        )
        if in_place:
            work = list(tensors)
        else:
            kdtype = dtype if dtype.name in KERNEL_DTYPES else xp.dtype(xp.float32)
            work = [xp.array(xp.broadcast_to(t, tensors[0].shape), dtype=kdtype, order="C") for t in tensors]
        kernel = kernels.step_kernel(rule, work[0].dtype.name, **flags)
        values = [scalars[s] for s in kernel.meta["scalars"]]
        rt.launch(kernel, work[0].size, *work, *values)
        if in_place or work[0].dtype == dtype:
            return work
        return [w.astype(dtype) for w in work]

    def sgd_step(
        param,
        grad,
        momentum_buffer,
        *,
        lr,
        momentum=0.0,
        dampening=0.0,
        nesterov=False,
        weight_decay=0.0,
        maximize=False,
    ):
        first = momentum != 0 and momentum_buffer is None
        tensors = [param, grad]
        if momentum != 0:
            tensors.append(xp.empty_like(param, order="C") if first else momentum_buffer)
        flags, scalars = sgd_constants(
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            nesterov=nesterov,
            weight_decay=weight_decay,
            maximize=maximize,
            first=first,
        )
        out = run_step("sgd_step", flags, scalars, tensors)
        return out[0], (out[2] if momentum != 0 else None)

    def adam_step(
        param,
        grad,
        exp_avg,
        exp_avg_sq,
        max_exp_avg_sq,
        *,
        step,
        lr,
        beta1=0.9,
        beta2=0.999,
        eps=1e-8,
        weight_decay=0.0,
        amsgrad=False,
        maximize=False,
        decoupled_weight_decay=False,
    ):
        flags, scalars = adam_constants(
            step=step,
            lr=lr,
            beta1=beta1,
            beta2=beta2,
            eps=eps,
            weight_decay=weight_decay,
            amsgrad=amsgrad,
            maximize=maximize,
            decoupled_weight_decay=decoupled_weight_decay,
        )
        tensors = [param, grad, exp_avg, exp_avg_sq] + ([max_exp_avg_sq] if amsgrad else [])
        out = run_step("adam_step", flags, scalars, tensors)
        return out[0], out[2], out[3], (out[4] if amsgrad else None)

    def rmsprop_step(
        param,
        grad,
        square_avg,
        grad_avg,
        momentum_buffer,
        *,
        lr,
        alpha=0.99,
        eps=1e-8,
        weight_decay=0.0,
        momentum=0.0,
        centered=False,
        maximize=False,
    ):
        flags, scalars = rmsprop_constants(
            lr=lr,
            alpha=alpha,
            eps=eps,
            weight_decay=weight_decay,
            momentum=momentum,
            centered=centered,
            maximize=maximize,
        )
        tensors = (
            [param, grad, square_avg] + ([grad_avg] if centered else []) + ([momentum_buffer] if momentum > 0 else [])
        )
        out = run_step("rmsprop_step", flags, scalars, tensors)
        k = 3
        ga = bf = None
        if centered:
            ga, k = out[k], k + 1
        if momentum > 0:
            bf = out[k]
        return out[0], out[2], ga if centered else grad_avg, bf if momentum > 0 else momentum_buffer

    return {
        "softmax": softmax,
        "log_softmax": log_softmax,
        "cross_entropy": cross_entropy,
        "layer_norm": layer_norm,
        "gelu": gelu,
        "scaled_dot_product_attention": attention,
        "softmax_backward": softmax_backward,
        "log_softmax_backward": log_softmax_backward,
        "cross_entropy_backward": cross_entropy_backward,
        "layer_norm_backward": layer_norm_backward,
        "gelu_backward": gelu_backward,
        "max_pool2d": max_pool2d,
        "max_pool2d_backward": max_pool2d_backward,
        "batch_norm": batch_norm,
        "batch_norm_backward": batch_norm_backward,
        "sgd_step": sgd_step,
        "adam_step": adam_step,
        "rmsprop_step": rmsprop_step,
    }


def adam_constants(*, step, lr, beta1, beta2, eps, weight_decay, amsgrad, maximize, decoupled_weight_decay):
    """The compile-time flags and the per-step scalars of one Adam step, computed in Python
    doubles exactly as ember.optim.functional.adam_step computes them."""
    weight = 1 - beta1
    big = abs(weight) >= 0.5
    flags = dict(
        amsgrad=amsgrad, maximize=maximize, weight_decay=weight_decay, decoupled=decoupled_weight_decay, big_lerp=big
    )
    scalars = dict(
        decay=1 - lr * weight_decay,
        wd=weight_decay,
        w1=(1 - weight) if big else weight,
        c2=1 - beta2,
        beta2=beta2,
        neg_step=-(lr / (1 - beta1**step)),
        bc2=(1 - beta2**step) ** 0.5,
        eps=eps,
    )
    return flags, scalars


def sgd_constants(*, lr, momentum, dampening, nesterov, weight_decay, maximize, first):
    flags = dict(
        maximize=maximize,
        weight_decay=weight_decay,
        momentum=momentum,
        dampening=dampening,
        nesterov=nesterov,
        first=first,
    )
    return flags, dict(wd=weight_decay, mom=momentum, damp=1 - dampening, neg_lr=-lr)


def rmsprop_constants(*, lr, alpha, eps, weight_decay, momentum, centered, maximize):
    weight = 1 - alpha
    big = abs(weight) >= 0.5
    flags = dict(maximize=maximize, weight_decay=weight_decay, momentum=momentum > 0, centered=centered, big_lerp=big)
    scalars = dict(
        wd=weight_decay,
        alpha=alpha,
        c1=1 - alpha,
        w1=(1 - weight) if big else weight,
        eps=eps,
        mom=momentum,
        neg_lr=-lr,
    )
    return flags, scalars


def _overlap(xp, arrays) -> bool:
    """Whether any two of ``arrays`` share memory (then an in-place update would race)."""
    spans = []
    for a in arrays:
        start = _address(a)
        spans.append((start, start + a.nbytes))
    spans.sort()
    return any(b[0] < a[1] for a, b in zip(spans, spans[1:]))


def _address(a) -> int:
    return a.data.ptr if hasattr(a.data, "ptr") else a.ctypes.data

"""The primitive table on CuPy arrays: each entry the spec in ember.primitives, as CuPy says it.

CuPy mirrors NumPy, so most entries are the reference backend's one-liners with ``xp`` for
``np``; every one of them is a kernel on the device, queued on the current stream, with no
host synchronisation. The exceptions, each for a reason:

* ``random_bits``, ``erf`` and ``remainder`` run kernels of our own (kernels/): Philox must be
  bit-identical to the reference, CuPy's remainder is not NumPy's (NaN for an infinite divisor,
  no -0.0, rounding; seen on an H200), and the same source is checked on the CPU;
* ``arange`` counts an unsigned range with a negative step in int64 (CuPy converts the step to
  the dtype first, which NumPy 2 refuses);
* ``matmul`` is ``xp.matmul`` (cuBLAS GEMM, batched); convolution is im2col — a strided
  view of windows, copied to columns — times the weight on cuBLAS, and its input gradient
  gathers columns back with one kernel (``col2im``) instead of ``kh * kw`` strided adds;
* ``index_add`` is ``cupyx.scatter_add`` (NumPy: ``np.add.at``).

``make_impls(rt)`` builds the table for a runtime (runtime.py), so the same code runs on NumPy
arrays in the host harness.
"""

from __future__ import annotations

import math

import numpy

from ember import dtypes as D
from ember.backends.numpy import ordering

from . import kernels
from .runtime import contiguous

FLOAT_KERNELS = ("float32", "float64")


def make_impls(rt) -> dict:
    """The primitive table for runtime ``rt`` (its ``xp`` and ``launch``)."""
    xp = rt.xp
    on_numpy = xp.__name__ == "numpy"
    NP = {d: xp.dtype(d.name) for d in D.ALL + D.OPTIONAL}
    random_kernel = kernels.random_bits_kernel()

    def quiet(f):
        if not on_numpy:
            return f

        def run(*args, **kwargs):
            with xp.errstate(divide="ignore", invalid="ignore", over="ignore"):
                return f(*args, **kwargs)

        run.__name__ = getattr(f, "__name__", "quiet")
        return run

    def arr(f):
        """NumPy returns scalars from 0-d ufuncs; a buffer must be an array. (CuPy never does.)"""
        if not on_numpy:
            return f

        def run(*args, **kwargs):
            out = f(*args, **kwargs)
            return out if type(out) is xp.ndarray else xp.asarray(out)

        run.__name__ = getattr(f, "__name__", "array")
        return run

    def dtype_of(*args):
        for a in args:
            if hasattr(a, "dtype"):
                return a.dtype
        return None

    def promoted(*ops):
        """The dtype NumPy gives ``ops`` (arrays and Python scalars, weak): its result_type on
        empty host arrays of the arrays' dtypes."""
        return numpy.result_type(*(numpy.empty(0, a.dtype) if hasattr(a, "dtype") else a for a in ops))

    def weak(f):
        """A binary op with a Python scalar follows the spec's weak-scalar rule (NumPy's: an int
        array with a Python float gives float64, otherwise the array's dtype), whatever the
        library's own scalar rules (:func:`promoted`)."""

        def run(*args):
            out = f(*args)
            ops = args[1:] if f is xp.where else args
            if all(hasattr(a, "dtype") for a in ops) or dtype_of(*ops) is None:
                return out
            want = promoted(*ops)
            return out if out.dtype == want else out.astype(want)

        run.__name__ = getattr(f, "__name__", "weak")
        return run

    # -- creation ---------------------------------------------------------------------------------
    def random_bits(shape, seed, offset):
        n = math.prod(shape)
        out = xp.empty(n, dtype=xp.uint32)
        rt.launch(random_kernel, kernels.random_bits_threads(n, offset), out, n, seed & (2**64 - 1), offset)
        return out.reshape(shape)

    # -- elementwise --------------------------------------------------------------------------------
    def erf(x):
        name = x.dtype.name
        if name not in FLOAT_KERNELS:
            return erf(x.astype(xp.float32)).astype(x.dtype)
        x = contiguous(x)
        out = xp.empty(x.shape, dtype=x.dtype)
        rt.launch(kernels.unary_kernel("erf", name), x.size, x, out)
        return out

    def remainder(a, b):
        want = promoted(a, b)
        run = "float32" if want == numpy.float16 else want.name  # as NumPy: in float32, rounded once
        a, b = xp.broadcast_arrays(*(xp.asarray(x, dtype=want).astype(run, copy=False) for x in (a, b)))
        out = xp.empty(a.shape, dtype=run)
        rt.launch(kernels.remainder_kernel(run), out.size, contiguous(a), contiguous(b), out)
        return out if run == want.name else out.astype(want)

    def arange(start, stop, step, dtype):
        if dtype.name.startswith("uint") and (step < 0 or start < 0):
            return xp.arange(start, stop, step, dtype=xp.int64).astype(NP[dtype])
        return xp.arange(start, stop, step, dtype=NP[dtype])

    def div(a, b):
        return xp.true_divide(a, b, dtype=dtype_of(a, b))

    def sum_(x, axes, keepdims=False):
        if x.dtype == xp.float16:
            return x.sum(axis=tuple(axes), keepdims=keepdims, dtype=xp.float32).astype(xp.float16)
        return xp.asarray(x.sum(axis=tuple(axes), keepdims=keepdims, dtype=x.dtype))

    # -- movement -----------------------------------------------------------------------------------
    if on_numpy:
        from numpy.lib.stride_tricks import as_strided

        def strided(x, shape, strides):
            return as_strided(x, shape, strides, writeable=False)
    else:
        from cupy.lib.stride_tricks import as_strided

        def strided(x, shape, strides):
            return as_strided(x, shape, strides)

    def windows(x, kernel, stride, dilation=(1, 1)):
        *lead, h, w = x.shape
        (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
        oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (w - dw * (kw - 1) - 1) // sw + 1
        *ls, s_h, s_w = x.strides
        return strided(x, (*lead, oh, ow, kh, kw), (*ls, s_h * sh, s_w * sw, s_h * dh, s_w * dw))

    def windows_grad(g, input_shape, kernel, stride, dilation=(1, 1)):
        *lead, h, w = input_shape
        name = g.dtype.name
        if name not in ("float32", "float64", "int32", "int64"):
            wide = xp.float32 if name == "float16" else xp.int64  # bool/uint8 sum and wrap like NumPy
            return windows_grad(g.astype(wide), input_shape, kernel, stride, dilation).astype(g.dtype)
        g = contiguous(g)
        out = xp.empty(tuple(input_shape), dtype=g.dtype)
        oh, ow = g.shape[-4], g.shape[-3]
        rt.launch(
            kernels.col2im_kernel(name),
            out.size,
            g,
            out,
            h,
            w,
            oh,
            ow,
            kernel[0],
            kernel[1],
            stride[0],
            stride[1],
            dilation[0],
            dilation[1],
        )
        return out

    def slice_(x, starts, stops, steps):
        return x[tuple(slice(a, b, c) for a, b, c in zip(starts, stops, steps))]

    def take(x, indices, axis):
        # CuPy's take wraps indices (NumPy's raises); both agree on the spec's range [-n, n).
        return xp.take(x, indices, axis=axis)

    if on_numpy:

        def add_at(out, index, values):
            xp.add.at(out, index, values)
    else:
        import cupyx

        def add_at(out, index, values):
            if out.dtype == xp.bool_:
                acc = out.astype(xp.int8)
                cupyx.scatter_add(acc, index, values.astype(xp.int8))
                out[...] = acc != 0
                return
            cupyx.scatter_add(out, index, values)

    def index_add(x, indices, values, axis):
        out = x.copy()
        add_at(out, (slice(None),) * (axis % x.ndim) + (indices,), values)
        return out

    # -- convolution: im2col + cuBLAS -------------------------------------------------------------
    def im2col(x, kh, kw, stride, padding, dilation):
        """(N, C, H, W) -> columns (N*OH*OW, C*KH*KW) and (OH, OW)."""
        ph, pw = padding
        if ph or pw:
            x = xp.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
        win = windows(x, (kh, kw), stride, dilation)  # N, C, OH, OW, KH, KW: a view
        n, c, oh, ow = win.shape[:4]
        return win.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * kh * kw), (oh, ow)

    def conv2d(x, w, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
        n, o = x.shape[0], w.shape[0]
        kh, kw = w.shape[2:]
        cg, og = x.shape[1] // groups, o // groups
        outs = []
        for gi in range(groups):
            cols, (oh, ow) = im2col(x[:, gi * cg : (gi + 1) * cg], kh, kw, stride, padding, dilation)
            outs.append(cols @ w[gi * og : (gi + 1) * og].reshape(og, -1).T)
        out = outs[0] if groups == 1 else xp.concatenate(outs, axis=1)
        return contiguous(out.reshape(n, oh, ow, o).transpose(0, 3, 1, 2))

    def conv2d_grad_weight(x, g, weight_shape, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
        o, cg, kh, kw = weight_shape
        og = o // groups
        outs = []
        for gi in range(groups):
            cols, _ = im2col(x[:, gi * cg : (gi + 1) * cg], kh, kw, stride, padding, dilation)
            gg = g[:, gi * og : (gi + 1) * og].transpose(1, 0, 2, 3).reshape(og, -1)
            outs.append((gg @ cols).reshape(og, cg, kh, kw))
        return outs[0] if groups == 1 else xp.concatenate(outs, axis=0)

    def conv2d_grad_input(g, w, input_shape, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
        n, c, h, wd = input_shape
        o, cg, kh, kw = w.shape
        og = o // groups
        ph, pw = padding
        oh, ow = g.shape[2:]
        outs = []
        for gi in range(groups):
            gg = g[:, gi * og : (gi + 1) * og].transpose(0, 2, 3, 1).reshape(n * oh * ow, og)
            cols = gg @ w[gi * og : (gi + 1) * og].reshape(og, -1)  # cuBLAS GEMM
            cols = cols.reshape(n, oh, ow, cg, kh, kw).transpose(0, 3, 1, 2, 4, 5)
            outs.append(windows_grad(cols, (n, cg, h + 2 * ph, wd + 2 * pw), (kh, kw), stride, dilation))
        out = outs[0] if groups == 1 else xp.concatenate(outs, axis=1)
        return contiguous(out[:, :, ph : ph + h, pw : pw + wd])

    table = {
        "full": lambda shape, value, dtype: xp.full(tuple(shape), value, dtype=NP[dtype]),
        "arange": arange,
        "random_bits": random_bits,
        "neg": xp.negative,
        "exp": xp.exp,
        "log": quiet(xp.log),
        "sin": xp.sin,
        "cos": xp.cos,
        "tanh": xp.tanh,
        "sqrt": quiet(xp.sqrt),
        "abs": xp.abs,
        "sign": xp.sign,
        "floor": xp.floor,
        "reciprocal": quiet(xp.reciprocal),
        "erf": erf,
        "logical_not": xp.logical_not,
        "add": weak(xp.add),
        "sub": weak(xp.subtract),
        "mul": weak(xp.multiply),
        "div": quiet(div),
        "pow": quiet(weak(xp.power)),
        "maximum": weak(xp.maximum),
        "minimum": weak(xp.minimum),
        "remainder": remainder,
        "eq": xp.equal,
        "ne": xp.not_equal,
        "lt": xp.less,
        "le": xp.less_equal,
        "gt": xp.greater,
        "ge": xp.greater_equal,
        "logical_and": xp.logical_and,
        "logical_or": xp.logical_or,
        "logical_xor": xp.logical_xor,
        "where": weak(xp.where),
        "cast": lambda x, dtype: x.astype(NP[dtype]),
        "sum": sum_,
        "max": lambda x, axes, keepdims=False: xp.max(x, axis=tuple(axes), keepdims=keepdims),
        "min": lambda x, axes, keepdims=False: xp.min(x, axis=tuple(axes), keepdims=keepdims),
        "argmax": lambda x, axis, keepdims=False: xp.argmax(x, axis=axis, keepdims=keepdims),
        "reshape": lambda x, shape: xp.reshape(x, tuple(shape)),
        "permute": lambda x, axes: xp.transpose(x, tuple(axes)),
        "expand": lambda x, shape: xp.broadcast_to(x, tuple(shape)),
        "pad": lambda x, widths, value=0: xp.pad(x, [tuple(w) for w in widths], constant_values=value),
        "slice": slice_,
        "concatenate": lambda *xs, axis: xp.concatenate(xs, axis=axis),
        "flip": lambda x, axes: xp.flip(x, axis=tuple(axes)),
        "take": take,
        "index_add": index_add,
        "matmul": xp.matmul,
        "conv2d": conv2d,
        "conv2d_grad_input": conv2d_grad_input,
        "conv2d_grad_weight": conv2d_grad_weight,
        "windows": windows,
        "windows_grad": windows_grad,
        # the optional primitives (sorting, cumsum, bits): the reference's definitions over xp
        **ordering.make_impls(xp),
    }
    return {name: arr(f) for name, f in table.items()}

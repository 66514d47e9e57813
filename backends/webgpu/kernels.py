"""The webgpu backend's WGSL kernels, one function per primitive (the ``GPU`` table).

Each returns a ``device.WGBuffer``, or None to decline: then the backend's host runs the python
backend's rule on a downloaded copy (backend.py). A kernel declines what WGSL cannot store
(``device.STORAGE`` lists the dtypes it can), empty tensors and operands that live on the host.
"""

from __future__ import annotations

from array import array

from ember import dtypes as D
from ember.primitives import broadcast_shapes

from . import wgsl
from .device import (
    STORAGE,
    WGBuffer,
    all_on_gpu,
    bits,
    broadcast_strides,
    coalesce,
    copy,
    device,
    elementwise,
    i32,
    launch_grid,
    new_buffer,
    numel,
    on_gpu,
    to_host,
)


# Each returns a WGBuffer, or None to decline (then the host runs the python backend's rule).
def _unary(name):
    def run(x):
        if x.dtype not in STORAGE or not numel(x.shape):
            return None
        if name == "logical_not":
            if not on_gpu(x):
                return None
            return elementwise(wgsl.UNARY[name], [x], [x.stype], D.bool_, x.shape)
        if (
            x.dtype is D.bool_
            or (name in wgsl.FLOAT_ONLY - {"floor"} and x.dtype is not D.float32)
            or (name in wgsl.SIGNED_ONLY and x.dtype.kind == "u")
        ):
            return None
        expr = wgsl.UNARY["copy" if name == "floor" and x.dtype is not D.float32 else name]
        if not on_gpu(x):
            return None
        return elementwise(expr, [x], [x.stype], x.dtype, x.shape)

    return run


def _scalar_operand(t: WGBuffer, s, compare=False):
    """The bit pattern of Python scalar ``s`` next to tensor ``t`` (NumPy 2 rules), or None
    when the result would leave the tensor's dtype or the scalar does not fit its type."""
    from ..python.buffer import scalar_as, scalar_result_dtype

    if isinstance(s, bool) and t.dtype is not D.bool_:
        s = int(s)
    if scalar_result_dtype(t.dtype, s) is not t.dtype:
        return None
    if t.dtype is D.bool_:
        return int(bool(s))
    if t.dtype is D.float32:
        return bits(scalar_as(D.float32, s), "f32")
    if not isinstance(s, int):
        return None
    lo, hi = D.int_range(t.dtype)
    return bits(s, t.stype) if lo <= s <= hi else None


def _operands(a, b, compare=False):
    """(dtype, shape, operands) of a binary op, or None to decline."""
    ta, tb = isinstance(a, WGBuffer), isinstance(b, WGBuffer)
    if ta and tb:
        if a.dtype is not b.dtype:
            return None
        shape = broadcast_shapes(a.shape, b.shape)
        return a.dtype, shape, [a, b]
    t, s = (a, b) if ta else (b, a)
    bits = _scalar_operand(t, s, compare)
    if bits is None:
        return None
    return t.dtype, t.shape, ([t, bits] if ta else [bits, t])


def _binary(name):
    def run(a, b):
        got = _operands(a, b)
        if got is None:
            return None
        dtype, shape, ops = got
        if dtype not in STORAGE or not numel(shape):
            return None
        if dtype is D.bool_:
            expr = wgsl.BOOL_BINARY.get(name)
        elif name in wgsl.FLOAT_ONLY and dtype is not D.float32:
            expr = None
        else:
            expr = wgsl.BINARY[name]
        if expr is None or not all_on_gpu(*ops):
            return None
        return elementwise(expr, ops, [STORAGE[dtype]] * 2, dtype, shape)

    return run


def _compare(name):
    def run(a, b):
        got = _operands(a, b, compare=True)
        if got is None or got[0] not in STORAGE or not numel(got[1]) or not all_on_gpu(*got[2]):
            return None
        dtype, shape, ops = got
        return elementwise(wgsl.COMPARE[name], ops, [STORAGE[dtype]] * 2, D.bool_, shape)

    return run


def _logical(name):
    def run(a, b):
        if (
            not (isinstance(a, WGBuffer) and isinstance(b, WGBuffer))
            or a.dtype is not D.bool_
            or b.dtype is not D.bool_
        ):
            return None
        shape = broadcast_shapes(a.shape, b.shape)
        if not numel(shape) or not all_on_gpu(a, b):
            return None
        return elementwise(wgsl.LOGICAL[name], [a, b], ["u32", "u32"], D.bool_, shape)

    return run


def where(c, a, b):
    if not isinstance(c, WGBuffer) or c.dtype is not D.bool_:
        return None
    ta, tb = isinstance(a, WGBuffer), isinstance(b, WGBuffer)
    if not (ta or tb) or (ta and tb and a.dtype is not b.dtype):
        return None
    t = a if ta else b
    ops = [c]
    for v in (a, b):
        if isinstance(v, WGBuffer):
            ops.append(v)
        else:
            bits = _scalar_operand(t, v)
            if bits is None:
                return None
            ops.append(bits)
    shape = broadcast_shapes(*(x.shape for x in ops if isinstance(x, WGBuffer)))
    if t.dtype not in STORAGE or not numel(shape) or not all_on_gpu(*ops):
        return None
    return elementwise(wgsl.WHERE, ops, ["u32", t.stype, t.stype], t.dtype, shape)


def cast(x, dtype):
    dtype = D.get(dtype)
    # argmax's int64 result lives on the GPU as i32 and casts from there
    if dtype not in STORAGE or not numel(x.shape) or not (x.store is not None or on_gpu(x)):
        return None
    expr = wgsl.cast_expr(x.stype, STORAGE[dtype], x.dtype is D.bool_, dtype is D.bool_)
    if x.stype == "f32" and dtype is D.uint16:  # through i32, so -1.0 wraps to 65535 as NumPy's does
        expr = "u32(i32({0}))"
    return elementwise(expr, [x], [x.stype], dtype, x.shape)


def _reduce(op):
    def run(x, axes=None, keepdims=False, axis=None):
        axes = (axis,) if op == "argmax" else tuple(axes)
        if x.dtype not in STORAGE or x.dtype is D.bool_ or not numel(x.shape) or not on_gpu(x):
            return None
        if x.dtype.itemsize < 4 and op not in ("max", "min", "argmax"):  # a sum would need wrapping
            return None
        nd = len(x.shape)
        red = sorted({a % nd for a in axes}) if nd else []
        kept = [d for d in range(nd) if d not in red]
        out_shape = (
            tuple(1 if d in red else s for d, s in enumerate(x.shape)) if keepdims else tuple(x.shape[d] for d in kept)
        )
        kdims, (kstr,) = coalesce([x.shape[d] for d in kept], [[x.strides[d] for d in kept]])
        rdims, (rstr,) = coalesce([x.shape[d] for d in red], [[x.strides[d] for d in red]])
        dtype, stype = (D.int64, "i32") if op == "argmax" else (x.dtype, x.stype)
        out = new_buffer(out_shape, dtype, stype)
        n_out = numel(out_shape)
        meta = [
            n_out,
            numel([x.shape[d] for d in red]),
            i32(x.offset),
            *kdims,
            *map(i32, kstr),
            *rdims,
            *map(i32, rstr),
        ]
        code = wgsl.reduce(op, x.stype, len(kdims), len(rdims))
        device().dispatch(code, [out.store.gpu, x.store.gpu], meta, launch_grid(n_out))
        return out

    return run


def _matmul_layout(a, b, m, k, n) -> str:
    """The fastest shader the operands' layout allows (see wgsl.matmul)."""
    sa, sb = a.strides, b.strides
    aligned = all(v % 4 == 0 for v in (a.offset, b.offset) + sa[:-2] + sb[:-2])
    if (
        aligned
        and k % 4 == 0
        and sa[-1] == 1
        and sb[-2] == 1
        and (m == 1 or sa[-2] % 4 == 0)
        and (n == 1 or sb[-1] % 4 == 0)
    ):
        return "kk4"
    if aligned and n % 4 == 0 and sb[-1] == 1 and (k == 1 or sb[-2] % 4 == 0):
        return "kn4"
    return "general"


def matmul(a, b):
    if a.dtype is not b.dtype or a.dtype not in (D.float32, D.int32):
        return None
    (m, k), n = a.shape[-2:], b.shape[-1]
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    count = numel(batch)
    if not (m and n and k and count) or count > 65535 or not all_on_gpu(a, b):
        return None
    out = new_buffer(batch + (m, n), a.dtype)
    sa, sb = (
        broadcast_strides(a.view(a.shape[:-2], 0, a.strides[:-2]), batch),
        broadcast_strides(b.view(b.shape[:-2], 0, b.strides[:-2]), batch),
    )
    meta = [
        m,
        n,
        k,
        i32(a.offset),
        i32(b.offset),
        *map(i32, (a.strides[-2], a.strides[-1], b.strides[-2], b.strides[-1])),
        *batch,
        *map(i32, sa),
        *map(i32, sb),
    ]
    layout = _matmul_layout(a, b, m, k, n)
    threads = m * n if layout == "general" else m * -(-n // 4)
    code = wgsl.matmul(a.stype, len(batch), layout)
    groups = -(-threads // wgsl.WORKGROUP)
    if groups > 65535:
        return None
    device().dispatch(code, [out.store.gpu, a.store.gpu, b.store.gpu], meta, (groups, 1, count))
    return out


def conv2d(x, w, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    if x.dtype is not D.float32 or w.dtype is not D.float32:
        return None
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    if not (n and o and oh > 0 and ow > 0 and cg) or not all_on_gpu(x, w):
        return None
    out = new_buffer((n, o, oh, ow), D.float32)
    fields = dict(
        n=n,
        c=c,
        h=h,
        w=wd,
        o=o,
        cg=cg,
        kh=kh,
        kw=kw,
        oh=oh,
        ow=ow,
        sh=stride[0],
        sw=stride[1],
        ph=padding[0],
        pw=padding[1],
        dh=dilation[0],
        dw=dilation[1],
        og=o // groups,
        x_off=x.offset,
        w_off=w.offset,
    )
    fields.update({f"x_s{d}": x.strides[d] for d in range(4)})
    fields.update({f"w_s{d}": w.strides[d] for d in range(4)})
    meta = [i32(fields[f]) for f in wgsl.CONV_FIELDS]
    device().dispatch(wgsl.conv2d("f32"), [out.store.gpu, x.store.gpu, w.store.gpu], meta, launch_grid(n * o * oh * ow))
    return out


def pad(x, widths, value=0):
    if x.dtype not in STORAGE or not numel(x.shape) or not on_gpu(x):
        return None
    bits = _scalar_operand(x, value)
    if bits is None:
        return None
    shape = tuple(s + lo + hi for s, (lo, hi) in zip(x.shape, widths))
    out = new_buffer(shape, x.dtype)
    nd = len(shape)
    meta = [numel(shape), i32(x.offset), *shape, *x.shape, *map(i32, x.strides), *(lo for lo, _ in widths), bits]
    device().dispatch(wgsl.pad(x.stype, nd), [out.store.gpu, x.store.gpu], meta, launch_grid(numel(shape)))
    return out


def full(shape, value, dtype):
    """A constant fill, made on the GPU (one shader: no host list, no upload)."""
    from ..python.buffer import convert, scalar_kind

    dtype, shape = D.get(dtype), tuple(shape)
    if dtype not in STORAGE or not numel(shape):
        return None
    (v,) = convert([value], scalar_kind(value), dtype)
    return elementwise("{0}", [int(v) if dtype is D.bool_ else bits(v, STORAGE[dtype])], [STORAGE[dtype]], dtype, shape)


def take(x, indices, axis):
    """A gather on the GPU. The indices are read to the host (where int64 ones live anyway),
    checked and wrapped as the python backend does, and uploaded as i32."""
    from ..python.layout import _checked

    if x.dtype not in STORAGE or not numel(x.shape) or not numel(indices.shape) or not on_gpu(x):
        return None
    axis %= max(len(x.shape), 1)
    n = x.shape[axis] if x.shape else 1
    idx = _checked(to_host(indices), n, axis)
    if not x.contiguous:
        x = copy(x)
    inner, m = numel(x.shape[axis + 1 :]), len(idx)
    out_shape = x.shape[:axis] + indices.shape + x.shape[axis + 1 :]
    ids = new_buffer((m,), D.int32)
    device().write(ids.store.gpu, array("i", idx).tobytes())
    out = new_buffer(out_shape, x.dtype)
    meta = [numel(out_shape), inner, m, n, x.offset]
    device().dispatch(
        wgsl.take(x.stype), [out.store.gpu, x.store.gpu, ids.store.gpu], meta, launch_grid(numel(out_shape))
    )
    return out


# -- movement: views, no kernel ---------------------------------------------------------------
def reshape(x, shape):
    if x.store is None:
        return None
    if not x.contiguous:
        x = copy(x)
    return x.view(tuple(shape), x.offset, None)


def permute(x, axes):
    if x.store is None:
        return None
    return x.view(tuple(x.shape[a] for a in axes), x.offset, tuple(x.strides[a] for a in axes))


def expand(x, shape):
    if x.store is None:
        return None
    return x.view(tuple(shape), x.offset, broadcast_strides(x, tuple(shape)))


def slice_(x, starts, stops, steps):
    if x.store is None:
        return None
    shape = tuple(len(range(a, b, c)) for a, b, c in zip(starts, stops, steps))
    offset = x.offset + sum(a * s for a, s in zip(starts, x.strides))
    return x.view(shape, offset, tuple(s * c for s, c in zip(x.strides, steps)))


def flip(x, axes):
    if x.store is None:
        return None
    nd = len(x.shape)
    axes = {a % nd for a in axes} if nd else set()
    offset = x.offset + sum((x.shape[d] - 1) * x.strides[d] for d in axes if x.shape[d])
    return x.view(x.shape, offset, tuple(-s if d in axes else s for d, s in enumerate(x.strides)))


def windows(x, kernel, stride, dilation=(1, 1)):
    if x.store is None:
        return None
    *lead, h, w = x.shape
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (w - dw * (kw - 1) - 1) // sw + 1
    *ls, s_h, s_w = x.strides
    return x.view((*lead, oh, ow, kh, kw), x.offset, (*ls, s_h * sh, s_w * sw, s_h * dh, s_w * dw))


def concatenate(*xs, axis):
    if not numel(xs[0].shape) or not all_on_gpu(*xs) or any(x.dtype is not xs[0].dtype for x in xs):
        return None
    axis = axis % len(xs[0].shape)
    shape = list(xs[0].shape)
    shape[axis] = sum(x.shape[axis] for x in xs)
    out = new_buffer(tuple(shape), xs[0].dtype)
    start = 0
    for x in xs:
        if x.shape[axis]:
            copy(x, out.view(x.shape, start * out.strides[axis], out.strides))
        start += x.shape[axis]
    return out


GPU = {
    **{
        n: _unary(n)
        for n in (
            "neg",
            "abs",
            "sign",
            "floor",
            "exp",
            "log",
            "sin",
            "cos",
            "tanh",
            "sqrt",
            "reciprocal",
            "logical_not",
        )
    },
    **{n: _binary(n) for n in wgsl.BINARY},
    **{n: _compare(n) for n in wgsl.COMPARE},
    **{n: _logical(n) for n in wgsl.LOGICAL},
    "where": where,
    "cast": cast,
    "full": full,
    "take": take,
    "sum": _reduce("sum"),
    "max": _reduce("max"),
    "min": _reduce("min"),
    "argmax": _reduce("argmax"),
    "matmul": matmul,
    "conv2d": conv2d,
    "pad": pad,
    "reshape": reshape,
    "permute": permute,
    "expand": expand,
    "slice": slice_,
    "flip": flip,
    "windows": windows,
    "concatenate": concatenate,
}

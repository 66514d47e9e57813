"""The template backend: every primitive of ember's backend contract, one plain function each.

Each function takes buffers (here NumPy arrays) and keyword parameters and returns a new
buffer, as specified in ``ember.primitives`` (``python -c "import ember.primitives as p;
print(p.PRIMITIVES['conv2d'].doc)"``). To port ember to another array library, replace the
body of each function with that library's call; keep the names and signatures. Gradients are
not your business: ember derives them from these primitives.

This is written independently of ember's NumPy reference (convolution is a loop over kernel
positions instead of im2col, windows are slices instead of stride tricks, Philox is spelled
out), so certifying it compares two implementations for real.
"""

from __future__ import annotations

import math

import numpy as np

from ember import dtypes as D
from ember.backend import Backend, Capabilities

#: ember dtype -> this library's dtype, and back
TYPES = {d: np.dtype(d.name) for d in D.ALL}
EMBER_TYPES = {v: k for k, v in TYPES.items()}


# ----------------------------------------------------------------------------- creation
def full(shape, value, dtype):
    return np.full(shape, value, dtype=TYPES[dtype])


def arange(start, stop, step, dtype):
    return np.arange(start, stop, step, dtype=TYPES[dtype])


def philox_block(counter: int, key: int) -> list:
    """Philox-4x32-10 on one 128-bit counter (low 64 bits = ``counter``), 64-bit ``key``."""
    m0, m1, w0, w1, mask = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85, 0xFFFFFFFF
    c0, c1, c2, c3 = counter & mask, (counter >> 32) & mask, 0, 0
    k0, k1 = key & mask, (key >> 32) & mask
    for _ in range(10):
        p0, p1 = m0 * c0, m1 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & mask, (p0 >> 32) ^ c3 ^ k1, p0 & mask
        k0, k1 = (k0 + w0) & mask, (k1 + w1) & mask
    return [c0, c1, c2, c3]


def random_bits(shape, seed, offset):
    # Element i is word (offset + i) % 4 of the block for counter (offset + i) // 4. A loop over
    # blocks is slow but obviously right; a real backend runs one thread per block.
    n = math.prod(shape)
    words = []
    for block in range(offset // 4, (offset + n + 3) // 4):
        words += philox_block(block, seed)
    start = offset % 4
    return np.array(words[start : start + n], dtype=np.uint32).reshape(shape)


# ----------------------------------------------------------------------------- elementwise
def erf(x):
    # the exact erf of each element, computed in float64 and rounded to x's dtype
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)


def div(a, b):
    dtype = a.dtype if isinstance(a, np.ndarray) else b.dtype
    return np.divide(a, b).astype(dtype, copy=False)


def where(cond, a, b):
    return np.where(cond, a, b)


def cast(x, dtype):
    return x.astype(TYPES[dtype])


# ----------------------------------------------------------------------------- reductions
def sum_(x, axes, keepdims=False):
    acc = np.float32 if x.dtype == np.float16 else x.dtype  # the spec: float16 adds in float32
    return np.sum(x, axis=tuple(axes), keepdims=keepdims, dtype=acc).astype(x.dtype)


def max_(x, axes, keepdims=False):
    return np.max(x, axis=tuple(axes), keepdims=keepdims)


def min_(x, axes, keepdims=False):
    return np.min(x, axis=tuple(axes), keepdims=keepdims)


def argmax(x, axis, keepdims=False):
    return np.argmax(x, axis=axis, keepdims=keepdims).astype(np.int64)


# ----------------------------------------------------------------------------- movement
def reshape(x, shape):
    return np.reshape(x, shape)


def permute(x, axes):
    return np.transpose(x, axes)


def expand(x, shape):
    return np.broadcast_to(x, shape)


def pad(x, widths, value=0):
    out = np.full(tuple(s + lo + hi for s, (lo, hi) in zip(x.shape, widths)), value, dtype=x.dtype)
    out[tuple(slice(lo, lo + s) for s, (lo, _) in zip(x.shape, widths))] = x
    return out


def slice_(x, starts, stops, steps):
    return x[tuple(slice(a, b, c) for a, b, c in zip(starts, stops, steps))]


def concatenate(*xs, axis):
    return np.concatenate(xs, axis=axis)


def flip(x, axes):
    return x[tuple(slice(None, None, -1) if d in axes else slice(None) for d in range(x.ndim))]


# ----------------------------------------------------------------------------- indexing
def take(x, indices, axis):
    return np.take(x, indices, axis=axis)


def index_add(x, indices, values, axis):
    out = x.copy()
    np.add.at(out, (slice(None),) * axis + (indices,), values)  # repeated indices accumulate
    return out


# ----------------------------------------------------------------------------- matmul, conv, pooling
def matmul(a, b):
    return np.matmul(a, b)


def _taps(kh, kw, stride, dilation, oh, ow):
    """For each kernel position: its index and the strided slices of the (padded) input it sees."""
    (sh, sw), (dh, dw) = stride, dilation
    for i in range(kh):
        for j in range(kw):
            yield i, j, (slice(i * dh, i * dh + sh * (oh - 1) + 1, sh), slice(j * dw, j * dw + sw * (ow - 1) + 1, sw))


def _out_size(size, k, stride, pad_, dilation):
    return (size + 2 * pad_ - dilation * (k - 1) - 1) // stride + 1


def conv2d(x, w, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    og = o // groups
    oh, ow = _out_size(h, kh, stride[0], padding[0], dilation[0]), _out_size(wd, kw, stride[1], padding[1], dilation[1])
    xp = pad(x, ((0, 0), (0, 0), (padding[0], padding[0]), (padding[1], padding[1])))
    out = np.zeros((n, o, oh, ow), dtype=x.dtype)
    for g in range(groups):
        xs, os_ = slice(g * cg, (g + 1) * cg), slice(g * og, (g + 1) * og)
        for i, j, (rows, cols) in _taps(kh, kw, stride, dilation, oh, ow):
            out[:, os_] += np.einsum("nchw,oc->nohw", xp[:, xs, rows, cols], w[os_, :, i, j])
    return out


def conv2d_grad_input(g, w, input_shape, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    n, c, h, wd = input_shape
    o, cg, kh, kw = w.shape
    og = o // groups
    oh, ow = g.shape[2:]
    gx = np.zeros((n, c, h + 2 * padding[0], wd + 2 * padding[1]), dtype=g.dtype)
    for grp in range(groups):
        xs, os_ = slice(grp * cg, (grp + 1) * cg), slice(grp * og, (grp + 1) * og)
        for i, j, (rows, cols) in _taps(kh, kw, stride, dilation, oh, ow):
            gx[:, xs, rows, cols] += np.einsum("nohw,oc->nchw", g[:, os_], w[os_, :, i, j])
    return gx[:, :, padding[0] : padding[0] + h, padding[1] : padding[1] + wd].copy()


def conv2d_grad_weight(x, g, weight_shape, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    o, cg, kh, kw = weight_shape
    og = o // groups
    oh, ow = g.shape[2:]
    xp = pad(x, ((0, 0), (0, 0), (padding[0], padding[0]), (padding[1], padding[1])))
    gw = np.zeros(weight_shape, dtype=x.dtype)
    for grp in range(groups):
        xs, os_ = slice(grp * cg, (grp + 1) * cg), slice(grp * og, (grp + 1) * og)
        for i, j, (rows, cols) in _taps(kh, kw, stride, dilation, oh, ow):
            gw[os_, :, i, j] = np.einsum("nohw,nchw->oc", g[:, os_], xp[:, xs, rows, cols])
    return gw


def windows(x, kernel, stride, dilation=(1, 1)):
    *lead, h, wd = x.shape
    oh, ow = _out_size(h, kernel[0], stride[0], 0, dilation[0]), _out_size(wd, kernel[1], stride[1], 0, dilation[1])
    out = np.empty((*lead, oh, ow, *kernel), dtype=x.dtype)
    for i, j, (rows, cols) in _taps(*kernel, stride, dilation, oh, ow):
        out[..., i, j] = x[..., rows, cols]
    return out


def windows_grad(g, input_shape, kernel, stride, dilation=(1, 1)):
    out = np.zeros(input_shape, dtype=g.dtype)
    oh, ow = g.shape[-4], g.shape[-3]
    for i, j, (rows, cols) in _taps(*kernel, stride, dilation, oh, ow):
        out[..., rows, cols] += g[..., i, j]  # overlapping windows accumulate
    return out


IMPLS = {
    "full": full,
    "arange": arange,
    "random_bits": random_bits,
    "neg": np.negative,
    "exp": np.exp,
    "log": np.log,
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
    "sqrt": np.sqrt,
    "reciprocal": np.reciprocal,
    "abs": np.abs,
    "sign": np.sign,
    "floor": np.floor,
    "erf": erf,
    "logical_not": np.logical_not,
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": div,
    "pow": np.power,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
    "logical_xor": np.logical_xor,
    "where": where,
    "cast": cast,
    "sum": sum_,
    "max": max_,
    "min": min_,
    "argmax": argmax,
    "reshape": reshape,
    "permute": permute,
    "expand": expand,
    "pad": pad,
    "slice": slice_,
    "concatenate": concatenate,
    "flip": flip,
    "take": take,
    "index_add": index_add,
    "matmul": matmul,
    "conv2d": conv2d,
    "conv2d_grad_input": conv2d_grad_input,
    "conv2d_grad_weight": conv2d_grad_weight,
    "windows": windows,
    "windows_grad": windows_grad,
}


def _array_result(fn):
    # NumPy returns a bare scalar for 0-d results; ember wants a buffer it can write into.
    def impl(*args, **params):
        return np.asarray(fn(*args, **params))

    impl.__name__ = getattr(fn, "__name__", "impl")
    return impl


# ----------------------------------------------------------------------------- optional fused ops
def softmax(x, dim=-1):
    """An optional fused op (see ember.fused): declared below, so tier 4 checks it."""
    e = np.exp(x - np.max(x, axis=dim, keepdims=True))
    return e / np.sum(e, axis=dim, keepdims=True)


class TemplateBackend(Backend):
    """Buffers are NumPy arrays; every primitive is one function of IMPLS above."""

    name = "template"
    version = "0.1.0"
    device = "cpu"
    impls = {name: _array_result(fn) for name, fn in IMPLS.items()}
    fused_impls = {"softmax": softmax}

    def available(self):
        return True, ""  # e.g. (False, "no CUDA device: install the driver") elsewhere

    def capabilities(self):
        return Capabilities(
            ops=frozenset(self.impls), dtypes=frozenset(D.ALL), devices=("cpu",), fused=frozenset(self.fused_impls)
        )

    # -- host transfer -----------------------------------------------------------------------
    def shape(self, buf):
        return tuple(buf.shape)

    def dtype(self, buf):
        return EMBER_TYPES[buf.dtype]

    def from_list(self, flat, shape, dtype):
        return np.array(flat, dtype=TYPES[dtype]).reshape(shape)

    def to_list(self, buf):
        return np.asarray(buf).reshape(-1).tolist()

    def from_bytes(self, data, shape, dtype):
        return np.frombuffer(data, dtype=TYPES[dtype].newbyteorder("<")).astype(TYPES[dtype]).reshape(shape)

    def to_bytes(self, buf):
        return np.ascontiguousarray(buf, dtype=buf.dtype.newbyteorder("<")).tobytes()

    def from_numpy(self, array):
        return np.array(array)  # a copy: tensors on this backend own their memory

    def to_numpy(self, buf):
        return np.array(buf)

    def assign(self, dst, src):
        np.copyto(dst, src)

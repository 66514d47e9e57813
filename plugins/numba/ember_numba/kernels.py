"""Hand-written kernels: the primitives where NumPy is weak and one loop nest is not.

* reductions (``sum``/``max``/``min``) over the axes a network reduces: rows (softmax), columns
  (bias gradients), all-but-channels (batch norm), everything (losses);
* convolution (conv.py): im2col + BLAS GEMM over chunks of the batch;
* ``windows_grad`` (the adjoint of sliding windows), ``pad`` without ``np.pad``'s per-call
  overhead, ``index_add`` without ``np.add.at``'s slow unbuffered loop, and ``random_bits``
  (Philox-4x32-10 in 32-bit words, no 64-bit temporaries).

Every public function here has the reference's signature and returns the reference's result;
it falls back to the NumPy reference for what its kernels do not cover, for small inputs, and
until its shapes are hot (launch.hot). Indices inside the kernels are unsigned where they
address memory: with signed ones numba checks for negative (wrap-around) indices, and that
check stops LLVM from vectorizing the loop (10x slower). Calls go through launch.run, which
picks the thread count.
"""

from __future__ import annotations

import math
import os

import numba
import numpy as np
from numba import prange, uint32, uint64

from ember.backends.numpy import backend as nb

from .launch import hot, run, threads

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
#: Elements from which these kernels run instead of the reference (``EMBER_NUMBA_MIN_SIZE``
#: lowers it for tests). Below it NumPy's call is as cheap as a kernel launch.
MIN_SIZE = int(os.environ.get("EMBER_NUMBA_MIN_SIZE", 4096))
REASSOC = {"reassoc"}  # lets LLVM vectorize a sum (it reorders the additions)
JIT = dict(cache=True, nogil=True, error_model="numpy")

# After JIT: blas.py ends by importing skinny.py, which takes JIT from here, so this module
# can be imported first (before, only blas.py or skinny.py could).
from .blas import matmul  # noqa: E402


def _contiguous_float(*arrays) -> bool:
    return all(a.dtype in FLOATS and a.flags.c_contiguous for a in arrays)


# ============================================================================ reductions
@numba.njit(parallel=True, fastmath=REASSOC, **JIT)
def _sum_keep(x, A, B, C, out):
    """out[b] = sum over a, c of x[a, b, c], one output per task (B large)."""
    c_n = uint64(C)
    for b in prange(B):
        s = 0.0
        for a in range(A):
            base = uint64((a * B + b) * C)
            for c in range(c_n):
                s += x[base + c]
        out[b] = s


@numba.njit(parallel=True, fastmath=REASSOC, **JIT)
def _sum_split(x, A, B, C, P, parts):
    """parts[p, b] = the sum over chunk p of a (and all c) of x[a, b, c] (A large)."""
    b_n, c_n = uint64(B), uint64(C)
    for p in prange(P):
        lo, hi = A * p // P, A * (p + 1) // P
        acc = parts[p]
        for a in range(lo, hi):
            if C == 1:
                base = uint64(a * B)
                for b in range(b_n):
                    acc[b] += x[base + b]
            else:
                for b in range(b_n):
                    base = uint64((a * B + b) * C)
                    s = 0.0
                    for c in range(c_n):
                        s += x[base + c]
                    acc[b] += s


@numba.njit(parallel=True, fastmath=REASSOC, **JIT)
def _sum_all(x, P, parts):
    """parts[p] = the sum of chunk p of x (a reduction over everything)."""
    n = x.size
    for p in prange(P):
        lo, hi = uint64(n * p // P), uint64(n * (p + 1) // P)
        s = 0.0
        for i in range(lo, hi):
            s += x[i]
        parts[p] = s


@numba.njit(parallel=True, **JIT)
def _extreme_keep(x, A, B, C, out, want_max):
    """out[b] = max (or min) over a, c of x[a, b, c]; NaN propagates."""
    c_n = uint64(C)
    for b in prange(B):
        m = x[uint64(b * C)]
        for a in range(A):
            base = uint64((a * B + b) * C)
            for c in range(c_n):
                v = x[base + c]
                if want_max:
                    if v > m or v != v:
                        m = v
                elif v < m or v != v:
                    m = v
                if m != m:
                    break
        out[b] = m


def _pattern(shape, axes):
    """Collapse ``shape`` reduced over ``axes`` to (A, B, C): reduce A and C, keep B. None if
    the reduced and kept dims do not form that pattern (e.g. keep, reduce, keep)."""
    groups = []  # [reduced?, size]
    for d, n in enumerate(shape):
        if n == 1:
            continue
        r = d in axes
        if groups and groups[-1][0] == r:
            groups[-1][1] *= n
        else:
            groups.append([r, n])
    flags = [g[0] for g in groups]
    sizes = [g[1] for g in groups]
    if flags in ([], [True], [False]):
        if flags == [False]:
            return 1, sizes[0], 1
        return (sizes[0] if sizes else 1), 1, 1
    if flags == [True, False]:
        return sizes[0], sizes[1], 1
    if flags == [False, True]:
        return 1, sizes[0], sizes[1]
    if flags == [True, False, True]:
        return sizes[0], sizes[1], sizes[2]
    return None


def _reduce_shape(shape, axes, keepdims):
    if keepdims:
        return tuple(1 if d in axes else n for d, n in enumerate(shape))
    return tuple(n for d, n in enumerate(shape) if d not in axes)


def _sum(x, axes, keepdims=False):
    axes = {a % max(x.ndim, 1) for a in axes}
    if x.size < MIN_SIZE or not axes or not _contiguous_float(x):
        return nb.IMPLS["sum"](x, tuple(axes), keepdims)
    pattern = _pattern(x.shape, axes)
    if pattern is None or not hot(("sum", x.shape, x.dtype.num, pattern)):
        return nb.IMPLS["sum"](x, tuple(axes), keepdims)
    A, B, C = pattern
    flat = x.reshape(-1)
    t = threads()
    if B == 1:
        P = max(1, min(4 * t, x.size // 4096))
        out = np.empty(P, np.float64)
        run(_sum_all, x.size, flat, P, out)
        out = np.array([out.sum()])
    elif (4 * t <= B and C >= 16) or A == 1:
        out = np.empty(B, np.float64)
        run(_sum_keep, x.size, flat, A, B, C, out)
    else:
        P = max(1, min(A, 4 * t))
        parts = np.zeros((P, B), np.float64)
        run(_sum_split, x.size, flat, A, B, C, P, parts)
        out = parts.sum(0) if P > 1 else parts[0]
    return out.astype(x.dtype).reshape(_reduce_shape(x.shape, axes, keepdims))


def _extreme(name, want_max):
    ref = nb.IMPLS[name]

    def impl(x, axes, keepdims=False):
        axes = {a % max(x.ndim, 1) for a in axes}
        if x.size < MIN_SIZE or not axes or not _contiguous_float(x):
            return ref(x, tuple(axes), keepdims)
        pattern = _pattern(x.shape, axes)
        if pattern is None or not hot((name, x.shape, x.dtype.num, pattern)):
            return ref(x, tuple(axes), keepdims)
        A, B, C = pattern
        out = np.empty(B, x.dtype)
        run(_extreme_keep, x.size, x.reshape(-1), A, B, C, out, want_max)
        return out.reshape(_reduce_shape(x.shape, axes, keepdims))

    impl.__name__ = f"numba_{name}"
    return impl


# ============================================================================ layout
@numba.njit(parallel=True, **JIT)
def _pad_rows(x, in_shape, out_shape, lo, value, out):
    """Copy x into out at offset lo, filling the rest with value; rows of the last dim."""
    rank = len(out_shape)
    rows = 1
    for d in range(rank - 1):
        rows *= out_shape[d]
    w_out, w_in, left = out_shape[rank - 1], in_shape[rank - 1], lo[rank - 1]
    for r in prange(rows):
        rest, src_row, inside, mult = r, 0, True, 1
        for d in range(rank - 2, -1, -1):
            i = rest % out_shape[d]
            rest //= out_shape[d]
            j = i - lo[d]
            if j < 0 or j >= in_shape[d]:
                inside = False
            src_row += j * mult
            mult *= in_shape[d]
        base = uint64(r * w_out)
        if not inside:
            for k in range(uint64(w_out)):
                out[base + k] = value
            continue
        src = uint64(src_row * w_in)
        for k in range(uint64(left)):
            out[base + k] = value
        for k in range(uint64(w_in)):
            out[base + uint64(left) + k] = x[src + k]
        for k in range(uint64(left + w_in), uint64(w_out)):
            out[base + k] = value


def _pad(x, widths, value=0):
    """Constant padding: one allocation, the interior copied once, only the border filled."""
    widths = [tuple(map(int, w)) for w in widths]
    shape = tuple(n + lo + hi for n, (lo, hi) in zip(x.shape, widths))
    if not any(lo or hi for lo, hi in widths):
        return x.copy()
    if x.ndim == 0 or x.dtype.names:  # a storage dtype's record: the NumPy backend encodes the fill value
        return nb.IMPLS["pad"](x, widths, value)
    out = np.empty(shape, x.dtype)
    if x.size >= MIN_SIZE and _contiguous_float(x) and x.ndim <= 8 and hot(("pad", x.shape, x.dtype.num)):
        run(
            _pad_rows,
            out.size,
            x.reshape(-1),
            np.array(x.shape, np.int64),
            np.array(shape, np.int64),
            np.array([lo for lo, _ in widths], np.int64),
            x.dtype.type(value),
            out.reshape(-1),
        )
        return out
    for d, (lo, hi) in enumerate(widths):  # the border, one slab per side per dim
        pre = (slice(None),) * d
        if lo:
            out[pre + (slice(0, lo),)] = value
        if hi:
            out[pre + (slice(shape[d] - hi, shape[d]),)] = value
    out[tuple(slice(lo, lo + n) for n, (lo, _) in zip(x.shape, widths))] = x
    return out


# ============================================================================ windows
@numba.njit(parallel=True, **JIT)
def _windows_grad_kernel(g, L, H, W, OH, OW, KH, KW, sh, sw, dh, dw, out):
    for l in prange(L):
        plane = uint64(l * H * W)
        for i in range(H * W):
            out[plane + uint64(i)] = 0
        src = l * OH * OW * KH * KW
        for oh in range(OH):
            for ow in range(OW):
                for kh in range(KH):
                    y = oh * sh + kh * dh
                    for kw in range(KW):
                        out[plane + uint64(y * W + ow * sw + kw * dw)] += g[uint64(src)]
                        src += 1


def _windows_grad(g, input_shape, kernel, stride, dilation=(1, 1)):
    if g.size < MIN_SIZE or not _contiguous_float(g) or not hot(("windows_grad", g.shape, g.dtype.num)):
        return nb.IMPLS["windows_grad"](g, input_shape, kernel, stride, dilation)
    *lead, h, w = input_shape
    oh, ow = g.shape[-4], g.shape[-3]
    out = np.empty(input_shape, g.dtype)
    run(
        _windows_grad_kernel,
        g.size,
        g.reshape(-1),
        math.prod(lead),
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
        out.reshape(-1),
    )
    return out


# ============================================================================ indexing
@numba.njit(**JIT)
def _index_add_kernel(out, idx, values, outer, n, m, inner):
    """out[o, idx[j], :] += values[o, j, :] for each o and j, in order (repeats accumulate)."""
    i_n = uint64(inner)
    for o in range(outer):
        for j in range(m):
            k = idx[j]
            if k < 0:
                k += n
            dst = uint64((o * n + k) * inner)
            src = uint64((o * m + j) * inner)
            for i in range(i_n):
                out[dst + i] += values[src + i]


def _index_add(x, indices, values, axis):
    axis %= max(x.ndim, 1)
    if (
        values.size < MIN_SIZE
        or x.dtype != values.dtype
        or x.ndim == 0
        or indices.dtype.kind not in "iu"
        or x.dtype.kind not in "fiu"
        or x.dtype == np.float16
        or not hot(("index_add", x.shape, values.shape, x.dtype.num, axis))
    ):
        return nb.IMPLS["index_add"](x, indices, values, axis)
    n = x.shape[axis]
    outer, inner = math.prod(x.shape[:axis]), math.prod(x.shape[axis + 1 :])
    idx = np.ascontiguousarray(indices, dtype=np.int64).reshape(-1)
    if idx.size and (idx.max() >= n or idx.min() < -n):
        return nb.IMPLS["index_add"](x, indices, values, axis)  # NumPy's IndexError names it
    out = np.array(x, order="C", copy=True)
    _index_add_kernel(out.reshape(-1), idx, np.ascontiguousarray(values).reshape(-1), outer, n, idx.size, inner)
    return out


# ============================================================================ random bits
@numba.njit(parallel=True, **JIT)
def _philox(first, blocks, k0, k1, out):
    """Philox-4x32-10 blocks first .. first+blocks-1, four words each, into out (uint32)."""
    for b in prange(blocks):
        ctr = uint64(first) + uint64(b)
        c0, c1, c2, c3 = uint32(ctr & 0xFFFFFFFF), uint32(ctr >> 32), uint32(0), uint32(0)
        a0, a1 = uint32(k0), uint32(k1)
        for _ in range(10):
            p0 = uint64(0xD2511F53) * uint64(c0)
            p1 = uint64(0xCD9E8D57) * uint64(c2)
            c0, c1, c2, c3 = (
                uint32(p1 >> 32) ^ c1 ^ a0,
                uint32(p1 & 0xFFFFFFFF),
                uint32(p0 >> 32) ^ c3 ^ a1,
                uint32(p0 & 0xFFFFFFFF),
            )
            a0 = uint32((uint64(a0) + uint64(0x9E3779B9)) & 0xFFFFFFFF)
            a1 = uint32((uint64(a1) + uint64(0xBB67AE85)) & 0xFFFFFFFF)
        o = uint64(b) * uint64(4)
        out[o], out[o + 1], out[o + 2], out[o + 3] = c0, c1, c2, c3


def _random_bits(shape, seed, offset):
    n = math.prod(shape)
    if n < MIN_SIZE or not hot(("random_bits", tuple(shape))):
        return nb.IMPLS["random_bits"](shape, seed, offset)
    first, last = offset // 4, (offset + n + 3) // 4
    words = np.empty(4 * (last - first), np.uint32)
    run(_philox, 16 * words.size, first, last - first, seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF, words)
    start = offset - 4 * first
    return words[start : start + n].reshape(shape)


IMPLS = {
    "matmul": matmul,
    "sum": _sum,
    "max": _extreme("max", True),
    "min": _extreme("min", False),
    "pad": _pad,
    "windows_grad": _windows_grad,
    "index_add": _index_add,
    "random_bits": _random_bits,
}

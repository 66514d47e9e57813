"""The NumPy reference backend: the executable spec of every primitive.

Each entry of ``IMPLS`` is the most obvious NumPy expression of its spec in ember.primitives.
No Python loops over elements; matmul and convolution go to BLAS (convolution as im2col + GEMM,
channels last: conv.py).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ember import dtypes as D
from ember.backend import Backend, Capabilities

from . import bfloat16 as bf16, conv, float8 as f8, fused, host_memory, narrow, ordering

NP = {d: np.dtype(d.name) for d in D.ALL + D.OPTIONAL}
NP[D.bfloat16] = bf16.BF16  # the storage dtypes (bfloat16.py, float8.py, narrow.py)
NP.update({D.get(name): buf for name, buf in {**f8.BUFFERS, **narrow.BUFFERS}.items()})
NP[D.string] = np.dtype(object)  # text: an object array of Python str (ember.text)
EMBER = {v: k for k, v in NP.items()}

# A storage dtype's buffer dtype -> (encode values in it, its exact values in its compute dtype's kind)
CODECS = {bf16.BF16: (bf16.from_float, bf16.to_float)}
CODECS.update({buf: (lambda x, name=name: f8.from_float(x, name), f8.to_float) for name, buf in f8.BUFFERS.items()})
CODECS.update(
    {buf: (lambda x, name=name: narrow.from_values(x, name), narrow.to_values) for name, buf in narrow.BUFFERS.items()}
)


# ----------------------------------------------------------------------------- random bits
_PHILOX_M = (np.uint64(0xD2511F53), np.uint64(0xCD9E8D57))
_PHILOX_W = (0x9E3779B9, 0xBB67AE85)
_MASK32 = np.uint64(0xFFFFFFFF)


def philox4x32_10(c0, c1, c2, c3, k0: int, k1: int) -> np.ndarray:
    """Philox-4x32-10 (Salmon et al. 2011): the four 32-bit counter words (uint64 arrays holding
    32-bit values) and the two key words -> (n, 4) uint32 words. Random123's known-answer
    vectors check this function (tests/backends/test_numpy_backend.py)."""
    for _ in range(10):
        p0 = _PHILOX_M[0] * c0  # 32 x 32 -> 64-bit products: (hi, lo) = (p >> 32, p & mask)
        p1 = _PHILOX_M[1] * c2
        c0, c1, c2, c3 = (
            (p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0),
            p1 & _MASK32,
            (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1),
            p0 & _MASK32,
        )
        k0, k1 = (k0 + _PHILOX_W[0]) & 0xFFFFFFFF, (k1 + _PHILOX_W[1]) & 0xFFFFFFFF
    return np.stack([c0, c1, c2, c3], axis=-1).astype(np.uint32)


def philox4x32(counters: np.ndarray, seed: int) -> np.ndarray:
    """ember's stream: block i has counter words (i low, i high, 0, 0) and key (seed low, seed high)."""
    zeros = np.zeros_like(counters)
    return philox4x32_10(
        counters & _MASK32, counters >> np.uint64(32), zeros, zeros, seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF
    )


def random_bits(shape, seed, offset):
    n = math.prod(shape)
    first, last = offset // 4, (offset + n + 3) // 4
    words = philox4x32(np.arange(first, max(last, first), dtype=np.uint64), seed).reshape(-1)
    start = offset - 4 * first
    return words[start : start + n].reshape(shape)


# ----------------------------------------------------------------------------- helpers
def _erf(x):
    if x.dtype == np.float64:
        return np.asarray(np.frompyfunc(math.erf, 1, 1)(x)).astype(np.float64)  # 0-d gives a bare float
    # Abramowitz & Stegun 7.1.26 in float64: |error| < 1.5e-7, below float32 resolution near 1.
    z = np.abs(x.astype(np.float64))
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return (np.sign(x) * (1.0 - poly * np.exp(-z * z))).astype(x.dtype)


def _ufunc(f, quiet=False, nargs=1):
    """Elementwise ``f`` of ``nargs`` arrays returning an ndarray: NumPy gives a scalar, not a
    0-d array, for 0-d input, and a buffer must be an array (``assign`` writes into it in place).
    ``quiet`` drops NumPy's divide/invalid warnings where the spec defines the result (IEEE-754:
    log(0) = -inf, x/0 = inf, sqrt(-1) = nan); users of a DL framework do not expect a warning
    for them. The fixed arity and the names bound as defaults keep the wrapper's own cost (every
    small eager op pays it) to a third of what ``*args`` and global lookups cost."""
    if quiet:

        def run(*xs):
            with np.errstate(divide="ignore", invalid="ignore"):
                out = f(*xs)
            return out if type(out) is np.ndarray else np.asarray(out)
    elif nargs == 1:

        def run(x, f=f, ndarray=np.ndarray, asarray=np.asarray):
            out = f(x)
            return out if type(out) is ndarray else asarray(out)
    else:

        def run(a, b, f=f, ndarray=np.ndarray, asarray=np.asarray):
            out = f(a, b)
            return out if type(out) is ndarray else asarray(out)

    run.__name__ = getattr(f, "__name__", "ufunc")
    return run


#: Elements from which :func:`channel_sums` takes a sum (below, NumPy's reduce is as fast).
CHANNEL_SUM_MIN = 1 << 15
_ONES: dict = {}  # (length, dtype) -> a vector of ones, made once


def ones(n, dtype):
    """A read-only vector of ``n`` ones of ``dtype``, made once: the operand that turns a sum
    into one BLAS product (:func:`channel_sums`, rewrites.row_sums)."""
    key = (n, np.dtype(dtype))
    v = _ONES.get(key)
    if v is None:
        v = _ONES[key] = np.ones(n, dtype)
        v.flags.writeable = False
    return v


def channel_sums(x, axes, keepdims=False, out=None):
    """The sum of float32/64 ``x`` over every axis but one, where ``x`` is a view whose memory
    holds that axis last (a convolution's channels-last output seen as NCHW: a bias gradient),
    as one BLAS product of a row of ones with the (rows, channels) memory; None elsewhere.
    NumPy reduces such a view a row of channels at a time, 4x slower for 32 channels of
    128x26x26 (1.6 ms against 0.41), and adds the rows one after another in the array's dtype;
    BLAS's blocked order was nearer the float64 sum there (0.22 against 0.38 off).

    >>> x = np.ones((8, 32, 32, 16), np.float32).transpose(0, 3, 1, 2)  # NCHW, channels last in memory
    >>> channel_sums(x, (0, 2, 3)).tolist()[:2], channel_sums(x, (0, 2, 3), keepdims=True).shape
    ([8192.0, 8192.0], (1, 16, 1, 1))
    >>> channel_sums(np.ascontiguousarray(x), (0, 2, 3)) is None  # NCHW in memory: NumPy's reduce
    True
    """
    axes = tuple(a % x.ndim for a in axes)
    kept = [a for a in range(x.ndim) if a not in axes]
    if len(kept) != 1 or x.size < CHANNEL_SUM_MIN or x.dtype not in (np.float32, np.float64) or x.flags.c_contiguous:
        return None
    rows = np.moveaxis(x, kept[0], -1)
    if not rows.flags.c_contiguous:
        return None
    rows = rows.reshape(-1, x.shape[kept[0]])
    column = ones(len(rows), x.dtype)
    if out is None:
        return np.matmul(column, rows).reshape(
            tuple(1 if a in axes else n for a, n in enumerate(x.shape)) if keepdims else -1
        )
    if out.flags.c_contiguous:
        np.matmul(column, rows, out=out.reshape(-1))
    else:
        np.copyto(out, np.matmul(column, rows).reshape(out.shape))
    return out


def _sum(x, axes, keepdims=False):
    # np.add.reduce is ndarray.sum without its Python wrapper (half the time of a small sum)
    if (s := channel_sums(x, axes, keepdims)) is not None:
        return s
    if x.dtype.type is np.float16:
        return np.add.reduce(x, axis=tuple(axes), keepdims=keepdims, dtype=np.float32).astype(np.float16)
    return np.asarray(np.add.reduce(x, axis=tuple(axes), keepdims=keepdims, dtype=x.dtype))


def _div(a, b):
    # A 0-d result of a ufunc is a NumPy scalar, not an ndarray: both have .dtype.
    return np.true_divide(a, b, dtype=(a.dtype if hasattr(a, "dtype") else b.dtype))


def _windows(x, kernel, stride, dilation=(1, 1)):
    *lead, h, w = x.shape
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (w - dw * (kw - 1) - 1) // sw + 1
    *ls, s_h, s_w = x.strides
    return as_strided(x, (*lead, oh, ow, kh, kw), (*ls, s_h * sh, s_w * sw, s_h * dh, s_w * dw), writeable=False)


def _windows_grad(g, input_shape, kernel, stride, dilation=(1, 1)):
    out = np.zeros(input_shape, dtype=g.dtype)
    oh, ow = g.shape[-4], g.shape[-3]
    (sh, sw), (dh, dw) = stride, dilation
    for i in range(kernel[0]):  # one strided add per kernel position, not per element
        for j in range(kernel[1]):
            out[..., i * dh : i * dh + sh * (oh - 1) + 1 : sh, j * dw : j * dw + sw * (ow - 1) + 1 : sw] += g[..., i, j]
    return out


def _index_add(x, indices, values, axis):
    out = x.copy()
    np.add.at(out, (slice(None),) * (axis % x.ndim) + (indices,), values)
    return out


def _cast(x, dtype):
    if dtype in D.STORAGE or x.dtype.names:  # a storage buffer is a one-field record
        # through its exact values (float32, or int8 for the narrow integers, which then wrap as C casts do)
        x = CODECS[x.dtype][1](x) if x.dtype.names else x
        return CODECS[NP[dtype]][0](x) if dtype in D.STORAGE else x.astype(NP[dtype])
    return x.astype(NP[dtype])


def _stored(make, dtype, *args):
    """``make(*args, dtype=...)``; a storage dtype's values are made in float32 and cast."""
    if dtype in D.STORAGE:
        return _cast(make(*args, dtype=np.float32), dtype)
    return make(*args, dtype=NP[dtype])


def _pad(x, widths, value=0):
    if x.dtype.names and value:
        value = CODECS[x.dtype][0](np.float32(value))[()]
    return np.pad(x, widths, constant_values=value)


def _slice(x, starts, stops, steps):
    # the trailing ... keeps a 0-d result an array (x[()] would be a scalar)
    return x[tuple(slice(a, b, c) for a, b, c in zip(starts, stops, steps)) + (Ellipsis,)]


IMPLS = {
    "full": lambda shape, value, dtype: _stored(np.full, dtype, shape, value),
    "arange": lambda start, stop, step, dtype: _stored(np.arange, dtype, start, stop, step),
    "random_bits": random_bits,
    **{
        name: _ufunc(f)
        for name, f in [
            ("neg", np.negative),
            ("exp", np.exp),
            ("sin", np.sin),
            ("cos", np.cos),
            ("tanh", np.tanh),
            ("abs", np.abs),
            ("sign", np.sign),
            ("floor", np.floor),
            ("erf", _erf),
            ("logical_not", np.logical_not),
        ]
    },
    **{
        name: _ufunc(f, nargs=2)
        for name, f in [
            ("add", np.add),
            ("sub", np.subtract),
            ("mul", np.multiply),
            ("maximum", np.maximum),
            ("minimum", np.minimum),
            ("eq", np.equal),
            ("ne", np.not_equal),
            ("lt", np.less),
            ("le", np.less_equal),
            ("gt", np.greater),
            ("ge", np.greater_equal),
            ("logical_and", np.logical_and),
            ("logical_or", np.logical_or),
            ("logical_xor", np.logical_xor),
        ]
    },
    **{
        name: _ufunc(f, quiet=True)
        for name, f in [
            ("log", np.log),
            ("sqrt", np.sqrt),
            ("reciprocal", np.reciprocal),
            ("div", _div),
            ("pow", np.power),
            ("remainder", np.remainder),
        ]
    },
    "where": np.where,
    "cast": _cast,
    "sum": _sum,
    "max": lambda x, axes, keepdims=False: np.asarray(np.max(x, axis=tuple(axes), keepdims=keepdims)),
    "min": lambda x, axes, keepdims=False: np.asarray(np.min(x, axis=tuple(axes), keepdims=keepdims)),
    "argmax": lambda x, axis, keepdims=False: np.asarray(np.argmax(x, axis=axis, keepdims=keepdims)),
    "reshape": lambda x, shape: np.reshape(x, shape),  # shape= is numpy >= 2.1 only
    "permute": np.transpose,
    "expand": np.broadcast_to,
    "pad": _pad,
    "slice": _slice,
    "concatenate": lambda *xs, axis: np.concatenate(xs, axis=axis),
    "flip": lambda x, axes: np.flip(x, axis=tuple(axes)) if axes else x,
    "take": lambda x, indices, axis: np.asarray(np.take(x, indices, axis=axis)),
    "index_add": _index_add,
    "matmul": np.matmul,
    "conv2d": conv.conv2d,
    "conv2d_grad_input": conv.conv2d_grad_input,
    "conv2d_grad_weight": conv.conv2d_grad_weight,
    "windows": _windows,
    "windows_grad": _windows_grad,
    **ordering.make_impls(np, _ufunc),
}


class NumpyBackend(Backend):
    """The reference backend. Buffers are ``numpy.ndarray``."""

    name = "numpy"
    version = np.__version__
    device = "cpu"
    impls = IMPLS
    fused_impls = fused.IMPLS

    def __init__(self):
        host_memory.tune()  # large arrays keep their pages from step to step (host_memory.py)

    def capabilities(self):
        return Capabilities(
            ops=frozenset(IMPLS),
            dtypes=frozenset(D.KNOWN),
            devices=("cpu",),
            fused=frozenset(self.fused_impls),
            notes={"blas": "numpy", "malloc": host_memory.STATE["malloc"]},
        )

    def shape(self, buf):
        return buf.shape

    def dtype(self, buf):
        return EMBER[buf.dtype]

    def from_list(self, flat, shape, dtype):
        if dtype in D.STORAGE:
            return CODECS[NP[dtype]][0](np.array(flat)).reshape(shape)  # ints stay ints (int4 wraps them)
        return np.array(flat, dtype=NP[dtype]).reshape(shape)

    def to_list(self, buf):
        return (CODECS[buf.dtype][1](buf) if buf.dtype.names else buf).reshape(-1).tolist()

    def from_bytes(self, data, shape, dtype):
        if dtype is D.string:
            raise TypeError("string tensors have no bytes form (safetensors has no string dtype)")
        return np.frombuffer(data, dtype=NP[dtype].newbyteorder("<")).astype(NP[dtype]).reshape(shape)

    def to_bytes(self, buf):
        if buf.dtype.kind == "O":
            raise TypeError("string tensors have no bytes form (safetensors has no string dtype)")
        return np.ascontiguousarray(buf, dtype=buf.dtype.newbyteorder("<")).tobytes()

    def from_numpy(self, array):
        return array.view(NP[D.get(array.dtype.name)]) if bf16.is_ml_dtypes(array) else array

    def to_numpy(self, buf):
        return bf16.ml_dtypes_view(buf) if buf.dtype.names else buf

    def assign(self, dst, src):
        np.copyto(dst, src)

    def jit_runner(self):
        from .jit_runner import NumpyProgram  # numba's and cupy-host's backends inherit it

        return NumpyProgram

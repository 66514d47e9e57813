"""``batch_norm`` (training) and ``batch_norm_backward``: one task per channel (or a few
neighbouring channels when a channel's runs are short), reading its N runs of H*W values;
statistics and gradient sums in float64, the output and the input gradient one multiply-add
per element."""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import prange, uint64

from .. import launch
from .common import FLOATS, JIT, REASSOC, _reference


@numba.njit(parallel=True, fastmath=REASSOC, **JIT)
def batch_norm_channels(x, w, b, r, N, C, L, G, eps, has_w, has_b, has_r, relu, out, mean, var):
    """Batch norm of contiguous x (N, C, L), one task per G consecutive channels (G * L values
    in a row: a single channel's runs of a few values, C * L apart -- 32 KB for 512 4x4 maps --
    would fight over the same cache sets). Per channel: mean and biased variance in float64, two passes, the mean
    rounded to x's dtype before centering as the reference does; then
    ``(x - mean) / sqrt(var + eps) * w[c] + b[c]``, rounded to x's dtype, and with ``has_r``
    plus ``r`` (a residual of x's shape) in x's dtype, with ``relu`` zero where not above zero:
    the bits of the separate sum and ``where(gt(y, 0), y, 0)``, while the values are in registers."""
    l_n = uint64(L)
    count = N * L
    zero = out.dtype.type(0)
    for t in prange((C + G - 1) // G):
        c0, c1 = t * G, min(C, (t + 1) * G)
        acc = np.zeros(c1 - c0)
        for n in range(N):
            for c in range(c0, c1):
                base = uint64((n * C + c) * L)
                s = 0.0
                for k in range(l_n):
                    s += x[base + k]
                acc[c - c0] += s
        for c in range(c0, c1):
            mean[c] = acc[c - c0] / count
            acc[c - c0] = 0.0
        for n in range(N):
            for c in range(c0, c1):
                base = uint64((n * C + c) * L)
                m = mean[c]
                q = 0.0
                for k in range(l_n):
                    d = x[base + k] - m
                    q += d * d
                acc[c - c0] += q
        for c in range(c0, c1):
            var[c] = acc[c - c0] / count
        for n in range(N):
            for c in range(c0, c1):
                base = uint64((n * C + c) * L)
                m = mean[c]
                scale = 1.0 / math.sqrt(acc[c - c0] / count + eps)
                if has_w:
                    scale = scale * w[c]
                shift = b[c] if has_b else 0.0
                if has_r:
                    for k in range(l_n):
                        out[base + k] = (x[base + k] - m) * scale + shift
                        y = out[base + k] + r[base + k]  # rounded to x's dtype, then summed in it
                        out[base + k] = y if y > 0 or not relu else zero
                elif relu:
                    for k in range(l_n):
                        out[base + k] = (x[base + k] - m) * scale + shift
                        y = out[base + k]
                        out[base + k] = y if y > 0 else zero
                else:
                    for k in range(l_n):
                        out[base + k] = (x[base + k] - m) * scale + shift


@numba.njit(parallel=True, fastmath=REASSOC, **JIT)
def batch_norm_backward_channels(x, g, w, mean, var, N, C, L, G, eps, has_w, dx, dw, db):
    """Batch norm's gradients, tasks as in :func:`batch_norm_channels`: per channel
    ``sum(g)`` and ``sum(g * xhat)`` (float64), then ``dx = (gw - mean(gw) - xhat *
    mean(gw * xhat)) * rstd`` with gw = g * w[c], one multiply-add per element, and the
    weight and bias gradients (those two sums). The coefficients are worked out once a
    channel, not once a sample and channel (a square root and three divisions each: ResNet-18's
    4x4 maps, 16 values a plane, took 0.94 against 0.62-0.68 ms)."""
    l_n = uint64(L)
    count = N * L
    for t in prange((C + G - 1) // G):
        c0, c1 = t * G, min(C, (t + 1) * G)
        sg, sgx = np.zeros(c1 - c0), np.zeros(c1 - c0)
        for n in range(N):
            for c in range(c0, c1):
                base = uint64((n * C + c) * L)
                m = mean[c]
                a = 0.0
                bb = 0.0
                for k in range(l_n):
                    gi = g[base + k]
                    a += gi
                    bb += gi * (x[base + k] - m)
                sg[c - c0] += a
                sgx[c - c0] += bb
        kg, kx, k0 = np.empty(c1 - c0), np.empty(c1 - c0), np.empty(c1 - c0)
        for c in range(c0, c1):
            i = c - c0
            dw[c], kg[i], kx[i], k0[i] = _coefficients(sg[i], sgx[i], var[c], eps, w[c] if has_w else 1.0, count)
            db[c] = sg[i]
        for n in range(N):
            for c in range(c0, c1):
                base = uint64((n * C + c) * L)
                m, k_g, k_x, k_0 = mean[c], kg[c - c0], kx[c - c0], k0[c - c0]
                for k in range(l_n):
                    dx[base + k] = g[base + k] * k_g - (x[base + k] - m) * k_x - k_0


@numba.njit(inline="always", **JIT)
def _coefficients(sg, sgx, v, eps, wc, count):
    """A channel's ``(dw, k_g, k_x, k_0)`` from its sums ``sg = sum(g)``, ``sgx = sum(g * (x -
    mean))``, variance ``v`` and weight ``wc``: ``dw = sum(g * xhat)`` and ``dx = g * k_g - (x -
    mean) * k_x - k_0``, the same expressions for both backward kernels."""
    rs = 1.0 / math.sqrt(v + eps)
    return sgx * rs, wc * rs, wc * (sgx * rs) / count * rs * rs, wc * sg / count * rs


def _channel_group(C, L) -> int:
    """Channels per task: enough for runs of ~256 values, while leaving 2 tasks a thread."""
    return max(1, min(-(-256 // L), C // (2 * launch.threads())))


def _channel_params_ok(x, *params):
    return all(p is None or (p.dtype == x.dtype and p.shape == (x.shape[1],)) for p in params)


def batch_norm(x, weight, bias, *, eps=1e-5):
    return batch_norm_relu(x, weight, bias, eps=eps, relu=False)


def batch_norm_relu(x, weight, bias, residual=None, *, eps=1e-5, relu=True):
    """``batch_norm(x)``'s ``(out, mean, var)`` with ``out`` replaced by ``relu(out + residual)``
    (no sum without ``residual``; no ReLU with ``relu`` False): the jit's rewrite of batch
    norm and the ReLU after it (ember.backends.numpy.rewrites), computed as ``out`` is made, in
    registers, instead of in two more passes over memory. The nodes' bits: where batch norm's
    kernel does not run (its first calls, other dtypes), the reference and then the sum and
    ``where`` as NumPy computes them."""
    if (
        x.dtype not in FLOATS
        or x.ndim < 2
        or x.size == 0
        or not _channel_params_ok(x, weight, bias)
        or not launch.hot(("batch_norm", x.shape, x.dtype.num))
        or (residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype))
    ):
        out, mean, var = _reference("batch_norm", x, weight, bias, eps=eps)
        if residual is not None:
            out = np.add(out, residual)
        if relu:
            out = np.where(out > 0, out, out.dtype.type(0))
        return out, mean, var
    N, C = x.shape[:2]
    w, b = (np.zeros(1, x.dtype) if p is None else np.ascontiguousarray(p) for p in (weight, bias))
    r = np.zeros(1, x.dtype) if residual is None else np.ascontiguousarray(residual).reshape(-1)
    out, mean, var = np.empty(x.shape, x.dtype), np.empty(C, x.dtype), np.empty(C, x.dtype)
    L = x.size // (N * C)
    launch.run(
        batch_norm_channels,
        x.size,
        np.ascontiguousarray(x).reshape(-1),
        w,
        b,
        r,
        N,
        C,
        L,
        _channel_group(C, L),
        float(eps),
        weight is not None,
        bias is not None,
        residual is not None,
        relu,
        out.reshape(-1),
        mean,
        var,
    )
    return out, mean, var


def batch_norm_backward(grad, x, weight, bias, mean, var, *, eps=1e-5):
    if (
        x.dtype not in FLOATS
        or x.ndim < 2
        or x.size == 0
        or grad.dtype != x.dtype
        or grad.shape != x.shape
        or not _channel_params_ok(x, weight, bias, mean, var)
        or not launch.hot(("batch_norm_backward", x.shape, x.dtype.num))
    ):
        return _reference("batch_norm_backward", grad, x, weight, bias, mean, var, eps=eps)
    N, C = x.shape[:2]
    L = x.size // (N * C)
    dx, dw, db = np.empty(x.shape, x.dtype), np.empty(C, x.dtype), np.empty(C, x.dtype)
    w = np.zeros(1, x.dtype) if weight is None else np.ascontiguousarray(weight)
    launch.run(
        batch_norm_backward_channels,
        x.size,
        np.ascontiguousarray(x).reshape(-1),
        np.ascontiguousarray(grad).reshape(-1),
        w,
        np.ascontiguousarray(mean),
        np.ascontiguousarray(var),
        N,
        C,
        L,
        _channel_group(C, L),
        float(eps),
        weight is not None,
        dx.reshape(-1),
        dw,
        db,
    )
    return dx, None if weight is None else dw, None if bias is None else db

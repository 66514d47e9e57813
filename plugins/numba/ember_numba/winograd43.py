"""Winograd F(4x4, 3x3) kernels, vectorized across channels: 36 products a 4x4 output tile
instead of F(2x2, 3x3)'s 64 (2.25 against 4 multiplications an output, im2col's 9).

F(4x4, 3x3)'s transforms (the NumPy module's ``F43``) read six input rows and columns a tile
at a stride of 4. Written on NCHW rows as winograd.py's F(2x2) ones are, a vector holds a few
tiles and every read is strided (its input transform measured 3x F(2x2)'s). Here the
transforms work on whole vectors of channels instead: each chunk's input is first copied
channels-last (``P``: rows x columns x C, zero-padded), so a tile's value at (i, j) is C
contiguous floats and every step of ``B^T d B`` is a run of unit-stride adds; the GEMMs are
laid out to match, ``M[p] = V[p] (T, C) @ U[p] (C, K)``, and the output transform works on
vectors of K before one copy back into NCHW rows.

==================  ==============================================================
per chunk           of ``m`` samples, tile rows ty0 .. ty1-1 (T = m * rows * tw tiles)
==================  ==============================================================
channels last       ``P`` (m, 4 rows + 2, 4 tw + 2, C) <- ``x`` (m, C, H, W)
input transform     ``V`` (36, T, C) <- ``B^T d B`` of every 6x6 tile of ``P``
GEMMs               ``M[p] = V[p] @ U[p]``, (T, C) @ (C, K), 36 one-thread BLAS calls
output transform    ``A^T m A`` of every tile, 4 output rows (4 tw, K) at a time,
                    copied into NCHW ``out`` cut to its edge
==================  ==============================================================

The weight gradient is the forward's adjoint in the kernel, as for F(2x2): per chunk ``V``
as above, the output gradient channels last and ``D = A dY A^T`` (36, T, K) on vectors of K,
then ``D[p]^T @ V[p]`` (K, T) @ (T, C) summed per thread, and ``G^T . G`` once at the end.
The input gradient may be the forward's adjoint in the input too (:func:`input_adjoint`), on
the forward's own tiles: ``D`` as for the weight gradient, ``D[p] @ U[p]^T`` (T, K) @ (K, C),
then ``B . B^T`` of every tile added into a channels-last gradient.

winograd.py drives these as it does its own kernels (chunks, bands, the epilogue) and
:data:`winograd.F43_TAKES` says which layers take them.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import uint64

from ember.backends.numpy import winograd as reference

from .blas import on_demand
from .kernels import JIT
from .scratch import scratch

F43 = reference.F43
_2, _3, _4, _5 = uint64(2), uint64(3), uint64(4), uint64(5)
#: The loops across channels run in blocks of LANES (a float32 AVX-512 vector), or whole where
#: the channels are a multiple of WHOLE. LLVM vectorizes a loop of unknown length 16 lanes by
#: 4 at a time and leaves fewer than 64 iterations to its scalar loop: 32 channels, LeNet's
#: second layer, ran 2.8x slower a tile (the input transform, one thread: 40.7 against 14.7 ns a
#: tile and channel); a block of constant length is vectorized whole. From 64 the plain loop
#: was 3-6% faster.
LANES, WHOLE = uint64(16), uint64(64)
#: Channels :func:`channels_last` copies together. Per sample, one thread, 25 alternating
#: calls, against a channel at a time: 64 ch 32x32 0.68x, 128 ch 16x16 0.80x, 256 ch 8x8
#: 0.83x (2 channels: 0.76-0.95x; 8: 0.70-1.38x; 16: 0.98-1.27x).
CL_BLOCK = 4


@numba.njit(**JIT)
def channels_last(x, N, C, H, W, ph, pw, tw, ty0, ty1, P):
    """``P`` (N, 4*(ty1-ty0)+2, 4*tw+2, C), flat <- the rows of ``x`` (N, C, H, W), flat, that
    tile rows ty0 .. ty1-1 read, channels last, zero outside the image (padding by ph, pw)."""
    rows = 4 * (ty1 - ty0) + 2
    width = 4 * tw + 2
    wc = uint64(width * C)
    cu = uint64(C)
    zero = x.dtype.type(0)
    for n in range(N):
        for r in range(rows):
            y = 4 * ty0 + r - ph
            dst = uint64((n * rows + r) * width) * cu
            if y < 0 or y >= H:
                for j in range(wc):
                    P[dst + j] = zero
                continue
            for j in range(uint64(pw) * cu):  # the left padding
                P[dst + j] = zero
            for j in range(uint64(pw + W) * cu, wc):  # the right padding and beyond
                P[dst + j] = zero
            base = dst + uint64(pw) * cu
            # x's rows of CL_BLOCK channels at a time, each column's CL_BLOCK values stored
            # side by side in P's row; the channels left over a row each, stored C apart
            hw = uint64(H * W)
            c0 = 0
            while c0 + CL_BLOCK <= C:
                src = uint64(((n * C + c0) * H + y) * W)
                for j in range(uint64(W)):
                    d = base + j * cu + uint64(c0)
                    for c in range(uint64(CL_BLOCK)):
                        P[d + c] = x[src + c * hw + j]
                c0 += CL_BLOCK
            for c in range(c0, C):
                src = uint64(((n * C + c) * H + y) * W)
                cc = uint64(c)
                for j in range(uint64(W)):
                    P[base + j * cu + cc] = x[src + j]


@numba.njit(**JIT)
def input_transform(P, N, C, nty, tw, T, V, S):
    """``V`` (36, T, C), flat <- ``B^T d B`` of every 6x6 tile (stride 4) of ``P`` (N, 4*nty+2,
    4*tw+2, C), flat, into V's first N*nty*tw tiles (T: V's tiles, at least those);
    ``S`` (6, 4*tw+2, C) is scratch for a tile row's ``B^T d``."""
    T = uint64(T)
    cu = uint64(C)
    wc = uint64((4 * tw + 2) * C)
    TC = T * cu
    for n in range(N):
        for ty in range(nty):
            src = uint64((n * (4 * nty + 2) + 4 * ty) * (4 * tw + 2)) * cu
            # B^T d down the tile row's 6 input rows, every column and channel at once
            for j in range(wc):
                d0, d1, d2 = P[src + j], P[src + wc + j], P[src + _2 * wc + j]
                d3, d4, d5 = P[src + _3 * wc + j], P[src + _4 * wc + j], P[src + _5 * wc + j]
                S[j] = 4 * d0 - 5 * d2 + d4
                S[wc + j] = d3 + d4 - 4 * (d1 + d2)
                S[_2 * wc + j] = d4 - d3 + 4 * (d1 - d2)
                S[_3 * wc + j] = d4 - d2 + 2 * (d3 - d1)
                S[_4 * wc + j] = d4 - d2 - 2 * (d3 - d1)
                S[_5 * wc + j] = 4 * d1 - 5 * d3 + d5
            # (B^T d) B across each tile's 6 columns, a vector of channels at a time
            t0 = uint64((n * nty + ty) * tw)
            for p in range(6):
                for tx in range(uint64(tw)):
                    s = uint64(p) * wc + uint64(4) * tx * cu
                    out = (uint64(6 * p) * T + t0 + tx) * cu
                    if cu % WHOLE == 0:
                        for c in range(cu):
                            _bt_lane(S, s, cu, V, out, TC, c)
                    else:
                        blocks = cu - cu % LANES
                        for c0 in range(uint64(0), blocks, LANES):
                            for i in range(LANES):
                                _bt_lane(S, s, cu, V, out, TC, c0 + i)
                        for c in range(blocks, cu):
                            _bt_lane(S, s, cu, V, out, TC, c)


@numba.njit(inline="always", **JIT)
def _bt_lane(S, s, cu, V, out, TC, c):
    """``(B^T d) B`` of one channel ``c`` of a tile: its six values in S, C apart from ``s``,
    to its six values of V, TC apart from ``out``."""
    d0, d1, d2 = S[s + c], S[s + cu + c], S[s + _2 * cu + c]
    d3, d4, d5 = S[s + _3 * cu + c], S[s + _4 * cu + c], S[s + _5 * cu + c]
    V[out + c] = 4 * d0 - 5 * d2 + d4
    V[out + TC + c] = d3 + d4 - 4 * (d1 + d2)
    V[out + _2 * TC + c] = d4 - d3 + 4 * (d1 - d2)
    V[out + _3 * TC + c] = d4 - d2 + 2 * (d3 - d1)
    V[out + _4 * TC + c] = d4 - d2 - 2 * (d3 - d1)
    V[out + _5 * TC + c] = 4 * d1 - 5 * d3 + d5


@numba.njit(**JIT)
def output_transform(M, N, K, OH, OW, nty, tw, ty0, T, out, Z, O):
    """Tile rows ty0 .. ty0+nty-1 of ``out`` (N, K, OH, OW), flat <- ``A^T m A`` of the first
    N*nty*tw tiles of ``M`` (36, T, K), flat, cut to the output's edge. ``Z`` (4, 6, K) and
    ``O`` (4, 4*tw, K) are scratch: a tile's ``A^T m`` and a tile row's outputs, channels last."""
    T = uint64(T)
    ku = uint64(K)
    TK = T * ku
    ow4 = uint64(4 * tw) * ku
    sk = uint64(6) * ku
    for n in range(N):
        for ty in range(nty):
            t0 = uint64((n * nty + ty) * tw)
            for tx in range(uint64(tw)):
                # A^T m down the tile's 6 rows, for each of its 6 columns
                for q in range(uint64(6)):
                    src = (q * T + t0 + tx) * ku
                    for k in range(ku):
                        m0, m1, m2 = M[src + k], M[src + uint64(6) * TK + k], M[src + uint64(12) * TK + k]
                        m3, m4, m5 = (
                            M[src + uint64(18) * TK + k],
                            M[src + uint64(24) * TK + k],
                            M[src + uint64(30) * TK + k],
                        )
                        a, b = m1 + m2, m1 - m2
                        c, d = m3 + m4, m3 - m4
                        Z[q * ku + k] = m0 + a + c
                        Z[sk + q * ku + k] = b + 2 * d
                        Z[_2 * sk + q * ku + k] = a + 4 * c
                        Z[_3 * sk + q * ku + k] = b + 8 * d + m5
                # (A^T m) A across the columns, into the tile row's channels-last outputs
                for i in range(uint64(4)):
                    z = i * sk
                    dst = i * ow4 + uint64(4) * tx * ku
                    for k in range(ku):
                        m0, m1, m2 = Z[z + k], Z[z + ku + k], Z[z + _2 * ku + k]
                        m3, m4, m5 = Z[z + _3 * ku + k], Z[z + _4 * ku + k], Z[z + _5 * ku + k]
                        a, b = m1 + m2, m1 - m2
                        c, d = m3 + m4, m3 - m4
                        O[dst + k] = m0 + a + c
                        O[dst + ku + k] = b + 2 * d
                        O[dst + _2 * ku + k] = a + 4 * c
                        O[dst + _3 * ku + k] = b + 8 * d + m5
            # back to NCHW, the rows and columns inside the output
            y0 = 4 * (ty0 + ty)
            for k in range(K):
                plane = uint64((n * K + k) * OH * OW)
                for i in range(min(4, OH - y0)):
                    row = plane + uint64((y0 + i) * OW)
                    src = uint64(i) * ow4 + uint64(k)
                    for j in range(uint64(OW)):
                        out[row + j] = O[src + j * ku]


@numba.njit(**JIT)
def gradient_transform(P, N, K, th, tw, T, D, S):
    """``D`` (36, T, K), flat <- ``A dY A^T`` of every 4x4 tile of the output gradient, given
    channels last as ``P`` (N, 4*th+2, 4*tw+2, K), flat (:func:`channels_last` unpadded: zero
    beyond the output's edge), into D's first N*th*tw tiles; ``S`` (6, 4*tw+2, K) is scratch.
    ``A`` is ``A^T``'s transpose: rows (1, 0, 0, 0), (1, 1, 1, 1), (1, -1, 1, -1), (1, 2, 4, 8),
    (1, -2, 4, -8), (0, 0, 0, 1)."""
    T = uint64(T)
    ku = uint64(K)
    wk = uint64((4 * tw + 2) * K)
    TK = T * ku
    for n in range(N):
        for ty in range(th):
            src = uint64((n * (4 * th + 2) + 4 * ty) * (4 * tw + 2)) * ku
            # A g down the tile row's 4 rows
            for j in range(wk):
                g0, g1, g2, g3 = P[src + j], P[src + wk + j], P[src + _2 * wk + j], P[src + _3 * wk + j]
                a, b = g0 + g2, g1 + g3
                c, d = g0 + 4 * g2, 2 * g1 + 8 * g3
                S[j] = g0
                S[wk + j] = a + b
                S[_2 * wk + j] = a - b
                S[_3 * wk + j] = c + d
                S[_4 * wk + j] = c - d
                S[_5 * wk + j] = g3
            # (A g) A^T across each tile's 4 columns
            t0 = uint64((n * th + ty) * tw)
            for p in range(6):
                for tx in range(uint64(tw)):
                    s = uint64(p) * wk + uint64(4) * tx * ku
                    out = (uint64(6 * p) * T + t0 + tx) * ku
                    if ku % WHOLE == 0:
                        for k in range(ku):
                            _ag_lane(S, s, ku, D, out, TK, k)
                    else:
                        blocks = ku - ku % LANES
                        for k0 in range(uint64(0), blocks, LANES):
                            for i in range(LANES):
                                _ag_lane(S, s, ku, D, out, TK, k0 + i)
                        for k in range(blocks, ku):
                            _ag_lane(S, s, ku, D, out, TK, k)


@numba.njit(inline="always", **JIT)
def _ag_lane(S, s, ku, D, out, TK, k):
    """``(A g) A^T`` of one channel ``k`` of a tile: its four values in S, K apart from ``s``,
    to its six values of D, TK apart from ``out``."""
    g0, g1, g2, g3 = S[s + k], S[s + ku + k], S[s + _2 * ku + k], S[s + _3 * ku + k]
    a, b = g0 + g2, g1 + g3
    c, d = g0 + 4 * g2, 2 * g1 + 8 * g3
    D[out + k] = g0
    D[out + TK + k] = a + b
    D[out + _2 * TK + k] = a - b
    D[out + _3 * TK + k] = c + d
    D[out + _4 * TK + k] = c - d
    D[out + _5 * TK + k] = g3


@numba.njit(**JIT)
def _adjoint_row(i, e0, e1, e2, e3, e4, e5):
    """Row ``i`` of ``B e``: the input transform's sums read down its columns."""
    if i == 0:
        return 4 * e0
    if i == 1:
        return 4 * (e2 - e1) + 2 * (e4 - e3) + 4 * e5
    if i == 2:
        return -(5 * e0 + 4 * (e1 + e2) + e3 + e4)
    if i == 3:
        return e1 - e2 + 2 * (e3 - e4) - 5 * e5
    if i == 4:
        return e0 + e1 + e2 + e3 + e4
    return e5


@numba.njit(**JIT)
def input_adjoint(E, N, C, nty, tw, T, Q, S):
    """``Q`` (N, 4*nty+2, 4*tw+2, C), flat, zeroed by the caller += ``B e B^T`` of the first
    N*nty*tw tiles ``e`` of ``E`` (36, T, C), flat: the input transform's adjoint, each 6x6 tile
    added at a stride of 4, so neighbouring tiles' two shared rows and columns sum. ``S`` (6,
    4*tw+2, C) is scratch for a tile row's ``e B^T``. ``B`` is ``B^T``'s transpose.

    Each loop adds into one run of memory: six sums into six runs of one array in one loop
    keep LLVM from vectorizing it (the runs could overlap across lanes), 4x slower."""
    T = uint64(T)
    cu = uint64(C)
    wc = uint64((4 * tw + 2) * C)
    TC = T * cu
    zero = Q.dtype.type(0)
    for n in range(N):
        for ty in range(nty):
            for j in range(uint64(6) * wc):
                S[j] = zero
            # e B^T across each tile's 6 columns, into the tile row's 6 rows (columns shared)
            t0 = uint64((n * nty + ty) * tw)
            for p in range(6):
                for tx in range(uint64(tw)):
                    src = (uint64(6 * p) * T + t0 + tx) * cu
                    for i in range(6):
                        dst = uint64(p) * wc + (uint64(4) * tx + uint64(i)) * cu
                        for c in range(cu):
                            S[dst + c] += _adjoint_row(
                                i,
                                E[src + c],
                                E[src + TC + c],
                                E[src + _2 * TC + c],
                                E[src + _3 * TC + c],
                                E[src + _4 * TC + c],
                                E[src + _5 * TC + c],
                            )
            # B (e B^T) down the 6 rows, every column and channel at once (rows shared)
            base = uint64((n * (4 * nty + 2) + 4 * ty) * (4 * tw + 2)) * cu
            for i in range(6):
                dst = base + uint64(i) * wc
                for j in range(wc):
                    Q[dst + j] += _adjoint_row(
                        i, S[j], S[wc + j], S[_2 * wc + j], S[_3 * wc + j], S[_4 * wc + j], S[_5 * wc + j]
                    )


@numba.njit(**JIT)
def channels_first(Q, N, C, H, W, ph, pw, rows, width, out):
    """``out`` (N, C, H, W), flat <- ``Q`` (N, rows, width, C), flat, from row ``ph`` and column
    ``pw`` on: :func:`channels_last`'s inverse, the padding dropped."""
    cu = uint64(C)
    for n in range(N):
        for c in range(C):
            dst = uint64((n * C + c) * H * W)
            for y in range(H):
                src = uint64((n * rows + y + ph) * width + pw) * cu + uint64(c)
                row = dst + uint64(y * W)
                for x in range(uint64(W)):
                    out[row + x] = Q[src + x * cu]


#: ``G (x) G`` (36, 9): row ``6p + q`` takes a kernel's 9 taps to ``(G g G^T)[p, q]``.
GG = {dt: np.kron(np.array(F43.G), np.array(F43.G)).astype(dt) for dt in (np.float32, np.float64)}
#: ``G`` (6, 3) in each dtype.
G = {dt: np.array(F43.G, dt) for dt in (np.float32, np.float64)}


#: Kernels a block of :func:`_kernel_rows` takes: their taps and ``G g`` (27 rows) stay in L1.
KT_BLOCK = 512
#: Kernels from which :func:`kernel_transform` shares them out among the threads: it writes 4x
#: what it reads (ResNet-18's 512-channel layers: 38 MB a call, 26 calls a W3 step).
SPLIT_KERNELS = 1 << 15


@numba.njit(**JIT)
def _kernel_rows(taps, j0, j1, KC, G, S, out, K, C, flip):
    """``out[(6p + q) * KC + j] = (G g_j G^T)[p, q]`` for the kernels j0 .. j1-1 of ``taps``
    (K*C, 9), flat: ``G g`` first (6x3), then ``(G g) G^T``, each a loop across a block of
    kernels (vectors of kernels, not of taps). ``S`` holds a block's taps, transposed, and its
    ``G g``: 27 rows of KT_BLOCK. With ``flip``, kernel j = c*K + k is kernel (k, c) of
    ``taps`` turned half a turn (its taps in reverse): an input gradient's kernel, read where
    the weights lie instead of from a flipped copy."""
    B = KT_BLOCK
    for b0 in range(j0, j1, B):
        nb = min(B, j1 - b0)
        if flip:
            for i in range(nb):
                src = ((b0 + i) % K * C + (b0 + i) // K) * 9
                for t in range(9):
                    S[t * B + i] = taps[src + 8 - t]
        else:
            for i in range(nb):
                for t in range(9):
                    S[t * B + i] = taps[(b0 + i) * 9 + t]
        for r in range(6):
            g0, g1, g2 = G[r, 0], G[r, 1], G[r, 2]
            for col in range(3):
                h = (9 + 3 * r + col) * B
                for i in range(nb):
                    S[h + i] = g0 * S[col * B + i] + g1 * S[(3 + col) * B + i] + g2 * S[(6 + col) * B + i]
        for r in range(6):
            h = (9 + 3 * r) * B
            for q in range(6):
                g0, g1, g2 = G[q, 0], G[q, 1], G[q, 2]
                dst = (6 * r + q) * KC + b0
                for i in range(nb):
                    out[dst + i] = g0 * S[h + i] + g1 * S[h + B + i] + g2 * S[h + 2 * B + i]


def kernel_transform(w, out=None, threads=1, flipped=False):
    """``U`` (36, C, K) = ``G g G^T`` of every 3x3 kernel of ``w`` (K, C, 3, 3), in the GEMMs'
    (C, K) order as a transposed view of (36, K*C) (:func:`_kernel_rows`). Into ``out``
    (36*K*C of w's dtype), if given. With ``threads``, many kernels are shared out among that
    many threads, a block each (each kernel's values are the same whichever thread makes them).
    ``flipped``: the transform of ``w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1]`` (an input
    gradient's kernel), without making that copy."""
    k0, c0 = w.shape[:2]
    k, c = (c0, k0) if flipped else (k0, c0)
    kc = k * c
    taps = np.ascontiguousarray(w).reshape(-1)
    g = G[w.dtype.type]
    out = np.empty(36 * kc, w.dtype) if out is None else out.reshape(-1)[: 36 * kc]
    parts = threads if threads > 1 and kc >= SPLIT_KERNELS else 1
    e = [kc * i // parts // KT_BLOCK * KT_BLOCK for i in range(parts)] + [kc]
    on_demand(
        parts,
        parts,
        lambda i: _kernel_rows(
            taps, e[i], e[i + 1], kc, g, scratch("winograd_kt", 27 * KT_BLOCK, w.dtype), out, k0, c0, flipped
        ),
    )
    return out.reshape(36, k, c).transpose(0, 2, 1)

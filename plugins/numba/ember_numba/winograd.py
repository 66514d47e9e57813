"""Winograd F(2x2, 3x3) and F(4x4, 3x3) convolutions: 3x3 kernels at stride 1 with 2.25x and 4x
fewer multiplications.

The algorithm and its matrices are the NumPy backend's (``ember.backends.numpy.winograd``,
whose docstring derives it): each 2x2 output tile is ``A^T [(G g G^T) * (B^T d B)] A`` of the
4x4 input tile ``d`` that covers it, so a convolution is an input transform, 16 GEMMs (one
per tile position, summed over the channels) and an output transform. Here the transforms
are numba kernels on NCHW memory, and the batch is cut into chunks as in conv.py: each chunk
runs on one of the plugin's threads, taken on demand (``blas.on_demand``), with one-thread
BLAS inside, and its buffers are a few MB, in cache. With fewer chunks than threads (batch 1)
a chunk's tile rows are cut into bands that the threads share instead (:func:`_bands`).

==================  =======================================================  ================
primitive           per chunk of ``m`` samples (T = m * tiles per sample)     then
==================  =======================================================  ================
conv2d              ``V`` (16, C, T); ``M = U (16, K, C) @ V``; ``A^T M A``   into NCHW ``out``
conv2d_grad_input   conv2d of ``g`` with the kernel flipped, channels swapped
conv2d_grad_weight  ``V``, ``D`` (16, K, T); ``M += D @ V^T`` (16, K, C)      ``G^T M G``
==================  =======================================================  ================

The weight gradient is the adjoint of the forward in the kernel: ``dW = G^T [sum over tiles
of (A dY A^T) * V] G`` (the NumPy module's derivation), so per chunk the same input transform
``V`` (16, C, T), the output gradient's ``D = A dY A^T`` (16, K, T) and 16 GEMMs
``D[p] @ V[p]^T`` (K, T) @ (T, C), summed into a partial per thread; ``G^T . G`` once at the end.
Its chunk buffers are the threads' scratch (scratch.py), not fresh arrays: with fresh ones
the 64-channel layer ran no faster than im2col (1.01x), with reused ones 0.64x its time.

In batches with enough tiles (:func:`takes_f43`), all three take F(4x4, 3x3) instead
(winograd43.py: 36 products a 4x4 tile, its transforms vectorized across channels on a
channels-last copy of each chunk), driven by the same chunks and bands; where those chunks
would hold too few tiles for wide GEMMs (:func:`_by_position`: 4x4 maps), the transforms go
by pieces of samples and each of the 36 GEMMs over the whole batch's tiles instead.

The transforms of F(2x2, 3x3) are adds and subtracts only; they are written out here as
scalar code (rows of the tile first, as contiguous vectors, then columns), which LLVM
vectorizes. :func:`plan` says which convolutions take this path. As in the NumPy module,
a result that is not finite is returned as None, and conv.py computes that one directly
(an inf meets itself with both signs in the transforms and would come out as NaN).
"""

from __future__ import annotations

import contextlib
import time

import numba
import numpy as np
from numba import uint64

from ember.backends.numpy import winograd as reference

from . import crew, skinny, winograd43
from .blas import awake, native_rows, on_demand, one_thread
from .epilogue import _apply
from .kernels import JIT
from .launch import ThreadChoice, threads
from .scratch import ThreadSums, scratch

F23 = reference.F23
#: Input and output channels, and output pixels a sample, from which conv.py takes this path.
#: Measured at batch 128 (loaded 2-core machine; best of 5, alternating), Winograd / im2col
#: time, forward and input gradient: ResNet-18's 32x32 and 16x16 layers (64 and 128 channels)
#: 0.78-0.91, a 16-channel 32x32 layer 0.80-1.02; with few tiles a sample the 16 GEMMs are
#: narrow and lose: 8x8 and 4x4 (256 and 512 channels) 1.38-1.77, LeNet's 13x13 1.03-1.74
#: (with chunks of 4 MB; for the 8x8 and 4x4 layers see SMALL).
MIN_CHANNELS = 16
MIN_PIXELS = 256
#: ... but a batch of one from this many (20x20, between the two measured sizes; its bands'
#: 16 GEMMs are narrow): on the AVX-512 machine (2 cores, 2 MB of L2 a core) ResNet-18's
#: 128-channel 16x16 layers on im2col at batch 1 made the W3-infer-b1 step 0.868 of its time
#: (0.75-0.94, 8 rounds of benchmarks.numpy_ab), where ResNet-50's 128-channel 28x28 layers
#: took 1.17-1.27x their F(2x2) time on im2col (benchmarks.onnx_ab) and the step with
#: ResNet-18's 64-channel 32x32 layers on im2col as well was 1.051.
SAMPLE_MIN_PIXELS = 400
#: ... and, in batches, from each row's pixels with at least its channels: with the chunks in
#: L2 (below) ResNet-18's 8x8 layers (256 channels) at batch 128 ran 0.76-0.88x im2col's time
#: (forward, 8-12 alternating calls, 3 runs); LeNet's 11x11 (32 -> 64) still lost (1.30). With
#: reused chunk buffers (scratch.py) and chunks at least K/2 tiles wide (:func:`_chunks`), the
#: 4x4 layers win too: 512 channels 0.68x (batch 128) and 0.78x (batch 32), 256 channels 0.72x,
#: ResNet-50's 512-channel 7x7 layer 0.68x (batch 32; 8 alternating calls, load ~1).
# fmt: off
SMALL = (  # (output pixels a sample at least, channels at least)
    (64, 128),
    (16, 256),
)
# fmt: on
#: Bytes of transformed input (V) per chunk at most, and tiles per chunk at least (so the 16
#: GEMMs stay wide); chunks per thread at least where the batch allows, as in conv.py. V and
#: the products M of a chunk then fit a core's 2 MB L2 cache between the transforms and the
#: GEMMs: ResNet-18's 64- and 128-channel layers at batch 128 ran 0.73-0.82x the time of 4 MB
#: and 1,024 tiles (chunks of 4 and 16 samples; 2 runs of 10-12 alternating calls, loaded machine).
#: 64 tiles rather than 256 keep the 8x8 layers' chunks at 1 MB too (0.63-0.82x im2col's time
#: against 0.86-0.90x, batch 128; 0.95x against 1.11x at batch 32), the others the same.
CHUNK_BYTES = 1 << 20
MIN_TILES = 64
CHUNKS_PER_THREAD = 4
#: With fewer chunks than threads (batch 1), a chunk's tile rows are cut into bands that the
#: threads share: at least BAND_TILES tiles a band, BANDS_PER_THREAD bands a thread where the
#: tiles allow; one thread or all by measurement (BAND_THREADS: a busy machine takes one).
BAND_TILES = 96
BANDS_PER_THREAD = 2
BAND_THREADS = ThreadChoice()
#: The weight gradient takes this path in batches from WEIGHT_MIN_CHANNELS channels in and out,
#: at any map size: Winograd / im2col time, ResNet-18's 3x3 layers (10 alternating calls,
#: 2-core machine at load ~1): batch 128 0.64 (64 channels, 32x32), 0.59 (128, 16x16), 0.67
#: (256, 8x8), 0.83 (512, 4x4); batch 32 0.63, 0.58, 0.70, 0.68. LeNet's 32 -> 64 layer on 13x13
#: lost (1.20) and a 16-channel 32x32 layer gained little (0.91); one sample lost at 8x8 (2.0).
WEIGHT_MIN_CHANNELS = 64
#: F(4x4, 3x3) (winograd43.py) instead, for all three primitives: 36 products a 4x4 tile
#: against F(2x2)'s 64, with transforms vectorized across channels. Taken, in a batch, from
#: each row's tiles (4x4 output tiles in the whole batch) with at least its channels: F(4x4) /
#: F(2x2) time at batch 128 (2 threads, 8-12 alternating calls, machine loaded 2-6) 64 ch 32x32
#: 0.16-0.70, 128 ch 16x16 0.17-0.36, 256 ch 8x8 0.37-0.48, 512 ch 4x4 0.71-0.91; batch 32
#: 64 ch 0.74-1.13, 128 ch 0.40-0.83, 256 ch 0.63-0.70, but 512 ch 4x4 (32 tiles) 1.01-1.14;
#: one sample lost (64 ch 32x32, 64 tiles: 1.23-1.26). The weight gradient, the same way:
#: batch 128 0.57, 0.57, 0.34, 0.38; batch 32 0.59, 0.51, 0.38, but 512 ch 4x4 0.99 (its
#: (36, K, C) partial sums, 38 MB a thread); batch 4 256 ch 8x8 2.7. Its GEMMs are narrow and
#: lose: F43_MIN_TILES tiles a chunk at least (64 channels, one thread: T = 64
#: ran at 96-100 GFLOP/s, 256 at 160-175), F43_CHUNK_BYTES of V at most. With the GEMMs by
#: tile position (:func:`_by_position`), 512 ch 4x4 at batch 32 takes it too: F(4x4) / F(2x2)
#: CPU time 0.95 forward, 0.93 input gradient, 0.69 weight gradient (12 alternating calls).
#: One sample wins from 144 tiles at 64 channels (forward with bias and ReLU, one thread, 30-40
#: alternating calls, load ~2.3): 56x56 (ResNet-50's first stage, 196 tiles) 0.75-0.76x
#: F(2x2)'s time, 48x48 0.74x, 64x64 0.78x; 128 channels at 28x28 (49 tiles) 0.96x and 256 at
#: 14x14 1.66x stay on F(2x2). (Small batches' forwards won as well, 4 x 28x28 0.81x, 2 x 40x40
#: 0.70x, but their weight gradients were not measured, and the row is for one sample, which
#: has none here.)
# fmt: off
F43_TAKES = (  # (4x4 tiles in the batch at least, channels at least, samples at most; 0: any)
    (512, 64, 0),
    (512, 32, 0),
    (128, 256, 0),
    (32, 512, 0),
    (144, 64, 1),
)
# fmt: on
#: The 32-channel row was measured on an AVX2 machine (Zen 3, OpenBLAS at 94 GFLOP/s a core),
#: batch 128, 20 alternating calls, F(4x4) / F(2x2) / im2col time: 32 channels at 32x32 forward
#: 18.0 / 24.7 / 21.3 ms, weight gradient 18.9 / 19.1 / 21.0, input gradient 19.1 / 24.4 / 23.0;
#: at 16x16 5.4 / 8.2 / 6.6, 5.1 / 7.6 / 6.7, 5.0 / 8.4 / 7.4. F(2x2) lost to im2col there.
#:
#: In a batch that :func:`takes_f43`, maps under MIN_PIXELS take F(4x4) too where its tiles
#: cover them with little waste (output pixels / tiles' pixels at least F43_MIN_FILL): LeNet's
#: 32 -> 64 layer (11x11 outputs in 3x3 tiles, 0.84 full), batch 128, F(4x4) / im2col time
#: forward 4.4 / 5.3 ms, weight gradient 4.2-5.0 / 5.4-5.6; its input gradient, a 13x13 map in
#: 4x4 tiles (0.66 full), lost (6.9 / 5.4); 64 -> 64 channels at 11x11: 6.3 / 9.5, 6.1 / 10.2,
#: input gradient 9.3 / 9.6 (AVX2 machine as above). At batch 32 (288 tiles: no F(4x4)) the
#: forward lost (2.0 / 1.8). On an AVX-512 Xeon (OpenBLAS ~200 GFLOP/s a core) the W2 step
#: with LeNet's layer on im2col took 1.105x the time of F(4x4) (150 alternating steps).
F43_MIN_FILL = 0.8
#: 2 MB rather than 4 (64 ch 32x32, batch 128: 4 samples a chunk, not 7): CPU time 0.89-0.90
#: forward, 0.89-0.96 input gradient (2 runs of 10 alternating calls, load 5-6), the other
#: layers' chunks the same.
F43_MIN_TILES = 256
F43_CHUNK_BYTES = 2 << 20
#: ... and the weight gradient's, whose chunks hold D beside V: F43_WEIGHT_CHUNK_BYTES of V at
#: most, F43_WEIGHT_MIN_TILES tiles (and K) at least. Against the forward's (4 MB, 256 tiles),
#: CPU time, 10 alternating calls, load 6-7: 64 ch 32x32 0.69 (batch 128, 2 samples a chunk),
#: 0.83 (batch 32); 128 ch 16x16 0.91; 256 ch the same chunks (with 128 tiles, not K: 1.03-1.05).
F43_WEIGHT_CHUNK_BYTES = 1 << 20
F43_WEIGHT_MIN_TILES = 128
#: The scratch buffer (scratch.py) of F(4x4)'s kernel-sized operands, 36 MiB at 512 channels:
#: the forward's ``U`` on the calling thread, the weight gradient's first partial sum on each.
#: Fresh arrays that size are above malloc's mmap threshold (32 MiB) and were mapped and zeroed
#: afresh each call (ResNet-18's 512-channel weight gradient: 1,089 faults, 6.9 ms system time).
WIDE = "winograd_wide"


def takes_f43(n, c, k, oh, ow):
    """F(4x4, 3x3) for a convolution of ``n`` samples, ``c`` -> ``k`` channels, ``oh`` x ``ow``
    outputs (its forward, input gradient or weight gradient)? A row of :data:`F43_TAKES`;
    F(2x2, 3x3) otherwise.

    >>> takes_f43(128, 64, 64, 32, 32), takes_f43(128, 512, 512, 4, 4), takes_f43(1, 64, 64, 32, 32)
    (True, True, False)
    >>> takes_f43(1, 64, 64, 56, 56), takes_f43(4, 64, 64, 28, 28)  # a sample of 196 tiles; four of 49
    (True, False)
    """
    tiles = n * -(-oh // 4) * -(-ow // 4)
    return any(tiles >= t and min(c, k) >= ch and n <= (most or n) for t, ch, most in F43_TAKES)


def _small_by_f43(n, c, k, oh, ow):
    """A batch's map under MIN_PIXELS by F(4x4): :func:`takes_f43`, and ``oh`` x ``ow`` fills
    its 4x4 tiles to :data:`F43_MIN_FILL` at least.

    >>> _small_by_f43(128, 32, 64, 11, 11), _small_by_f43(128, 64, 32, 13, 13)  # LeNet: forward, input gradient
    (True, False)
    """
    fill = oh * ow / (16 * -(-oh // 4) * -(-ow // 4))
    return n > 1 and fill >= F43_MIN_FILL and takes_f43(n, c, k, oh, ow)


def plan_weight(x_shape, w_shape, stride, padding, dilation, groups, dtype):
    """Take the Winograd path for ``conv2d_grad_weight``? 3x3 kernels at stride 1 as for
    :func:`plan`, in batches (a sample alone runs im2col's product on all threads), with at
    least :data:`WEIGHT_MIN_CHANNELS` channels in and out, or by F(4x4) (:func:`takes_f43`),
    at any number of pixels.

    >>> plan_weight((8, 512, 4, 4), (512, 512, 3, 3), (1, 1), (1, 1), (1, 1), 1, np.float32)
    True
    >>> plan_weight((1, 64, 32, 32), (64, 64, 3, 3), (1, 1), (1, 1), (1, 1), 1, np.float32)
    False
    """
    if not reference.eligible(x_shape, w_shape, stride, padding, dilation, groups, dtype):
        return False
    n, k, c = x_shape[0], w_shape[0], w_shape[1]
    oh, ow = x_shape[2] + 2 * padding[0] - 2, x_shape[3] + 2 * padding[1] - 2
    return n > 1 and (min(k, c) >= WEIGHT_MIN_CHANNELS or takes_f43(n, c, k, oh, ow))


def plan(x_shape, w_shape, stride, padding, dilation, groups, dtype, grad_input=False):
    """Take the Winograd path (``conv2d`` of ``x_shape``, or with ``grad_input`` its input
    gradient)? 3x3 kernels at stride 1, dilation 1, one group, float32/64, padding at most 2,
    at least :data:`MIN_CHANNELS` channels in and out and :data:`MIN_PIXELS` output pixels a
    sample (:data:`SAMPLE_MIN_PIXELS` for a batch of one; in a batch, a row of :data:`SMALL`
    will do, or F(4x4) on a map that fills its tiles: :func:`_small_by_f43`, on the map the
    path computes: the input's for its gradient, unless that is computed on the forward's
    tiles, :func:`_on_forward_tiles`).

    >>> plan((8, 64, 32, 32), (64, 64, 3, 3), (1, 1), (1, 1), (1, 1), 1, np.float32)
    True
    >>> plan((8, 3, 32, 32), (64, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1, np.float32)  # the stem
    False
    >>> plan((8, 256, 8, 8), (256, 256, 3, 3), (1, 1), (1, 1), (1, 1), 1, np.float32)
    True
    >>> [plan((n, 128, 16, 16), (128, 128, 3, 3), (1, 1), (1, 1), (1, 1), 1, np.float32) for n in (1, 8)]
    [False, True]
    """
    if not reference.eligible(x_shape, w_shape, stride, padding, dilation, groups, dtype):
        return False
    pixels = (x_shape[2] + 2 * padding[0] - 2) * (x_shape[3] + 2 * padding[1] - 2)
    channels = min(w_shape[0], w_shape[1])
    if channels < MIN_CHANNELS:
        return False
    small = x_shape[0] > 1 and any(pixels >= p and channels >= c for p, c in SMALL)
    n, k, c = x_shape[0], w_shape[0], w_shape[1]
    oh, ow = x_shape[2] + 2 * padding[0] - 2, x_shape[3] + 2 * padding[1] - 2
    computed = not grad_input or _on_forward_tiles(n, c, k, x_shape[2:], (oh, ow))  # the forward's map
    mapped = (c, k, oh, ow) if computed else (k, c, *x_shape[2:])
    return pixels >= (MIN_PIXELS if n > 1 else SAMPLE_MIN_PIXELS) or small or _small_by_f43(n, *mapped)


# ----------------------------------------------------------------------------- kernels
# Index arithmetic is in uint64 throughout: numba types int64 +- uint64 as float64, and
# signed indices carry a wrap-around check that stops LLVM from vectorizing (kernels.py).
_1, _2, _3 = uint64(1), uint64(2), uint64(3)


@numba.njit(**JIT)
def _input_transform(x, N, C, H, W, ph, pw, tw, ty0, ty1, V):
    """``V`` (16, C, N*(ty1-ty0)*tw), flat <- ``B^T d B`` of every 4x4 tile (stride 2) in tile
    rows ty0 .. ty1-1 of ``x`` (N, C, H, W), flat, zero-padded by (ph, pw)."""
    nty = ty1 - ty0
    T = N * nty * tw
    CT = uint64(C * T)
    width = 2 * tw + 2  # >= W + 2 * pw: every tile's columns, padding included
    wp = uint64(width)
    rows = np.zeros(4 * width, x.dtype)  # one tile row's 4 input rows, zero-padded
    s = np.empty(4 * width, x.dtype)  # B^T of them
    zero = x.dtype.type(0)
    for t in range(N * C):
        n = t // C
        c = t - n * C
        plane = (n * C + c) * H * W
        for ty in range(ty0, ty1):
            for i in range(4):
                y = 2 * ty + i - ph
                dst = uint64(i) * wp + uint64(pw)
                if 0 <= y < H:
                    src = uint64(plane + y * W)
                    for j in range(uint64(W)):
                        rows[dst + j] = x[src + j]
                else:
                    for j in range(uint64(W)):
                        rows[dst + j] = zero
            for j in range(wp):
                r0, r1, r2, r3 = rows[j], rows[wp + j], rows[_2 * wp + j], rows[_3 * wp + j]
                s[j] = r0 - r2
                s[wp + j] = r1 + r2
                s[_2 * wp + j] = r2 - r1
                s[_3 * wp + j] = r1 - r3
            dst0 = uint64(c * T + (n * nty + ty - ty0) * tw)
            for p in range(4):
                row = uint64(p) * wp
                out = uint64(4 * p) * CT + dst0
                for tx in range(uint64(tw)):
                    col = row + _2 * tx
                    a0, a1, a2, a3 = s[col], s[col + _1], s[col + _2], s[col + _3]
                    V[out + tx] = a0 - a2
                    V[out + CT + tx] = a1 + a2
                    V[out + _2 * CT + tx] = a2 - a1
                    V[out + _3 * CT + tx] = a1 - a3


@numba.njit(inline="always", **JIT)
def _tile_out(M, i, KT):
    """``A^T m A`` of the 4x4 tile whose 16 values are ``M[i + pq * KT]``: its 2x2 outputs."""
    m0, m1, m2, m3 = M[i], M[i + KT], M[i + _2 * KT], M[i + _3 * KT]
    i += uint64(4) * KT
    m4, m5, m6, m7 = M[i], M[i + KT], M[i + _2 * KT], M[i + _3 * KT]
    i += uint64(4) * KT
    m8, m9, m10, m11 = M[i], M[i + KT], M[i + _2 * KT], M[i + _3 * KT]
    i += uint64(4) * KT
    m12, m13, m14, m15 = M[i], M[i + KT], M[i + _2 * KT], M[i + _3 * KT]
    u00, u01, u02, u03 = m0 + m4 + m8, m1 + m5 + m9, m2 + m6 + m10, m3 + m7 + m11
    u10, u11, u12, u13 = m4 - m8 - m12, m5 - m9 - m13, m6 - m10 - m14, m7 - m11 - m15
    return u00 + u01 + u02, u01 - u02 - u03, u10 + u11 + u12, u11 - u12 - u13


@numba.njit(**JIT)
def _output_transform(M, N, K, OH, OW, tw, ty0, ty1, out):
    """Tile rows ty0 .. ty1-1 of ``out`` (N, K, OH, OW), flat <- ``A^T M A`` of every tile of
    ``M`` (16, K, N*(ty1-ty0)*tw), flat, cut to the output's edge."""
    nty = ty1 - ty0
    T = N * nty * tw
    KT = uint64(K * T)
    full = uint64(OW // 2)  # tiles whose two columns are inside the output
    for t in range(N * K):
        n = t // K
        k = t - n * K
        plane = uint64((n * K + k) * OH * OW)
        for ty in range(ty0, ty1):
            src = uint64(k * T + (n * nty + ty - ty0) * tw)
            row0 = plane + uint64(2 * ty * OW)
            row1 = row0 + uint64(OW)
            two = 2 * ty + 1 < OH
            for tx in range(full):
                y00, y01, y10, y11 = _tile_out(M, src + tx, KT)
                out[row0 + _2 * tx] = y00
                out[row0 + _2 * tx + _1] = y01
                if two:
                    out[row1 + _2 * tx] = y10
                    out[row1 + _2 * tx + _1] = y11
            if full < uint64(tw):  # an odd width: the last tile's first column only
                y00, y01, y10, y11 = _tile_out(M, src + full, KT)
                out[row0 + _2 * full] = y00
                if two:
                    out[row1 + _2 * full] = y10


@numba.njit(**JIT)
def _gradient_transform(g, N, K, OH, OW, tw, D):
    """``D`` (16, K, N*th*tw), flat <- ``A dY A^T`` of every 2x2 tile of ``g`` (N, K, OH, OW),
    flat, zero beyond the output's edge (th = ceil(OH / 2)): the weight gradient's other
    operand, in V's layout. ``A`` is ``A^T``'s transpose, rows (1, 0), (1, 1), (1, -1), (0, -1)."""
    th = (OH + 1) // 2
    T = N * th * tw
    KT = uint64(K * T)
    width = 2 * tw  # >= OW: the last tile's second column is zero for an odd width
    wp = uint64(width)
    rows = np.zeros(2 * width, g.dtype)  # one tile row's 2 output-gradient rows, zero-padded
    s = np.empty(4 * width, g.dtype)  # A of them
    zero = g.dtype.type(0)
    for t in range(N * K):
        n = t // K
        k = t - n * K
        plane = (n * K + k) * OH * OW
        for ty in range(th):
            for i in range(2):
                y = 2 * ty + i
                dst = uint64(i) * wp
                if y < OH:
                    src = uint64(plane + y * OW)
                    for j in range(uint64(OW)):
                        rows[dst + j] = g[src + j]
                else:
                    for j in range(uint64(OW)):
                        rows[dst + j] = zero
            for j in range(wp):
                r0, r1 = rows[j], rows[wp + j]
                s[j] = r0
                s[wp + j] = r0 + r1
                s[_2 * wp + j] = r0 - r1
                s[_3 * wp + j] = -r1
            dst0 = uint64(k * T + (n * th + ty) * tw)
            for p in range(4):
                row = uint64(p) * wp
                out = uint64(4 * p) * KT + dst0
                for tx in range(uint64(tw)):
                    col = row + _2 * tx
                    a0, a1 = s[col], s[col + _1]
                    D[out + tx] = a0
                    D[out + KT + tx] = a0 + a1
                    D[out + _2 * KT + tx] = a0 - a1
                    D[out + _3 * KT + tx] = -a1


#: ``G (x) G`` (16, 9): row ``4p + q`` takes a kernel's 9 taps to ``(G g G^T)[p, q]``.
_GG = {dt: np.kron(np.array(F23.G), np.array(F23.G)).astype(dt) for dt in (np.float32, np.float64)}


def kernel_transform(w):
    """``U`` (16, K, C) = ``G g G^T`` of every 3x3 kernel ``g`` of ``w`` (K, C, 3, 3), in the
    GEMMs' (K, C) order: one product of ``G (x) G`` with the taps as they lie, (K*C, 9) read
    transposed by BLAS (call it with BLAS on one thread). The reference's form, a transposed
    copy of the taps and of U, took 0.3-1.3 ms for 128 channels, 4.7 ms for 256."""
    k, c = w.shape[:2]
    taps = np.ascontiguousarray(w).reshape(k * c, 9)
    return np.matmul(_GG[w.dtype.type], taps.T).reshape(16, k, c)


# ----------------------------------------------------------------------------- chunks
def _chunks(n, tiles, bytes_per_sample, min_tiles=None, chunk_bytes=None):
    """(samples per chunk, chunks, threads): chunks of at most ``chunk_bytes`` (default
    CHUNK_BYTES) of V, at least ``min_tiles`` (default MIN_TILES) tiles, CHUNKS_PER_THREAD a
    thread where the batch allows, and never fewer chunks than threads (conv.py's rule, on
    tiles instead of columns)."""
    min_tiles = MIN_TILES if min_tiles is None else min_tiles
    chunk_bytes = CHUNK_BYTES if chunk_bytes is None else chunk_bytes
    nt = threads()
    by_cache = max(1, chunk_bytes // max(bytes_per_sample, 1))
    by_threads = -(-n // (CHUNKS_PER_THREAD * nt))
    by_gemm = min(-(-min_tiles // max(tiles, 1)), -(-n // nt))
    m = max(1, min(n, max(min(by_cache, by_threads), by_gemm)))
    return m, -(-n // m), nt


def _evened(n, per, nt):
    """(samples a chunk, chunks): ``per`` cut where its chunks would not go evenly round ``nt``
    threads, the last round's thread alone. LeNet's 32 -> 64 layer at batch 128 by F(4x4):
    5 chunks of 29 samples on 2 threads took 4.3-4.4 ms, 6 of 22 3.9 ms (30 alternating calls).

    >>> _evened(128, 29, 2), _evened(128, 16, 2), _evened(1, 1, 2)
    ((22, 6), (16, 8), (1, 1))
    """
    count = -(-n // per)
    if count > nt and count % nt:
        per = -(-n // (nt * -(-count // nt)))
    return per, -(-n // per)


def _bands(n0, m, th, tw, nt, tiles, key, native=None):
    """``tiles`` of samples n0 .. n0+m-1 as bands of tile rows that ``nt`` threads take on
    demand (at least :data:`BAND_TILES` tiles a band, BANDS_PER_THREAD a thread where there are
    enough), or all on the calling thread where that measured faster (:data:`BAND_THREADS`,
    per ``key``). A sample's bands go as native blocks where ``native(n0, m, edges)`` can
    take them (it returns False where it cannot)."""
    one, explore, st = BAND_THREADS.choose(key, watch=m == 1)
    bands = 1 if one else max(1, min(BANDS_PER_THREAD * nt, m * th * tw // BAND_TILES, th))
    edges = [th * i // bands for i in range(bands + 1)]
    t0 = time.perf_counter()
    with awake() if m == 1 else contextlib.nullcontext():  # a sample's bands: helpers kept awake
        if one or native is None or m != 1 or not native(n0, m, edges):
            on_demand(bands, nt, lambda i: tiles(n0, m, edges[i], edges[i + 1]))
    BAND_THREADS.record(st, one, explore, time.perf_counter() - t0)


def conv2d(x, w, padding, epilogue=None, flipped=False):
    """``conv2d`` at stride 1 for NCHW float ``x`` and a 3x3 ``w`` (K, C, 3, 3): contiguous
    NCHW output, or None if it is not finite. ``epilogue`` (epilogue.Epilogue), if given, goes
    on each band of tile rows as it is made, on its thread, once the band is found finite.
    F(4x4, 3x3) (winograd43.py) where :func:`takes_f43` says so, F(2x2, 3x3) otherwise.
    ``flipped``: with the kernel ``w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1]`` (an input
    gradient's), which F(4x4)'s kernel transform reads from ``w`` as it lies."""
    x = np.ascontiguousarray(x)
    n, c, h, wd = x.shape
    k = w.shape[1] if flipped else w.shape[0]
    (ph, pw), dtype = padding, x.dtype
    oh, ow = h + 2 * ph - 2, wd + 2 * pw - 2
    size = 4 if takes_f43(n, c, k, oh, ow) else 2  # output tile: size x size
    th, tw = -(-oh // size), -(-ow // size)
    out = np.empty((n, k, oh, ow), dtype)
    flat = out.reshape(-1)
    broken = []  # a band that is not finite: the caller computes the whole directly

    def f23(n0, m, ty0, ty1):
        T = m * (ty1 - ty0) * tw
        V = scratch("winograd_v", 16 * c * T, dtype)
        _input_transform(x[n0 : n0 + m].reshape(-1), m, c, h, wd, ph, pw, tw, ty0, ty1, V)
        M = scratch("winograd_m", 16 * k * T, dtype)
        np.matmul(U, V.reshape(16, c, T), out=M.reshape(16, k, T))  # 16 one-thread BLAS GEMMs (K, C) @ (C, T)
        _output_transform(M, m, k, oh, ow, tw, ty0, ty1, out[n0 : n0 + m].reshape(-1))

    def f43(n0, m, ty0, ty1):
        nty = ty1 - ty0
        T = m * nty * tw
        P = scratch("winograd_p", m * (4 * nty + 2) * (4 * tw + 2) * c, dtype)
        winograd43.channels_last(x[n0 : n0 + m].reshape(-1), m, c, h, wd, ph, pw, tw, ty0, ty1, P)
        V = scratch("winograd_v", 36 * T * c, dtype)
        winograd43.input_transform(P, m, c, nty, tw, T, V, scratch("winograd_s", 6 * (4 * tw + 2) * c, dtype))
        M = scratch("winograd_m", 36 * T * k, dtype)
        skinny.stacked(V.reshape(36, T, c), U, M.reshape(36, T, k))  # 36 one-thread products (T, C) @ (C, K)
        Z, O = scratch("winograd_z", 24 * k, dtype), scratch("winograd_o", 16 * tw * k, dtype)
        winograd43.output_transform(M, m, k, oh, ow, nty, tw, ty0, T, flat[n0 * k * oh * ow :], Z, O)

    compute = f43 if size == 4 else f23

    def tiles(n0, m, ty0, ty1):
        """Tile rows ty0 .. ty1-1 of samples n0 .. n0+m-1, on the calling thread, found finite
        there while they are in cache (not afterwards, one thread over the whole output)."""
        compute(n0, m, ty0, ty1)
        rows = slice(size * ty0, min(size * ty1, oh))
        if not reference.finite(out[n0 : n0 + m, :, rows]):
            broken.append(True)
        elif epilogue is not None and not broken:
            epilogue(out, n0, n0 + m, 0, k, rows.start * ow, rows.stop * ow)

    if size == 4:
        per, count, nt = _chunks(
            n, th * tw, 36 * c * th * tw * dtype.itemsize, max(F43_MIN_TILES, k // 2), F43_CHUNK_BYTES
        )
        if _by_position(n, per, th * tw, nt):
            with one_thread():
                U = winograd43.kernel_transform(
                    w.astype(dtype, copy=False), scratch(WIDE, 36 * k * c, dtype), nt, flipped
                )
                _f43_by_position(x, U, padding, out, epilogue, broken)
            return None if broken else out
    else:
        # Each of a chunk's 16 GEMMs packs its U[p] (K, C) again: at least K/2 tiles keep that a
        # small share (ResNet-18's 512-channel 4x4 layer, batch 128: 0.68x im2col's time, 0.80x with 64).
        per, count, nt = _chunks(n, th * tw, 16 * c * th * tw * dtype.itemsize, max(MIN_TILES, k // 2))
    per, count = _evened(n, per, nt)
    with one_thread():
        # on one thread: BLAS's own sleep between layers
        w = w.astype(dtype, copy=False)
        if size == 4:  # U in scratch: 36 MiB at 512 channels, faulted in afresh each call otherwise
            U = winograd43.kernel_transform(w, scratch(WIDE, 36 * k * c, dtype), nt, flipped)
        else:
            U = kernel_transform(np.ascontiguousarray(w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1]) if flipped else w)
        checked = count >= nt  # every chunk by tiles(), which checks it
        if checked:
            if size == 4:  # the chunks' products read U[p] (C, K) row by row (skinny.stacked)
                U = skinny.stacked_operand(U)
            on_demand(count, nt, lambda i: tiles(i * per, min(per, n - i * per), 0, th))
        else:  # too few chunks to go round: each chunk's tile rows are shared out instead

            def native(n0, m, edges):
                return _native_bands(size, x, U, out, padding, epilogue, broken, nt, n0, m, edges)

            for i in range(count):
                m = min(per, n - i * per)
                _bands(i * per, m, th, tw, nt, tiles, (size, m, c, k, th, tw, dtype.num), native)
    if epilogue is not None or checked:
        return None if broken else out
    return out if reference.finite(out) else None  # native bands check only with an epilogue


def conv2d_grad_input(g, w, input_shape, padding):
    """``conv2d_grad_input`` at stride 1: conv2d of ``g`` with the kernel flipped and its
    channels swapped, padded by ``2 - padding``; or, where :func:`_on_forward_tiles`, the
    forward's adjoint on the forward's own tiles (:func:`_grad_input_f43`)."""
    n, k, oh, ow = g.shape
    if _on_forward_tiles(n, input_shape[1], k, input_shape[2:], (oh, ow)):
        return _grad_input_f43(g, w, input_shape, padding)
    return conv2d(g, w, (2 - padding[0], 2 - padding[1]), flipped=True)


def _on_forward_tiles(n, c, k, in_hw, out_hw):
    """The input gradient by F(4x4) on the forward's tiles? In a batch that takes F(4x4), where
    the forward's output has fewer 4x4 tiles than the input (padding under 1: LeNet's 11x11
    outputs are 9 tiles, its 13x13 inputs 16).

    >>> _on_forward_tiles(128, 32, 64, (13, 13), (11, 11)), _on_forward_tiles(128, 64, 64, (32, 32), (32, 32))
    (True, False)
    """
    tiles = [-(-a // 4) * -(-b // 4) for a, b in (in_hw, out_hw)]
    return n > 1 and tiles[1] < tiles[0] and takes_f43(n, c, k, *out_hw)


def _grad_input_f43(g, w, input_shape, padding):
    """``conv2d_grad_input`` by F(4x4, 3x3) as the forward's adjoint: per chunk of samples the
    output gradient channels last and ``D = A dY A^T`` (36, T, K), as for the weight gradient,
    36 one-thread GEMMs ``D[p] @ U[p]^T`` (T, K) @ (K, C), and ``B . B^T`` of every tile added
    into the input's gradient, channels last, then copied into NCHW. LeNet's 32 -> 64 layer at
    batch 128 (AVX2 machine, 2 threads, 20 alternating calls): 3.6 ms against im2col's 5.0; the
    full convolution by F(4x4) on the input's 13x13 map took 6.9. None if not finite."""
    g = np.ascontiguousarray(g)
    n, k, oh, ow = g.shape
    c, h, wd = input_shape[1:]
    (ph, pw), dtype = padding, g.dtype
    th, tw = -(-oh // 4), -(-ow // 4)
    rows, width, widest = 4 * th + 2, 4 * tw + 2, max(c, k)
    per, count, nt = _chunks(
        n, th * tw, 36 * widest * th * tw * dtype.itemsize, max(F43_MIN_TILES, c // 2), F43_CHUNK_BYTES
    )
    per, count = _evened(n, per, nt)
    out = np.empty(input_shape, dtype)
    flat = out.reshape(-1)

    @np.errstate(invalid="ignore", over="ignore")  # on each thread: not finite, computed directly
    def part(i):
        n0 = i * per
        m = min(per, n - n0)
        T = m * th * tw
        P = scratch("winograd_p", m * rows * width * widest, dtype)
        S = scratch("winograd_s", 6 * width * widest, dtype)
        D = scratch("winograd_d", 36 * T * k, dtype)
        E = scratch("winograd_v", 36 * T * c, dtype)
        winograd43.channels_last(g[n0 : n0 + m].reshape(-1), m, k, oh, ow, 0, 0, tw, 0, th, P)
        winograd43.gradient_transform(P, m, k, th, tw, T, D, S)
        skinny.stacked(D.reshape(36, T, k), U, E.reshape(36, T, c))  # 36 one-thread products (T, K) @ (K, C)
        Q = P[: m * rows * width * c]  # g's copy is spent: the gradient is summed there
        Q[:] = 0
        winograd43.input_adjoint(E, m, c, th, tw, T, Q, S)
        winograd43.channels_first(Q, m, c, h, wd, ph, pw, rows, width, flat[n0 * c * h * wd :])
        if not reference.finite(out[n0 : n0 + m]):  # in cache, on this thread
            broken.append(True)

    broken: list = []
    with one_thread(), np.errstate(invalid="ignore", over="ignore"):
        # U[p] (K, C): the forward's (C, K) transposed, as kernel_transform's product lies
        wt = w.astype(dtype, copy=False)
        U = winograd43.kernel_transform(wt, scratch(WIDE, 36 * k * c, dtype), nt).transpose(0, 2, 1)
        on_demand(count, nt, part)
    return None if broken else out


def conv2d_grad_weight(x, g, weight_shape, padding):
    """``conv2d_grad_weight`` at stride 1 for a 3x3 kernel, or None if it is not finite:
    ``dW = G^T [sum over tiles of (A dY A^T) * V] G``. Per chunk of samples, the input
    transform ``V`` (16, C, T), the output gradient's ``D`` (16, K, T) and 16 one-thread GEMMs
    ``D[p] @ V[p]^T`` (K, T) @ (T, C), added into a partial sum per thread; the kernel-side
    transform once at the end. F(4x4, 3x3) where :func:`takes_f43` says so."""
    x, g = np.ascontiguousarray(x), np.ascontiguousarray(g)
    n, c, h, wd = x.shape
    k = weight_shape[0]
    (ph, pw), dtype = padding, x.dtype
    oh, ow = g.shape[2:]
    if takes_f43(n, c, k, oh, ow):
        th, tw = -(-oh // 4), -(-ow // 4)
        least = max(F43_WEIGHT_MIN_TILES, k)
        per, _, nt = _chunks(n, th * tw, 36 * c * th * tw * dtype.itemsize, least, F43_WEIGHT_CHUNK_BYTES)
        if _by_position(n, per, th * tw, nt, least):
            return _grad_weight_f43_by_position(x, g, weight_shape, padding)
        return _grad_weight_f43(x, g, weight_shape, padding)
    th, tw = -(-oh // 2), -(-ow // 2)
    per, count, nt = _chunks(n, th * tw, 16 * c * th * tw * dtype.itemsize)  # as conv2d's: 1 MB of V
    per, count = _evened(n, per, nt)
    sums = ThreadSums()  # (16, K, C) a thread

    @np.errstate(invalid="ignore", over="ignore")  # on each thread: not finite, computed directly
    def part(i):
        n0 = i * per
        m = min(per, n - n0)
        V = scratch("winograd_v", 16 * c * m * th * tw, dtype)
        D = scratch("winograd_d", 16 * k * m * th * tw, dtype)
        _input_transform(x[n0 : n0 + m].reshape(-1), m, c, h, wd, ph, pw, tw, 0, th, V)
        _gradient_transform(g[n0 : n0 + m].reshape(-1), m, k, oh, ow, tw, D)
        V, D = V.reshape(16, c, -1), D.reshape(16, k, -1)
        sums.add(np.matmul(D, V.transpose(0, 2, 1), out=sums.spare((16, k, c), dtype)))  # 16 GEMMs (K, T) @ (T, C)

    with one_thread(), np.errstate(invalid="ignore", over="ignore"):
        on_demand(count, nt, part)
        return kernel_side(sums.partials(), _GG[dtype.type], weight_shape, nt)


#: Kernels a block of :func:`kernel_side` takes: blocks of a fixed size, so that the bits do not
#: depend on the threads.
SIDE_BLOCK = 1 << 13


def kernel_side(parts, gg, weight_shape, nt):
    """A weight gradient's last step: ``G^T m G`` of every (K, C) of the sum of ``parts`` (each
    (P, K, C), P = 16 or 36; ``gg`` (P, 9)), the taps as (K*C, 9), the weights' own layout; or
    None if it is not finite. Blocks of SIDE_BLOCK kernels are taken on demand by ``nt``
    threads (with BLAS on one thread): each adds up its columns of the parts, multiplies them
    and checks its taps in cache, where one thread did all three over the whole (ResNet-18's
    512-channel layers: a 38 MB sum)."""
    p, kc = gg.shape[0], int(np.prod(weight_shape[:2]))
    flat = [a.reshape(p, kc) for a in parts]
    dw = np.empty(weight_shape, flat[0].dtype)
    taps = dw.reshape(kc, 9)
    blocks = -(-kc // SIDE_BLOCK)
    broken = []

    @np.errstate(invalid="ignore", over="ignore")  # on each thread: not finite, computed directly
    def block(i):
        lo, hi = i * SIDE_BLOCK, min(kc, (i + 1) * SIDE_BLOCK)
        m = flat[0][:, lo:hi]
        if len(flat) > 1:
            m = np.add(m, flat[1][:, lo:hi], out=scratch("winograd_side", p * (hi - lo), m.dtype).reshape(p, hi - lo))
            for other in flat[2:]:
                m += other[:, lo:hi]
        np.matmul(m.T, gg, out=taps[lo:hi])
        if not reference.finite(taps[lo:hi]):
            broken.append(True)

    on_demand(blocks, nt, block)
    return None if broken else dw


def _grad_weight_f43(x, g, weight_shape, padding):
    """:func:`conv2d_grad_weight` by F(4x4, 3x3) (winograd43.py): per chunk the input and the
    output gradient channels last, ``V`` (36, T, C), ``D`` (36, T, K) and 36 one-thread GEMMs
    ``D[p]^T @ V[p]`` (K, T) @ (T, C) into a partial sum per thread; ``G^T . G`` at the end."""
    n, c, h, wd = x.shape
    k = weight_shape[0]
    (ph, pw), dtype = padding, x.dtype
    oh, ow = g.shape[2:]
    th, tw = -(-oh // 4), -(-ow // 4)
    least = max(F43_WEIGHT_MIN_TILES, k)
    per, count, nt = _chunks(n, th * tw, 36 * c * th * tw * dtype.itemsize, least, F43_WEIGHT_CHUNK_BYTES)
    per, count = _evened(n, per, nt)
    sums = ThreadSums(WIDE)  # (36, K, C) a thread, its first part in scratch
    rows, width = 4 * th + 2, 4 * tw + 2

    @np.errstate(invalid="ignore", over="ignore")  # on each thread: not finite, computed directly
    def part(i):
        n0 = i * per
        m = min(per, n - n0)
        T = m * th * tw
        P = scratch("winograd_p", m * rows * width * max(c, k), dtype)
        S = scratch("winograd_s", 6 * width * max(c, k), dtype)
        V = scratch("winograd_v", 36 * T * c, dtype)
        D = scratch("winograd_d", 36 * T * k, dtype)
        winograd43.channels_last(x[n0 : n0 + m].reshape(-1), m, c, h, wd, ph, pw, tw, 0, th, P)
        winograd43.input_transform(P, m, c, th, tw, T, V, S)
        winograd43.channels_last(g[n0 : n0 + m].reshape(-1), m, k, oh, ow, 0, 0, tw, 0, th, P)
        winograd43.gradient_transform(P, m, k, th, tw, T, D, S)
        V, D = V.reshape(36, T, c), D.reshape(36, T, k)
        sums.add(np.matmul(D.transpose(0, 2, 1), V, out=sums.spare((36, k, c), dtype)))  # 36 GEMMs (K, T) @ (T, C)

    with one_thread(), np.errstate(invalid="ignore", over="ignore"):
        on_demand(count, nt, part)
        return kernel_side(sums.partials(), winograd43.GG[dtype.type], weight_shape, nt)


# ----------------------------------------------------------------------------- native bands
#: Whether a sample's bands go to the crew as native blocks (crew.py's kind 3) where they can:
#: the helpers run them in their spin, without the GIL, where a Python band waited 64-82 µs
#: for it (read at each call: ``python -m benchmarks.onnx_ab --flag`` compares).
NATIVE_BANDS = True
#: A native band's arguments, crew.BLOCKS columns 2 on (addresses, or numbers; the buffers
#: V, M, P, S, Z, O slot 0's, each other slot's ``stride`` bytes on):
# fmt: off
ARGS = (
    "gemm", "x", "m", "c", "h", "w", "ph", "pw", "tw", "ty0", "ty1", "U", "k", "V", "M", "out",
    "oh", "ow", "bias", "residual", "relu", "broken", "P", "S", "Z", "O", "size", "stride",
)
# fmt: on
#: Per band of the job: set to 1 by a band whose output is not finite (its epilogue not applied).
_BROKEN = np.zeros(64, np.int64)


@numba.njit(**JIT)
def _band(a, slot, like, one, zero):  # pragma: no cover - compiled
    """One band of tile rows ty0 .. ty1-1 (:func:`conv2d`'s ``tiles``), its arguments ``a``
    (:data:`ARGS`) as plain numbers, on the buffers of ``slot``: the transforms, the GEMMs as
    the same BLAS calls that np.matmul makes on the same operands (so the band's bits are the
    Python band's), then, with a bias, the finite check and the epilogue. ``like``: a 0-d
    array of the dtype."""
    m, c, h, w, ph, pw, tw, ty0, ty1 = a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10]
    k, oh, ow, size, b, mine = a[12], a[16], a[17], a[26], like.itemsize, slot * a[27]
    nty = ty1 - ty0
    T = m * nty * tw
    x = numba.carray(crew._pointer(a[1], like), m * c * h * w)
    out = numba.carray(crew._pointer(a[15], like), m * k * oh * ow)
    V, M = a[13] + mine, a[14] + mine
    if size == 4:
        P = numba.carray(crew._pointer(a[22] + mine, like), m * (4 * nty + 2) * (4 * tw + 2) * c)
        S = numba.carray(crew._pointer(a[23] + mine, like), 6 * (4 * tw + 2) * c)
        winograd43.channels_last(x, m, c, h, w, ph, pw, tw, ty0, ty1, P)
        winograd43.input_transform(P, m, c, nty, tw, T, numba.carray(crew._pointer(V, like), 36 * T * c), S)
        for p in range(36):  # V[p] (T, C) @ U[p] (C, K), U[p] a transposed (K, C): BLAS reads it so
            crew._gemm_at(
                a[0], 111, 112, T, k, c, one, V + p * T * c * b, c, a[11] + p * k * c * b, c, zero, M + p * T * k * b, k
            )
        Z = numba.carray(crew._pointer(a[24] + mine, like), 24 * k)
        O = numba.carray(crew._pointer(a[25] + mine, like), 16 * tw * k)
        winograd43.output_transform(
            numba.carray(crew._pointer(M, like), 36 * T * k), m, k, oh, ow, nty, tw, ty0, T, out, Z, O
        )
    else:
        _input_transform(x, m, c, h, w, ph, pw, tw, ty0, ty1, numba.carray(crew._pointer(V, like), 16 * c * T))
        for p in range(16):  # U[p] (K, C) @ V[p] (C, T)
            crew._gemm_at(
                a[0], 111, 111, k, T, c, one, a[11] + p * k * c * b, c, V + p * c * T * b, T, zero, M + p * k * T * b, T
            )
        _output_transform(numba.carray(crew._pointer(M, like), 16 * k * T), m, k, oh, ow, tw, ty0, ty1, out)
    if not a[18]:
        return
    p0, p1 = size * ty0 * ow, min(size * ty1, oh) * ow
    bad = False  # v * 0 is 0 for every finite v, NaN for an inf or a NaN (an or: vectorized)
    for i in range(m * k):
        base = uint64(i * oh * ow)
        for q in range(uint64(p0), uint64(p1)):
            bad |= out[base + q] * zero != zero
    if bad:
        numba.carray(crew._pointer(a[21], crew.I64), 1)[0] = 1
        return
    bias = numba.carray(crew._pointer(a[18], like), k)
    residual = numba.carray(crew._pointer(a[19] if a[19] else a[15], like), m * k * oh * ow if a[19] else 0)
    _apply(out, k, oh * ow, 0, m, 0, k, p0, p1, bias, residual, a[20] != 0)


def _native_bands(size, x, U, out, padding, epilogue, broken, nt, n0, m, edges) -> bool:
    """:func:`conv2d`'s bands of tile rows ``edges`` of samples n0 .. n0+m-1 as native blocks on
    the crew of ``nt`` threads (blas.native_rows: the helpers take them in their spin, without
    the GIL), each band's epilogue on it there; ``broken`` gets True where a band is not finite. False,
    having done nothing, where they cannot go so (blas.native_rows), or the dtype or the
    epilogue's form is not one :func:`_band` takes."""
    dtype = out.dtype
    after = None if epilogue is None else epilogue.on(out, n0).native
    if not NATIVE_BANDS:
        return False
    n, c, h, w = x.shape
    k, oh, ow = out.shape[1:]
    b = dtype.itemsize
    # U as _band reads it: F(2x2)'s (16, K, C) contiguous, F(4x4)'s (36, C, K) a transposed (36, K, C)
    layout = (k * c * b, c * b, b) if size == 2 else (k * c * b, b, c * b)
    if (epilogue is not None and after is None) or not (x.flags.c_contiguous and U.strides == layout):
        return False
    tw, count = -(-ow // size), len(edges) - 1

    def fill(blocks, fn, gemm, slots):
        oa = crew.address(out) + n0 * k * oh * ow * b
        bias = residual = relu = 0
        if after is not None:
            r = after[2]
            bias, residual, relu = (
                crew.address(after[1]),
                crew.address(r) + n0 * k * oh * ow * b if r.size else 0,
                after[3][4],
            )
        # one set of buffers a slot, for the widest band: V, M, then F(4x4)'s P, S, Z, O
        nty = max(t1 - t0 for t0, t1 in zip(edges, edges[1:]))
        T, taps = m * nty * tw, 36 if size == 4 else 16
        sizes = [taps * c * T, taps * k * T]
        if size == 4:
            sizes += [m * (4 * nty + 2) * (4 * tw + 2) * c, 6 * (4 * tw + 2) * c, 24 * k, 16 * tw * k]
        per = -(-sum(sizes) // 16) * 16  # a slot's elements, 64-byte aligned apart
        base = crew.address(scratch("native_bands", slots * per, dtype))
        at = [base + b * sum(sizes[:j]) for j in range(len(sizes))] + [0] * (6 - len(sizes))
        head = (gemm, crew.address(x) + n0 * c * h * w * b, m, c, h, w, *padding, tw)
        _BROKEN[:count] = 0
        broken_at, ua = crew.address(_BROKEN), crew.address(U)
        for i in range(count):
            row = (*head, edges[i], edges[i + 1], ua, k, at[0], at[1], oa, oh, ow, bias, residual, relu)
            blocks[i, : 2 + len(ARGS)] = (3, fn, *row, broken_at + 8 * i, *at[2:], size, per * b)

    if not native_rows(nt, dtype, _band, len(ARGS), count, fill):
        return False
    if _BROKEN[:count].any():
        broken.append(True)
    return True


# ----------------------------------------------------------------------------- by position
def _by_position(n, per, tiles, nt, min_tiles=None):
    """F(4x4) by tile position (:func:`_f43_by_position`) rather than by chunks of ``per`` of
    the ``n`` samples? Where the chunks were cut below ``min_tiles`` (default F43_MIN_TILES)
    tiles to give each of ``nt`` threads one (ResNet-18's 512-channel 4x4 layer at batch 128:
    64 tiles a chunk); with fewer chunks than threads (batch 1) the tile rows go as bands."""
    min_tiles = F43_MIN_TILES if min_tiles is None else min_tiles
    return 1 < nt <= -(-n // per) and per * tiles < min_tiles


def _pieces(n, nt):
    """Samples in pieces for the threads' transforms: 2 a thread where the batch allows."""
    per = -(-n // (2 * nt))
    return per, -(-n // per)


def _position_plan(n, oh, ow):
    """The by-position paths' split of ``n`` samples of ``oh`` x ``ow`` outputs: tile rows and
    columns (4x4 tiles), the threads, the batch's tiles ``T``, and the transforms' pieces
    (samples a piece, pieces)."""
    th, tw = -(-oh // 4), -(-ow // 4)
    nt = threads()
    return (th, tw, nt, n * th * tw, *_pieces(n, nt))


def _f43_by_position(x, U, padding, out, epilogue, broken):
    """:func:`conv2d` by F(4x4) with the whole batch's tiles in each GEMM: the transforms by
    pieces of samples, the 36 GEMMs ``V[p] (T, C) @ U[p]`` taken by the threads one position
    at a time, so each packs its U[p] for all T tiles (one thread, 512 channels: 155 GFLOP/s
    at T = 128 against 123 at the chunks' T = 64)."""
    n, c, h, wd = x.shape
    k = out.shape[1]
    (ph, pw), dtype = padding, x.dtype
    oh, ow = out.shape[2:]
    th, tw, nt, T, per, count = _position_plan(n, oh, ow)
    V, M = np.empty(36 * T * c, dtype), np.empty(36 * T * k, dtype)
    flat = out.reshape(-1)

    def transform(i):
        n0 = i * per
        m = min(per, n - n0)
        P = scratch("winograd_p", m * (4 * th + 2) * (4 * tw + 2) * c, dtype)
        winograd43.channels_last(x[n0 : n0 + m].reshape(-1), m, c, h, wd, ph, pw, tw, 0, th, P)
        S = scratch("winograd_s", 6 * (4 * tw + 2) * c, dtype)
        winograd43.input_transform(P, m, c, th, tw, T, V[n0 * th * tw * c :], S)

    def output(i):
        n0 = i * per
        m = min(per, n - n0)
        Z, O = scratch("winograd_z", 24 * k, dtype), scratch("winograd_o", 16 * tw * k, dtype)
        winograd43.output_transform(M[n0 * th * tw * k :], m, k, oh, ow, th, tw, 0, T, flat[n0 * k * oh * ow :], Z, O)
        if not reference.finite(out[n0 : n0 + m]):
            broken.append(True)
        elif epilogue is not None and not broken:
            epilogue(out, n0, n0 + m, 0, k, 0, oh * ow)

    V3, M3 = V.reshape(36, T, c), M.reshape(36, T, k)
    on_demand(count, nt, transform)
    on_demand(36, nt, lambda p: np.matmul(V3[p], U[p], out=M3[p]))
    on_demand(count, nt, output)


def _grad_weight_f43_by_position(x, g, weight_shape, padding):
    """:func:`_grad_weight_f43` with the whole batch's tiles in each GEMM: ``V`` and ``D`` by
    pieces of samples, then the 36 GEMMs ``D[p]^T @ V[p]`` (K, T) @ (T, C) taken by the threads
    one position at a time, each into its own slice of one (36, K, C) sum: no partial sums a
    thread, nor their adding up."""
    n, c, h, wd = x.shape
    k = weight_shape[0]
    (ph, pw), dtype = padding, x.dtype
    oh, ow = g.shape[2:]
    th, tw, nt, T, per, count = _position_plan(n, oh, ow)
    V, D = np.empty(36 * T * c, dtype), np.empty(36 * T * k, dtype)
    rows, width = 4 * th + 2, 4 * tw + 2

    def transform(i):
        n0 = i * per
        m = min(per, n - n0)
        P = scratch("winograd_p", m * rows * width * max(c, k), dtype)
        S = scratch("winograd_s", 6 * width * max(c, k), dtype)
        winograd43.channels_last(x[n0 : n0 + m].reshape(-1), m, c, h, wd, ph, pw, tw, 0, th, P)
        winograd43.input_transform(P, m, c, th, tw, T, V[n0 * th * tw * c :], S)
        winograd43.channels_last(g[n0 : n0 + m].reshape(-1), m, k, oh, ow, 0, 0, tw, 0, th, P)
        winograd43.gradient_transform(P, m, k, th, tw, T, D[n0 * th * tw * k :], S)

    with one_thread(), np.errstate(invalid="ignore", over="ignore"):
        total = scratch(WIDE, 36 * k * c, dtype).reshape(36, k, c)
        V3, D3 = V.reshape(36, T, c), D.reshape(36, T, k)
        on_demand(count, nt, transform)
        on_demand(36, nt, lambda p: np.matmul(D3[p].T, V3[p], out=total[p]))  # (K, T) @ (T, C)
        return kernel_side([total], winograd43.GG[dtype.type], weight_shape, nt)

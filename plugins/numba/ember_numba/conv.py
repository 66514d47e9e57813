"""Convolution as im2col + BLAS GEMM, over chunks of the batch small enough to stay in cache.

Layout: "columns" ``cols[(c, kh, kw), (n, oh, ow)]`` hold, for each kernel tap, the input
values it meets at every output position. Each row is a run of OW values read from one input
row, so im2col and col2im are straight (vectorizable) copies at stride 1, and the three
convolutions are GEMMs against "o-major" ``(O, n*OH*OW)`` outputs and gradients:

=====================  =========================================  ==========================
primitive              per chunk of ``m`` samples                 then
=====================  =========================================  ==========================
conv2d                 ``out_o = W (O, CKK) @ cols (CKK, m*P)``   swap to (m, O, P)
conv2d_grad_weight     ``dW += g_o (O, m*P) @ cols.T``            (sum over chunks)
conv2d_grad_input      ``cols = W.T @ g_o``                       col2im into the m samples
=====================  =========================================  ==========================

Why chunks: the columns of a whole batch are large — ResNet-18's first stage at batch 128
needs 302 MB of them per convolution. Written and read once per call, they cost more than
the GEMM: fresh pages fault in (glibc returns large blocks to the OS), and every pass goes to
main memory. A chunk holds :data:`CHUNK_BYTES` of columns (a few MB, in the last-level cache),
in buffers reused from call to call. A chunk of one sample needs no swap at all: its GEMM
writes the sample's (O, P) block of the NCHW output directly. Chunks are at least
:data:`MIN_COLUMNS` wide, so deep layers with few output pixels (P = 16) still hand BLAS a
GEMM wide enough to run at speed.

Narrow maps, whose runs of OW values are short (LeNet's 11x11 layer), go channels last
instead: runs of KW*C values, channels_last.py (``channels_last.takes``, asked by the three
``*_cols`` functions).

At stride 1 the input gradient is itself a forward convolution of the output gradient with
the kernel flipped and its channels swapped; that is taken when its columns are not much
larger than col2im's (ResNet's C -> C convolutions run 2-3x faster that way).

At batch 1 there is one chunk, and its GEMM is the whole call: it then runs on all threads,
not on one — the forward as one-thread BLAS calls on the plugin's threads
(Chunks.forward_sample), the gradients on BLAS's (blas.matmul). A lone sample's forward on a
one-thread pool takes the same bands of output rows, so its columns stay in L2. A sample's forward product
with few output pixels and large weights (skinny.takes: ResNet-50's last stage) skips BLAS
for skinny.py's kernel, which reads the weights in place instead of repacking them.
"""

from __future__ import annotations

import functools
import math
import os
import time

import numba
import numpy as np
from numba import uint64

from ember.backends.numpy import backend as nb

from . import channels_last, crew, skinny, winograd
from .blas import awake, matmul, native_rows, on_demand, one_thread, shared_matmul
from .epilogue import _apply
from .kernels import FLOATS, JIT, MIN_SIZE
from .launch import ThreadChoice, hot, threads
from .scratch import ThreadSums, scratch

#: Bytes of columns per chunk (``EMBER_NUMBA_CONV_CHUNK``): in the last-level cache with room
#: for the GEMM's other operands.
CHUNK_BYTES = int(os.environ.get("EMBER_NUMBA_CONV_CHUNK", 4 << 20))
#: Columns per GEMM at least: narrower products leave BLAS's kernels half idle, and each
#: call packs the whole weight matrix again (measured on ResNet-18's 256- and 512-channel
#: layers: 512 columns ran up to 1.4x slower than one GEMM over the batch, 2048 as fast or faster).
MIN_COLUMNS = 2048
#: Chunks per thread at least, where the batch allows: the last chunks even out the threads.
CHUNKS_PER_THREAD = 4
#: Output pixels per sample from which a chunk's GEMMs go sample by sample (Chunks.per_sample).
PER_SAMPLE_P = 512
#: ... and, for weight gradients, at most this many columns rows (C*KH*KW): the per-sample
#: products are summed afterwards, which pays only while the swap it avoids is the larger cost
#: (ResNet-18's 64-channel layer, CKK = 576, ran 3% slower that way; LeNet's, CKK = 9, 4x faster).
PER_SAMPLE_CKK = 64
#: Weight gradients with few output channels (at most TRANSPOSED_MAX_O, fewer than the CKK
#: column rows) and at least TRANSPOSED_MIN_PIXELS output pixels in the batch are made as
#: dWᵀ = cols @ g_oᵀ, the product's larger side as its rows, and transposed once at the end:
#: OpenBLAS ran that form 1.14-1.27x faster on one thread (LeNet's conv2, ResNet-18's 64- and
#: 128-channel layers), the same on the 256- and 512-channel ones, whose final transpose then
#: only costs; with few pixels it outweighs the gain (8x8 and 4x4 layers at batch 32: 1.2-2.6x slower).
TRANSPOSED_MAX_O = 128
TRANSPOSED_MIN_PIXELS = 4096
#: Output rows at most this wide take :func:`_im2col_taps`: below it a row's bounds and loop
#: cost more than its copy (ResNet-18's 4x4 stage: 3.9 ms against 8.4 ms a half batch; equal
#: at 16 wide, 3x slower at 32).
TAPS_MAX_OW = 8
#: Output rows at least this wide take :func:`_im2col_same` where it applies; narrower ones the
#: tap table, whose loop has no bounds to work out for each of a tap's few pixels (one sample,
#: AVX-512 machine, medians of 300: 512 channels at 4x4 0.060 ms against 0.116, at 7x7 0.128
#: against 0.134, 64 at 6x6 0.014 against 0.017; at 8x8, 256 channels, the plane copies won,
#: 0.069 against 0.075). W3-infer-b1 on numba+jit (its 4x4 layers): step 0.979 (0.66-1.10, 10
#: rounds of benchmarks.numpy_ab).
SAME_MIN_OW = 8
#: Input columns (KW) from which a stride-2 im2col splits each input row into its even and
#: odd columns first (:func:`_im2col_split`), so that each of the KW taps copies a straight run:
#: the stem (7x7) 0.57x the row kernel's time; 3x3 layers lost (1.2-1.9x: 3 taps do not repay
#: the split).
SPLIT_MIN_KW = 5
#: Column bytes from which one sample's im2col is shared out among the threads, when a chunk's
#: products run on all of them (Chunks.wide): ~0.1 ms of copying, twice what waking a helper costs.
SHARED_IM2COL_BYTES = 1 << 20
#: One sample's forward convolution on all threads (Chunks.forward_sample): from this many
#: output pixels it is cut into bands of output rows, each band's columns (at most
#: BAND_BYTES, in a core's L2 cache) and its product made by the thread that takes it.
BAND_MIN_P = 1024
BAND_BYTES = 512 << 10
BANDS_PER_THREAD = 2
#: One thread or all for one sample's forward convolution, by measurement (launch.ThreadChoice).
SAMPLE_THREADS = ThreadChoice()
#: A batch of one on one thread goes the same way (bands of output rows, each band's columns
#: in L2), not as one chunk whose columns outgrow the cache (the stem: 7.4 MB).
SOLO_BANDS = True


# ----------------------------------------------------------------------------- kernels
# Index arithmetic in uint64 where it can be (kernels.py: signed indices stop LLVM vectorizing).
_1, _2 = uint64(1), uint64(2)


@numba.njit(inline="always", **JIT)
def _inside(x0, sw, W, OW):
    """The range [lo, hi) of ow whose column ow * sw + x0 lies inside [0, W)."""
    lo = 0 if x0 >= 0 else (-x0 + sw - 1) // sw
    hi = 0 if W - 1 - x0 < 0 else min(OW, (W - 1 - x0) // sw + 1)
    return lo, max(lo, hi)


@numba.njit(inline="always", **JIT)
def _tap(t, N, KH, KW):
    """Job ``t`` of an im2col copy as (row block k, sample n, channel c, tap kh, kw): the
    copies run over k = (c, kh, kw) outer, n inner, so each job writes one sample's columns
    of one tap."""
    k = t // N
    return k, t - k * N, k // (KH * KW), (k // KW) % KH, k % KW


@numba.njit(**JIT)
def _im2col(x, N, C, H, W, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, oh0, oh1, cols):
    """Columns of output rows ``oh0 .. oh1-1`` (all: 0, OH), each a run of OW values."""
    P = (oh1 - oh0) * OW
    for t in range(C * KH * KW * N):
        k, n, c, kh, kw = _tap(t, N, KH, KW)
        src_plane = (n * C + c) * H
        dst = uint64((k * N + n) * P)
        x0 = kw * dw - pw
        lo, hi = _inside(x0, sw, W, OW)
        for oh in range(oh0, oh1):
            y = oh * sh + kh * dh - ph
            row = dst + uint64((oh - oh0) * OW)
            if y < 0 or y >= H:
                for ow in range(uint64(OW)):
                    cols[row + ow] = 0
                continue
            src = (src_plane + y) * W + x0
            for ow in range(lo):
                cols[row + uint64(ow)] = 0
            if sw == 1:  # a straight copy, which LLVM vectorizes (a strided read it cannot)
                s0 = uint64(src)
                for ow in range(uint64(lo), uint64(hi)):
                    cols[row + ow] = x[s0 + ow]
            else:
                for ow in range(lo, hi):
                    cols[row + uint64(ow)] = x[uint64(src + ow * sw)]
            for ow in range(hi, OW):
                cols[row + uint64(ow)] = 0


@numba.njit(**JIT)
def _im2col_split(x, N, C, H, W, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, oh0, oh1, cols):
    """_im2col at column stride 2: each input row is split once into its even and odd columns
    (a strided pass that LLVM vectorizes as an interleaved load), then each of the KW taps
    copies a straight run from one of the halves instead of a strided one of its own."""
    P = (oh1 - oh0) * OW
    half = (W + 1) // 2
    buf = np.empty(2 * half, x.dtype)  # [even columns | odd columns]
    zero = cols.dtype.type(0)
    for t in range(C * KH * N):
        r = t // N  # (c, kh)
        n = t - r * N
        c = r // KH
        kh = r - c * KH
        src_plane = (n * C + c) * H
        for oh in range(oh0, oh1):
            y = oh * sh + kh * dh - ph
            inside = 0 <= y < H
            if inside:
                s = uint64((src_plane + y) * W)
                for i in range(uint64(W // 2)):
                    buf[i] = x[s + _2 * i]
                    buf[uint64(half) + i] = x[s + _2 * i + _1]
                if W % 2:
                    buf[half - 1] = x[s + uint64(W - 1)]
            for kw in range(KW):
                row = uint64(((r * KW + kw) * N + n) * P + (oh - oh0) * OW)
                if not inside:
                    for ow in range(uint64(OW)):
                        cols[row + ow] = zero
                    continue
                x0 = kw * dw - pw
                lo, hi = _inside(x0, sw, W, OW)
                for ow in range(lo):
                    cols[row + uint64(ow)] = zero
                # input column 2*ow + x0 = 2*(ow + x0 // 2) + x0 % 2: half x0 % 2, index ow + x0 // 2
                at, b0 = row + uint64(lo), uint64((x0 % 2) * half + x0 // 2 + lo)
                for i in range(uint64(hi - lo)):
                    cols[at + i] = buf[b0 + i]
                for ow in range(hi, OW):
                    cols[row + uint64(ow)] = zero


@numba.njit(**JIT)
def _im2col_same(x, N, C, H, W, KH, KW, ph, pw, dh, dw, cols):
    """_im2col at stride 1 where the output is the input's size (OH, OW = H, W: "same"
    padding): a tap's columns are the whole input plane shifted by ``y0 * W + x0``, so one
    straight copy of the plane, then zeros where the shift left the plane or wrapped around a
    row's ends (|x0| columns a row), instead of a short run and its bounds per output row."""
    P = H * W
    zero = cols.dtype.type(0)
    for t in range(C * KH * KW * N):
        k, n, c, kh, kw = _tap(t, N, KH, KW)
        src = uint64((n * C + c) * P)
        dst = uint64((k * N + n) * P)
        y0, x0 = kh * dh - ph, kw * dw - pw
        shift = y0 * W + x0
        lo = min(max(0, -y0), H) * W  # the output rows whose input row is inside: [lo, hi)
        hi = max(min(H, H - y0) * W, lo)
        a = min(max(lo, -shift), hi)  # ... and whose source lies in the plane: [a, b)
        b = max(min(hi, P - shift), a)
        for p in range(uint64(0), uint64(a)):
            cols[dst + p] = zero
        s = src + uint64(a + shift)
        for p in range(uint64(b - a)):
            cols[dst + uint64(a) + p] = x[s + p]
        for p in range(uint64(b), uint64(P)):
            cols[dst + p] = zero
        if x0 != 0:  # the columns that wrapped around a row's ends
            c0, c1 = (0, min(-x0, W)) if x0 < 0 else (max(W - x0, 0), W)
            for row in range(lo, hi, W):
                for ow in range(c0, c1):
                    cols[dst + uint64(row + ow)] = zero


@numba.njit(**JIT)
def _taps(H, W, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW):
    """For each kernel tap and output pixel, the input pixel it reads (offset in the plane),
    or -1 where it falls in the padding: _im2col's bounds, worked out once per geometry."""
    tab = np.empty((KH * KW, OH * OW), np.int64)
    for kh in range(KH):
        for kw in range(KW):
            for oh in range(OH):
                y = oh * sh + kh * dh - ph
                for ow in range(OW):
                    xx = ow * sw + kw * dw - pw
                    tab[kh * KW + kw, oh * OW + ow] = y * W + xx if 0 <= y < H and 0 <= xx < W else -1
    return tab


@functools.lru_cache(maxsize=256)
def _tap_table(geometry):
    """_taps of a geometry (H, W, KH, KW, strides, padding, dilation, OH, OW), made once: a
    training step meets the same few geometries every step. Read only."""
    tab = _taps(*geometry)
    tab.flags.writeable = False
    return tab


@numba.njit(**JIT)
def _im2col_taps(x, N, C, H, W, KK, tab, P, cols):
    """_im2col for narrow outputs: one loop over each sample's P pixels per tap, reading
    through the tap table, instead of a short row at a time."""
    zero = cols.dtype.type(0)
    for t in range(C * KK * N):
        k = t // N
        n = t - k * N
        c = k // KK
        tap = k - c * KK
        src = (n * C + c) * H * W
        dst = uint64((k * N + n) * P)
        for p in range(P):
            o = tab[tap, p]
            cols[dst + uint64(p)] = x[src + o] if o >= 0 else zero


@numba.njit(**JIT)
def _col2im(cols, N, C, H, W, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, out):
    """The adjoint of _im2col: each column value is added back where it was read from."""
    P = OH * OW
    for t in range(N * C):
        n = t // C
        c = t - n * C
        plane = uint64(t * H * W)
        for i in range(uint64(H * W)):
            out[plane + i] = 0
        for kh in range(KH):
            for kw in range(KW):
                k = (c * KH + kh) * KW + kw
                src_base = (k * N + n) * P
                x0 = kw * dw - pw
                lo, hi = _inside(x0, sw, W, OW)
                for oh in range(OH):
                    y = oh * sh + kh * dh - ph
                    if y < 0 or y >= H:
                        continue
                    dst = plane + uint64(y * W + x0)
                    src = src_base + oh * OW
                    for ow in range(lo, hi):
                        out[dst + uint64(ow * sw)] += cols[uint64(src + ow)]


@numba.njit(**JIT)
def _swap01(x, A, B, C, out):
    """(A, B, C) -> (B, A, C): whole rows of C move."""
    c_n = uint64(C)
    for t in range(A * B):
        b = t // A
        a = t - b * A
        src = uint64((a * B + b) * C)
        dst = uint64(t * C)
        for c in range(c_n):
            out[dst + c] = x[src + c]


# ----------------------------------------------------------------------------- the chunks
def _geometry(x_shape, w_shape, stride, padding, dilation):
    n, c, h, w = x_shape
    o, _, kh, kw = w_shape
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (w + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    return (n, c, h, w, kh, kw, stride[0], stride[1], padding[0], padding[1], dilation[0], dilation[1], oh, ow)


#: How a convolution's columns are copied (Chunks.form): the first row whose geometry fits.
#: One sample's columns, one thread (14x14 and 28x28 3x3 layers of 256 and 128 channels, the
#: stem's band of 7 output rows, 200 alternating calls), against the row kernel or, at 7x7, the
#: tap kernel:
#:
#: ======  ==================================================  ========================  =======
#: form    geometry                                            kernel                    time
#: ======  ==================================================  ========================  =======
#: same    stride 1, output the input's size ("same" padding)  :func:`_im2col_same`      0.50x (0.96x at 7x7)
#: split   column stride 2, at least SPLIT_MIN_KW taps wide    :func:`_im2col_split`     0.57x
#: taps    outputs at most TAPS_MAX_OW wide                    :func:`_im2col_taps`
#: rows    any                                                 :func:`_im2col`
#: ======  ==================================================  ========================  =======
#:
#: ("same" copies whole planes: a band of output rows, Chunks.forward_sample's, takes the row kernel.)
FORMS = (
    ("same", lambda g, taps: g[6] == g[7] == 1 and g[12:14] == g[2:4] and g[13] >= SAME_MIN_OW),
    ("split", lambda g, taps: g[7] == 2 and g[5] >= SPLIT_MIN_KW),
    ("taps", lambda g, taps: taps),
    ("rows", lambda g, taps: True),
)


def _form(geo, taps):
    """The first of :data:`FORMS` that fits ``geo`` (_geometry's tuple); ``taps``: a tap table exists."""
    return next(name for name, fits in FORMS if fits(geo, taps))


class Chunks:
    """The batch of one convolution cut into chunks of ``m`` samples, and the per-chunk steps
    the three primitives share. :meth:`run` hands the chunks to the threads on demand; each
    chunk runs on one thread (one-thread kernels; BLAS is set to one thread while they run),
    so threads never wait for each other inside a chunk, and a thread the machine does not
    schedule takes no chunk. With fewer chunks than threads — a batch of one has one chunk —
    that would leave threads idle, so there the chunks' products run on all threads instead."""

    def __init__(self, x_shape, w_shape, stride, padding, dilation, dtype):
        self.geo = _geometry(x_shape, w_shape, stride, padding, dilation)
        n, c, _, _, kh, kw = self.geo[:6]
        self.n, self.o, self.ckk = n, w_shape[0], c * kh * kw
        self.p = self.geo[-2] * self.geo[-1]
        self.dtype = np.dtype(dtype)
        self.threads = threads()
        per_sample = max(self.ckk * self.p * self.dtype.itemsize, 1)
        by_cache = max(1, CHUNK_BYTES // per_sample)
        by_threads = -(-n // (CHUNKS_PER_THREAD * self.threads))  # enough chunks to share out evenly
        by_gemm = min(-(-MIN_COLUMNS // max(self.p, 1)), -(-n // self.threads))  # but every thread gets one
        self.m = max(1, min(n, max(min(by_cache, by_threads), by_gemm)))
        self.count = -(-n // self.m)
        #: Fewer chunks than threads (batch 1, or a small batch on many cores): the chunks run
        #: one after another, and each of their products takes all threads instead (:meth:`gemm`).
        self.wide = self.count < self.threads
        self.taps = _tap_table(self.geo[2:]) if self.geo[-1] <= TAPS_MAX_OW else None
        self.form = _form(self.geo, self.taps is not None)
        #: A 1x1 kernel at stride 1 without padding reads each input pixel once, in place: a
        #: sample's columns are its (C, H*W) plane itself (ResNet-50's bottlenecks: 2 of 3 layers).
        self.pointwise = (kh, kw) == (1, 1) and self.geo[6:10] == (1, 1, 0, 0)

    def run(self, work):
        """``work(n0, m)`` for each chunk (first sample, samples), on all threads."""

        def chunk(i):
            n0 = i * self.m
            work(n0, min(self.m, self.n - n0))

        if self.wide:
            for i in range(self.count):
                chunk(i)
            return
        with one_thread():  # each chunk makes its own one-thread BLAS calls
            on_demand(self.count, self.threads, chunk)

    def summed(self, part):
        """The sum of ``part(n0, m)`` over the chunks (:meth:`run`), a partial per thread
        (scratch.ThreadSums): a weight gradient."""
        sums = ThreadSums()
        self.run(lambda n0, m: sums.add(part(n0, m)))
        return sums.total()

    def gemm(self, a, b, out=None):
        """``a @ b`` (into ``out``) for a chunk: a one-thread BLAS call where the chunks share out
        the threads, the product on all threads (blas.matmul) where they are too few to."""
        return matmul(a, b, out) if self.wide else np.matmul(a, b, out=out)

    def buffer(self, name, size):
        """This thread's scratch buffer ``name``: ``size`` elements of the convolution's dtype."""
        return scratch(name, size, self.dtype)

    def cols(self, m):
        """This thread's column buffer for ``m`` samples: (CKK, m*P)."""
        return scratch("cols", self.ckk * m * self.p, self.dtype).reshape(self.ckk, m * self.p)

    def im2col(self, x, n0, m, workers=None):
        """Columns of samples n0 .. n0+m-1 of contiguous NCHW ``x`` (read only: for one sample
        of a pointwise convolution, a view of ``x``); one sample's copy shared among ``workers``
        (default: all, where the chunk has them to itself)."""
        if self.pointwise and m == 1:
            return x[n0].reshape(self.ckk, self.p)
        cols = self.cols(m)
        c = self.geo[1]
        workers = (self.threads if self.wide else 1) if workers is None else workers
        if workers > 1 and m == 1 and c > 1 and cols.nbytes >= SHARED_IM2COL_BYTES:
            # One sample's channels are contiguous blocks of x and of the columns: the threads
            # that will share the GEMM share the copy too.
            kk, blocks = self.ckk // c, min(c, 2 * workers)
            e = [c * i // blocks for i in range(blocks + 1)]
            pieces = [(1, e[i], e[i + 1], cols[e[i] * kk : e[i + 1] * kk]) for i in range(blocks)]
            if not _native_blocks(self, x[n0], pieces, workers):
                on_demand(
                    len(e) - 1,
                    workers,
                    lambda i: self._fill(x[n0 : n0 + 1, e[i] : e[i + 1]], cols[e[i] * kk : e[i + 1] * kk]),
                )
        else:
            self._fill(x[n0 : n0 + m], cols)
        return cols

    def forward_sample(self, x, n, wm, out, then=None):
        """``out (O, P) = wm @ columns of sample n`` of ``x`` on all threads, for a chunk that has
        them to itself (:attr:`wide`): one-thread BLAS calls that the threads take on demand.
        BLAS's own threads are not used here: between a network's layers they fall asleep, and
        waking them cost more than the product (a 0.4 ms product took 2-7 ms after a 0.3 ms gap,
        on the 2-core development machine). Wide outputs go as bands of output rows, each
        band's im2col and product on one thread, its columns in that core's cache; the others
        share the columns' copy, then the product as blocks (blas.shared_matmul). Where one
        thread measured faster (:data:`SAMPLE_THREADS`: a busy machine), all of it runs on one.
        ``then(o0, o1, p0, p1)``, if given, runs on each block of ``out`` (channels o0 .. o1-1,
        pixels p0 .. p1-1) once it is made, on the thread that made it (an epilogue)."""
        one, explore, st = SAMPLE_THREADS.choose((self.geo, wm.shape, self.dtype.num), watch=True)
        t0 = time.perf_counter()
        with one_thread(), awake():
            self._forward_sample(x, n, wm, out, 1 if one else self.threads, then)
        SAMPLE_THREADS.record(st, one, explore, time.perf_counter() - t0)

    def _forward_sample(self, x, n, wm, out, threads, then=None):
        oh, ow = self.geo[-2:]
        if self.pointwise or self.taps is not None or self.p < BAND_MIN_P:
            cols = self.im2col(x, n, 1, threads)
            if skinny.takes(wm, cols):  # few pixels (ResNet-50's last stage): weights read in place
                skinny.matmul(wm, cols, out, threads, then)
                return
            if threads > 1:
                shared_matmul(wm, cols, threads, out, then)
                return
            np.matmul(wm, cols, out=out)
            if then is not None:
                then(0, self.o, 0, self.p)
            return
        by_cache = BAND_BYTES // (self.ckk * ow * self.dtype.itemsize)
        rows = max(1, min(by_cache, -(-oh // (BANDS_PER_THREAD * threads))))
        edges = [*range(0, oh, rows), oh]
        sample = x[n].reshape(-1)

        def band(i):
            r0, r1 = edges[i], edges[i + 1]
            cols = scratch("band", self.ckk * (r1 - r0) * ow, self.dtype)
            self._rows(sample, 1, self.geo[1], r0, r1, cols)
            np.matmul(wm, cols.reshape(self.ckk, -1), out=out[:, r0 * ow : r1 * ow])
            if then is not None:
                then(0, self.o, r0 * ow, r1 * ow)

        if threads > 1 and _native_blocks(
            self, x[n], [(0, r0, r1, None) for r0, r1 in zip(edges, edges[1:])], threads, wm, out, then
        ):
            return
        on_demand(len(edges) - 1, threads, band)

    def _fill(self, xs, cols):
        """im2col of contiguous ``xs`` (m, C', H, W) — C' of the C channels — into ``cols``."""
        m, c = xs.shape[:2]
        g, flat, out = self.geo, xs.reshape(-1), cols.reshape(-1)
        if self.form == "same":
            _im2col_same(flat, m, c, g[2], g[3], g[4], g[5], g[8], g[9], g[10], g[11], out)
        elif self.form == "taps":
            _im2col_taps(flat, m, c, g[2], g[3], g[4] * g[5], self.taps, self.p, out)
        else:
            self._rows(flat, m, c, 0, g[-2], out)

    def _rows(self, flat, m, c, oh0, oh1, out):
        """Columns of output rows oh0 .. oh1-1 of ``m`` samples of ``c`` channels, flat."""
        (_im2col_split if self.form == "split" else _im2col)(flat, m, c, *self.geo[2:], oh0, oh1, out)

    def per_sample(self, m):
        """Run this chunk's GEMMs one sample at a time (batched matmul over strided views of the
        columns) instead of as one GEMM against a swapped (O, m*P) copy? Where each sample is
        wide enough for BLAS on its own (P >= PER_SAMPLE_P), the swap is pure cost: LeNet's
        first layer (P = 676, CKK = 9) ran 1.7x (forward) and 4x (weight gradient) faster so."""
        return m > 1 and self.p >= PER_SAMPLE_P

    def o_major(self, g, n0, m):
        """Samples n0 .. n0+m-1 of contiguous (N, O, P) ``g`` as (O, m*P): a view for one sample."""
        if m == 1:
            return g[n0].reshape(self.o, self.p)
        out = scratch("o_major", self.o * m * self.p, self.dtype)
        _swap01(g[n0 : n0 + m].reshape(-1), m, self.o, self.p, out)
        return out.reshape(self.o, m * self.p)


def conv2d_cols(x, w, stride, padding, dilation, epilogue=None):
    """``conv2d`` (groups 1) for float ``x`` (N, C, H, W) and ``w`` (O, C, KH, KW); then
    ``epilogue(out, n0, n1, o0, o1, p0, p1)`` (epilogue.Epilogue), if given, in place on each
    block of the output as it is made, while it is in cache: a chunk's samples, or at batch 1
    a band of rows or a block of the product, on the thread that made it."""
    x = np.ascontiguousarray(x)
    ch = Chunks(x.shape, w.shape, stride, padding, dilation, x.dtype)
    if channels_last.takes(ch):
        return channels_last.conv2d(ch, x, w, epilogue)
    o, p = ch.o, ch.p
    wm = np.ascontiguousarray(w).reshape(o, ch.ckk)
    out = np.empty((ch.n, o, ch.geo[-2], ch.geo[-1]), x.dtype)

    def work(n0, m):
        if m == 1 and (ch.wide or (ch.n == 1 and SOLO_BANDS)):
            then = None if epilogue is None else epilogue.on(out, n0)
            ch.forward_sample(x, n0, wm, out[n0].reshape(o, p), then)
            return
        product(n0, m)
        if epilogue is not None:
            epilogue(out, n0, n0 + m, 0, o, 0, p)

    def product(n0, m):
        cols = ch.im2col(x, n0, m)
        if m == 1 and skinny.takes(wm, cols):  # as forward_sample's: the same bits on any thread count
            skinny.matmul(wm, cols, out[n0].reshape(o, p))
            return
        if m == 1:
            ch.gemm(wm, cols, out[n0].reshape(o, p))  # BLAS GEMM, straight into NCHW
            return
        if ch.per_sample(m):  # a GEMM a sample, into NCHW
            ch.gemm(wm, cols.reshape(ch.ckk, m, p).transpose(1, 0, 2), out[n0 : n0 + m].reshape(m, o, p))
            return
        out_o = scratch("out_o", o * m * p, x.dtype)
        ch.gemm(wm, cols, out_o.reshape(o, m * p))  # BLAS GEMM: (O, m*P)
        _swap01(out_o, o, m, p, out[n0 : n0 + m].reshape(-1))

    ch.run(work)
    return out


def conv2d_grad_weight_cols(x, g, weight_shape, stride, padding, dilation):
    """``conv2d_grad_weight``: the sum over chunks of ``g_o @ cols.T``, one partial sum per thread."""
    x, g = np.ascontiguousarray(x), np.ascontiguousarray(g)
    ch = Chunks(x.shape, weight_shape, stride, padding, dilation, x.dtype)
    if channels_last.takes(ch):
        return channels_last.conv2d_grad_weight(ch, x, g, weight_shape)
    dw = ch.summed(lambda n0, m: weight_part(ch, ch.im2col(x, n0, m), g[n0 : n0 + m]))
    return np.ascontiguousarray(dw).reshape(weight_shape)


def weight_part(ch, cols, g):
    """A chunk's share of the weight gradient, (O, K): its output gradient ``g`` (m, O, OH,
    OW), contiguous, times its columns ``cols`` (K, m*P): the CKK columns of its inputs, and
    perhaps more rows (a row of ones sums ``g``: a bias's gradient)."""
    m = len(g)
    if ch.per_sample(m) and ch.ckk <= PER_SAMPLE_CKK:  # a GEMM a sample, then their sum
        samples = g.reshape(m, ch.o, ch.p), cols.reshape(len(cols), m, ch.p).transpose(1, 2, 0)
        return ch.gemm(*samples).sum(0)
    if ch.ckk > ch.o and ch.o <= TRANSPOSED_MAX_O and ch.n * ch.p >= TRANSPOSED_MIN_PIXELS:
        return ch.gemm(cols, ch.o_major(g, 0, m).T).T  # BLAS GEMM, K = m*P
    return ch.gemm(ch.o_major(g, 0, m), cols.T)


def conv2d_grad_input_cols(g, w, input_shape, stride, padding, dilation):
    """``conv2d_grad_input``: per chunk ``cols = W.T @ g_o``, scattered back by col2im."""
    g = np.ascontiguousarray(g)
    ch = Chunks(input_shape, w.shape, stride, padding, dilation, g.dtype)
    if channels_last.takes(ch):
        return channels_last.conv2d_grad_input(ch, g, w, input_shape)
    wt = np.ascontiguousarray(w).reshape(ch.o, ch.ckk).T
    dx = np.empty(input_shape, g.dtype)

    def work(n0, m):
        cols = ch.cols(m)
        if ch.per_sample(m):  # a GEMM a sample, no swap
            ch.gemm(wt, g[n0 : n0 + m].reshape(m, ch.o, ch.p), cols.reshape(ch.ckk, m, ch.p).transpose(1, 0, 2))
        else:
            ch.gemm(wt, ch.o_major(g, n0, m), cols)  # BLAS GEMM: (CKK, m*P)
        _col2im(cols.reshape(-1), m, *ch.geo[1:], dx[n0 : n0 + m].reshape(-1))

    ch.run(work)
    return dx


# ----------------------------------------------------------------------------- native blocks
#: Whether one sample's bands of output rows and its shared im2col copies go to the crew as
#: native blocks (crew.py's kind 3) where they can: the helpers run them in their spin,
#: without the GIL (read at each call: ``python -m benchmarks.onnx_ab --flag`` compares).
NATIVE_BLOCKS = True
#: A native block's arguments, crew.BLOCKS columns 2 on: ``mode`` 0 a band of output rows
#: r0 .. r1-1 (its columns, the product, the epilogue where ``bias``), 1 the columns of
#: ``C`` channels (a share of the copy); ``form`` :data:`FORMS`' index; addresses of ``x``
#: (the first channel's plane), the band's ``cols``, ``wm``, ``out`` (the sample's (O, P)),
#: ``bias``, ``residual`` (0: none) and the tap table; a band's ``cols`` are slot 0's, each other
#: slot's ``stride`` bytes on (a copy's are its share of the sample's columns, stride 0).
# fmt: off
ARGS = (
    "gemm", "mode", "form", "x", "C", "H", "W", "KH", "KW", "sh", "sw", "ph", "pw", "dh", "dw",
    "OH", "OW", "r0", "r1", "cols", "wm", "O", "out", "bias", "residual", "relu", "taps", "stride",
)
# fmt: on
_SAME, _SPLIT, _TAPS = 0, 1, 2  # FORMS' indices


@numba.njit(**JIT)
def _native(a, slot, like, one, zero):  # pragma: no cover - compiled
    """One native block (:data:`ARGS` ``a``, plain numbers) taken by ``slot``: what
    Chunks._forward_sample's ``band`` or Chunks.im2col's shared copy does, the same kernels
    and BLAS call."""
    mode, form, C, H, W, KH, KW = a[1], a[2], a[4], a[5], a[6], a[7], a[8]
    sh, sw, ph, pw, dh, dw, OH, OW, r0, r1 = a[9], a[10], a[11], a[12], a[13], a[14], a[15], a[16], a[17], a[18]
    x = numba.carray(crew._pointer(a[3], like), C * H * W)
    rows = OH if mode == 1 else r1 - r0
    at = a[19] + slot * a[27]
    cols = numba.carray(crew._pointer(at, like), C * KH * KW * rows * OW)
    if mode == 1 and form == _SAME:
        _im2col_same(x, 1, C, H, W, KH, KW, ph, pw, dh, dw, cols)
    elif mode == 1 and form == _TAPS:
        tab = numba.carray(crew._pointer(a[26], crew.I64), (KH * KW, OH * OW))
        _im2col_taps(x, 1, C, H, W, KH * KW, tab, OH * OW, cols)
    elif form == _SPLIT:
        _im2col_split(
            x, 1, C, H, W, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, r0 if mode == 0 else 0, r1 if mode == 0 else OH, cols
        )
    else:
        _im2col(
            x, 1, C, H, W, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, r0 if mode == 0 else 0, r1 if mode == 0 else OH, cols
        )
    if mode == 1:
        return
    O, P, K, b, n = a[21], OH * OW, C * KH * KW, like.itemsize, rows * OW
    crew._gemm_at(a[0], 111, 111, O, n, K, one, a[20], K, at, n, zero, a[22] + r0 * OW * b, P)
    if a[23]:
        y = numba.carray(crew._pointer(a[22], like), O * P)
        bias = numba.carray(crew._pointer(a[23], like), O)
        residual = numba.carray(crew._pointer(a[24] if a[24] else a[22], like), O * P if a[24] else 0)
        _apply(y, O, P, 0, 1, 0, O, r0 * OW, r1 * OW, bias, residual, a[25] != 0)


def _native_blocks(ch, x, pieces, threads, wm=None, out=None, then=None) -> bool:
    """Native blocks of one sample's forward convolution on ``threads`` threads (blas.native_rows):
    ``pieces`` (mode, start, stop, cols), each a band of output rows (mode 0: its columns in a
    buffer of the thread's, ``wm @ cols`` into ``out`` (O, P), ``then``'s epilogue) or the
    columns of a run of channels into ``cols`` (mode 1). False, having done nothing, where
    they cannot go so."""
    dtype = ch.dtype
    after = None if then is None else getattr(then, "native", None)
    if not NATIVE_BLOCKS:
        return False
    if (then is not None and after is None) or not x.flags.c_contiguous:
        return False
    if wm is not None and not (wm.flags.c_contiguous and out.strides == (ch.p * dtype.itemsize, dtype.itemsize)):
        return False
    g, b = ch.geo, dtype.itemsize
    form = {"same": _SAME, "split": _SPLIT, "taps": _TAPS}.get(ch.form, 3)

    def fill(blocks, fn, gemm, slots):
        widest = max((hi - lo for mode, lo, hi, _ in pieces if mode == 0), default=0)
        per = -(-ch.ckk * widest * g[13] // 16) * 16  # a slot's band columns, 64-byte aligned apart
        band = crew.address(scratch("native_band", slots * per, dtype)) if widest else 0
        xa, plane = crew.address(x), g[2] * g[3] * b
        taps = crew.address(ch.taps) if ch.taps is not None else 0
        wa, oa = (crew.address(wm), crew.address(out)) if wm is not None else (0, 0)
        bias = residual = relu = 0
        if after is not None:  # on the sample's (O, P), ``out`` (the residual's the same sample of it)
            r, (_, offset, _, _, relu) = after[2], after[3]
            bias, residual = crew.address(after[1]), crew.address(r) + offset * b if r.size else 0
        for i, (mode, lo, hi, cols) in enumerate(pieces):
            c, at = (g[1], xa) if mode == 0 else (hi - lo, xa + lo * plane)
            rows, buffer, stride = ((lo, hi), band, per * b) if mode == 0 else ((0, 0), crew.address(cols), 0)
            blocks[i, : 2 + len(ARGS)] = (
                3, fn, gemm, mode, form, at, c, *g[2:14], *rows, buffer, wa, ch.o, oa, bias, residual, relu, taps, stride,
            )  # fmt: skip

    return native_rows(threads, dtype, _native, len(ARGS), len(pieces), fill)


# ----------------------------------------------------------------------------- the primitives
def _conv_ok(name, a, b, groups, macs):
    """Can the kernels take this convolution (``macs``: its multiply-adds, for the hotness rule)?"""
    if not (
        groups == 1
        and a.dtype in FLOATS
        and a.dtype == b.dtype
        and a.size > 0
        and b.size > 0
        and max(a.size, b.size) >= MIN_SIZE
    ):
        return False
    return hot((name, a.shape, b.shape, a.dtype.num), 2 * macs)


def _conv2d(x, w, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, epilogue=None):
    """``conv2d``; with ``epilogue`` (epilogue.Epilogue), that applied in place to the output
    too: to each block while it is in cache where the im2col chunks or the Winograd bands make
    it (a bias and ReLU: the NumPy runner's conv2d_bias_relu rewrite, see rewrites.py)."""
    if not _conv_ok(
        "conv2d", x, w, groups, x.shape[0] * w.size * x.shape[2] * x.shape[3] // max(stride[0] * stride[1], 1)
    ):
        y = nb.IMPLS["conv2d"](x, w, stride, padding, dilation, groups)
        return y if epilogue is None else epilogue.whole(y)
    # 3x3, stride 1 (winograd.py, the epilogue on each band); None: not finite, computed directly
    if winograd.plan(x.shape, w.shape, stride, padding, dilation, groups, x.dtype):
        y = winograd.conv2d(x, w, padding, epilogue)
        if y is not None:
            return y
    return conv2d_cols(x, w, stride, padding, dilation, epilogue)


def _conv2d_grad_weight(x, g, weight_shape, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    if not _conv_ok("conv2d_grad_weight", x, g, groups, math.prod(weight_shape) * g.size // max(g.shape[1], 1)):
        return nb.IMPLS["conv2d_grad_weight"](x, g, weight_shape, stride, padding, dilation, groups)
    if (
        winograd.plan_weight(x.shape, weight_shape, stride, padding, dilation, groups, x.dtype)
        and (dw := winograd.conv2d_grad_weight(x, g, weight_shape, padding)) is not None
    ):
        return dw
    return conv2d_grad_weight_cols(x, g, weight_shape, stride, padding, dilation)


def _conv2d_grad_input(g, w, input_shape, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    if not _conv_ok("conv2d_grad_input", g, w, groups, g.size * w.size // max(w.shape[0], 1)):
        return nb.IMPLS["conv2d_grad_input"](g, w, input_shape, stride, padding, dilation, groups)
    if (
        winograd.plan(input_shape, w.shape, stride, padding, dilation, groups, g.dtype, grad_input=True)
        and (dx := winograd.conv2d_grad_input(g, w, input_shape, padding)) is not None
    ):
        return dx
    o, c, kh, kw = w.shape
    full = (dilation[0] * (kh - 1) - padding[0], dilation[1] * (kw - 1) - padding[1])
    h_w, oh_ow = input_shape[2] * input_shape[3], g.shape[2] * g.shape[3]
    if tuple(stride) == (1, 1) and full[0] >= 0 and full[1] >= 0 and o * h_w <= 1.5 * c * oh_ow:
        flipped = np.ascontiguousarray(w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1])
        return conv2d_cols(g, flipped, (1, 1), full, dilation)
    return conv2d_grad_input_cols(g, w, input_shape, stride, padding, dilation)


IMPLS = {
    "conv2d": _conv2d,
    "conv2d_grad_input": _conv2d_grad_input,
    "conv2d_grad_weight": _conv2d_grad_weight,
}

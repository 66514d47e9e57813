"""Winograd convolutions for 3x3 kernels at stride 1: fewer multiplications than im2col.

Direct convolution (im2col + GEMM, conv.py) spends 9 multiply-adds per input channel on every
output pixel of every output channel. Winograd's minimal filtering F(m x m, 3x3) (Lavin and
Gray, 2016) computes a whole m x m tile of outputs from the (m+2) x (m+2) input tile ``d``
that covers it:

    Y = A^T [ (G g G^T) * (B^T d B) ] A        (* elementwise)

Only the elementwise product multiplies input by weight: (m+2)^2 products a tile instead of
9 m^2. Summed over the input channels, each of the (m+2)^2 positions p of the tile is one
matrix product, so a convolution is three stages:

=================  ==================================================================
input transform    ``V[p] = (B^T d B)[p]`` of every tile: (tiles, C) for each p
GEMMs              ``M[p] = V[p] @ U[p]`` with ``U = G g G^T`` as (C, K): one stacked
                   ``np.matmul`` of (m+2)^2 BLAS products
output transform   ``Y = A^T M A`` of every tile, into the channels-last output
=================  ==================================================================

The transforms are the small matrices in :data:`F23` and :data:`F43`, applied as a few
whole-array adds on strided views of the padded, channels-last input (one view a row, then
one a column of the tile: ``B^T d B = B^T (d B)``); no Python loop runs over images or tiles.

The two gradients reuse the same pieces. At stride 1 the input gradient is a forward
convolution of the output gradient with the kernel flipped and its channels swapped. The
weight gradient is the adjoint of the forward map in ``g``:
``dW = G^T [ sum over tiles of (A dY A^T) * (B^T d B) ] G``, again (m+2)^2 GEMMs, now
(K, tiles) @ (tiles, C), with the same input transform.

Which layers take it is :func:`plan`'s rule (conv.py asks it first).

Non-finite values. The transforms add and subtract input values of a tile, so an inf in the
input meets itself with both signs (inf - inf) and comes out as NaN where the direct sum
gives +-inf; large finite values may also overflow in V where the direct sum does not. Each
function therefore returns None when its result is not finite (one sum over it, a cheap
check), and conv.py computes that convolution directly: results with inf or NaN are the
direct sum's, exactly.

>>> import numpy as np
>>> from numpy.lib.stride_tricks import sliding_window_view
>>> rng = np.random.default_rng(0)
>>> x, w = rng.standard_normal((2, 8, 5, 7)), rng.standard_normal((4, 8, 3, 3))
>>> windows = sliding_window_view(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3))
>>> direct = np.einsum("nchwij,kcij->nkhw", windows, w)
>>> bool(np.allclose(conv2d(x, w, (1, 1)), direct))
True
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Transforms:
    """F(m x m, 3x3): output tiles of ``m`` x ``m`` from input tiles of ``alpha = m + 2``."""

    m: int
    BT: tuple  # alpha x alpha, input transform B^T
    G: tuple  # alpha x 3, kernel transform
    AT: tuple  # m x alpha, output transform A^T

    @property
    def alpha(self) -> int:
        return self.m + 2


#: F(2x2, 3x3): 16 products a tile instead of 36. Every coefficient of B and A is 0 or +-1,
#: so the input and output transforms are adds and subtracts only.
F23 = Transforms(
    m=2,
    BT=((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1)),
    G=((1, 0, 0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0, 0, 1)),
    AT=((1, 1, 1, 0), (0, 1, -1, -1)),
)
#: F(4x4, 3x3) (interpolation points 0, +-1, +-2, infinity): 36 products instead of 144, but
#: its transforms scale values by up to 25 (B) and 8 (A), and float32 results drift further from
#: the direct sum (the tests measure how far); :func:`plan` uses it only where asked.
F43 = Transforms(
    m=4,
    BT=(
        (4, 0, -5, 0, 1, 0),
        (0, -4, -4, 1, 1, 0),
        (0, 4, -4, -1, 1, 0),
        (0, -2, -1, 2, 1, 0),
        (0, 2, -1, -2, 1, 0),
        (0, 4, 0, -5, 0, 1),
    ),
    G=(
        (1 / 4, 0, 0),
        (-1 / 6, -1 / 6, -1 / 6),
        (-1 / 6, 1 / 6, -1 / 6),
        (1 / 24, 1 / 12, 1 / 6),
        (1 / 24, -1 / 12, 1 / 6),
        (0, 0, 1),
    ),
    AT=((1, 1, 1, 1, 1, 0), (0, 1, -1, 2, -2, 0), (0, 1, 1, 4, 4, 0), (0, 1, -1, 8, -8, 1)),
)

#: Input and output channels from which the Winograd path is taken. With few channels its
#: GEMMs are thin for BLAS ((tiles, C) @ (C, K) against im2col's (pixels, 9C) @ (9C, K)) and the
#: transforms, whose whole-array adds run over C-long rows, are the larger part of the work.
#: Measured at batch 64 on one BLAS thread (loaded 2-core machine), Winograd / im2col time:
#: ResNet-18's 64- to 512-channel layers 0.71-0.92 (forward 0.79-0.88, input gradient
#: 0.74-0.92, weight gradient 0.71-0.92; the 512-channel 4x4 layer's weight gradient 1.13);
#: LeNet's 32 -> 64 layer on 13x13 0.98-3.7, a 16-channel 32x32 layer 0.85-1.75.
MIN_CHANNELS = 64
#: Whether conv.py takes this path at all: ``EMBER_NUMPY_WINOGRAD=1``. Off by default: in the
#: whole W3 training step (numpy+jit, BLAS on its two threads, machine loaded to 4x its cores)
#: it measured slower, steps alternating in one process: Winograd / im2col step time median
#: 3.0 (1.45-8.7) with 4 MiB blocks, 1.14 (1.06-1.69) with 16 MiB ones. Each block makes 16
#: BLAS calls where im2col makes one, and on a busy machine every multi-threaded call can wait
#: for a thread the machine does not schedule (docs/performance.md).
ENABLED = os.environ.get("EMBER_NUMPY_WINOGRAD", "0") == "1"
#: Bytes of transformed input (V) built at a time. Larger than conv.py's 4 MiB of columns:
#: each block makes (m+2)^2 GEMM calls, which must stay large enough to pay for BLAS's threads.
BLOCK_BYTES = 16 << 20
MIN_TILES = 512  # tiles per block at least, so each of the stacked GEMMs stays tall
#: The transforms in use: :data:`F23` (see F43's note).
DEFAULT = F23


def plan(x_shape, w_shape, stride, padding, dilation, groups, dtype):
    """The :class:`Transforms` to compute this convolution with, or None for im2col.

    Taken for 3x3 kernels at stride 1, dilation 1, one group, float32/float64, padding at
    most 2 (the input gradient pads by 2 - padding), at least :data:`MIN_CHANNELS` channels
    in and out (ResNet's stages; not LeNet's 32-channel layer, where im2col measured faster),
    and only when :data:`ENABLED`.

    >>> from ember.backends.numpy import winograd
    >>> was, winograd.ENABLED = winograd.ENABLED, True  # as EMBER_NUMPY_WINOGRAD=1 sets it
    >>> plan((8, 64, 32, 32), (64, 64, 3, 3), (1, 1), (1, 1), (1, 1), 1, np.float32).m
    2
    >>> plan((8, 3, 32, 32), (64, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1, np.float32) is None  # the stem
    True
    >>> winograd.ENABLED = was
    """
    if not ENABLED or not eligible(x_shape, w_shape, stride, padding, dilation, groups, dtype):
        return None
    return DEFAULT if min(w_shape[0], w_shape[1]) >= MIN_CHANNELS else None


def eligible(x_shape, w_shape, stride, padding, dilation, groups, dtype) -> bool:
    """Can a Winograd 3x3 path compute this convolution at all (whether it pays is each
    backend's own rule)? A 3x3 kernel at stride 1, dilation 1, one group, float32/float64,
    padding at most 2 (the input gradient pads by 2 - padding) and a padded image of at least
    3x3.

    >>> eligible((8, 64, 32, 32), (64, 64, 3, 3), (1, 1), (1, 1), (1, 1), 1, np.float32)
    True
    >>> eligible((8, 64, 32, 32), (64, 64, 3, 3), (2, 2), (1, 1), (1, 1), 1, np.float32)
    False
    """
    if tuple(w_shape[2:]) != (3, 3) or tuple(stride) != (1, 1) or tuple(dilation) != (1, 1) or groups != 1:
        return False
    if np.dtype(dtype) not in (np.dtype(np.float32), np.dtype(np.float64)):
        return False
    return all(0 <= p <= 2 for p in padding) and x_shape[2] + 2 * padding[0] >= 3 and x_shape[3] + 2 * padding[1] >= 3


# ----------------------------------------------------------------------------- transforms
def _combine(coefficients, terms, out):
    """``out = sum(c * t)`` over the nonzero coefficients: adds and subtracts where a
    coefficient is +-1, a multiply (into a temporary) only for the others."""
    pairs = [(c, t) for c, t in zip(coefficients, terms) if c != 0]
    ones = [(c, t) for c, t in pairs if abs(c) == 1]
    scaled = [(c, t) for c, t in pairs if abs(c) != 1]
    if scaled:
        c, t = scaled.pop(0)
        np.multiply(t, c, out=out)
    else:
        ones.sort(key=lambda ct: ct[0] != 1)  # a +1 first: out = t1 +- t2 in one pass
        (c, t), rest = ones[0], ones[1:]
        if rest:
            (np.add if rest[0][0] == c else np.subtract)(t, rest.pop(0)[1], out=out)
            if c == -1:
                np.negative(out, out=out)
        elif c == 1:
            np.copyto(out, t)
        else:
            np.negative(t, out=out)
        ones = rest
    tmp = np.empty(out.shape, out.dtype) if scaled else None
    for c, t in scaled:
        np.multiply(t, c, out=tmp)
        np.add(out, tmp, out=out)
    for c, t in ones:
        (np.add if c == 1 else np.subtract)(out, t, out=out)


def _input_transform(t, xp, tiles, V):
    """``V[p, q]`` (n, th, tw, C) <- ``(B^T d B)[p, q]`` of every tile of the padded
    channels-last block ``xp`` (n, m*th + 2, m*tw + 2, C)."""
    a, m = t.alpha, t.m
    th, tw = tiles
    rows = [xp[:, i : i + m * th : m] for i in range(a)]  # row i of every tile row
    s = np.empty(rows[0].shape, xp.dtype)
    for p in range(a):
        _combine(t.BT[p], rows, s)
        cols = [s[:, :, j : j + m * tw : m] for j in range(a)]
        for q in range(a):
            _combine(t.BT[q], cols, V[p, q])


def _output_transform(t, M, out):
    """``out`` (n, OH, OW, K) <- ``A^T M A`` of every tile, cut to the output's edge; ``M`` is
    (alpha, alpha, n, th, tw, K)."""
    a, m = t.alpha, t.m
    oh, ow = out.shape[1:3]
    s = np.empty(M.shape[1:], M.dtype)
    for i in range(m):
        _combine(t.AT[i], list(M), s)  # s[q] = sum_p AT[i, p] M[p, q]: all q at once
        r = len(range(i, oh, m))
        for j in range(m):
            c = len(range(j, ow, m))
            _combine(t.AT[j], [s[q, :, :r, :c] for q in range(a)], out[:, i::m, j::m])


def _gradient_transform(t, gp, tiles, out):
    """``out[p, q]`` (n, th, tw, K) <- ``(A dY A^T)[p, q]`` of every m x m tile of the
    zero-padded channels-last output gradient ``gp`` (n, m*th, m*tw, K)."""
    a, m = t.alpha, t.m
    A = tuple(zip(*t.AT))  # alpha x m
    rows = [gp[:, i::m] for i in range(m)]
    s = np.empty(rows[0].shape, gp.dtype)
    for p in range(a):
        _combine(A[p], rows, s)
        cols = [s[:, :, j::m] for j in range(m)]
        for q in range(a):
            _combine(A[q], cols, out[p, q])


def kernel_transform(t, w):
    """``U`` (alpha^2, C, K) = ``G g G^T`` of every (K, C) kernel ``g``: one GEMM of the
    Kronecker product ``G (x) G`` (alpha^2, 9) with the kernels' taps (9, C*K)."""
    k, c = w.shape[:2]
    taps = np.ascontiguousarray(w.transpose(2, 3, 1, 0)).reshape(9, c * k)
    return (np.kron(t.G, t.G).astype(w.dtype) @ taps).reshape(t.alpha**2, c, k)


def weight_from(t, M, dtype):
    """``dW`` (K, C, 3, 3) = ``G^T m G`` of every (K, C) from ``M`` (alpha^2, K, C): one GEMM
    of ``(G (x) G)^T`` (9, alpha^2) with M."""
    a2, k, c = M.shape
    dw = (np.kron(t.G, t.G).T.astype(M.dtype) @ M.reshape(a2, k * c)).reshape(3, 3, k, c)
    return np.ascontiguousarray(dw.transpose(2, 3, 0, 1), dtype=dtype)


# ----------------------------------------------------------------------------- blocks
def finite(a) -> bool:
    """Is every value of ``a`` finite? One pairwise sum: it is finite exactly when all are,
    unless it overflows (then a finite result is computed again, directly: correct, slower).
    Its inf - inf or overflow is the answer, not a warning for the user.

    >>> finite(np.array([1.0, 2.0])), finite(np.array([np.inf, -np.inf]))
    (True, False)
    """
    with np.errstate(invalid="ignore", over="ignore"):
        return bool(np.isfinite(a.sum()))


def _tiles(out_hw, m):
    return -(-out_hw[0] // m), -(-out_hw[1] // m)


def _blocks(n, tiles_per_image, bytes_per_tile):
    per = max(1, BLOCK_BYTES // max(1, tiles_per_image * bytes_per_tile), -(-MIN_TILES // max(1, tiles_per_image)))
    return [slice(a, min(n, a + per)) for a in range(0, n, per)]


def _padded(xh, b, padding, shape, buf):
    """Images ``b`` of channels-last ``xh`` at offset ``padding`` in a zeroed block of
    ``shape`` (reusing ``buf``: only the images' region is written, so its zeros stay)."""
    n = b.stop - b.start
    if buf is None or buf.shape[0] < n:
        buf = np.zeros(shape, xh.dtype)
    h, w = xh.shape[1:3]
    ph, pw = padding
    buf[:n, ph : ph + h, pw : pw + w] = xh[b]
    return buf[:n], buf


# ----------------------------------------------------------------------------- the primitives
@np.errstate(invalid="ignore", over="ignore")  # a non-finite result is computed again, directly
def conv2d(x, w, padding, t=None):
    """``conv2d`` at stride 1 for a 3x3 ``w`` (K, C, 3, 3) by F(m x m, 3x3); (N, K, OH, OW)
    laid out channels last in memory, like conv.py's; None if not finite (see the module doc)."""
    t = t or DEFAULT
    a, m = t.alpha, t.m
    n, c, h, wd = x.shape
    k = w.shape[0]
    dtype = np.result_type(x, w)
    oh, ow = h + 2 * padding[0] - 2, wd + 2 * padding[1] - 2
    th, tw = _tiles((oh, ow), m)
    U = kernel_transform(t, w.astype(dtype, copy=False))
    xh = x.transpose(0, 2, 3, 1)
    out = np.empty((n, oh, ow, k), dtype)
    blocks = _blocks(n, th * tw, a * a * c * dtype.itemsize)
    per = blocks[0].stop
    V = np.empty((a * a, per * th * tw, c), dtype)
    M = np.empty((a * a, per * th * tw, k), dtype)
    buf = None
    for b in blocks:
        nb = b.stop - b.start
        xp, buf = _padded(xh, b, padding, (per, m * th + 2, m * tw + 2, c), buf)
        Vb, Mb = V[:, : nb * th * tw], M[:, : nb * th * tw]
        _input_transform(t, xp, (th, tw), Vb.reshape(a, a, nb, th, tw, c))
        np.matmul(Vb, U, out=Mb)  # (alpha^2) BLAS GEMMs (tiles, C) @ (C, K)
        _output_transform(t, Mb.reshape(a, a, nb, th, tw, k), out[b])
    return out.transpose(0, 3, 1, 2) if finite(out) else None


def conv2d_grad_input(g, w, input_shape, padding, t=None):
    """``conv2d_grad_input`` at stride 1: the forward convolution of ``g`` with the kernel
    flipped and its channels swapped, padded by ``2 - padding``."""
    flipped = w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1]
    return conv2d(g, flipped, (2 - padding[0], 2 - padding[1]), t)


@np.errstate(invalid="ignore", over="ignore")  # a non-finite result is computed again, directly
def conv2d_grad_weight(x, g, weight_shape, padding, t=None):
    """``conv2d_grad_weight`` at stride 1 for a 3x3 kernel: ``G^T [sum (A dY A^T) * V] G``,
    the sum over tiles as (m+2)^2 GEMMs (K, tiles) @ (tiles, C) per block of images; None if
    not finite."""
    t = t or DEFAULT
    a, m = t.alpha, t.m
    n, c = x.shape[:2]
    k = weight_shape[0]
    dtype = np.result_type(x, g)
    oh, ow = g.shape[2:]
    th, tw = _tiles((oh, ow), m)
    xh, gh = x.transpose(0, 2, 3, 1), g.transpose(0, 2, 3, 1)
    blocks = _blocks(n, th * tw, a * a * (c + k) * dtype.itemsize)
    per = blocks[0].stop
    V = np.empty((a * a, per * th * tw, c), dtype)
    Gt = np.empty((a * a, per * th * tw, k), dtype)
    acc = np.zeros((a * a, k, c), dtype)
    xbuf = gbuf = None
    for b in blocks:
        nb = b.stop - b.start
        xp, xbuf = _padded(xh, b, padding, (per, m * th + 2, m * tw + 2, c), xbuf)
        gp, gbuf = _padded(gh, b, (0, 0), (per, m * th, m * tw, k), gbuf)
        Vb, Gb = V[:, : nb * th * tw], Gt[:, : nb * th * tw]
        _input_transform(t, xp, (th, tw), Vb.reshape(a, a, nb, th, tw, c))
        _gradient_transform(t, gp, (th, tw), Gb.reshape(a, a, nb, th, tw, k))
        acc += np.matmul(Gb.transpose(0, 2, 1), Vb)  # (alpha^2) BLAS GEMMs (K, tiles) @ (tiles, C)
    dw = weight_from(t, acc, dtype)
    return dw if finite(dw) else None

"""Convolutions for the NumPy backend: im2col + one BLAS GEMM per group, channels last.

Why channels last. The columns matrix (one row per output pixel, one column per
(kernel row, kernel column, input channel)) is a copy of sliding-window views of the padded
input; with the channels innermost each copied run is a whole contiguous channel vector
(KW * C values at dilation 1), not KW scattered numbers, which makes that copy several
times faster. With one channel the runs would be KW values long, so the columns are then
copied a kernel position at a time (runs of OW values) and BLAS gets them transposed.
The GEMM ``columns @ weights.T`` then yields (N*OH*OW, O): the output in
NHWC memory order. It is returned as the (N, O, OH, OW) view of that memory instead of
being copied back to NCHW: elementwise ops lay their results out like their inputs, so a
whole conv -> batch-norm -> ReLU stack stays channels last, and the next convolution's
``transpose(0, 2, 3, 1)`` is free.

Where the weights outweigh the columns (more output channels than output pixels in the
batch: a sample through a deep layer), the forward reads them as they lie instead,
``weights (O, C*KH*KW) @ columns``, and returns NCHW (WEIGHTS_FIRST).

Each runs over blocks of the batch whose columns stay in cache (BLOCK_BYTES); the forward
pass can run an epilogue (``then``: a bias and ReLU, rewrites.py) on each block's output rows
while they are in cache. Layers with narrow, deep products (SPLIT_MAX_CHANNELS,
SPLIT_MIN_DEPTH: ResNet's 64- and 128-channel layers, LeNet's second) run runs of those
blocks on all of BLAS's threads at once, each block's products on one thread, each run
padding its own images (split.py): the same products on the same blocks, so the same bits,
but for the weight gradient, which adds its runs' sums in order.

The backward pass uses the same layout: the input gradient is one GEMM ``g @ weights``
into columns (one GEMM per kernel position for at most 128 channels, so that each
position's columns are contiguous), then col2im adds its k*k kernel-position slices into a
preallocated padded buffer (each add a strided slice over whole channel vectors, or whole
rows of OW * C values per kernel position at stride 1), or, for large stride-1 images,
the forward convolution of ``g`` with the flipped kernel (no col2im); the weight gradient is
one GEMM ``g.T @ columns`` (computed as its transpose for narrow layers).

>>> import numpy as np
>>> x = np.arange(16.0).reshape(1, 1, 4, 4)
>>> conv2d(x, np.ones((1, 1, 2, 2)), stride=(2, 2))[0, 0].tolist()
[[10.0, 18.0], [42.0, 50.0]]
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from . import split, winograd


def _channels_last(x, padding):
    """(N, C, H, W) -> contiguous (N, H + 2ph, W + 2pw, C), padded with zeros (a view when x
    is already channels last in memory and there is no padding)."""
    xh = x.transpose(0, 2, 3, 1)
    ph, pw = padding
    if not (ph or pw):
        # one transposing copy of x (none when it is channels last already) beats gathering
        # the k*k times larger columns from scattered channels
        return np.ascontiguousarray(xh)
    n, h, w, c = xh.shape
    out = np.empty((n, h + 2 * ph, w + 2 * pw, c), dtype=x.dtype)
    # zeros on the border only: the interior is written once, not zeroed first
    out[:, :ph], out[:, ph + h :], out[:, ph : ph + h, :pw], out[:, ph : ph + h, pw + w :] = 0, 0, 0, 0
    out[:, ph : ph + h, pw : pw + w] = xh
    return out


def _out_size(size, k, s, p, d):
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def _columns(xh, kernel, stride, dilation, out_hw):
    """Channels-last padded input (N, HP, WP, C) -> columns (N*OH*OW, KH*KW*C) (a copy, or
    for one channel the transposed view of one)."""
    n, _, _, c = xh.shape
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel, stride, dilation, out_hw
    sn, sy, sx, sc = xh.strides
    win = as_strided(xh, (n, oh, ow, kh, kw, c), (sn, sy * sh, sx * sw, sy * dh, sx * dw, sc), writeable=False)
    if c == 1:
        # runs of KW values are too short for NumPy's copy loop: copy each kernel position's
        # (N, OH, OW) plane instead (runs of OW values), and hand BLAS the transposed view
        planes = np.ascontiguousarray(win[..., 0].transpose(3, 4, 0, 1, 2))
        return planes.reshape(kh * kw, n * oh * ow).T
    try:
        return win.reshape(n * oh * ow, kh * kw * c, copy=False)  # 1x1, stride 1: the input itself
    except TypeError:  # NumPy < 2.1 has no copy=: a view where one exists, else a copy, one thread
        return win.reshape(n * oh * ow, kh * kw * c)
    except ValueError:  # a copy is needed
        return np.ascontiguousarray(win).reshape(n * oh * ow, kh * kw * c)


def _weight_matrix(w):
    """(O, C, KH, KW) -> (O, KH*KW*C), the columns' order."""
    return w.transpose(0, 2, 3, 1).reshape(w.shape[0], -1)


def _rows(g):
    """Output gradient (N, O, OH, OW) -> (N*OH*OW, O): free when g is channels last in memory."""
    n, o, oh, ow = g.shape
    return g.transpose(0, 2, 3, 1).reshape(n * oh * ow, o)


#: Bytes of columns built at a time. A whole batch's columns (75 MB for ResNet-18's first
#: stage at batch 32) go out to memory and come back for the GEMM; a block of images whose
#: columns stay in cache makes the same GEMM on fewer, still large, matrices (measured: the
#: first stage's convolution 40% faster, the deepest ones unchanged), and the peak memory
#: of a convolution is this block, not the batch's columns.
BLOCK_BYTES = 4 << 20
MIN_ROWS = 1024  # keeps each GEMM tall enough to use BLAS's blocking well
#: Bytes of output a forward block makes at most, so that an epilogue (``then``: a bias and
#: ReLU, rewrites.py) finds it in cache; it binds where the output rows are wider than the
#: columns' (few input channels: LeNet's and ResNet's first layers).
OUT_BLOCK_BYTES = 1 << 20


def _blocks(n, rows_per_image, row_bytes):
    """Slices of the batch of ``n`` images whose rows (columns, or output) take about BLOCK_BYTES."""
    per = max(1, BLOCK_BYTES // max(1, rows_per_image * row_bytes), -(-MIN_ROWS // max(1, rows_per_image)))
    return [slice(a, min(n, a + per)) for a in range(0, n, per)]


#: Convolutions whose products are at most this many channels wide (a group's output
#: channels; an input gradient's, its input channels) and at least SPLIT_MIN_DEPTH deep (the
#: products' inner size) run their blocks on all of BLAS's threads at once, each block's
#: products on one thread (split.py). Measured on 2 cores, batch 128, alone: ResNet-18's 3x3
#: layers of 64 channels 0.69-0.74x the time, 128 channels 0.83-0.98x, 512 channels 0.93-1.07x
#: (not split: no gain in the W3 step); LeNet's first layer (one input channel, depth 9) 1.6x.
SPLIT_MAX_CHANNELS = 128
SPLIT_MIN_DEPTH = 64


def _over(run, blocks, width, depth):
    """``run`` over the blocks: split.py's runs of them on all threads for products ``width``
    wide and ``depth`` deep that gain by it (SPLIT_MAX_CHANNELS, SPLIT_MIN_DEPTH), else one run
    of all on the calling thread; the runs' results."""
    narrow = width <= SPLIT_MAX_CHANNELS and depth >= SPLIT_MIN_DEPTH
    return split.each(run, blocks, split.PARTS if narrow else 1)


def _padded_run(x, padding, blocks):
    """The images of a run of blocks channels last and padded (:func:`_channels_last`: on the
    thread that runs them, a run at a time), and each block as ``(its slice of those, its
    slice of the batch)``."""
    if not blocks:  # an empty batch
        return None, []
    first = blocks[0].start
    xh = _channels_last(x[first : blocks[-1].stop], padding)
    return xh, [(slice(b.start - first, b.stop - first), b) for b in blocks]


def _geometry(input_hw, kernel, stride, padding, dilation):
    return tuple(_out_size(input_hw[i], kernel[i], stride[i], padding[i], dilation[i]) for i in range(2))


def conv2d(x, w, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, then=None):
    """The ``conv2d`` primitive: (N, C, H, W) * (O, C/groups, KH, KW) -> (N, O, OH, OW),
    laid out channels last in memory (see the module doc). ``then(rows)``, if given, is
    applied in place to each block of output rows (M, O) right after its GEMMs, while they
    are in cache."""
    wino = winograd.plan(x.shape, w.shape, stride, padding, dilation, groups, np.result_type(x, w))
    # 3x3, stride 1, enough channels: fewer multiplications (winograd.py); None: not finite
    if wino is not None and (y := winograd.conv2d(x, w, padding, wino)) is not None:
        if then is not None:
            then(y.transpose(0, 2, 3, 1).reshape(-1, y.shape[1]))  # channels last: a view
        return y
    n, o = x.shape[0], w.shape[0]
    kernel = w.shape[2:]
    oh, ow = _geometry(x.shape[2:], kernel, stride, padding, dilation)
    if groups == 1 and o >= n * oh * ow * WEIGHTS_FIRST:
        return _weights_first(x, w, stride, padding, dilation, (oh, ow), then)
    cg, og = x.shape[1] // groups, o // groups
    wm = _weight_matrix(w)
    out = np.empty((n, oh, ow, o), dtype=np.result_type(x, w))
    row_bytes = max(wm.shape[1], o * BLOCK_BYTES // OUT_BLOCK_BYTES) * x.itemsize

    def run(blocks):
        xh, blocks = _padded_run(x, padding, blocks)
        for mine, b in blocks:
            rows = out[b].reshape(-1, o)
            for gi in range(groups):
                cols = _columns(xh[mine, ..., gi * cg : (gi + 1) * cg], kernel, stride, dilation, (oh, ow))
                np.matmul(cols, wm[gi * og : (gi + 1) * og].T, out=rows[:, gi * og : (gi + 1) * og])  # BLAS GEMM
            if then is not None:
                then(rows)

    _over(run, _blocks(n, oh * ow, row_bytes), og, wm.shape[1])
    return out.transpose(0, 3, 1, 2)


#: A forward convolution with at least WEIGHTS_FIRST output channels for each output pixel of
#: the batch (a sample through ResNet's deep layers: 512 channels on 4x4 maps) has more weights
#: than columns. The channels-last product above needs the weights as (O, KH*KW*C), a
#: transposing copy of all of them at every call: 1.6 of the 2.7 ms that ResNet-18's 512-channel
#: 3x3 layer took at batch 1 (2-core AMD EPYC, caches evicted between calls as a network's
#: other layers do). :func:`_weights_first` reads the weights as they lie, (O, C*KH*KW), and
#: makes the columns in that order from the NCHW input instead.
WEIGHTS_FIRST = 1


def _weights_first(x, w, stride, padding, dilation, out_hw, then):
    """One group's ``conv2d`` as ``w.reshape(O, C*KH*KW) @ columns (C*KH*KW, N*OH*OW)``: the
    weights in place, the columns copied from the padded NCHW input; the output NCHW for one
    sample (the (N, O, OH, OW) view of (O, N, OH, OW) memory for more). ``then`` gets the
    output rows (N*OH*OW, O) as a view."""
    n, c, _, _ = x.shape
    o, _, kh, kw = w.shape
    (ph, pw), (sh, sw), (dh, dw), (oh, ow) = padding, stride, dilation, out_hw
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw))) if ph or pw else x
    sn, sc, sy, sx = xp.strides
    win = as_strided(xp, (c, kh, kw, n, oh, ow), (sc, sy * dh, sx * dw, sn, sy * sh, sx * sw), writeable=False)
    out = np.matmul(w.reshape(o, -1), win.reshape(c * kh * kw, n * oh * ow))  # BLAS GEMM
    if then is not None:
        then(out.T)
    return out.reshape(o, n, oh, ow).transpose(1, 0, 2, 3)


#: conv2d_grad_weight with at most this many output channels and a kernel of several positions
#: computes the transposed weight matrix, ``columns.T @ g``, which OpenBLAS runs faster than
#: ``g.T @ columns`` for narrow ``g`` and deep columns (measured, this / the other, same bits;
#: whole kernels, one thread: 1 channel in 0.77x, 32 -> 64 0.97x, 64 -> 64 0.93x, 128 -> 128
#: 0.93x, 256 -> 256 1.07x, 512 -> 512 1.70x; the products alone on two threads: K = 288 and
#: 576 with 64 channels 0.88x and 0.93x, but a 1x1 kernel's K = 64 with 128 channels 1.07x).
COLUMNS_FIRST_MAX_CHANNELS = 128


def conv2d_grad_weight(x, g, weight_shape, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    """The ``conv2d_grad_weight`` primitive: ``g.T @ columns`` per group (or its transpose,
    COLUMNS_FIRST_MAX_CHANNELS), summed over blocks of the batch."""
    wino = winograd.plan(x.shape, weight_shape, stride, padding, dilation, groups, np.result_type(x, g))
    if wino is not None and (dw := winograd.conv2d_grad_weight(x, g, weight_shape, padding, wino)) is not None:
        return dw
    o, cg, kh, kw = weight_shape
    og = o // groups
    n, _, oh, ow = g.shape
    gr = _rows(g).reshape(n, oh * ow, o)
    first = o <= COLUMNS_FIRST_MAX_CHANNELS and kh * kw > 1

    def run(blocks):
        xh, blocks = _padded_run(x, padding, blocks)
        out = np.zeros((kh * kw * cg, o) if first else (o, kh * kw * cg), dtype=np.result_type(x, g))
        for mine, b in blocks:
            grb = gr[b].reshape(-1, o)
            for gi in range(groups):
                cols = _columns(xh[mine, ..., gi * cg : (gi + 1) * cg], (kh, kw), stride, dilation, (oh, ow))
                gb, at = grb[:, gi * og : (gi + 1) * og], slice(gi * og, (gi + 1) * og)
                if first:
                    out[:, at] += cols.T @ gb
                else:
                    out[at] += gb.T @ cols
        return out

    out, *rest = _over(run, _blocks(n, oh * ow, kh * kw * cg * x.itemsize), og, kh * kw * cg)
    for part in rest:  # the runs' sums, in order
        out += part
    # laid out like the weight
    return np.ascontiguousarray((out.T if first else out).reshape(o, kh, kw, cg).transpose(0, 3, 1, 2))


#: conv2d_grad_input of a stride-1, one-group convolution on images of at least this many
#: pixels runs as a convolution (measured, 3x3 and 64 channels, one BLAS thread: 32x32 images
#: 0.78x the time of columns + col2im, 16x16 1.00x, 8x8 1.13x, 4x4 1.18x).
AS_CONV_PIXELS = 1024


#: conv2d_grad_input with at most this many channels a group makes one GEMM per kernel
#: position (k*k products of C columns instead of one of k*k*C), so that each position's
#: columns are contiguous and col2im adds whole rows (OW * C values at stride 1) instead of
#: runs of C values, NumPy's inner loop then being too short (measured, one process, the two
#: alternating: 32 channels 0.79x the time, 128 0.90x, 256 0.97x, 512 1.15x).
TAPS_MAX_CHANNELS = 128


def _col2im(target, cols, stride, dilation, out_hw):
    """Add each kernel position's columns ``cols[i, j]`` (B, OH, OW, C) into its strided slice
    of the padded, channels-last ``target`` (B, HP, WP, C)."""
    (sh, sw), (dh, dw), (oh, ow) = stride, dilation, out_hw
    kh, kw = cols.shape[:2]
    for i in range(kh):
        for j in range(kw):
            top, left = i * dh, j * dw
            target[:, top : top + sh * (oh - 1) + 1 : sh, left : left + sw * (ow - 1) + 1 : sw] += cols[i, j]


def conv2d_grad_input(g, w, input_shape, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    """The ``conv2d_grad_input`` primitive: ``g @ weights`` per group into columns (per kernel
    position for few channels, TAPS_MAX_CHANNELS), then col2im: each kernel position's slice
    of the columns added into a padded, channels-last buffer (k*k strided adds per block of
    the batch). Large stride-1 images: a convolution of ``g`` (AS_CONV_PIXELS)."""
    wino = winograd.plan(input_shape, w.shape, stride, padding, dilation, groups, np.result_type(g, w))
    if wino is not None and (dx := winograd.conv2d_grad_input(g, w, input_shape, padding, wino)) is not None:
        return dx
    n, c, h, wd = input_shape
    o, cg, kh, kw = w.shape
    (ph, pw), (dh, dw) = padding, dilation
    if (
        h * wd >= AS_CONV_PIXELS
        and tuple(stride) == (1, 1)
        and groups == 1
        and ph <= dh * (kh - 1)
        and pw <= dw * (kw - 1)
    ):
        # the adjoint of a stride-1 convolution is the full convolution with the kernel
        # flipped and its channel axes swapped: one GEMM with k*k times the depth, no col2im
        flipped = np.ascontiguousarray(w[:, :, ::-1, ::-1].transpose(1, 0, 2, 3))
        return conv2d(g, flipped, padding=(dh * (kh - 1) - ph, dw * (kw - 1) - pw), dilation=dilation)
    og = o // groups
    oh, ow = g.shape[2:]
    gr = _rows(g).reshape(n, oh * ow, o)
    by_tap = 1 < cg <= TAPS_MAX_CHANNELS  # one channel: per position a matrix-vector product, summed otherwise
    if by_tap:  # (groups, KH*KW, O/groups, C/groups): one matrix per kernel position
        wm = np.ascontiguousarray(w.reshape(groups, og, cg, kh * kw).transpose(0, 3, 1, 2))
    else:
        wm = _weight_matrix(w)
    dx = np.zeros((n, h + 2 * ph, wd + 2 * pw, c), dtype=np.result_type(g, w))

    def run(blocks):
        for b in blocks:
            grb = gr[b].reshape(-1, o)
            for gi in range(groups):
                if by_tap:  # BLAS GEMM per kernel position, each position's columns contiguous
                    cols = np.matmul(grb[:, gi * og : (gi + 1) * og], wm[gi]).reshape(kh, kw, -1, oh, ow, cg)
                else:
                    cols = grb[:, gi * og : (gi + 1) * og] @ wm[gi * og : (gi + 1) * og]
                    cols = cols.reshape(-1, oh, ow, kh, kw, cg).transpose(3, 4, 0, 1, 2, 5)
                _col2im(dx[b, ..., gi * cg : (gi + 1) * cg], cols, stride, dilation, (oh, ow))

    _over(run, _blocks(n, oh * ow, kh * kw * cg * dx.itemsize), cg, og)
    return dx[:, ph : ph + h, pw : pw + wd].transpose(0, 3, 1, 2)

"""Operators that fit no larger family: cumulative products, window functions, rotary
embeddings, Einsum, crops, sequence reversal, gated units, bitwise operators and BitCast,
DFT and STFT (host-computed cos/sin matrices times ember matmuls), MelWeightMatrix, Col2Im, MaxUnpool, Det and
TfIdfVectorizer.
"""

from __future__ import annotations

import math

from ... import dtypes as D, primitives as P
from ...tensor import arange, cat, stack, where
from ..reader import DTYPES
from .common import axis, const, filled, ints, movedim, scalar


def cumprod(node, x, ax):
    # exp(cumsum(log|x|)) with the sign from a running count of negatives and zeros kept apart.
    a = axis(int(scalar(ax)), x.ndim)
    rev, excl = node.attr("reverse", 0), node.attr("exclusive", 0)
    y = x.flip(a) if rev else x
    if excl:
        one = y.narrow(a, 0, 1) * 0 + 1
        y = cat([one, y.narrow(a, 0, y.shape[a] - 1)], a)
    f = y if y.dtype.is_floating_point else y.to(D.float64)
    mag = f.abs().log().cumsum(a).exp()
    neg = (f < 0).to(f.dtype).cumsum(a)
    sign = 1 - 2 * (neg - 2 * (neg / 2).floor())
    zero = (f == 0).to(f.dtype).cumsum(a) > 0
    out = where(zero, 0.0, sign * mag)
    out = out.to(x.dtype) if y.dtype.is_floating_point else out.round().to(x.dtype)
    return out.flip(a) if rev else out


def window(node, size):
    n = int(scalar(size))
    dtype = node.dtype(node.attr("output_datatype", 1))
    period = n if node.attr("periodic", 1) else n - 1
    i = arange(n, backend=size.backend).to(D.float64) * (2 * math.pi / period)
    if node.op_type == "HannWindow":
        w = 0.5 - 0.5 * i.cos()
    elif node.op_type == "HammingWindow":
        alpha = 25 / 46
        w = alpha - (1 - alpha) * i.cos()
    else:
        w = 0.42 - 0.5 * i.cos() + 0.08 * (2 * i).cos()
    return w.to(dtype)


def mel_weight_matrix(node, num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz):
    """(dft_length // 2 + 1, num_mel_bins) triangular filters, equally spaced in mel, computed on
    the host from the five scalars (ONNX's formula, including its integer bin edges)."""
    bins, length, rate = int(scalar(num_mel_bins)), int(scalar(dft_length)), scalar(sample_rate)
    lo, hi = (2595 * math.log10(1 + scalar(f) / 700) for f in (lower_edge_hertz, upper_edge_hertz))
    step = (hi - lo) / (bins + 2)
    edges = [int(((length + 1) * 700 * (10 ** ((lo + i * step) / 2595) - 1)) // rate) for i in range(bins + 2)]
    out = [[0.0] * bins for _ in range(length // 2 + 1)]
    for i, (left, center, right) in enumerate(zip(edges, edges[1:], edges[2:])):
        if center == left:
            out[center][i] = 1.0
        for j in range(left, center + 1) if center > left else ():
            out[j][i] = (j - left) / (center - left)
        for j in range(center, right):
            out[j][i] = (right - j) / (right - center)
    return const(out, num_mel_bins, dtype=node.dtype(node.attr("output_datatype", 1)))


def rotary_embedding(node, x, cos, sin, positions=None):
    shape = x.shape
    if x.ndim == 4:
        x = x.permute(0, 2, 1, 3)
    elif x.ndim == 3:
        h = node.attr("num_heads")
        x = x.reshape(shape[0], shape[1], h, shape[2] // h)
    dim = node.attr("rotary_embedding_dim", 0) or x.shape[3]
    rot, rest = x.narrow(3, 0, dim), x.narrow(3, dim, x.shape[3] - dim)
    if positions is not None:
        cos, sin = cos.take(positions, 0), sin.take(positions, 0)
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    half = dim // 2
    if node.attr("interleaved", 0):
        pairs = rot.reshape(*rot.shape[:3], half, 2)
        x1, x2 = pairs.narrow(4, 0, 1).squeeze(4), pairs.narrow(4, 1, 1).squeeze(4)
    else:
        x1, x2 = rot.narrow(3, 0, half), rot.narrow(3, half, half)
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    if node.attr("interleaved", 0):
        rot = cat([real.unsqueeze(4), imag.unsqueeze(4)], 4).reshape(rot.shape)
    else:
        rot = cat([real, imag], 3)
    out = cat([rot, rest], 3)
    return out.reshape(shape) if len(shape) == 3 else out.permute(0, 2, 1, 3)


def center_crop_pad(node, x, shape, dims=None):
    dims = node.attr("axes")
    dims = [axis(a, x.ndim) for a in dims] if dims else list(range(x.ndim))
    for a, want in zip(dims, ints(shape)):
        have = x.shape[a]
        if want < have:
            x = x.narrow(a, (have - want) // 2, want)
        elif want > have:
            lo = (want - have) // 2
            widths = [(0, 0)] * x.ndim
            widths[a] = (lo, want - have - lo)
            x = x.pad(widths)
    return x


def reverse_sequence(node, x, lengths):
    t_ax, b_ax = node.attr("time_axis", 0), node.attr("batch_axis", 1)
    n = x.shape[t_ax]
    shape = [1] * x.ndim
    shape[t_ax] = n
    t = arange(n, backend=x.backend).reshape(shape)
    lshape = [1] * x.ndim
    lshape[b_ax] = x.shape[b_ax]
    length = lengths.to(D.int64).reshape(lshape)
    src = where(t < length, length - 1 - t, t).expand(x.shape)
    return x.gather(t_ax, src)


def einsum(node, *xs):
    # Every operand broadcast over all letters, multiplied, the non-output letters summed.
    spec = node.attr("equation").replace(" ", "")
    lhs, _, rhs = spec.partition("->")
    terms = lhs.split(",")
    letters = []
    shapes = {}
    for term, x in zip(terms, xs):
        if "..." in term:
            k = x.ndim - (len(term) - 3)
            term = term.replace("...", "".join(chr(0x100 + i) for i in range(k)))
        for c, s in zip(term, x.shape):
            shapes[c] = s
            if c not in letters:
                letters.append(c)
    ell = sorted(c for c in letters if ord(c) >= 0x100)
    if not _:
        rhs = "".join(ell) + "".join(sorted(c for c in letters if ord(c) < 0x100 and lhs.count(c) == 1))
    else:
        rhs = rhs.replace("...", "".join(ell))
    order = list(rhs) + [c for c in letters if c not in rhs]
    prod = None
    for term, x in zip(terms, xs):
        if "..." in term:
            k = x.ndim - (len(term) - 3)
            term = term.replace("...", "".join(chr(0x100 + i) for i in range(k)))
        x = _diagonal(x, term)
        term = "".join(dict.fromkeys(term))
        present = [c for c in order if c in term]
        y = x.permute(*[term.index(c) for c in present]) if present else x
        y = y.reshape([shapes[c] if c in term else 1 for c in order])
        prod = y if prod is None else prod * y
    extra = tuple(range(len(rhs), len(order)))
    return prod.sum(extra) if extra else prod


def _diagonal(x, term):
    """Collapse repeated letters of one operand (``ii->i``) to their diagonal."""
    while len(set(term)) < len(term):
        c = next(c for c in term if term.count(c) > 1)
        i, j = term.index(c), term.index(c, term.index(c) + 1)
        n = x.shape[i]
        x = movedim(x, j, i + 1)
        shape = list(x.shape)
        flat = x.reshape(shape[:i] + [n * n] + shape[i + 2 :])
        x = flat.take(arange(n, backend=x.backend) * (n + 1), i)
        term = term[:j] + term[j + 1 :]
    return x


def swiglu(node, a, b=None):
    if b is None:
        half = a.shape[-1] // 2
        a, b = a.narrow(-1, 0, half), a.narrow(-1, half, half)
    return a * (node.attr("alpha", 1.0) * a).sigmoid() * b


# ---------------------------------------------------------------- bitwise
BITWISE = {
    "BitwiseAnd": lambda a, b: a & b,
    "BitwiseOr": lambda a, b: a | b,
    "BitwiseXor": lambda a, b: a ^ b,
    "BitwiseNot": lambda a, b: ~a,
}


def bitwise(node, a, b=None):
    # the bitwise primitives on integers; bool operands take the logical ones (as in torch)
    return BITWISE[node.op_type](a, b)


def bitcast(node, x):
    to = DTYPES.get(node.attr("to"))
    if to is None:
        raise node.error(f"BitCast to element type {node.attr('to')} is not an ember dtype")
    return P.bitcast(x, dtype=to)


# ---------------------------------------------------------------- DFT as a matrix product
def _dft_apply(x, m, axis):
    last = x.ndim - 1
    order = [d for d in range(x.ndim) if d != axis] + [axis]
    y = x.permute(*order) @ m.t()
    back = list(range(x.ndim - 1))
    back.insert(axis, last)
    return y.permute(*back)


def dft(node, x, length=None, ax=None):
    if node.version >= 20:
        a = int(scalar(ax)) if ax is not None else -2
    else:
        a = node.attr("axis", 1)
    a %= x.ndim
    inverse, onesided = node.attr("inverse", 0), node.attr("onesided", 0)
    m = x.shape[a]
    n = int(scalar(length)) if length is not None else (2 * (m - 1) if inverse and onesided else m)
    f = x.to(D.float64)
    re = f.narrow(x.ndim - 1, 0, 1).squeeze(-1)
    im = f.narrow(x.ndim - 1, 1, 1).squeeze(-1) if x.shape[-1] == 2 else None
    ax2 = a  # the axis in re/im (the last dim is gone)
    size = re.shape[ax2]
    keep = n if not (inverse and onesided) else n // 2 + 1
    if size > keep:
        re = re.narrow(ax2, 0, keep)
        im = im.narrow(ax2, 0, keep) if im is not None else None
    elif size < keep:
        widths = [(0, 0)] * re.ndim
        widths[ax2] = (0, keep - size)
        re = re.pad(widths)
        im = im.pad(widths) if im is not None else None
    rows = n // 2 + 1 if onesided and not inverse else n
    cols = keep
    if inverse and onesided:
        w = [1.0 if (k == 0 or (n % 2 == 0 and k == n // 2)) else 2.0 for k in range(cols)]
        c = const(
            [[w[k] * math.cos(2 * math.pi * j * k / n) / n for k in range(cols)] for j in range(n)], re, D.float64
        )
        s = const(
            [[w[k] * math.sin(2 * math.pi * j * k / n) / n for k in range(cols)] for j in range(n)], re, D.float64
        )
        out = _dft_apply(re, c, ax2) - (_dft_apply(im, s, ax2) if im is not None else 0.0)
        return out.unsqueeze(-1).to(x.dtype)
    real, imag = _spectrum(re, im, ax2, n, rows, cols, inverse)
    return stack([real, imag], -1).to(x.dtype)


def _spectrum(re, im, ax, n, rows, cols, inverse=False):
    """(real, imaginary) of the n-point DFT of re + i im along ax: `rows` bins of `cols` inputs."""
    theta = [[2 * math.pi * j * k / n for j in range(cols)] for k in range(rows)]
    c = const([[math.cos(t) for t in row] for row in theta], re, D.float64)
    s = const([[math.sin(t) for t in row] for row in theta], re, D.float64)
    sign = 1.0 if inverse else -1.0
    real, imag = _dft_apply(re, c, ax), sign * _dft_apply(re, s, ax)
    if im is not None:
        real, imag = real - sign * _dft_apply(im, s, ax), imag + _dft_apply(im, c, ax)
    if inverse:
        real, imag = real / n, imag / n
    return real, imag


def stft(node, x, step, window=None, length=None):
    """Frames of the signal, windowed, each through the DFT."""
    hop = int(scalar(step))
    n = int(scalar(length)) if length is not None else window.shape[0]
    size = x.shape[1]
    frames = 1 + (size - n) // hop
    f = x.to(D.float64)
    parts = [f.narrow(1, k * hop, n) for k in range(frames)]
    framed = stack(parts, 1)  # (batch, frames, n, 1 or 2)
    if window is not None:
        framed = framed * window.to(D.float64).reshape(1, 1, -1, 1)
    re = framed.narrow(3, 0, 1).squeeze(3)
    im = framed.narrow(3, 1, 1).squeeze(3) if x.shape[-1] == 2 else None
    rows = n // 2 + 1 if node.attr("onesided", 1) else n
    real, imag = _spectrum(re, im, 2, n, rows, n)
    return stack([real, imag], -1).to(x.dtype)


# ---------------------------------------------------------------- Col2Im, MaxUnpool, Det
def col2im(node, x, image_shape, block_shape):
    image, block = ints(image_shape), ints(block_shape)
    nd = len(image)
    dil = list(node.attr("dilations") or [1] * nd)
    pads = list(node.attr("pads") or [0] * (2 * nd))
    strides = list(node.attr("strides") or [1] * nd)
    padded = [image[i] + pads[i] + pads[i + nd] for i in range(nd)]
    outs = [(padded[i] - (block[i] - 1) * dil[i] - 1) // strides[i] + 1 for i in range(nd)]
    # flat padded-image position of every (kernel offset, block) pair, on the host
    pos = []
    for k in _grid(block):
        row = []
        for o in _grid(outs):
            p = 0
            for i in range(nd):
                p = p * padded[i] + o[i] * strides[i] + k[i] * dil[i]
            row.append(p)
        pos.append(row)
    n, ck, _ = x.shape
    c = ck // math.prod(block)
    total = math.prod(padded)
    vals = x.reshape(n, c, -1)
    idx = const([p for row in pos for p in row], x, D.int64)
    out = filled((n, c, total), 0.0, x).index_add(2, idx, vals)
    out = out.reshape(n, c, *padded)
    for i in range(nd):
        out = out.narrow(2 + i, pads[i], image[i])
    return out


def _grid(sizes):
    out = [()]
    for s in sizes:
        out = [o + (i,) for o in out for i in range(s)]
    return out


def max_unpool(node, x, idx, shape=None):
    kernel = node.attr("kernel_shape")
    nd = len(kernel)
    strides = list(node.attr("strides") or [1] * nd)
    pads = list(node.attr("pads") or [0] * (2 * nd))
    default = list(x.shape[:2]) + [
        (x.shape[2 + i] - 1) * strides[i] + kernel[i] - pads[i] - pads[i + nd] for i in range(nd)
    ]
    out = ints(shape) if shape is not None else default
    flat = idx.reshape(-1).to(D.int64)
    if out != default:
        # The indices count positions in the default shape: re-address them in `out`.
        pos, rest = None, flat
        for d in range(len(default) - 1, -1, -1):
            coord = rest % default[d]
            rest = rest // default[d]
            term = coord * math.prod(out[d + 1 :])
            pos = term if pos is None else pos + term
        flat = pos
    values = filled((math.prod(out),), 0.0, x).index_add(0, flat, x.reshape(-1))
    return values.reshape(out)


def det(node, x):
    # Laplace expansion along the first row: fine for the small matrices ONNX models use.
    n = x.shape[-1]
    if n == 1:
        return x[..., 0, 0]
    if n > 6:
        raise node.error(f"Det of {n}x{n} matrices needs an LU primitive, which ember lacks")
    total = None
    for j in range(n):
        cols = const([c for c in range(n) if c != j], x, D.int64)
        minor = x.narrow(-2, 1, n - 1).take(cols, x.ndim - 1)
        term = x[..., 0, j] * det(node, minor) * (1 if j % 2 == 0 else -1)
        total = term if total is None else total + term
    return total


# ---------------------------------------------------------------- TfIdfVectorizer
def _ngrams(node):
    """(output index, tokens) of every n-gram in the pool, by ngram_counts' start offsets."""
    pool = list(node.attr("pool_int64s") or node.attr("pool_strings") or [])  # ints, or str (ember.string input)
    starts = list(node.attr("ngram_counts"))
    index = iter(node.attr("ngram_indexes"))
    out = []
    for n, start in enumerate(starts, 1):
        end = starts[n] if n < len(starts) else len(pool)
        for at in range(start, end, n):
            out.append((next(index), pool[at : at + n]))
    return out


def tfidf(node, x):
    # Each n-gram's count is a sum of elementwise matches over shifted slices (skip-grams
    # included): no trie, no host reads.
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    length = rows.shape[1]
    lo, hi = node.attr("min_gram_length"), node.attr("max_gram_length")
    skips = node.attr("max_skip_count", 0)
    grams = _ngrams(node)
    width = max(i for i, _ in grams) + 1
    columns = [filled((rows.shape[0],), 0.0, rows, D.float32) for _ in range(width)]
    for out, tokens in grams:
        n = len(tokens)
        if not lo <= n <= hi:
            continue
        for d in range(1, (skips + 1 if n > 1 else 1) + 1):
            span = (n - 1) * d
            if span >= length:
                break
            hit = None
            for k, tok in enumerate(tokens):
                m = rows.narrow(1, k * d, length - span) == tok
                hit = m if hit is None else hit & m
            columns[out] = columns[out] + hit.to(D.float32).sum(1)
    counts = stack(columns, 1)
    weights = node.attr("weights")
    mode = node.attr("mode")
    if mode == "IDF":
        counts = (counts > 0).to(D.float32)
    if mode in ("IDF", "TFIDF") and weights:
        w = [0.0] * width
        for (out, _), v in zip(grams, weights):
            w[out] = v
        counts = counts * const(w, counts, D.float32)
    return counts.reshape(-1) if x.ndim == 1 else counts


OPS = {
    "CumProd": (cumprod, 26),
    "HannWindow": (window, 17),
    "HammingWindow": (window, 17),
    "BlackmanWindow": (window, 17),
    "RotaryEmbedding": (rotary_embedding, 23),
    "CenterCropPad": (center_crop_pad, 18),
    "ReverseSequence": (reverse_sequence, 10),
    "Einsum": (einsum, 12),
    "SwiGLU": (swiglu, 28),
    "BitwiseAnd": (bitwise, 18),
    "BitwiseOr": (bitwise, 18),
    "BitwiseXor": (bitwise, 18),
    "BitwiseNot": (bitwise, 18),
    "BitCast": (bitcast, 26),
    "DFT": (dft, 17),
    "MelWeightMatrix": (mel_weight_matrix, 17),
    "STFT": (stft, 17),
    "Col2Im": (col2im, 18),
    "MaxUnpool": (max_unpool, 9),
    "Det": (det, 11),
    "TfIdfVectorizer": (tfidf, 9),
}

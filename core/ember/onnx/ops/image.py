"""Image geometry: Resize (and the older Upsample); and ImageDecoder, which hands the encoded
bytes to Pillow (optional: the decoders are C libraries ember does not carry).

Resizing is separable and linear in the data: along each resized axis the output is a fixed
(out × in) matrix of interpolation weights times the input. The weights depend only on shapes
and attributes, so they are computed on the host (as ONNX's reference computes them) and the
data moves through one ember matmul per axis — nearest, linear and cubic alike.
"""

from __future__ import annotations

import math

from ... import dtypes as D
from .common import const, filled, ints, movedim


# ---------------------------------------------------------------- 1-d interpolation weights
def _nearest(mode):
    def coeffs(ratio, scale):
        if float(ratio).is_integer():
            return [0.0, 1.0]
        up = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5, "floor": False, "ceil": True}[mode]
        return [0.0, 1.0] if up else [1.0, 0.0]

    return coeffs


def _linear(ratio, scale):
    return [1 - ratio, ratio]


def _linear_antialias(ratio, scale):
    scale = min(scale, 1.0)
    start = int(math.floor(-1 / scale) + 1)
    c = [max(0.0, min(1.0, 1 - abs((i - ratio) * scale))) for i in range(start, 2 - start)]
    return [v / sum(c) for v in c]


def _cubic(a):
    def coeffs(ratio, scale):
        r, s = ratio, 1 - ratio
        return [
            ((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
            ((a + 2) * r - (a + 3)) * r * r + 1,
            ((a + 2) * s - (a + 3)) * s * s + 1,
            ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a,
        ]

    return coeffs


def _cubic_antialias(a):
    def coeffs(ratio, scale):
        scale = min(scale, 1.0)

        def k(x):
            x = abs(x)
            if x <= 1:
                return (a + 2) * x**3 - (a + 3) * x**2 + 1
            return a * x**3 - 5 * a * x**2 + 8 * a * x - 4 * a if x < 2 else 0.0

        start = int(math.floor(-2 / scale) + 1)
        c = [k(scale * (i - ratio)) for i in range(start, 2 - start)]
        return [v / sum(c) for v in c]

    return coeffs


def _source(mode, y, scale, n_in, n_out, roi):
    """Output position y → source coordinate, and whether it lies outside (tf_crop_and_resize)."""
    out_w = scale * n_in
    if mode == "align_corners":
        return (0.0 if out_w == 1 else y * (n_in - 1) / (out_w - 1)), False
    if mode == "asymmetric":
        return y / scale, False
    if mode == "tf_crop_and_resize":
        x = (
            (roi[1] - roi[0]) * (n_in - 1) / 2 if out_w == 1 else y * (roi[1] - roi[0]) * (n_in - 1) / (out_w - 1)
        ) + roi[0] * (n_in - 1)
        return x, x < 0 or x > n_in - 1
    if mode == "pytorch_half_pixel":
        return (-0.5 if out_w == 1 else (y + 0.5) / scale - 0.5), False
    if mode == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / out_w)
        return offset + (y + 0.5) / scale - 0.5, False
    return (y + 0.5) / scale - 0.5, False  # half_pixel


def weights(n_in, n_out, scale, coeffs, mode, roi, exclude_outside):
    """(rows of weights per output position, outside flags) as nested lists."""
    rows, outside = [], []
    for y in range(n_out):
        x, out = _source(mode, float(y), scale, n_in, n_out, roi)
        base = math.floor(x)
        ratio = 1.0 if x == base else x - base
        c = list(coeffs(ratio, scale))
        n = len(c)
        pad = math.ceil(n / 2)
        xp = x + pad
        p = math.floor(xp)
        frac = xp - p
        if n % 2 == 0:
            start = p + (-(n // 2) if frac == 0 else -(n // 2) + 1)
        else:
            start = p - (n - 1) // 2 + (0 if frac <= 0.5 else 1)
        idx = [start + i - pad for i in range(n)]
        if exclude_outside:
            c = [0.0 if (j < 0 or j >= n_in) else v for v, j in zip(c, idx)]
            total = sum(c) or 1.0
            c = [v / total for v in c]
        row = [0.0] * n_in
        for v, j in zip(c, idx):
            row[min(max(j, 0), n_in - 1)] += v
        rows.append([0.0] * n_in if out else row)
        outside.append(out)
    return rows, outside


# ---------------------------------------------------------------- the operator
def _coeffs(node):
    mode = node.attr("mode", "nearest")
    if mode == "nearest":
        return _nearest(node.attr("nearest_mode", "round_prefer_floor"))
    a = node.attr("cubic_coeff_a", -0.75)
    if mode == "cubic":
        return _cubic_antialias(a) if node.attr("antialias", 0) else _cubic(a)
    return _linear_antialias if node.attr("antialias", 0) else _linear


def _geometry(node, x, roi, scales, sizes):
    r = x.ndim
    axes = [a + r if a < 0 else a for a in (node.attr("axes") or range(r))]
    roi_full = None
    if roi:
        roi_full = [0.0] * r + [1.0] * r
        for i, d in enumerate(axes):
            roi_full[d], roi_full[r + d] = roi[i], roi[len(axes) + i]
    if sizes:
        scale = [1.0] * r
        out = list(x.shape)
        for i, d in enumerate(axes):
            scale[d], out[d] = sizes[i] / x.shape[d], sizes[i]
        policy = node.attr("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            s = (min if policy == "not_larger" else max)(scale[d] for d in axes)
            scale = [s if d in axes else 1.0 for d in range(r)]
            out = [int(s * x.shape[d] + 0.5) if d in axes else x.shape[d] for d in range(r)]
    else:
        scale = [1.0] * r
        for i, d in enumerate(axes):
            scale[d] = scales[i]
        out = [int(scale[d] * x.shape[d]) for d in range(r)]
    return axes, scale, out, roi_full


def _along(x, axis, w):
    """Apply weight matrix w (out, in) along `axis`."""
    last = x.ndim - 1
    return movedim(movedim(x, axis, last) @ w.t(), last, axis)


def resize_to(node, x, scale, out, roi, axes):
    coeffs = _coeffs(node)
    mode = node.attr("coordinate_transformation_mode", "half_pixel")
    extrap = node.attr("extrapolation_value", 0.0)
    y = x.to(D.float64)
    r = x.ndim
    for d in axes:
        axis_roi = [roi[d], roi[d + r]] if roi else None
        if (
            math.isclose(scale[d], 1.0)
            and out[d] == x.shape[d]
            and (axis_roi is None or (math.isclose(axis_roi[0], 0) and math.isclose(axis_roi[1], 1)))
        ):
            continue
        rows, outside = weights(x.shape[d], out[d], scale[d], coeffs, mode, axis_roi, node.attr("exclude_outside", 0))
        y = _along(y, d, const(rows, y, D.float64))
        if any(outside):
            shape = [1] * r
            shape[d] = out[d]
            mask = const(outside, y).reshape(shape)
            from ...tensor import where

            y = where(mask, float(extrap), y)
    if x.dtype.is_floating_point:
        return y.to(x.dtype)
    return y.round().to(x.dtype) if node.attr("mode", "nearest") != "nearest" else y.to(x.dtype)


def resize(node, x, roi=None, scales=None, sizes=None):
    if node.version < 11:  # Resize-10: (X, scales), Upsample's coordinates
        roi, scales, sizes, node = None, roi, None, _Legacy(node)
    roi_v = [float(v) for v in roi.reshape(-1).tolist()] if roi is not None and roi.numel() else None
    scales_v = [float(v) for v in scales.reshape(-1).tolist()] if scales is not None and scales.numel() else None
    sizes_v = ints(sizes) if sizes is not None and sizes.numel() else None
    axes, scale, out, roi_full = _geometry(node, x, roi_v, scales_v, sizes_v)
    return resize_to(node, x, scale, out, roi_full, axes)


LEGACY = {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}


class _Legacy:
    """A Resize-10 or Upsample node seen as a Resize: asymmetric coordinates, floor for nearest."""

    def __init__(self, node):
        self.node = node

    def attr(self, name, default=None):
        return self.node.attr(name, LEGACY.get(name, default))


def upsample(node, x, scales=None):
    s = node.attr("scales") if scales is None else [float(v) for v in scales.tolist()]
    node = _Legacy(node)
    out = [int(x.shape[d] * s[d]) for d in range(x.ndim)]
    return resize_to(node, x, list(s), out, None, list(range(x.ndim)))


# ---------------------------------------------------------------- GridSample
def _reflect(x, lo, hi):
    """Fold coordinates outside [lo, hi] back in by reflecting at the borders."""
    from ...tensor import where

    rng = hi - lo

    def laps(dx):  # (whole widths travelled is even, the remainder)
        n = (dx / rng).floor()
        return (n - 2 * (n / 2).floor()) == 0, dx - n * rng

    even_b, rb = laps(lo - x)
    even_a, ra = laps(x - hi)
    below = where(even_b, lo + rb, hi - rb)
    above = where(even_a, hi - ra, lo + ra)
    return where(x < lo, below, where(x > hi, above, x))


def _cubic_w(t):
    a = -0.75
    return [
        ((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
        ((a + 2) * t - (a + 3)) * t * t + 1,
        ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1,
        ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a,
    ]


def grid_sample(node, x, grid):
    from ...tensor import where

    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(node.attr("mode", "linear"), node.attr("mode", "linear"))
    padding, align = node.attr("padding_mode", "zeros"), node.attr("align_corners", 0)
    n, c = x.shape[:2]
    dims = list(x.shape[2:])
    nd = len(dims)
    out_sp = list(grid.shape[1:-1])
    g = grid.to(D.float64).reshape(n, -1, nd)
    lo = [0.0 if align else -0.5 for _ in dims]
    hi = [d - 1.0 if align else d - 0.5 for d in dims]
    coords = []
    for i, d in enumerate(dims):
        v = g.narrow(2, nd - 1 - i, 1).squeeze(2)
        v = (v + 1) / 2 * (d - 1) if align else ((v + 1) * d - 1) / 2
        if mode == "nearest":
            from .elementwise import _round_half_even

            v = _round_half_even(v)
        if padding == "border":
            v = where((v < lo[i]) | (v > hi[i]), v.clamp(0, d - 1), v)
        elif padding == "reflection":
            v = _reflect(v, lo[i], hi[i])
        coords.append(v)
    # Per dim: (integer index, weight) taps.
    taps = []
    for v in coords:
        if mode == "nearest":
            taps.append([(v, None)])
            continue
        base = v.floor()
        t = v - base
        if mode == "linear":
            taps.append([(base, 1 - t), (base + 1, t)])
        else:
            taps.append([(base + k - 1, w) for k, w in enumerate(_cubic_w(t))])
    flat = x.reshape(n, c, -1)
    total = None
    for combo in _combos(taps):
        index, valid, weight = None, None, None
        stride = 1
        for i in range(nd - 1, -1, -1):
            idx, w = combo[i]
            d = dims[i]
            if padding == "zeros":
                ok = (idx >= 0) & (idx <= d - 1)
                valid = ok if valid is None else valid & ok
                idx = idx.clamp(0, d - 1)
            elif padding == "border":
                idx = idx.clamp(0, d - 1)
            else:
                idx = _reflect(idx, lo[i], hi[i])
                idx = (idx.sign() * idx.abs().floor()).clamp(0, d - 1)
            term = idx.to(D.int64) * stride
            index = term if index is None else index + term
            stride *= d
            if w is not None:
                weight = w if weight is None else weight * w
        px = flat.gather(2, index.unsqueeze(1).expand(n, c, index.shape[1])).to(D.float64)
        if valid is not None:
            px = where(valid.unsqueeze(1), px, 0.0)
        part = px * weight.unsqueeze(1) if weight is not None else px
        total = part if total is None else total + part
    return total.reshape(n, c, *out_sp).to(x.dtype)


def _combos(taps):
    out = [[]]
    for t in taps:
        out = [o + [p] for o in out for p in t]
    return out


def affine_grid(node, theta, size):
    from ...tensor import arange, stack

    shape = ints(size)
    n, sp = shape[0], shape[2:]
    align = node.attr("align_corners", 0)
    axes = []
    for d in sp:
        i = arange(d, backend=theta.backend).to(D.float64)
        axes.append((2 * i / (d - 1) - 1) if align and d > 1 else ((2 * i + 1) / d - 1) if not align else i * 0)
    # base grid (..., nd + 1): x (last spatial dim) first, then y (, z), then 1.
    nd = len(sp)
    grids = []
    for k in range(nd):
        dim = nd - 1 - k
        view = [1] * nd
        view[dim] = sp[dim]
        grids.append(axes[dim].reshape(view).expand(*sp))
    grids.append(grids[0] * 0 + 1)
    base = stack(grids, -1).reshape(-1, nd + 1)
    out = base.unsqueeze(0) @ theta.to(D.float64).permute(0, 2, 1)
    return out.reshape(n, *sp, nd).to(theta.dtype)


# ---------------------------------------------------------------- NonMaxSuppression
def _suppression(boxes, centered, threshold):
    """(N, N) bool: box j is suppressed by box i (ONNX's rules: positive areas, IoU > threshold)."""
    cols = [boxes.narrow(1, k, 1).squeeze(1) for k in range(4)]
    if centered:
        xc, yc, w, h = cols
        x0, x1, y0, y1 = xc - w / 2, xc + w / 2, yc - h / 2, yc + h / 2
    else:
        a, b, c, d = cols
        y0, y1, x0, x1 = a.minimum(c), a.maximum(c), b.minimum(d), b.maximum(d)
    iw = x1.unsqueeze(1).minimum(x1.unsqueeze(0)) - x0.unsqueeze(1).maximum(x0.unsqueeze(0))
    ih = y1.unsqueeze(1).minimum(y1.unsqueeze(0)) - y0.unsqueeze(1).maximum(y0.unsqueeze(0))
    inter = iw * ih
    area = (x1 - x0) * (y1 - y0)
    union = area.unsqueeze(1) + area.unsqueeze(0) - inter
    ok = (iw > 0) & (ih > 0) & (area.unsqueeze(1) > 0) & (area.unsqueeze(0) > 0) & (union > 0)
    from ...tensor import where

    return ok & (inter / where(ok, union, 1.0) > threshold)


def non_max_suppression(node, boxes, scores, max_out=None, iou=None, score_min=None):
    # Greedy, as the reference: the best remaining box is kept, the boxes it overlaps dropped.
    # Each step reads one index to the host: the output's length depends on the values.
    from ...tensor import arange, where
    from .common import scalar

    limit = max(int(scalar(max_out, 0)), 0)
    threshold = float(scalar(iou, 0.0))
    floor_ = scalar(score_min)
    picked = []
    n_batch, n_class, n = scores.shape
    for b in range(n_batch):
        suppress = _suppression(boxes[b].to(D.float64), node.attr("center_point_box", 0), threshold)
        for c in range(n_class):
            s = scores[b, c].to(D.float64)
            live = s > floor_ if floor_ is not None else filled(s.shape, True, s, D.bool_)
            kept = 0
            while kept < limit:
                masked = where(live, s, float("-inf"))
                i = int(masked.argmax().item())
                if not bool(live[i].item()):
                    break
                picked.append([b, c, i])
                kept += 1
                live = live & ~suppress[i] & (arange(n, backend=s.backend) != i)
    if not picked:
        return filled((0, 3), 0, boxes, D.int64)
    return const(picked, boxes, D.int64)


# ---------------------------------------------------------------- RoiAlign
def _roi_samples(h, w, ph, pw, gh, gw, start_h, start_w, bin_h, bin_w):
    """Per sample (bin by bin, then grid point): four flat positions and bilinear weights."""
    pos, wts = [[] for _ in range(4)], [[] for _ in range(4)]
    for by in range(ph):
        for bx in range(pw):
            for iy in range(gh):
                y = start_h + by * bin_h + (iy + 0.5) * bin_h / gh
                for ix in range(gw):
                    x = start_w + bx * bin_w + (ix + 0.5) * bin_w / gw
                    if y < -1.0 or y > h or x < -1.0 or x > w:
                        corners = [(0, 0.0)] * 4
                    else:
                        y, x = max(y, 0.0), max(x, 0.0)
                        y0, x0 = int(y), int(x)
                        y1, x1 = y0 + 1, x0 + 1
                        if y0 >= h - 1:
                            y0 = y1 = h - 1
                            y = float(y0)
                        if x0 >= w - 1:
                            x0 = x1 = w - 1
                            x = float(x0)
                        ly, lx = y - y0, x - x0
                        corners = [
                            (y0 * w + x0, (1 - ly) * (1 - lx)),
                            (y0 * w + x1, (1 - ly) * lx),
                            (y1 * w + x0, ly * (1 - lx)),
                            (y1 * w + x1, ly * lx),
                        ]
                    for k, (p, wt) in enumerate(corners):
                        pos[k].append(p)
                        wts[k].append(wt)
    return pos, wts


def roi_align(node, x, rois, batch):
    # The ROIs fix the sampling grid (its size too, with sampling_ratio 0), so they are read to
    # the host; the feature map is gathered on the backend.
    from ...tensor import stack

    ph, pw = node.attr("output_height", 1), node.attr("output_width", 1)
    ratio, scale = node.attr("sampling_ratio", 0), node.attr("spatial_scale", 1.0)
    half = node.attr("coordinate_transformation_mode", "half_pixel") == "half_pixel"
    mode = node.attr("mode", "avg")
    c, h, w = x.shape[1:]
    out = []
    for box, b in zip(rois.tolist(), ints(batch)):
        off = 0.5 if half else 0.0
        x0, y0, x1, y1 = (v * scale - off for v in box[:4])
        rw, rh = x1 - x0, y1 - y0
        if not half:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        gh = ratio if ratio > 0 else math.ceil(rh / ph)
        gw = ratio if ratio > 0 else math.ceil(rw / pw)
        pos, wts = _roi_samples(h, w, ph, pw, gh, gw, y0, x0, rh / ph, rw / pw)
        plane = x[b].reshape(c, h * w)
        taps = [plane.take(const(p, x, D.int64), 1) * const(wt, x, x.dtype) for p, wt in zip(pos, wts)]
        if mode == "avg":
            v = (taps[0] + taps[1] + taps[2] + taps[3]).reshape(c, ph, pw, -1).sum(3) / max(gh * gw, 1)
        else:
            v = taps[0].maximum(taps[1]).maximum(taps[2]).maximum(taps[3]).reshape(c, ph, pw, -1).amax(3)
        out.append(v)
    return stack(out, 0).to(x.dtype)


def image_decoder(node, encoded):
    """(H, W, 3) RGB or BGR, or (H, W, 1) grayscale uint8 pixels of an encoded image (JPEG, PNG,
    BMP, TIFF, WebP, JPEG 2000, PNM: what the installed Pillow reads)."""
    try:
        import PIL.Image
    except ImportError:
        raise node.error("ImageDecoder needs Pillow (pip install pillow), which is not installed here") from None
    import io

    fmt = node.attr("pixel_format", "RGB")
    if fmt not in ("RGB", "BGR", "Grayscale"):
        raise node.error(f"pixel_format {fmt!r} is not one of RGB, BGR, Grayscale")
    try:
        image = PIL.Image.open(io.BytesIO(bytes(encoded.reshape(-1).tolist())))
        image = image.convert("L" if fmt == "Grayscale" else "RGB")
    except (OSError, ValueError) as err:
        raise node.error(f"the bytes are not an image Pillow can decode ({err})") from None
    w, h = image.size
    pixels = const(list(image.tobytes()), encoded, D.uint8).reshape(h, w, -1)
    return pixels.flip(2) if fmt == "BGR" else pixels


OPS = {
    "Resize": (resize, 10),
    "NonMaxSuppression": (non_max_suppression, 10),
    "Upsample": (upsample, 7, 9),
    "GridSample": (grid_sample, 16),
    "AffineGrid": (affine_grid, 20),
    "RoiAlign": (roi_align, 10),
    "ImageDecoder": (image_decoder, 20),
}

"""Resizing: ``interpolate`` (nearest, linear, bilinear), one spatial dim at a time.

Both modes are separable, so each spatial dim is resized on its own: nearest picks source
rows (a ``take``), linear blends two picked rows with weights computed on the host. The
source coordinates follow torch's kernels exactly, in float32 where torch computes in float32
(nearest), so the picked rows agree with torch's at every size.
"""

from __future__ import annotations

import math
import struct

from ...errors import DTypeError, ShapeError, located
from ...tensor import tensor

#: mode -> the input ranks it takes (N, C, *spatial)
MODES = {"nearest": (3, 4), "linear": (3,), "bilinear": (4,)}


def _f32(v: float) -> float:
    """``v`` rounded to float32 (torch's nearest computes its coordinates in float)."""
    return struct.unpack("f", struct.pack("f", v))[0]


def _scale(size_in, size_out, scale_factor, align_corners):
    """How far apart the source coordinates of neighbouring outputs are (torch's
    ``area_pixel_compute_scale``): the user's scale factor when given, else the size ratio."""
    if align_corners:
        return (size_in - 1) / (size_out - 1) if size_out > 1 else 0.0
    return 1.0 / scale_factor if scale_factor else size_in / size_out


def nearest_indices(size_in, size_out, scale_factor=None):
    """Source index of each output position: ``floor(i * scale)`` in float32, clamped.

    >>> nearest_indices(3, 7)
    [0, 0, 0, 1, 1, 2, 2]
    """
    if size_out == size_in:
        return list(range(size_out))
    scale = _f32(_scale(size_in, size_out, scale_factor, False))
    return [min(int(math.floor(_f32(i * scale))), size_in - 1) for i in range(size_out)]


def linear_weights(size_in, size_out, scale_factor=None, align_corners=False):
    """``(lo, hi, w_hi)``: each output blends rows ``lo`` and ``hi`` as ``(1 - w_hi, w_hi)``.

    >>> linear_weights(2, 4, align_corners=True)
    ([0, 0, 0, 1], [1, 1, 1, 1], [0.0, 0.3333333333333333, 0.6666666666666666, 0.0])
    """
    if size_out == size_in:
        return list(range(size_in)), list(range(size_in)), [0.0] * size_in
    scale = _scale(size_in, size_out, scale_factor, align_corners)
    lo, hi, w = [], [], []
    for i in range(size_out):
        src = scale * i if align_corners else max(scale * (i + 0.5) - 0.5, 0.0)
        i0 = int(src)
        lo.append(i0)
        hi.append(i0 + 1 if i0 < size_in - 1 else i0)
        w.append(min(max(src - i0, 0.0), 1.0))
    return lo, hi, w


def _sizes(x, size, scale_factor, n):
    """Output sizes and per-dim scale factors (None where the size was given)."""
    if (size is None) == (scale_factor is None):
        raise located(ValueError, "interpolate: give exactly one of size and scale_factor")
    if size is not None:
        out = (size,) * n if isinstance(size, int) else tuple(int(s) for s in size)
        if len(out) != n:
            raise located(ValueError, f"interpolate: size {size} needs {n} values for input of shape {x.shape}")
        return out, (None,) * n
    scales = (float(scale_factor),) * n if isinstance(scale_factor, (int, float)) else tuple(map(float, scale_factor))
    if len(scales) != n:
        raise located(
            ValueError, f"interpolate: scale_factor {scale_factor} needs {n} values for input of shape {x.shape}"
        )
    return tuple(int(math.floor(s * f)) for s, f in zip(x.shape[2:], scales)), scales


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None, recompute_scale_factor=None):
    """Resize (N, C, L) or (N, C, H, W) to ``size`` or by ``scale_factor``, as torch does.

    Modes: ``'nearest'`` (3-d and 4-d), ``'linear'`` (3-d), ``'bilinear'`` (4-d), with
    ``align_corners`` False (pixel centres, the default) or True (corner pixels line up).
    ``recompute_scale_factor=True`` computes the coordinates from the sizes, not the factor.

    >>> import ember
    >>> interpolate(ember.tensor([[[1.0, 2.0]]]), scale_factor=2).tolist()
    [[[1.0, 1.0, 2.0, 2.0]]]
    >>> interpolate(ember.tensor([[[1.0, 2.0]]]), size=3, mode="linear", align_corners=True).tolist()
    [[[1.0, 1.5, 2.0]]]
    """
    if mode not in MODES:
        raise located(NotImplementedError, f"interpolate: mode {mode!r} is not supported; ember has {', '.join(MODES)}")
    if input.ndim not in MODES[mode]:
        raise located(
            ShapeError,
            f"interpolate: mode {mode!r} needs input of {' or '.join(map(str, MODES[mode]))} "
            f"dims (N, C, ...), got shape {input.shape}",
        )
    if mode != "nearest" and not input.dtype.is_floating_point:
        raise located(
            DTypeError, f"interpolate: mode {mode!r} blends values, so it needs a float input, got {input.dtype}"
        )
    if mode == "nearest" and align_corners is not None:
        raise located(ValueError, "interpolate: align_corners only goes with the linear modes, not 'nearest'")
    n = input.ndim - 2
    out_sizes, scales = _sizes(input, size, scale_factor, n)
    if min(out_sizes) <= 0:
        raise located(ShapeError, f"interpolate: input {input.shape} gives an empty output {out_sizes}")
    if recompute_scale_factor:
        scales = (None,) * n
    out = input
    for d in range(n):
        axis, s_in, s_out = 2 + d, input.shape[2 + d], out_sizes[d]
        if mode == "nearest":
            out = out.take(nearest_indices(s_in, s_out, scales[d]), axis)
            continue
        lo, hi, w = linear_weights(s_in, s_out, scales[d], bool(align_corners))
        w_hi = tensor(w, dtype=input.dtype, backend=input._backend).reshape((s_out,) + (1,) * (n - 1 - d))
        a = out.take(lo, axis)
        out = a + (out.take(hi, axis) - a) * w_hi
    return out

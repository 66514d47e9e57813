"""Quantization operators on 2- to 16-bit integers, float8 and float4 (and int32 accumulators): QuantizeLinear,
DequantizeLinear, DynamicQuantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv.

Integer products are computed in float64 (exact for 8-bit operands and the sums ONNX's cases
make) and cast back; rounding is half to even, as ONNX specifies.
"""

from __future__ import annotations

from ... import dtypes as D
from ...tensor import where
from .elementwise import _round_half_even, cast_to
from .nn import conv


def _along(node, s, x):
    """Scale/zero point s broadcast against x: scalar, per axis, or per block along the axis."""
    if s.numel() == 1:  # one value, per tensor (also a (1,) one beside a 1-d x, where axis 1 is no axis)
        return s.reshape([])
    a = node.attr("axis", 1)
    a = a + x.ndim if a < 0 else a
    block = node.attr("block_size", 0)
    if block:
        s = s.unsqueeze(a + 1).expand(*s.shape[: a + 1], block, *s.shape[a + 1 :])
        s = s.reshape(*s.shape[:a], s.shape[a] * block, *s.shape[a + 2 :]).narrow(a, 0, x.shape[a])
        return s
    shape = [1] * x.ndim
    shape[a] = -1
    return s.reshape(shape)


def _saturate(y, dtype):
    lo, hi = D.int_range(dtype) if dtype.kind in "iu" else (None, None)
    return y.clamp(lo, hi).to(dtype)


def quantize(node, x, scale, zp=None):
    dtype = zp.dtype if zp is not None else node.dtype(node.attr("output_dtype", 2) or 2)
    if dtype in D.FLOAT8 or dtype is D.float4_e2m1fn:  # rounds as the cast does, not to an integer
        y = x.to(D.float32) / _along(node, scale, x).to(D.float32)
        return cast_to(node, y + _along(node, zp, x).to(D.float32) if zp is not None else y, dtype)
    y = _round_half_even(x.to(D.float32) / _along(node, scale, x).to(D.float32))
    if zp is not None:
        y = y + _along(node, zp, x).to(D.float32)
    return _saturate(y, dtype)


def dequantize(node, x, scale, zp=None):
    y = x.to(D.float32)
    if zp is not None:
        y = y - _along(node, zp, x).to(D.float32)
    return (y * _along(node, scale, x).to(D.float32)).to(scale.dtype)


def dynamic_quantize(node, x):
    lo, hi = x.amin().minimum(0.0 * x.amin()), x.amax().maximum(0.0 * x.amax())
    scale = (hi - lo) / 255
    zp = _saturate(_round_half_even(-lo / scale), D.uint8)
    y = _saturate(_round_half_even(x / scale) + zp.to(x.dtype), D.uint8)
    return y, scale, zp


def _centered(x, zp, axis_len=None):
    y = x.to(D.float64)
    if zp is not None:
        z = zp.to(D.float64)
        y = y - (z.reshape(-1, 1) if z.ndim == 1 and z.numel() > 1 and axis_len else z)
    return y


def matmul_integer(node, a, b, azp=None, bzp=None):
    a64 = a.to(D.float64) - (
        azp.to(D.float64).reshape(-1, 1)
        if azp is not None and azp.ndim == 1 and azp.numel() > 1
        else (azp.to(D.float64) if azp is not None else 0.0)
    )
    b64 = b.to(D.float64) - (bzp.to(D.float64) if bzp is not None else 0.0)
    return (a64 @ b64).to(D.int32)


def conv_integer(node, x, w, xzp=None, wzp=None):
    x64 = x.to(D.float64) - (xzp.to(D.float64) if xzp is not None else 0.0)
    w64 = w.to(D.float64)
    if wzp is not None:
        z = wzp.to(D.float64)
        w64 = w64 - (z.reshape(-1, *[1] * (w.ndim - 1)) if z.numel() > 1 else z.reshape([]))
    return conv(node, x64, w64).to(D.int32)


def qlinear_matmul(node, a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp):
    real = ((a.to(D.float64) - a_zp.to(D.float64)) * a_s.to(D.float64)) @ (
        (b.to(D.float64) - b_zp.to(D.float64)) * b_s.to(D.float64)
    )
    y = _round_half_even(real / y_s.to(D.float64)) + y_zp.to(D.float64)
    return _saturate(y, y_zp.dtype)


def qlinear_conv(node, x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp, b=None):
    xr = (x.to(D.float64) - x_zp.to(D.float64)) * x_s.to(D.float64)
    ws = w_s.to(D.float64)
    wz = w_zp.to(D.float64)
    shape = [-1] + [1] * (w.ndim - 1)
    ws = ws.reshape(shape) if ws.numel() > 1 else ws.reshape([])
    wz = wz.reshape(shape) if wz.numel() > 1 else wz.reshape([])
    wr = (w.to(D.float64) - wz) * ws
    y = conv(node, xr, wr)
    if b is not None:
        scale = (x_s.to(D.float64) * w_s.to(D.float64)).reshape(-1)
        y = y + (b.to(D.float64) * scale).reshape(1, -1, *[1] * (y.ndim - 2))
    q = _round_half_even(y / y_s.to(D.float64)) + y_zp.to(D.float64)
    return _saturate(where(q.isnan(), 0.0, q), y_zp.dtype)


OPS = {
    "QuantizeLinear": (quantize, 10),
    "DequantizeLinear": (dequantize, 10),
    "DynamicQuantizeLinear": (dynamic_quantize, 11),
    "MatMulInteger": (matmul_integer, 10),
    "ConvInteger": (conv_integer, 10),
    "QLinearMatMul": (qlinear_matmul, 10),
    "QLinearConv": (qlinear_conv, 10),
}

"""Products and windows: matmul, conv2d with its two gradient convolutions, windows and its adjoint.

The gradient convolutions are primitives with VJPs of their own (they are bilinear), so conv
nets are twice differentiable; ``windows`` is what pooling is made of.
"""

from __future__ import annotations

import math

from ..errors import DTypeError, ShapeError
from .adjoint import unbroadcast
from .movement import permute
from .record import ALL, FLOATS, NUMERIC, defprim
from .shapes import broadcast_shapes, conv_out_size

#: the records defined here; ember.primitives re-exports them (P.add, ...)
__all__ = ["matmul", "conv2d", "conv2d_grad_input", "conv2d_grad_weight", "windows", "windows_grad"]


# ----------------------------------------------------------------------------- abstract rules
def _matmul(a, b):
    (sa, da), (sb, db) = a, b
    if da is not db:
        raise DTypeError(f"matmul: dtypes {da} and {db} differ")
    if len(sa) < 2 or len(sb) < 2:
        raise ShapeError(f"matmul primitive needs >= 2-d operands, got {sa} and {sb}")
    if sa[-1] != sb[-2]:
        raise ShapeError(
            f"matmul: shapes {sa} and {sb} do not align: {sa[-1]} (dim -1 of the first) "
            f"!= {sb[-2]} (dim -2 of the second)"
        )
    return broadcast_shapes(sa[:-2], sb[:-2]) + (sa[-2], sb[-1]), da


def _conv2d(x, w, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    (sx, dx), (sw, dw) = x, w
    if len(sx) != 4 or len(sw) != 4:
        raise ShapeError(f"conv2d needs input (N, C, H, W) and weight (O, C/groups, KH, KW), got {sx} and {sw}")
    if sx[1] != sw[1] * groups or sw[0] % groups:
        raise ShapeError(
            f"conv2d: input has {sx[1]} channels but weight {sw} with groups={groups} expects {sw[1] * groups}"
        )
    if dx is not dw:
        raise DTypeError(f"conv2d: dtypes {dx} and {dw} differ")
    oh, ow = (conv_out_size(sx[2 + i], sw[2 + i], stride[i], padding[i], dilation[i]) for i in range(2))
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"conv2d: kernel {sw[2:]} (dilation {dilation}) is larger than the padded input {sx[2:]}")
    return (sx[0], sw[0], oh, ow), dx


def _conv2d_grad_input(g, w, input_shape, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    return tuple(input_shape), g[1]


def _conv2d_grad_weight(x, g, weight_shape, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    return tuple(weight_shape), g[1]


def _windows(x, kernel, stride, dilation=(1, 1)):
    s = x[0]
    if len(s) < 2:
        raise ShapeError(f"windows needs >= 2 dims, got {s}")
    oh, ow = (conv_out_size(s[-2 + i], kernel[i], stride[i], 0, dilation[i]) for i in range(2))
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"window {tuple(kernel)} does not fit in spatial size {s[-2:]}")
    return s[:-2] + (oh, ow) + tuple(kernel), x[1]


def _windows_grad(g, input_shape, kernel, stride, dilation=(1, 1)):
    return tuple(input_shape), g[1]


# ----------------------------------------------------------------------------- tier-2 cases
def _matmul_tier2(d, dt):
    batch = d.broadcastable(2, max_dims=2)
    m, k, n = d.sampled_from(((3, 4, 2), (1, 3, 1), (2, 1, 3), (2, 0, 3), (0, 2, 2), (3, 2, 0)))
    a = d.array(batch[0] + (m, k), dt, special=d.integers(0, 1) == 1)
    b = d.array(batch[1] + (k, n), dt)
    return d.case([a, b], terms=k or 1, scale=d.finite_max(a) * d.finite_max(b))


#: structural conv geometries: each parameter away from its default alone, then all at once
CONV_KINDS = {
    "drawn": None,
    "plain": {},
    "padded": dict(padding=(1, 2)),
    "strided": dict(stride=(2, 3)),
    "dilated": dict(dilation=(2, 1)),
    "grouped": dict(groups=2),
    "everything": dict(padding=(2, 1), stride=(1, 2), dilation=(1, 2), groups=2),
}


def _conv_geometry(d):
    fixed = CONV_KINDS[d.sampled_from(CONV_KINDS)]
    kh, kw = d.integers(1, 3), d.integers(1, 3)
    if fixed is None:
        groups = d.integers(1, 2)
        stride = (d.integers(1, 2), d.integers(1, 2))
        padding = (d.integers(0, 1), d.integers(0, 1))
        dilation = (d.integers(1, 2), d.integers(1, 2))
    else:
        groups = fixed.get("groups", 1)
        stride, padding, dilation = (
            fixed.get(k, v) for k, v in (("stride", (1, 1)), ("padding", (0, 0)), ("dilation", (1, 1)))
        )
        kh, kw = max(kh, 2), max(kw, 2)  # a 1x1 kernel hides padding and dilation
    cg, og = d.integers(1, 2), d.integers(1, 2)
    # the smallest input the kernel fits in, plus a little
    h = d.integers(max(1, dilation[0] * (kh - 1) + 1 - 2 * padding[0]), 6)
    w = d.integers(max(1, dilation[1] * (kw - 1) + 1 - 2 * padding[1]), 6)
    n = d.integers(1, 2)
    params = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    oh = conv_out_size(h, kh, stride[0], padding[0], dilation[0])
    ow = conv_out_size(w, kw, stride[1], padding[1], dilation[1])
    return (n, cg * groups, h, w), (og * groups, cg, kh, kw), (n, og * groups, oh, ow), params


def _conv2d_tier2(d, dt):
    xs, ws, _, params = _conv_geometry(d)
    x, w = d.array(xs, dt), d.array(ws, dt)
    return d.case([x, w], params, terms=math.prod(ws[1:]), scale=d.finite_max(x) * d.finite_max(w))


def _conv2d_grad_input_tier2(d, dt):
    xs, ws, gs, params = _conv_geometry(d)
    g, w = d.array(gs, dt), d.array(ws, dt)
    terms = ws[0] // params["groups"] * ws[2] * ws[3]
    return d.case([g, w], dict(input_shape=xs, **params), terms=terms, scale=d.finite_max(g) * d.finite_max(w))


def _conv2d_grad_weight_tier2(d, dt):
    xs, ws, gs, params = _conv_geometry(d)
    x, g = d.array(xs, dt), d.array(gs, dt)
    return d.case(
        [x, g], dict(weight_shape=ws, **params), terms=gs[0] * gs[2] * gs[3], scale=d.finite_max(x) * d.finite_max(g)
    )


def _window_geometry(d):
    kernel = (d.integers(1, 3), d.integers(1, 3))
    stride = (d.integers(1, 2), d.integers(1, 2))
    dilation = (d.integers(1, 2), d.integers(1, 2))
    lead = d.sampled_from(((2,), (), (0, 2), (2, 1)))
    hw = tuple(d.integers(dl * (k - 1) + 1, 6) for k, dl in zip(kernel, dilation))
    out = tuple(conv_out_size(s, k, st, 0, dl) for s, k, st, dl in zip(hw, kernel, stride, dilation))
    return lead + hw, lead + out + kernel, dict(kernel=kernel, stride=stride, dilation=dilation)


def _windows_tier2(d, dt):
    xs, _, params = _window_geometry(d)
    return d.case([d.array(xs, dt, special=True)], params)


def _windows_grad_tier2(d, dt):
    xs, gs, params = _window_geometry(d)
    g = d.array(gs, dt, special=True)
    return d.case([g], dict(input_shape=xs, **params), terms=math.prod(params["kernel"]), scale=d.finite_max(g))


# ----------------------------------------------------------------------------- tier-3 cases
def _matmul_tier3(r):
    return [
        r.case([r.normal((2, 3, 4)), r.normal((4, 5))], diff=(0, 1), label="batched"),
        r.case([r.normal((3, 4)), r.normal((2, 4, 2))], diff=(0, 1), label="broadcast batch"),
    ]


#: (input shape, weight shape, params) of the gradient cases
CONV = [
    ((2, 4, 5, 5), (6, 2, 3, 3), dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2)),
    ((1, 1, 4, 4), (2, 1, 2, 2), dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1)),
]


def _conv_out(xs, ws, p):
    return (xs[0], ws[0]) + tuple(
        conv_out_size(xs[2 + i], ws[2 + i], p["stride"][i], p["padding"][i], p["dilation"][i]) for i in range(2)
    )


def _conv2d_tier3(r):
    return [r.case([r.normal(xs), r.normal(ws)], dict(p), diff=(0, 1)) for xs, ws, p in CONV]


def _conv2d_grad_input_tier3(r):
    return [
        r.case([r.normal(_conv_out(xs, ws, p)), r.normal(ws)], dict(p, input_shape=xs), diff=(0, 1))
        for xs, ws, p in CONV
    ]


def _conv2d_grad_weight_tier3(r):
    return [
        r.case([r.normal(xs), r.normal(_conv_out(xs, ws, p))], dict(p, weight_shape=ws), diff=(0, 1))
        for xs, ws, p in CONV
    ]


WINDOWS = dict(kernel=(2, 3), stride=(2, 1), dilation=(1, 1))


def _windows_tier3(r):
    return [
        r.case([r.normal((2, 5, 6))], dict(WINDOWS)),
        r.case([r.normal((1, 2, 5, 5))], dict(kernel=(3, 2), stride=(1, 2), dilation=(2, 1))),
    ]


def _windows_grad_tier3(r):
    return [r.case([r.normal((2, 2, 4, 2, 3))], dict(WINDOWS, input_shape=(2, 5, 6)))]


# ----------------------------------------------------------------------------- VJP rules
def _swaps_last_two(t) -> bool:
    """Was ``t`` made by transposing the last two dims of another tensor (``w.mT``)?"""
    ctx = t._ctx
    if ctx is None or ctx[0] != permute:
        return False
    axes = ctx[2]["axes"]
    n = len(axes)
    return n >= 2 and axes == tuple(range(n - 2)) + (n - 1, n - 2)


def _matmul_vjp(g, out, a, b):
    gb = None
    if b.requires_grad:
        # For ``x @ w.mT`` (a linear layer) take (g.mT @ x).mT: back through the transpose
        # it becomes g.mT @ x, laid out like w, where a.mT @ g would reach w as a transposed
        # view that every optimizer step must copy or read across (PyTorch's linear does the same).
        gb = (g.mT @ a).mT if _swaps_last_two(b) else a.mT @ g
        gb = unbroadcast(gb, b.shape)
    return (unbroadcast(g @ b.mT, a.shape) if a.requires_grad else None, gb)


def _conv2d_vjp(g, out, x, w, **p):
    return (
        conv2d_grad_input(g, w, input_shape=x.shape, **p) if x.requires_grad else None,
        conv2d_grad_weight(x, g, weight_shape=w.shape, **p) if w.requires_grad else None,
    )


def _conv2d_grad_input_vjp(u, out, g, w, input_shape, **p):
    # out = J_x^T g is bilinear in (g, w); <u, out> = <conv2d(u, w), g>.
    return (
        conv2d(u, w, **p) if g.requires_grad else None,
        conv2d_grad_weight(u, g, weight_shape=w.shape, **p) if w.requires_grad else None,
    )


def _conv2d_grad_weight_vjp(v, out, x, g, weight_shape, **p):
    # out = J_w^T g is bilinear in (x, g); <v, out> = <conv2d(x, v), g>.
    return (
        conv2d_grad_input(g, v, input_shape=x.shape, **p) if x.requires_grad else None,
        conv2d(x, v, **p) if g.requires_grad else None,
    )


# ----------------------------------------------------------------------------- the records
matmul = defprim(
    "matmul",
    "linalg",
    "matmul(a, b): batched matrix product of >= 2-d operands, batch dims broadcast; "
    "(..., m, k) @ (..., k, n) -> (..., m, n).",
    _matmul,
    dtypes=("int32", "int64") + FLOATS,
    cases=_matmul_tier2,
    grad_cases=_matmul_tier3,
    second_order=True,
    vjp=_matmul_vjp,
)
conv2d = defprim(
    "conv2d",
    "conv",
    "conv2d(x, w, stride, padding, dilation, groups): cross-correlation of x "
    "(N, C, H, W) with w (O, C/groups, KH, KW), zero padding (ph, pw) on both sides; output (N, O, OH, OW), "
    "OH = (H + 2ph - dh(KH-1) - 1) // sh + 1.",
    _conv2d,
    cases=_conv2d_tier2,
    grad_cases=_conv2d_tier3,
    second_order=True,
    vjp=_conv2d_vjp,
)
conv2d_grad_input = defprim(
    "conv2d_grad_input",
    "conv",
    "conv2d_grad_input(g, w, input_shape, stride, padding, dilation, groups): the "
    "gradient of conv2d with respect to its input (a transposed convolution of g), shape input_shape.",
    _conv2d_grad_input,
    cases=_conv2d_grad_input_tier2,
    grad_cases=_conv2d_grad_input_tier3,
    second_order=True,
    vjp=_conv2d_grad_input_vjp,
)
conv2d_grad_weight = defprim(
    "conv2d_grad_weight",
    "conv",
    "conv2d_grad_weight(x, g, weight_shape, stride, padding, dilation, groups): the "
    "gradient of conv2d with respect to its weight, shape weight_shape.",
    _conv2d_grad_weight,
    cases=_conv2d_grad_weight_tier2,
    grad_cases=_conv2d_grad_weight_tier3,
    second_order=True,
    vjp=_conv2d_grad_weight_vjp,
)
windows = defprim(
    "windows",
    "pool",
    "windows(x, kernel, stride, dilation): sliding windows over the last two dims: "
    "(..., H, W) -> (..., OH, OW, KH, KW), no padding (pad first). Pooling is windows + a reduce.",
    _windows,
    dtypes=ALL,
    cases=_windows_tier2,
    grad_cases=_windows_tier3,
    vjp=lambda g, out, x, **p: (windows_grad(g, input_shape=x.shape, **p),),  # type: ignore[has-type]
)
windows_grad = defprim(
    "windows_grad",
    "pool",
    "windows_grad(g, input_shape, kernel, stride, dilation): the adjoint of "
    "windows: each window element of g is added back at its source position (overlaps accumulate).",
    _windows_grad,
    dtypes=NUMERIC,
    cases=_windows_grad_tier2,
    grad_cases=_windows_grad_tier3,
    vjp=lambda u, out, g, input_shape, **p: (windows(u, **p),),
)

"""The primitive set: the contract between ember and every backend.

Each primitive is one row of ``PRIMITIVES``: its name, its group, a paragraph of spec, and its
*abstract evaluation* — a function from input "avals" (``(shape, dtype)`` pairs, or a Python
scalar where the spec allows one) and parameters to the output ``(shape, dtype)``. The abstract
rules do three jobs: they are the written spec, they let ``ember.jit`` infer shapes without
running anything, and they turn a backend's cryptic failure into an error that names shapes.

A backend implements a primitive as ``impl(*buffers, **params) -> buffer``; see backend.py.
Gradients never live here: they are in autodiff.py's VJP table, written in Tensor ops.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import dtypes as D
from .errors import DTypeError, ShapeError


@dataclass(frozen=True)
class Primitive:
    name: str
    group: str
    doc: str
    abstract: Callable
    differentiable: bool = True
    required: bool = True


PRIMITIVES: dict[str, Primitive] = {}
NON_DIFFERENTIABLE: set[str] = set()     # dispatch records no graph for these (comparisons, argmax, ...)


def _define(group, names, abstract, doc, differentiable=True, required=True):
    for name in names.split():
        PRIMITIVES[name] = Primitive(name, group, doc, abstract, differentiable, required)
        if not differentiable:
            NON_DIFFERENTIABLE.add(name)


# ----------------------------------------------------------------------------- shape helpers
def broadcast_shapes(*shapes: tuple) -> tuple:
    """NumPy broadcasting: align right, each pair of sizes equal or one of them 1.

    >>> broadcast_shapes((3, 1), (4,))
    (3, 4)
    """
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(-ndim, 0):
        sizes = {s[i] for s in shapes if len(s) >= -i} - {1}
        if len(sizes) > 1:
            raise ShapeError(f"shapes {' and '.join(str(tuple(s)) for s in shapes)} cannot be broadcast "
                             f"(sizes {' vs '.join(map(str, sorted(sizes)))} at dim {i})")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def normalize_axis(axis: int, ndim: int) -> int:
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise ShapeError(f"dim {axis} is out of range for a tensor with {ndim} dims")
    return axis % max(ndim, 1)


def _aval(a):
    """(shape, dtype) of an abstract input; a Python scalar is a 0-d weak value."""
    return ((), None) if isinstance(a, (int, float, bool)) else a


def _prod(xs):
    n = 1
    for x in xs:
        n *= x
    return n


# ----------------------------------------------------------------------------- abstract rules
def _creation(shape, dtype, **_):
    return tuple(shape), D.get(dtype)


def _arange(start, stop, step, dtype):
    n = max(0, -(-(stop - start) // step)) if isinstance(step, int) and isinstance(start, int) \
        else max(0, int(-(-(stop - start) // step)))
    return (n,), D.get(dtype)


def _random_bits(shape, seed, offset):
    return tuple(shape), D.uint32


def _unary(x):
    return x


def _float_unary(x):
    if x[1].kind != "f":
        raise DTypeError(f"needs a floating-point input, got {x[1]}")
    return x


def _logical_not(x):
    return x[0], D.bool_


def _binary_shape_dtype(a, b):
    (sa, da), (sb, db) = _aval(a), _aval(b)
    if da is not None and db is not None and da is not db:
        raise DTypeError(f"operands have different dtypes {da} and {db} (the front end casts first)")
    return broadcast_shapes(sa, sb), da or db


def _binary(a, b):
    return _binary_shape_dtype(a, b)


def _compare(a, b):
    return _binary_shape_dtype(a, b)[0], D.bool_


def _where(c, a, b):
    (sc, dc) = c
    shape, dtype = _binary_shape_dtype(a, b)
    if dc is not D.bool_:
        raise DTypeError(f"where: condition must be bool, got {dc}")
    return broadcast_shapes(sc, shape), dtype


def _cast(x, dtype):
    return x[0], D.get(dtype)


def _reduce_shape(shape, axes, keepdims):
    axes = {normalize_axis(a, len(shape)) for a in axes}
    if keepdims:
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


def _reduce(x, axes, keepdims=False):
    if x[1] is D.bool_:
        raise DTypeError("cannot reduce a bool tensor; cast it to int64 first")
    return _reduce_shape(x[0], axes, keepdims), x[1]


def _reduce_nonempty(x, axes, keepdims=False):
    for a in axes:
        if x[0][normalize_axis(a, len(x[0]))] == 0:
            raise ShapeError(f"max/min over an empty dim {a} of shape {x[0]} has no identity")
    return _reduce(x, axes, keepdims)


def _argmax(x, axis, keepdims=False):
    _reduce_nonempty(x, (axis,), keepdims)
    return _reduce_shape(x[0], (axis,), keepdims), D.int64


def _reshape(x, shape):
    if _prod(shape) != _prod(x[0]):
        raise ShapeError(f"cannot reshape {x[0]} ({_prod(x[0])} elements) into {tuple(shape)} "
                         f"({_prod(shape)} elements)")
    return tuple(shape), x[1]


def _permute(x, axes):
    if sorted(axes) != list(range(len(x[0]))):
        raise ShapeError(f"permute axes {tuple(axes)} are not a permutation of {len(x[0])} dims")
    return tuple(x[0][a] for a in axes), x[1]


def _expand(x, shape):
    if broadcast_shapes(x[0], shape) != tuple(shape):
        raise ShapeError(f"cannot expand {x[0]} to {tuple(shape)}")
    return tuple(shape), x[1]


def _pad(x, widths, value=0):
    if len(widths) != len(x[0]) or any(lo < 0 or hi < 0 for lo, hi in widths):
        raise ShapeError(f"pad widths {widths} do not fit shape {x[0]} (one non-negative (lo, hi) per dim)")
    return tuple(s + lo + hi for s, (lo, hi) in zip(x[0], widths)), x[1]


def _slice(x, starts, stops, steps):
    shape = []
    for s, a, b, c in zip(x[0], starts, stops, steps):
        if c <= 0 or not 0 <= a <= s or not 0 <= b <= s:
            raise ShapeError(f"slice [{a}:{b}:{c}] is out of range for a dim of size {s}")
        shape.append(max(0, -(-(b - a) // c)))
    return tuple(shape), x[1]


def _concatenate(*xs, axis):
    first = xs[0]
    axis = normalize_axis(axis, len(first[0]))
    for x in xs[1:]:
        if x[1] is not first[1]:
            raise DTypeError(f"concatenate: dtypes {first[1]} and {x[1]} differ")
        if len(x[0]) != len(first[0]) or any(a != b for i, (a, b) in enumerate(zip(x[0], first[0])) if i != axis):
            raise ShapeError(f"concatenate along dim {axis}: shapes {' and '.join(str(y[0]) for y in xs)} differ off that dim")
    shape = list(first[0])
    shape[axis] = sum(x[0][axis] for x in xs)
    return tuple(shape), first[1]


def _flip(x, axes):
    return x


def _take(x, indices, axis):
    if indices[1].kind not in "iu":
        raise DTypeError(f"take: indices must be integers, got {indices[1]}")
    axis = normalize_axis(axis, len(x[0]))
    return x[0][:axis] + indices[0] + x[0][axis + 1:], x[1]


def _index_add(x, indices, values, axis):
    axis = normalize_axis(axis, len(x[0]))
    expect = x[0][:axis] + indices[0] + x[0][axis + 1:]
    if values[0] != expect:
        raise ShapeError(f"index_add: values of shape {values[0]} should have shape {expect}")
    return x


def _matmul(a, b):
    (sa, da), (sb, db) = a, b
    if da is not db:
        raise DTypeError(f"matmul: dtypes {da} and {db} differ")
    if len(sa) < 2 or len(sb) < 2:
        raise ShapeError(f"matmul primitive needs >= 2-d operands, got {sa} and {sb}")
    if sa[-1] != sb[-2]:
        raise ShapeError(f"matmul: shapes {sa} and {sb} do not align: {sa[-1]} (dim -1 of the first) "
                         f"!= {sb[-2]} (dim -2 of the second)")
    return broadcast_shapes(sa[:-2], sb[:-2]) + (sa[-2], sb[-1]), da


def conv_out_size(size, k, stride, pad, dilation):
    return (size + 2 * pad - dilation * (k - 1) - 1) // stride + 1


def _conv2d(x, w, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    (sx, dx), (sw, dw) = x, w
    if len(sx) != 4 or len(sw) != 4:
        raise ShapeError(f"conv2d needs input (N, C, H, W) and weight (O, C/groups, KH, KW), got {sx} and {sw}")
    if sx[1] != sw[1] * groups or sw[0] % groups:
        raise ShapeError(f"conv2d: input has {sx[1]} channels but weight {sw} with groups={groups} expects "
                         f"{sw[1] * groups}")
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


# ----------------------------------------------------------------------------- the table
_define("creation", "full", _creation, differentiable=False, doc=
        "full(shape, value, dtype): a new tensor of `shape` filled with `value`.")
_define("creation", "arange", _arange, differentiable=False, doc=
        "arange(start, stop, step, dtype): start, start+step, ... up to but excluding stop.")
_define("creation", "random_bits", _random_bits, differentiable=False, doc=
        "random_bits(shape, seed, offset): uint32 words of Philox-4x32-10. Element i (row-major) is "
        "word (offset+i) % 4 of the block for counter (offset+i) // 4 under key `seed` "
        "(64-bit: low word, high word). Every backend must produce the same bits.")
_define("unary", "neg exp log sin cos tanh sqrt reciprocal abs sign floor erf", _unary, doc=
        "op(x): elementwise, same shape and dtype. Floating-point functions (exp, log, sin, cos, "
        "tanh, sqrt, reciprocal, erf) follow IEEE-754 (log(0) = -inf, sqrt(-1) = nan).")
_define("unary", "logical_not", _logical_not, differentiable=False, doc=
        "logical_not(x): elementwise not; input bool, output bool.")
_define("binary", "add sub mul div pow maximum minimum", _binary, doc=
        "op(a, b): elementwise with NumPy broadcasting. Both operands have the same dtype, or one "
        "is a Python scalar, which takes the other's dtype. div of integers is not defined (the front "
        "end casts to float). maximum/minimum propagate NaN.")
_define("compare", "eq ne lt le gt ge", _compare, differentiable=False, doc=
        "op(a, b): elementwise comparison with broadcasting; output bool.")
_define("logical", "logical_and logical_or logical_xor", _compare, differentiable=False, doc=
        "op(a, b): elementwise on bool operands with broadcasting; output bool.")
_define("select", "where", _where, doc=
        "where(cond, a, b): a where cond else b; cond bool; all three broadcast together.")
_define("cast", "cast", _cast, doc=
        "cast(x, dtype): convert elementwise; float to int truncates toward zero; to bool is x != 0.")
_define("reduce", "sum", _reduce, doc=
        "sum(x, axes, keepdims): sum over `axes` (a tuple, possibly empty = identity); same dtype "
        "as x (float16 accumulates in float32). Empty reductions give 0.")
_define("reduce", "max min", _reduce_nonempty, doc=
        "max/min(x, axes, keepdims): over `axes`; NaN propagates; an empty axis is an error.")
_define("reduce", "argmax", _argmax, differentiable=False, doc=
        "argmax(x, axis, keepdims): index (int64) of the first maximum along one axis.")
_define("movement", "reshape", _reshape, doc=
        "reshape(x, shape): same elements in row-major order, new shape of equal size.")
_define("movement", "permute", _permute, doc=
        "permute(x, axes): output dim i is input dim axes[i].")
_define("movement", "expand", _expand, doc=
        "expand(x, shape): broadcast x to `shape` (NumPy rules), without copying where possible.")
_define("movement", "pad", _pad, doc=
        "pad(x, widths, value): widths is one (lo, hi) pair of non-negative ints per dim; the new "
        "border holds `value` (may be -inf, for max pooling).")
_define("movement", "slice", _slice, doc=
        "slice(x, starts, stops, steps): per dim, elements start, start+step, ... < stop; steps > 0 "
        "and 0 <= start, stop <= size (the front end normalizes negative and reversed slices).")
_define("movement", "concatenate", _concatenate, doc=
        "concatenate(*xs, axis): join along `axis`; all other dims and the dtype equal.")
_define("movement", "flip", _flip, doc=
        "flip(x, axes): reverse the order of elements along each of `axes`.")
_define("index", "take", _take, doc=
        "take(x, indices, axis): NumPy take: out.shape = x.shape[:axis] + indices.shape + "
        "x.shape[axis+1:]; indices are integers in [-n, n) (negative counts from the end).")
_define("index", "index_add", _index_add, doc=
        "index_add(x, indices, values, axis): a copy of x with `values` added at `indices` along "
        "`axis`, repeated indices accumulating (scatter-add); values.shape = take(x, indices, axis).shape.")
_define("linalg", "matmul", _matmul, doc=
        "matmul(a, b): batched matrix product of >= 2-d operands, batch dims broadcast; "
        "(..., m, k) @ (..., k, n) -> (..., m, n).")
_define("conv", "conv2d", _conv2d, doc=
        "conv2d(x, w, stride, padding, dilation, groups): cross-correlation of x (N, C, H, W) with "
        "w (O, C/groups, KH, KW), zero padding (ph, pw) on both sides; output (N, O, OH, OW), "
        "OH = (H + 2ph - dh(KH-1) - 1) // sh + 1.")
_define("conv", "conv2d_grad_input", _conv2d_grad_input, doc=
        "conv2d_grad_input(g, w, input_shape, stride, padding, dilation, groups): the gradient of "
        "conv2d with respect to its input (a transposed convolution of g), shape input_shape.")
_define("conv", "conv2d_grad_weight", _conv2d_grad_weight, doc=
        "conv2d_grad_weight(x, g, weight_shape, stride, padding, dilation, groups): the gradient of "
        "conv2d with respect to its weight, shape weight_shape.")
_define("pool", "windows", _windows, doc=
        "windows(x, kernel, stride, dilation): sliding windows over the last two dims: "
        "(..., H, W) -> (..., OH, OW, KH, KW), no padding (pad first). Pooling is windows + a reduce.")
_define("pool", "windows_grad", _windows_grad, doc=
        "windows_grad(g, input_shape, kernel, stride, dilation): the adjoint of windows: each "
        "window element of g is added back at its source position (overlaps accumulate).")

REQUIRED = tuple(n for n, p in PRIMITIVES.items() if p.required)
GROUPS = {}
for _p in PRIMITIVES.values():
    GROUPS.setdefault(_p.group, []).append(_p.name)


def abstract_eval(name: str, *avals, **params):
    """Output (shape, dtype) of primitive `name`, or a ShapeError/DTypeError saying why not."""
    return PRIMITIVES[name].abstract(*avals, **params)


def markdown() -> str:
    """The contract as a Markdown page (docs/primitives.md is this text; a test keeps it current).

    >>> markdown().splitlines()[0]
    '# The primitive contract'
    """
    lines = ["# The primitive contract", "",
             "Generated from `ember.primitives.PRIMITIVES` by `ember.primitives.markdown()`.",
             "A backend implements each primitive as `impls[name](*buffers, **params) -> buffer` (see",
             "docs/writing-a-backend.md). Gradients are ember's business: backends never write backward code.", ""]
    for group, names in GROUPS.items():
        lines += [f"## {group}", "", "| primitive | differentiable | spec |", "|---|---|---|"]
        for name in names:
            p = PRIMITIVES[name]
            lines.append(f"| `{name}` | {'yes' if p.differentiable else 'no'} | {p.doc.replace('|', '/')} |")
        lines.append("")
    return "\n".join(lines)


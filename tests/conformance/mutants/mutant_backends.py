"""Mutant backends: the NumPy reference with one planted bug each (the mutation score).

Each :class:`Mutant` names the primitive it breaks, the bug, and how tier 2 must catch it:
``caught_by`` is the kind of failure message (see ``KINDS``) and ``case`` the cases that find
it. Loaded into the suite's process with ``--backend-module`` (this file's path), which
registers what ``ember_backends()`` returns, exactly as an installed plugin would.
test_mutants.py certifies each one and checks that tier 2 catches it and names only its
primitive; docs/conformance.md's mutation table is :func:`table`, checked by a test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ember.backend import BackendInfo
from ember.backends.numpy.backend import (
    IMPLS,
    NumpyBackend,
    _sum,
    _windows,
    random_bits,
)

#: failure kind -> the words tier 2's message carries for it
KINDS = {
    "values": "elements differ",
    "shape": "backend.shape() says",
    "dtype": "backend.dtype() says",
    "nondeterministic": "nondeterministic:",
    "input write": "wrote into its input",
    "raised": " raised ",
}


@dataclass(frozen=True)
class Mutant:
    name: str
    primitive: str
    bug: str
    impl: object
    caught_by: str  # a key of KINDS
    case: str  # which cases find it


def _arrays(*xs):
    return all(isinstance(x, np.ndarray) for x in xs)


def _as_packed(x):
    """``x`` read as if its memory were packed row-major (a kernel that ignores strides)."""
    if isinstance(x, np.ndarray) and x.ndim and not x.flags.c_contiguous:
        return np.lib.stride_tricks.as_strided(x, x.shape, np.empty(x.shape, x.dtype).strides, writeable=False)
    return x


# ----------------------------------------------------------------------------- broadcasting
def tiled_add(a, b):
    out = np.broadcast_shapes(np.shape(a), np.shape(b))
    if _arrays(a, b) and a.shape != out and b.shape != out:  # both broadcast: repeat the flat data
        return np.add(np.resize(a, out), np.resize(b, out))
    return IMPLS["add"](a, b)


def mul_left_aligned(a, b):
    if _arrays(a, b) and a.ndim != b.ndim:  # pads the shorter shape on the right
        n = max(a.ndim, b.ndim)
        a, b = (x.reshape(x.shape + (1,) * (n - x.ndim)) for x in (a, b))
    return IMPLS["mul"](a, b)


def where_cond_not_broadcast(c, a, b):
    out = np.broadcast_shapes(np.shape(c), np.shape(a), np.shape(b))
    if c.shape != out and c.size:  # repeats cond's flat data
        c = np.resize(c, out)
    return np.where(c, a, b)


# ----------------------------------------------------------------------------- layouts
def maximum_ignores_strides(a, b):
    return IMPLS["maximum"](_as_packed(a), _as_packed(b))


def reshape_memory_order(x, shape):
    return np.reshape(x, shape, order="A")  # a transposed input is read in memory order


# ----------------------------------------------------------------------------- dtypes and scalars
def exp_float64(x):
    return np.exp(x.astype(np.float64))


def add_scalar_takes_array_dtype(a, b):
    out = np.asarray(np.add(a, b))
    arr = a if isinstance(a, np.ndarray) else b
    return out.astype(arr.dtype)  # int32 + 0.5 stays int32 (the old, wrong spec)


def sub_scalar_left_swapped(a, b):
    if not isinstance(a, np.ndarray):
        return IMPLS["sub"](b, a)  # s - x computed as x - s
    return IMPLS["sub"](a, b)


def where_scalar_takes_array_dtype(c, a, b):
    arr = a if isinstance(a, np.ndarray) else b
    return np.where(c, a, b).astype(arr.dtype)


def eq_truncates_float_scalar(a, b):
    a, b = (
        int(x)
        if isinstance(x, float) and math.isfinite(x) and isinstance(y, np.ndarray) and y.dtype.kind in "iub"
        else x
        for x, y in ((a, b), (b, a))
    )
    return IMPLS["eq"](a, b)


def cast_rounds(x, dtype):
    if x.dtype.kind == "f" and np.dtype(dtype.name).kind in "iu":
        return np.rint(x).astype(dtype.name)
    return IMPLS["cast"](x, dtype)


def cast_bool_positive(x, dtype):
    return np.asarray(x > 0) if dtype.name == "bool" and x.dtype.kind != "b" else IMPLS["cast"](x, dtype)


# ----------------------------------------------------------------------------- reductions and axes
def sum_ignores_keepdims(x, axes, keepdims=False):
    return _sum(x, axes, False)


def max_axes_mirrored(x, axes, keepdims=False):
    return IMPLS["max"](x, tuple(x.ndim - 1 - a % x.ndim for a in axes), keepdims)


def min_drops_negative_axes(x, axes, keepdims=False):
    return IMPLS["min"](x, tuple(a for a in axes if a >= 0), keepdims)


def argmax_negative_axis_off_by_one(x, axis, keepdims=False):
    return IMPLS["argmax"](x, axis if axis >= 0 else axis + x.ndim - 1, keepdims)


def sum_empty_not_zero(x, axes, keepdims=False):
    out = _sum(x, axes, keepdims)
    if any(x.shape[a] == 0 for a in axes):
        out = np.full_like(out, 1)  # the accumulator starts at 1 where nothing is added
    return out


# ----------------------------------------------------------------------------- ties and special values
def _last_of_ties(x, axis, keepdims):
    n = x.shape[axis]
    return np.asarray(n - 1 - np.argmax(np.flip(x, axis), axis=axis, keepdims=keepdims)).astype(np.int64)


def argmax_last_of_ties(x, axis, keepdims=False):
    return _last_of_ties(x, axis, keepdims)


def argmax_last_of_float_ties(x, axis, keepdims=False):
    return _last_of_ties(x, axis, keepdims) if x.dtype.kind == "f" else IMPLS["argmax"](x, axis, keepdims)


def max_ignores_nan(x, axes, keepdims=False):
    with np.errstate(invalid="ignore"):
        return np.asarray(np.fmax.reduce(x, axis=tuple(axes), keepdims=keepdims)) if axes else x.copy()


def minimum_ignores_nan(a, b):
    return np.asarray(np.fmin(a, b))


def sign_nan_is_zero(x):
    out = IMPLS["sign"](x)
    return np.where(np.isnan(out), 0, out).astype(out.dtype) if out.dtype.kind == "f" else out


def reciprocal_loses_zero_sign(x):
    with np.errstate(divide="ignore"):
        return np.where(x == 0, np.array(np.inf, x.dtype), IMPLS["reciprocal"](x)).astype(x.dtype)


def tanh_by_exp(x):
    with np.errstate(all="ignore"):
        e = np.exp(2 * x)
        return np.asarray((e - 1) / (e + 1)).astype(x.dtype)  # inf / inf = nan at x = inf


def floor_truncates(x):
    return np.asarray(np.trunc(x))


def logical_xor_is_or(a, b):
    return IMPLS["logical_or"](a, b)


# ----------------------------------------------------------------------------- products, padding, windows
_calls = {"matmul": 0}


def matmul_nondeterministic(a, b):
    out = np.array(np.matmul(a, b))
    _calls["matmul"] += 1
    if _calls["matmul"] % 50 == 0 and out.size:  # one call in 50: one element off by 1e-3
        out.reshape(-1)[_calls["matmul"] % out.size] += 1e-3 if out.dtype.kind == "f" else 1
    return out


def matmul_empty_k_nan(a, b):
    out = np.matmul(a, b)
    return np.full_like(out, np.nan if out.dtype.kind == "f" else -1) if a.shape[-1] == 0 else out


def conv2d_padding_off_by_one(x, w, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    # one more row/column of zeros before the input and one fewer after: same shape, shifted values
    (ph, pw) = padding
    x = np.pad(x, ((0, 0), (0, 0), (ph + (ph > 0), ph - (ph > 0)), (pw + (pw > 0), pw - (pw > 0))))
    return IMPLS["conv2d"](x, w, stride, (0, 0), dilation, groups)


def conv2d_stride_swapped(x, w, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    return IMPLS["conv2d"](x, w, stride[::-1], padding, dilation, groups)


def conv2d_grad_weight_ignores_dilation(x, g, weight_shape, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    return IMPLS["conv2d_grad_weight"](x, g, weight_shape, stride, padding, (1, 1), groups)


def pad_ignores_value(x, widths, value=0):
    return np.pad(x, widths)


def pad_swaps_sides(x, widths, value=0):
    return np.pad(x, [(hi, lo) for lo, hi in widths], constant_values=value)


def slice_ignores_last_step(x, starts, stops, steps):
    return IMPLS["slice"](x, starts, stops, tuple(steps[:-1]) + (1,) * bool(steps))


def windows_ignores_dilation(x, kernel, stride, dilation=(1, 1)):
    return _windows(x, kernel, stride, (1, 1))


def windows_grad_overwrites(g, input_shape, kernel, stride, dilation=(1, 1)):
    out = np.zeros(input_shape, dtype=g.dtype)
    oh, ow = g.shape[-4], g.shape[-3]
    (sh, sw), (dh, dw) = stride, dilation
    for i in range(kernel[0]):
        for j in range(kernel[1]):  # = instead of +=: overlapping windows do not accumulate
            out[..., i * dh : i * dh + sh * (oh - 1) + 1 : sh, j * dw : j * dw + sw * (ow - 1) + 1 : sw] = g[..., i, j]
    return out


# ----------------------------------------------------------------------------- movement and indexing
def permute_inverse(x, axes):
    inverse = [0] * len(axes)
    for i, a in enumerate(axes):
        inverse[a] = i
    return np.transpose(x, inverse)


def flip_last_axis_only(x, axes):
    return np.flip(x, axis=axes[-1]) if axes else x


def take_clips_negative(x, indices, axis):
    return np.asarray(np.take(x, indices, axis=axis, mode="clip"))


def index_add_no_accumulate(x, indices, values, axis):
    out = x.copy()
    idx = (slice(None),) * (axis % x.ndim) + (indices,)
    out[idx] += values  # buffered: a repeated index keeps only one value
    return out


# ----------------------------------------------------------------------------- aliasing
def exp_in_place(x):
    return np.exp(x, out=x) if x.flags.writeable and x.ndim else IMPLS["exp"](x)


def add_in_place(a, b):
    if (
        _arrays(a)
        and a.flags.writeable
        and a.shape == np.broadcast_shapes(a.shape, np.shape(b))
        and np.result_type(a, b) == a.dtype
    ):
        return np.add(a, b, out=a)  # accumulates into its first operand
    return IMPLS["add"](a, b)


# ----------------------------------------------------------------------------- random bits
def random_bits_ignores_key_high(shape, seed, offset):
    return random_bits(shape, seed & 0xFFFFFFFF, offset)


def random_bits_ignores_word_offset(shape, seed, offset):
    n = math.prod(shape)
    words = random_bits((n + offset % 4,), seed, offset - offset % 4)
    return words[:n].reshape(shape)  # starts at the block's first word


_draws = {"n": 0}


def random_bits_stateful(shape, seed, offset):
    _draws["n"] += 1  # a generator that advances on every call
    return random_bits(shape, seed, offset + _draws["n"])


M = Mutant
MUTANTS = [
    # the six of issue 19
    M(
        "tiled_add",
        "add",
        "tiles (repeats the flat data) instead of broadcasting when both operands broadcast",
        tiled_add,
        "values",
        "broadcast (3, 1) + (1, 4)",
    ),
    M("sum_keepdims", "sum", "ignores keepdims", sum_ignores_keepdims, "shape", "keepdims=True"),
    M(
        "conv2d_padding",
        "conv2d",
        "padding off by one (one more row and column before, one fewer after)",
        conv2d_padding_off_by_one,
        "values",
        "padded geometry",
    ),
    M("argmax_last_tie", "argmax", "returns the last of tied maxima", argmax_last_of_ties, "values", "ties"),
    M(
        "argmax_last_float_tie",
        "argmax",
        "returns the last of tied maxima, floats only",
        argmax_last_of_float_ties,
        "values",
        "float ties",
    ),
    M("exp_float64", "exp", "returns float64 for float32 and float16", exp_float64, "dtype", "any float32 case"),
    M(
        "matmul_flaky",
        "matmul",
        "adds 1e-3 to one element in one call of 50",
        matmul_nondeterministic,
        "nondeterministic",
        "every case run twice",
    ),
    # broadcasting
    M(
        "mul_left_aligned",
        "mul",
        "aligns operands of different rank from the left",
        mul_left_aligned,
        "raised",
        "rank mismatch (4,) * (2, 3, 4)",
    ),
    M(
        "where_cond_tiled",
        "where",
        "repeats the condition's flat data instead of broadcasting it",
        where_cond_not_broadcast,
        "values",
        "broadcast condition",
    ),
    # strides and layouts
    M(
        "maximum_strides",
        "maximum",
        "reads a strided view as if it were packed",
        maximum_ignores_strides,
        "values",
        "permuted / sliced / offset inputs",
    ),
    M(
        "reshape_memory_order",
        "reshape",
        "reads a transposed input in memory order",
        reshape_memory_order,
        "values",
        "permuted input",
    ),
    # dtypes and Python scalars
    M(
        "add_scalar_dtype",
        "add",
        "a Python float keeps an int array's dtype (int32 + 0.5 is int32)",
        add_scalar_takes_array_dtype,
        "dtype",
        "weak float scalar, int array",
    ),
    M(
        "sub_scalar_left",
        "sub",
        "a Python scalar on the left computes x - s",
        sub_scalar_left_swapped,
        "values",
        "scalar on the left",
    ),
    M(
        "where_scalar_dtype",
        "where",
        "a Python float keeps an int array's dtype",
        where_scalar_takes_array_dtype,
        "dtype",
        "weak float scalar, int array",
    ),
    M(
        "eq_scalar_truncated",
        "eq",
        "an int array compared with a Python float truncates the float",
        eq_truncates_float_scalar,
        "values",
        "weak float scalar, int array",
    ),
    M("cast_rounds", "cast", "float to int rounds instead of truncating", cast_rounds, "values", "float -> int"),
    M(
        "cast_bool_positive",
        "cast",
        "to bool is x > 0 instead of x != 0",
        cast_bool_positive,
        "values",
        "negative values -> bool",
    ),
    # reductions and axes
    M("max_axes_mirrored", "max", "counts reduction axes from the end", max_axes_mirrored, "shape", "axes"),
    M("min_negative_axes", "min", "drops negative axes", min_drops_negative_axes, "shape", "negative axes"),
    M(
        "argmax_negative_axis",
        "argmax",
        "negative axis off by one",
        argmax_negative_axis_off_by_one,
        "shape",
        "negative axis",
    ),
    M("sum_empty", "sum", "sum over an empty dim gives 1, not 0", sum_empty_not_zero, "values", "size-0 dims"),
    M("matmul_empty_k", "matmul", "an empty inner dim (k = 0) gives NaN, not 0", matmul_empty_k_nan, "values", "k = 0"),
    # NaN, infinities, signed zeros
    M("max_ignores_nan", "max", "ignores NaN (fmax) instead of propagating it", max_ignores_nan, "values", "NaN"),
    M("minimum_ignores_nan", "minimum", "ignores NaN (fmin)", minimum_ignores_nan, "values", "NaN"),
    M("sign_nan", "sign", "sign(NaN) is 0, not NaN", sign_nan_is_zero, "values", "NaN"),
    M("reciprocal_zero_sign", "reciprocal", "reciprocal(-0.0) is +inf", reciprocal_loses_zero_sign, "values", "-0.0"),
    M("tanh_inf", "tanh", "computed as (e^2x - 1) / (e^2x + 1): tanh(inf) is NaN", tanh_by_exp, "values", "inf"),
    M("floor_truncates", "floor", "rounds toward zero", floor_truncates, "values", "negative values"),
    M("logical_xor_or", "logical_xor", "computes or", logical_xor_is_or, "values", "any case"),
    # padding, stride, dilation
    M(
        "conv2d_stride_swapped",
        "conv2d",
        "swaps the two strides",
        conv2d_stride_swapped,
        "shape",
        "strided geometry (2, 3)",
    ),
    M(
        "conv2d_grad_weight_dilation",
        "conv2d_grad_weight",
        "ignores dilation",
        conv2d_grad_weight_ignores_dilation,
        "values",
        "dilated geometry",
    ),
    M("pad_value", "pad", "pads with 0 whatever the value", pad_ignores_value, "values", "any case"),
    M("pad_sides", "pad", "swaps the low and high widths", pad_swaps_sides, "values", "uneven widths"),
    M("slice_step", "slice", "ignores the last dim's step", slice_ignores_last_step, "shape", "steps > 1"),
    M("windows_dilation", "windows", "ignores dilation", windows_ignores_dilation, "shape", "dilation > 1"),
    M(
        "windows_grad_overlap",
        "windows_grad",
        "overlapping windows overwrite instead of adding",
        windows_grad_overwrites,
        "values",
        "stride < kernel",
    ),
    # movement and indexing
    M("permute_inverse", "permute", "applies the inverse permutation", permute_inverse, "shape", "3-cycles"),
    M("flip_one_axis", "flip", "flips only the last of its axes", flip_last_axis_only, "values", "two axes"),
    M("take_negative", "take", "clips negative indices to 0", take_clips_negative, "values", "negative indices"),
    M(
        "index_add_repeats",
        "index_add",
        "repeated indices keep one value instead of accumulating",
        index_add_no_accumulate,
        "values",
        "repeated indices",
    ),
    # aliasing
    M("exp_in_place", "exp", "writes its result into its input", exp_in_place, "input write", "any case"),
    M("add_in_place", "add", "accumulates into its first operand", add_in_place, "input write", "any case"),
    # random bits
    M(
        "random_bits_key_high",
        "random_bits",
        "ignores the key's high word",
        random_bits_ignores_key_high,
        "values",
        "64-bit keys",
    ),
    M(
        "random_bits_word_offset",
        "random_bits",
        "starts at the block's first word whatever the offset",
        random_bits_ignores_word_offset,
        "values",
        "offsets within a block",
    ),
    M(
        "random_bits_stateful",
        "random_bits",
        "the same key and offset give different bits on each call",
        random_bits_stateful,
        "nondeterministic",
        "every case run twice",
    ),
]
BY_NAME = {m.name: m for m in MUTANTS}


def _groups() -> list[list[Mutant]]:
    """The mutants dealt into groups whose primitives differ: group k holds the k-th mutant of
    each primitive, so one backend can carry a whole group's bugs at once."""
    groups: list[list[Mutant]] = []
    seen: dict[str, int] = {}
    for m in MUTANTS:
        k = seen[m.primitive] = seen.get(m.primitive, -1) + 1
        if k == len(groups):
            groups.append([])
        groups[k].append(m)
    return groups


#: Backends ``mutant_group_K``: every bug of group K planted together. A group's certification
#: runs every primitive, so it checks that no bug makes another primitive's tests fail; the
#: certification of each mutant alone runs only its own primitive (a tenth of the time).
GROUPS = _groups()


def backend_class(name: str, mutants: list[Mutant]):
    impls = {**IMPLS, **{m.primitive: m.impl for m in mutants}}
    doc = "; ".join(f"{m.primitive} {m.bug}" for m in mutants)
    return type(f"Mutant_{name}", (NumpyBackend,), {"name": f"mutant_{name}", "impls": impls, "__doc__": doc})


def ember_backends():
    alone = [
        BackendInfo(f"mutant_{m.name}", backend_class(m.name, [m]), description=f"mutant: {m.primitive} {m.bug}")
        for m in MUTANTS
    ]
    together = [
        BackendInfo(f"mutant_group_{k}", backend_class(f"group_{k}", g), description=f"mutants: {len(g)} bugs at once")
        for k, g in enumerate(GROUPS)
    ]
    return alone + together


def table() -> str:
    """docs/conformance.md's mutation table (a test keeps the page equal to it)."""
    lines = ["| mutant | primitive | planted bug | caught at | how |", "|---|---|---|---|---|"]
    for m in MUTANTS:
        lines.append(f'| `{m.name}` | `{m.primitive}` | {m.bug} | tier 2 | {m.case}: "{KINDS[m.caught_by]}" |')
    return "\n".join(lines)

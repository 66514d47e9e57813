"""Movement primitives: reshape, permute, expand, pad, slice, concatenate, flip.

Their VJP rules are movements too, so gradients of any order stay cheap and exact.
(The ``slice`` record shadows the builtin here; this module does not use it.)
"""

from __future__ import annotations

from ..errors import DTypeError, ShapeError
from .adjoint import unbroadcast
from .record import ALL, defprim
from .shapes import broadcast_shapes, normalize_axis, prod

#: the records defined here; ember.primitives re-exports them (P.add, ...)
__all__ = ["reshape", "permute", "expand", "pad", "slice", "concatenate", "flip"]


# ----------------------------------------------------------------------------- abstract rules
def _reshape(x, shape):
    if prod(shape) != prod(x[0]):
        raise ShapeError(f"cannot reshape {x[0]} ({prod(x[0])} elements) into {tuple(shape)} ({prod(shape)} elements)")
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
            raise ShapeError(
                f"concatenate along dim {axis}: shapes {' and '.join(str(y[0]) for y in xs)} differ off that dim"
            )
    shape = list(first[0])
    shape[axis] = sum(x[0][axis] for x in xs)
    return tuple(shape), first[1]


def _flip(x, axes):
    return x


# ----------------------------------------------------------------------------- tier-2 cases
def _reshape_tier2(d, dt):
    x = d.array(d.shape(), dt, special=True)
    n, s = x.size, x.shape
    options = [(n,), s[::-1], s + (1,), (1,) + s]
    if len(s) >= 2:
        options.append((s[0] * s[1],) + s[2:])
    if n and n % 2 == 0:
        options.append((2, n // 2))
    return d.case([x], dict(shape=tuple(d.sampled_from(options))))


def _permute_tier2(d, dt):
    x = d.array(d.shape(), dt, special=True)
    return d.case([x], dict(axes=d.permutation(x.ndim)))


def _expand_tier2(d, dt):
    x = d.array(d.shape(max_side=3), dt, special=True)
    lead = d.sampled_from(((), (2,), (0,), (3, 1)))
    target = lead + tuple(d.integers(0, 3) if s == 1 else s for s in x.shape)
    return d.case([x], dict(shape=target))


def _pad_tier2(d, dt):
    x = d.array(d.shape(min_dims=1), dt, special=True)  # the front end never pads a 0-d
    widths = tuple((d.integers(0, 2), d.integers(0, 2)) for _ in x.shape)
    return d.case([x], dict(widths=widths, value=d.scalar(dt, special=True)))


def _slice_tier2(d, dt):
    x = d.array(d.shape(max_side=6), dt, special=True)
    starts = tuple(d.integers(0, s) for s in x.shape)
    stops = tuple(d.integers(0, s) for s in x.shape)
    steps = tuple(d.integers(1, 3) for _ in x.shape)
    return d.case([x], dict(starts=starts, stops=stops, steps=steps))


def _concatenate_tier2(d, dt):
    s = d.shape(min_dims=1, max_side=3)
    axis = d.sampled_from(range(len(s)))
    xs = [
        d.array(s[:axis] + (d.integers(0, 3),) + s[axis + 1 :], dt, special=True)
        for _ in range(d.sampled_from((2, 1, 3)))
    ]
    return d.case(xs, dict(axis=axis))


def _flip_tier2(d, dt):
    x = d.array(d.shape(), dt, special=True)
    return d.case([x], dict(axes=d.subset(list(range(x.ndim)), min_size=1 if x.ndim else 0)))


# ----------------------------------------------------------------------------- tier-3 cases
def _moved(x_shape=(2, 3, 4), **params):
    def cases(r):
        return [r.case([r.normal(x_shape)], dict(params))]

    return cases


def _concatenate_tier3(r):
    return [r.case([r.normal((2, 1, 3)), r.normal((2, 4, 3)), r.normal((2, 2, 3))], dict(axis=1), diff=(0, 1, 2))]


# ----------------------------------------------------------------------------- VJP rules
def _permute_vjp(g, out, x, axes):
    inverse = [0] * len(axes)
    for i, a in enumerate(axes):
        inverse[a] = i
    return (g.permute(inverse),)


def _pad_vjp(g, out, x, widths, value=0):
    return (g._slice([lo for lo, _ in widths], [lo + s for (lo, _), s in zip(widths, x.shape)], [1] * x.ndim),)


def _slice_vjp(g, out, x, starts, stops, steps):
    # Put each strided element back at its place: interleave zeros (pad a new unit axis up to
    # the step, then merge it), then pad the ends. Only movement ops, so this is differentiable too.
    for d, step in enumerate(steps):
        if step > 1 and g.shape[d] > 0:
            shape = g.shape
            g = g.unsqueeze(d + 1)
            g = g.pad([(0, 0)] * (d + 1) + [(0, step - 1)] + [(0, 0)] * (len(shape) - d - 1))
            g = g.reshape(shape[:d] + (shape[d] * step,) + shape[d + 1 :])
            g = g._slice(
                [0] * g.ndim,
                [min(s, (shape[d] - 1) * step + 1) if i == d else s for i, s in enumerate(g.shape)],
                [1] * g.ndim,
            )
    widths = [(a, s - a - n) for a, s, n in zip(starts, x.shape, g.shape)]
    return (g.pad(widths),)


def _concatenate_vjp(g, out, *xs, axis):
    grads, start = [], 0
    for x in xs:
        n = x.shape[axis]
        grads.append(g.narrow(axis, start, n))
        start += n
    return tuple(grads)


# ----------------------------------------------------------------------------- the records
MOVEMENT = dict(group="movement", dtypes=ALL)
reshape = defprim(
    "reshape",
    **MOVEMENT,
    doc="reshape(x, shape): same elements in row-major order, new shape of equal size.",
    abstract=_reshape,
    cases=_reshape_tier2,
    grad_cases=_moved(shape=(4, 6)),
    vjp=lambda g, out, x, shape: (g.reshape(x.shape),),
)
permute = defprim(
    "permute",
    **MOVEMENT,
    doc="permute(x, axes): output dim i is input dim axes[i].",
    abstract=_permute,
    cases=_permute_tier2,
    grad_cases=_moved(axes=(2, 0, 1)),
    vjp=_permute_vjp,
)
expand = defprim(
    "expand",
    **MOVEMENT,
    doc="expand(x, shape): broadcast x to `shape` (NumPy rules), without copying where possible.",
    abstract=_expand,
    cases=_expand_tier2,
    grad_cases=_moved((3, 1), shape=(2, 3, 4)),
    vjp=lambda g, out, x, shape: (unbroadcast(g, x.shape),),
)
pad = defprim(
    "pad",
    **MOVEMENT,
    doc="pad(x, widths, value): widths is one (lo, hi) pair of non-negative ints per dim; "
    "the new border holds `value` (may be -inf, for max pooling).",
    abstract=_pad,
    cases=_pad_tier2,
    grad_cases=_moved(widths=((1, 0), (2, 1), (0, 2)), value=0.0),
    vjp=_pad_vjp,
)
slice = defprim(
    "slice",
    **MOVEMENT,
    doc="slice(x, starts, stops, steps): per dim, elements start, start+step, ... < "
    "stop; steps > 0 and 0 <= start, stop <= size (the front end normalizes negative and reversed slices).",
    abstract=_slice,
    cases=_slice_tier2,
    grad_cases=_moved((6, 5), starts=(1, 0), stops=(6, 4), steps=(2, 3)),
    vjp=_slice_vjp,
)
concatenate = defprim(
    "concatenate",
    **MOVEMENT,
    doc="concatenate(*xs, axis): join along `axis`; all other dims and the dtype equal.",
    abstract=_concatenate,
    cases=_concatenate_tier2,
    grad_cases=_concatenate_tier3,
    vjp=_concatenate_vjp,
)
flip = defprim(
    "flip",
    **MOVEMENT,
    doc="flip(x, axes): reverse the order of elements along each of `axes`.",
    abstract=_flip,
    cases=_flip_tier2,
    grad_cases=_moved(axes=(0, 2)),
    vjp=lambda g, out, x, axes: (g.flip(axes),),
)

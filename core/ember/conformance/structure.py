"""Tier 2's deterministic half: every structural case of a primitive, enumerated.

A record's case generator ``cases(d, dtype)`` asks its toolkit for structure (a shape, a pair
of broadcastable shapes, axes, keepdims, a permutation, which side a Python scalar is on) and
for values (array elements, seeds, sizes). Under hypothesis (:class:`cases.Draw`) everything is
drawn. Here :class:`Enumerate` offers the same methods, but each structural question returns
every answer in turn: :func:`structural_cases` runs the generator once per path through its
structural choices (a depth-first walk over the choice tree, as a model checker walks a state
space), while values come from a random generator seeded by the path. So ``(3, 1) + (1, 4)``,
a size-0 dim, a negative axis and ``keepdims=True`` are each checked on every run, whatever
``--max-examples`` says, and hypothesis adds random examples on top.

Structural sizes are small on purpose: a case checks structure, not arithmetic at scale.

>>> from ember.primitives import PRIMITIVES
>>> cases = structural_cases(PRIMITIVES["add"].cases, "float32", None)
>>> shapes = {tuple(a.shape for a in c.args if hasattr(a, "shape")) for c in cases}
>>> ((3, 1), (1, 4)) in shapes and ((4,), (2, 3, 4)) in shapes and ((0,),) in shapes
True
"""

from __future__ import annotations

import itertools
import zlib

import numpy as np

from ..primitives import FLOATS
from .cases import SCALAR_KINDS, Case, finite_max, int_bounds, most_repeated

#: the shapes a structural ``shape()`` offers, before its limits apply: the typical one, 0-d,
#: empty, size 1, rank 1 to 3 with distinct sizes (a transposed read shows), size-1 and size-0 dims
SHAPES = ((3, 4), (), (0,), (1,), (5,), (2, 3, 4), (4, 1), (1, 3), (2, 0, 3), (3, 1, 2))
#: the full shape broadcasting patterns are cut from: distinct sizes, so a tiled or transposed
#: operand gives different numbers
BASE = (2, 3, 4)
#: special values every structural float array holds (where the case allows them)
SPECIAL_VALUES = (np.nan, np.inf, -np.inf, -0.0, 0.0)
#: at most this many cases per (primitive, dtype); a larger tree is thinned evenly
LIMIT = 720


class NotEnumerable(Exception):
    """The generator drew a raw hypothesis strategy (``d.draw``): its structure cannot be listed."""


def operand_shapes(max_dims=3, base=BASE):
    """Every shape an operand of a broadcast can have: a suffix of ``base`` of each rank up to
    ``max_dims``, with any of its dims set to 1 (rank 3: 1 + 2 + 4 + 8 = 15 shapes).

    >>> operand_shapes(2, (3, 4))
    [(), (4,), (1,), (3, 4), (3, 1), (1, 4), (1, 1)]
    """
    out = []
    for rank in range(max_dims + 1):
        full = base[len(base) - rank :]
        for ones in itertools.product((False, True), repeat=rank):
            out.append(tuple(1 if one else s for s, one in zip(full, ones)))
    return out


def broadcast_patterns(n, max_dims=3):
    """Shape tuples for ``n`` operands: every pair for two operands (size-1 dims on either side
    or both, rank mismatch, 0-d); for three, every triple of ranks up to 2 plus each operand in
    every rank-3 pattern against full-shaped others."""
    if n == 2:
        return list(itertools.product(operand_shapes(max_dims), repeat=2))
    low = list(itertools.product(operand_shapes(min(max_dims, 2)), repeat=n))
    full = BASE[len(BASE) - max_dims :]
    for i in range(n):
        for s in operand_shapes(max_dims):
            low.append(tuple(s if j == i else full for j in range(n)))
    return list(dict.fromkeys(low))


class Enumerate:
    """The toolkit of :class:`cases.Draw` with structure enumerated: ``choose`` answers from
    ``path`` (one index per structural question, 0 past its end) and records how many answers
    each question had, so the caller can step to the next path."""

    def __init__(self, ctx, path):
        self.ctx, self.path, self.widths = ctx, path, []
        self.rng = np.random.default_rng(zlib.crc32(repr(path).encode()))
        from hypothesis import strategies

        self.st = strategies

    # -- structure: every answer in turn -------------------------------------------------------
    def choose(self, options):
        options = list(options)
        k = len(self.widths)
        self.widths.append(len(options))
        return options[self.path[k] if k < len(self.path) else 0]

    def booleans(self):
        return self.choose((False, True))

    def sampled_from(self, items):
        return self.choose(items)

    def shape(self, min_dims=0, max_dims=3, min_side=0, max_side=4):
        fits = [
            tuple(min(s, max_side) for s in sh)
            for sh in SHAPES
            if min_dims <= len(sh) <= max_dims and all(min(s, max_side) >= min_side for s in sh)
        ]
        return self.choose(dict.fromkeys(fits) or [(max(min_side, 1),) * max(min_dims, 1)])

    def broadcastable(self, n, max_dims=3, max_side=3):
        return list(self.choose(broadcast_patterns(n, max_dims)))

    def subset(self, items, min_size=0):
        return self.choose(s for r in range(min_size, len(items) + 1) for s in itertools.combinations(items, r))

    def axes(self, ndim, min_size=0, among=None):
        """Every set of axes (of ``among``, default all), spelt non-negative and negative
        (NumPy's axis=None is all of them)."""
        among = list(range(ndim)) if among is None else list(among)
        sets = [s for r in range(min_size, len(among) + 1) for s in itertools.combinations(among, r)]
        return self.choose(dict.fromkeys(sets + [tuple(a - ndim for a in s) for s in sets]))

    def axis(self, ndim):
        return self.choose(range(-ndim, ndim))

    def permutation(self, n):
        return self.choose(itertools.permutations(range(n)))

    # -- values: random, seeded by the path ---------------------------------------------------
    def integers(self, lo, hi):
        if hi - lo < 2**62:
            return int(self.rng.integers(lo, hi + 1))
        return lo + int.from_bytes(self.rng.bytes(16), "little") % (hi - lo + 1)  # 64-bit seeds

    def draw(self, strategy):
        raise NotEnumerable("a raw hypothesis strategy")

    def scalar(self, dtype, special=False):
        if dtype == "bool":
            return bool(self.rng.integers(2))
        if dtype in FLOATS:
            if special and self.rng.integers(4) == 3:
                return float(self.rng.choice(SPECIAL_VALUES))
            return float(self.rng.uniform(-10, 10))
        low, high = int_bounds(dtype)
        return int(self.rng.integers(low, high + 1))

    def weak_scalar(self, kind, dtype, special=False):
        """A Python scalar of ``kind`` (bool, int, float) next to an array of ``dtype``."""
        if kind == "int":
            return self.scalar(dtype if dtype not in FLOATS and dtype != "bool" else "int32")
        return self.scalar("float64" if kind == "float" else "bool", special)

    def array(self, shape, dtype, special=False, lo=None, hi=None, ties=False):
        rng = self.rng
        if dtype == "bool":
            return np.asarray(rng.random(shape) < 0.5)
        if ties:  # few distinct values: many equal elements
            out = rng.integers(0 if dtype.startswith("uint") else -2, 3, shape).astype(dtype)
        elif dtype in FLOATS:
            out = rng.uniform(-10.0 if lo is None else lo, 10.0 if hi is None else hi, shape).astype(dtype)
        else:
            low, high = int_bounds(dtype, lo, hi)
            out = rng.integers(low, high + 1, shape).astype(dtype)
        out = np.asarray(out)
        if special and dtype in FLOATS and out.size >= 2:
            flat = out.reshape(-1)
            k = min(len(SPECIAL_VALUES), out.size - 1)  # at least one ordinary value stays
            flat[rng.permutation(out.size)[:k]] = rng.permutation(np.array(SPECIAL_VALUES))[:k]
        return out

    def indices(self, n, max_dims=2):
        idt = self.choose(("int64", "int32"))
        shape = self.shape(max_dims=max_dims, max_side=4)
        return self.rng.integers(-n, n, shape).astype(idt)

    most_repeated = staticmethod(most_repeated)
    finite_max = staticmethod(finite_max)
    case = staticmethod(Case)
    scalar_kinds = SCALAR_KINDS


def structural_cases(generate, dtype, ctx, limit=LIMIT) -> list:
    """Every case ``generate`` makes on the paths through its structural choices (thinned
    evenly to ``limit``); [] if it draws raw strategies (see :class:`NotEnumerable`)."""
    out: list = []
    path: list[int] = []
    try:
        while True:
            d = Enumerate(ctx, path)
            out.append(generate(d, dtype))
            taken = path[: len(d.widths)] + [0] * (len(d.widths) - len(path))
            k = len(taken) - 1
            while k >= 0 and taken[k] + 1 >= d.widths[k]:
                k -= 1
            if k < 0:
                break
            path = taken[:k] + [taken[k] + 1]
    except NotEnumerable:
        return []
    if len(out) > limit:
        out = [out[int(i * len(out) / limit)] for i in range(limit)]
    return out

"""Tier 3 inputs: the toolkit a primitive's gradient cases are drawn with.

Each differentiable primitive's record has ``grad_cases(r)`` (see ember.primitives), which returns
a few fixed :class:`GradCase` s away from its kinks, drawn with a :class:`Rand`. ``args`` holds
NumPy arrays and Python values in the primitive's argument order; ``diff`` says which arguments
are differentiated (the others, such as a condition or indices, are passed as they are). Inputs
stay where the function is smooth (positive for log and sqrt, away from integers for floor,
ties broken for max), so that finite differences are a fair judge. ``second_order`` in the
record says whether the gradient is differentiated once more.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..primitives import PRIMITIVES


@dataclass
class GradCase:
    args: list
    params: dict = field(default_factory=dict)
    diff: tuple = (0,)
    label: str = ""


class Rand:
    """What a primitive's ``grad_cases(r)`` draws with: ``r.rng`` (a seeded NumPy Generator),
    ``r.dtype`` (the dtype tier 3 runs in) and arrays of that dtype."""

    def __init__(self, rng, dtype):
        self.rng, self.dtype = rng, dtype

    def normal(self, shape, lo=None, hi=None):
        """Standard normal values, or uniform in [lo, hi)."""
        if lo is None:
            return self.rng.standard_normal(shape).astype(self.dtype)
        return self.rng.uniform(lo, hi, shape).astype(self.dtype)

    def away_from_zero(self, shape):
        """Magnitudes in [0.2, 2) of either sign: clear of a kink at 0."""
        return (self.rng.uniform(0.2, 2.0, shape) * self.rng.choice([-1.0, 1.0], shape)).astype(self.dtype)

    def array(self, values, dtype=None):
        return np.asarray(values).astype(dtype or self.dtype)

    case = staticmethod(GradCase)


def grad_cases(op, seed, dtype) -> list:
    """Tier 3's cases for primitive ``op`` in ``dtype``, drawn from ``seed``."""
    return PRIMITIVES[op].grad_cases(Rand(np.random.default_rng(seed), dtype))

"""Random numbers from a counter-based generator (Philox-4x32-10).

The state is just ``(seed, offset)``: draw ``n`` numbers and the offset moves by ``n``. Every
backend implements the same ``random_bits`` primitive, so the same seed gives the same numbers
on numpy, numba, cupy and pure Python, and a checkpoint can save and restore the stream exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import dispatch, dtypes as D
from .registry import get_backend

if TYPE_CHECKING:
    from .tensor import Tensor


class Generator:
    """A stream of random numbers.

    >>> import ember
    >>> g = ember.Generator(seed=1)
    >>> a = ember.rand(3, generator=g)
    >>> g.manual_seed(1); bool((ember.rand(3, generator=g) == a).all())
    True
    """

    def __init__(self, seed: int = 0):
        self.manual_seed(seed)

    def manual_seed(self, seed: int) -> None:
        self.seed = int(seed) & 0xFFFFFFFFFFFFFFFF
        self.offset = 0

    def get_state(self) -> dict[str, int]:
        return {"seed": self.seed, "offset": self.offset}

    def set_state(self, state: dict[str, int]) -> None:
        self.seed, self.offset = int(state["seed"]), int(state["offset"])

    def bits(self, shape: Sequence[int], backend: Any = None) -> Tensor:
        """A uint32 tensor of fresh random words."""
        shape = tuple(shape)
        # Under ember.jit the draw is recorded relative to this generator's state at each call.
        out: Tensor = dispatch.interpreter().random_bits(self, shape, get_backend(backend))
        self.offset += math.prod(shape)
        return out


default_generator = Generator(0)


def manual_seed(seed: int) -> Generator:
    """Seed the default generator (``ember.manual_seed(0)`` like ``torch.manual_seed``)."""
    default_generator.manual_seed(seed)
    return default_generator


def _uniform(shape: tuple[int, ...], dtype: Any, generator: Generator | None, backend: Any) -> Tensor:
    """Uniform [0, 1): as many random bits as the dtype's significand holds (11 for float16,
    24 for float32, 53 from two words for float64), so rounding can never reach 1.0."""
    g = generator or default_generator
    if dtype is D.float64:
        hi = (g.bits(shape, backend).to(D.float64) / 32).floor()
        lo = (g.bits(shape, backend).to(D.float64) / 64).floor()
        return (hi * 67108864.0 + lo) * (1.0 / 9007199254740992.0)
    bits = 11 if dtype is D.float16 else 24
    u: Tensor = (g.bits(shape, backend).to(D.float64) / 2 ** (32 - bits)).floor() * (1.0 / 2**bits)
    return u.to(dtype)


def rand(
    *shape: Any, dtype: Any = None, generator: Generator | None = None, backend: Any = None, requires_grad: bool = False
) -> Tensor:
    """Uniform samples in [0, 1).

    >>> import ember
    >>> _ = ember.manual_seed(0); x = ember.rand(2, 3); x.shape
    (2, 3)
    """
    from .tensor_shape import _shape_arg

    out = _uniform(_shape_arg(shape), D.get(dtype or D.default_float), generator, backend)
    return out.requires_grad_() if requires_grad else out


def randn(
    *shape: Any, dtype: Any = None, generator: Generator | None = None, backend: Any = None, requires_grad: bool = False
) -> Tensor:
    """Standard normal samples (Box-Muller on two uniform draws, computed in float64)."""
    from .tensor_shape import _shape_arg

    shape = _shape_arg(shape)
    u1 = _uniform(shape, D.float64, generator, backend)
    u2 = _uniform(shape, D.float64, generator, backend)
    z = ((1.0 - u1).log() * -2.0).sqrt() * (u2 * (2 * math.pi)).cos()
    out = z.to(D.get(dtype or D.default_float))
    return out.requires_grad_() if requires_grad else out


def randint(
    low: int,
    high: int | None = None,
    size: Sequence[int] = (),
    dtype: Any = None,
    generator: Generator | None = None,
    backend: Any = None,
) -> Tensor:
    """Integers uniform in [low, high)."""
    if high is None:
        low, high = 0, low
    u = _uniform(tuple(size), D.float64, generator, backend)
    return ((u * (high - low)).floor() + low).to(D.get(dtype or D.int64))


def randperm(n: int, generator: Generator | None = None, backend: Any = None) -> Tensor:
    """A random permutation of 0..n-1 (argsort of uniform keys, done by repeated argmax-free sort
    on the host: permutations are small and host-side in practice)."""
    keys = _uniform((n,), D.float64, generator, backend).tolist()
    from .tensor import tensor

    return tensor(sorted(range(n), key=keys.__getitem__), dtype=D.int64, backend=backend)


def uniform_(t: Tensor, low: float = 0.0, high: float = 1.0, generator: Generator | None = None) -> Tensor:
    """Fill ``t`` in place with uniform samples in [low, high)."""
    return t.copy_(rand(t.shape, dtype=t.dtype, generator=generator, backend=t.backend) * (high - low) + low)


def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0, generator: Generator | None = None) -> Tensor:
    """Fill ``t`` in place with normal samples."""
    return t.copy_(randn(t.shape, dtype=t.dtype, generator=generator, backend=t.backend) * std + mean)

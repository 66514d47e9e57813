"""Shared fixtures for the ember.io tests: a set of tensors covering every dtype and shape kind."""

import random

import pytest

from ember.io import DTYPES, TensorBytes

# Scalars (0-d), empty tensors (a zero anywhere in the shape) and ordinary ones.
SHAPES = [(), (0,), (3,), (2, 3), (3, 0, 2)]


def make_tensors(seed=0, shapes=SHAPES, dtypes=tuple(DTYPES)):
    """{name: TensorBytes} with random bytes for every (dtype, shape) pair."""
    rng = random.Random(seed)
    tensors = {}
    for code in dtypes:
        for shape in shapes:
            numel = 1
            for s in shape:
                numel *= s
            n = DTYPES[code].nbytes(numel)
            if n is None:  # F4 packs two values a byte: an odd count is no file
                continue
            raw = rng.randbytes(n)
            if code == "BOOL":  # only 0 and 1 are booleans; other readers may normalise the rest
                raw = bytes(b & 1 for b in raw)
            tensors[f"{code.lower()}/{'x'.join(map(str, shape)) or 'scalar'}"] = TensorBytes(code, shape, raw)
    return tensors


@pytest.fixture
def tensors():
    return make_tensors()


@pytest.fixture(name="make_tensors")
def make_tensors_fixture():
    """The ``make_tensors`` function, for tests that need other seeds or dtypes."""
    return make_tensors

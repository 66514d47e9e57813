"""The operators that draw random numbers: RandomUniform, RandomNormal, their ``Like`` forms,
Bernoulli and Multinomial.

They draw from ember's own generator (``ember.random``: Philox, the same numbers on every
backend), not from the NumPy generator ONNX's reference uses, so the official cases of these
operators cannot match their stored outputs (known_failures.py); what a model gets is the
distribution the operator specifies. A node with a ``seed`` keeps its own generator, seeded
once, so its draws differ from call to call and repeat from one loaded model to the next, as
onnxruntime's do; a node without one draws from ember's default generator
(``ember.manual_seed``). The loader never folds these nodes (``RANDOM`` in ops/__init__.py).
"""

from __future__ import annotations

import struct

from ... import dtypes as D
from ...random import Generator, default_generator, rand, randn
from .common import ints


def _generator(node) -> Generator:
    seed = node.attr("seed")
    if seed is None:
        return default_generator
    # the float's bits, so that seeds 1.0 and 1.5 differ
    return node.cached("generator", lambda: Generator(struct.unpack("<I", struct.pack("<f", float(seed)))[0]))


def _float_dtype(node, like=None):
    code = node.attr("dtype")
    dtype = node.dtype(code) if code is not None else (like.dtype if like is not None else D.float32)
    if not dtype.is_floating_point:
        raise node.error(f"{node.op_type} draws floats; dtype {dtype} is not one")
    return dtype


def _draw(node, like, sample):
    """``sample(*shape, ...)`` (ember's rand or randn) in float64, of the ``shape`` attribute or
    of ``like``'s shape and on its backend (the ``Like`` forms)."""
    shape = tuple(like.shape) if like is not None else tuple(ints(node.attr("shape")))
    backend = like.backend if like is not None else None
    return sample(*shape, dtype=D.float64, generator=_generator(node), backend=backend)


def random_uniform(node, like=None):
    low, high = node.attr("low", 0.0), node.attr("high", 1.0)
    return (_draw(node, like, rand) * (high - low) + low).to(_float_dtype(node, like))


def random_normal(node, like=None):
    mean, scale = node.attr("mean", 0.0), node.attr("scale", 1.0)
    return (_draw(node, like, randn) * scale + mean).to(_float_dtype(node, like))


def bernoulli(node, p):
    """1 with probability ``p`` (each element its own), else 0, in ``dtype`` (default: p's)."""
    u = rand(*p.shape, dtype=D.float64, generator=_generator(node), backend=p.backend)
    code = node.attr("dtype")
    return (u < p.to(D.float64)).to(node.dtype(code) if code is not None else p.dtype)


def multinomial(node, logits):
    """``sample_size`` class indices per row of ``logits`` (batch, classes), each drawn with
    probability softmax(logits): the first class whose running probability passes a uniform draw."""
    n = node.attr("sample_size", 1)
    probs = logits.to(D.float64).softmax(-1)
    running = probs.cumsum(-1)
    u = rand(logits.shape[0], n, 1, dtype=D.float64, generator=_generator(node), backend=logits.backend)
    index = (u >= running.unsqueeze(1)).long().sum(-1).clamp(max=logits.shape[1] - 1)  # round-off past 1
    code = node.attr("dtype")
    return index.to(node.dtype(code) if code is not None else D.int32)


OPS = {
    "RandomUniform": (random_uniform, 1),
    "RandomNormal": (random_normal, 1),
    "RandomUniformLike": (random_uniform, 1),
    "RandomNormalLike": (random_normal, 1),
    "Bernoulli": (bernoulli, 15),
    "Multinomial": (multinomial, 7),
}

"""Batch-capable image transforms on numpy arrays.

Each transform takes an array whose last three axes are ``C, H, W`` (one image, or a batch
``N, C, H, W``) and a ``numpy.random.Generator``. The :class:`~ember.data.DataLoader`
calls them once per batch with a generator seeded from ``(seed, epoch, batch index)``, so
augmentation is reproducible and a resumed run draws exactly what the first run drew.
Transforms mark themselves ``batched = True``; any other callable is applied per sample.

>>> import numpy as np
>>> x = np.full((2, 1, 4, 4), 255, dtype=np.uint8)
>>> t = Compose([ToFloat(), Normalize(0.5, 0.5), RandomHorizontalFlip()])
>>> t(x, np.random.default_rng(0)).max()
np.float32(1.0)
"""

from __future__ import annotations

import numpy as np


def _rng(rng):
    # standalone calls may omit rng (like torchvision); the loader always passes one
    return rng if rng is not None else np.random.default_rng()


def _as_batch(x):
    x = np.asarray(x)
    if x.ndim < 3:
        raise ValueError(f"expected images with axes (..., C, H, W), got shape {x.shape}")
    return x.reshape((-1,) + x.shape[-3:]), x.shape[:-3]


class Compose:
    """Apply transforms in order; batched if all of them are.

    >>> Compose([ToFloat()])(np.array([[[[255]]]], dtype=np.uint8)).tolist()
    [[[[1.0]]]]
    """

    def __init__(self, transforms):
        self.transforms = list(transforms)
        self.batched = all(getattr(t, "batched", False) for t in self.transforms)

    def __call__(self, x, rng=None):
        rng = _rng(rng)
        for t in self.transforms:
            x = t(x, rng) if getattr(t, "batched", False) else t(x)
        return x

    def __repr__(self):
        return "Compose([" + ", ".join(map(repr, self.transforms)) + "])"


class ToFloat:
    """uint8 in [0, 255] to float32 in [0, 1] (``x / 255``, as PyTorch's ``ToTensor``).

    >>> ToFloat()(np.array([0, 51, 255], dtype=np.uint8)).tolist()
    [0.0, 0.20000000298023224, 1.0]
    """

    batched = True

    def __call__(self, x, rng=None):
        x = np.asarray(x)
        if x.dtype == np.uint8:
            return np.divide(x, np.float32(255), dtype=np.float32)
        return x.astype(np.float32, copy=False)

    def __repr__(self):
        return "ToFloat()"


class ToTensor:
    """torchvision's ``ToTensor``: images as float32 ``C, H, W`` in [0, 1].

    The rule, by what comes in (ember's datasets already hold float32 ``C, H, W`` in [0, 1], so
    on them it only makes sure of the dtype; the loader turns the batch into an ember tensor):

    | input | output |
    |---|---|
    | uint8 ``H, W`` | ``1, H, W`` divided by 255 |
    | uint8 ``H, W, C`` (a batch: ``N, H, W, C``) | ``C, H, W`` (``N, C, H, W``) divided by 255 |
    | anything else (floats, a tensor) | float32, layout as it is |

    >>> ToTensor()(np.full((2, 2, 3), 255, dtype=np.uint8)).shape
    (3, 2, 2)
    >>> ToTensor()(np.zeros((1, 28, 28), dtype=np.float32)).shape
    (1, 28, 28)
    """

    batched = True

    def __call__(self, x, rng=None):
        x = np.asarray(x)
        if x.dtype != np.uint8:
            return x.astype(np.float32, copy=False)
        if x.ndim == 2:
            x = x[None]
        elif x.ndim in (3, 4):
            x = np.moveaxis(x, -1, -3)
        else:
            raise ValueError(f"ToTensor: expected a uint8 image H,W or H,W,C (or a batch N,H,W,C), got shape {x.shape}")
        return np.divide(x, np.float32(255), dtype=np.float32)  # divide, as torchvision, for equal bits

    def __repr__(self):
        return "ToTensor()"


class Normalize:
    """``(x - mean) / std`` per channel (axis -3); scalars apply to every channel.

    >>> Normalize([0.5], [0.25])(np.ones((1, 1, 1, 2), dtype=np.float32)).tolist()
    [[[[2.0, 2.0]]]]
    """

    batched = True

    def __init__(self, mean, std):
        self.mean = np.asarray(mean, dtype=np.float32).reshape(-1, 1, 1)
        self.std = np.asarray(std, dtype=np.float32).reshape(-1, 1, 1)
        if (self.std == 0).any():
            raise ValueError(f"Normalize: std must be non-zero, got {std}")
        self._scale = np.float32(1) / self.std  # one multiply per element instead of a divide

    def __call__(self, x, rng=None):
        x = np.asarray(x, dtype=np.float32)
        c = x.shape[-3] if x.ndim >= 3 else None
        if len(self.mean) not in (1, c) or len(self.std) not in (1, c):
            raise ValueError(
                f"Normalize: {len(self.mean)} means / {len(self.std)} stds for images with {c} channels "
                f"(shape {x.shape}, channel axis -3)"
            )
        return (x - self.mean) * self._scale

    def __repr__(self):
        return f"Normalize(mean={self.mean.ravel().tolist()}, std={self.std.ravel().tolist()})"


class RandomCrop:
    """Pad by ``padding`` zeros on every side, then crop ``size`` at a random offset per image.

    >>> x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    >>> RandomCrop(4, padding=1)(x, np.random.default_rng(0)).shape
    (1, 1, 4, 4)
    """

    batched = True

    def __init__(self, size, padding=0):
        self.size = (size, size) if np.isscalar(size) else tuple(size)
        self.padding = (padding, padding) if np.isscalar(padding) else tuple(padding)

    def __call__(self, x, rng=None):
        rng = _rng(rng)
        b, lead = _as_batch(x)
        (h, w), (ph, pw) = self.size, self.padding
        if ph or pw:
            b = np.pad(b, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
        H, W = b.shape[-2:]
        if h > H or w > W:
            raise ValueError(f"RandomCrop: crop {self.size} is larger than the padded image {(H, W)}")
        n = len(b)
        top = rng.integers(0, H - h + 1, size=n)
        left = rng.integers(0, W - w + 1, size=n)
        # windows view: (N, C, H-h+1, W-w+1, h, w) without copying; pick one window per image
        windows = np.lib.stride_tricks.sliding_window_view(b, (h, w), axis=(2, 3))
        out = windows[np.arange(n), :, top, left]  # advanced indices first: (N, C, h, w)
        return out.reshape(lead + out.shape[1:])

    def __repr__(self):
        return f"RandomCrop(size={self.size}, padding={self.padding})"


class RandomHorizontalFlip:
    """Mirror each image left-right with probability ``p``.

    >>> x = np.array([[[[1, 2]]]])
    >>> RandomHorizontalFlip(p=1.0)(x, np.random.default_rng(0)).tolist()
    [[[[2, 1]]]]
    """

    batched = True

    def __init__(self, p=0.5):
        self.p = p

    def __call__(self, x, rng=None):
        rng = _rng(rng)
        b, lead = _as_batch(x)
        flip = rng.random(len(b)) < self.p
        out = np.where(flip[:, None, None, None], b[..., ::-1], b)
        return out.reshape(lead + out.shape[1:])

    def __repr__(self):
        return f"RandomHorizontalFlip(p={self.p})"

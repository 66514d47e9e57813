"""torchvision's ``FakeData``: random images and labels, made on demand from the index, for
running a training script without its dataset (pytorch/examples imagenet ``--dummy``).

>>> ds = FakeData(size=3, image_size=(3, 8, 8), num_classes=10)
>>> image, label = ds[0]
>>> image.shape, image.dtype, bool(0 <= label < 10), bool((ds[0][0] == image).all())
((8, 8, 3), dtype('uint8'), True, True)
"""

from __future__ import annotations

import numpy as np

from .dataset import Dataset


class FakeData(Dataset):
    """``size`` samples; sample ``i`` is an image drawn by a generator seeded with
    ``i + random_offset`` (the same image every time) and a label in ``[0, num_classes)``.

    Images come as a PIL image would, uint8 ``H, W, C`` (``H, W`` for one channel), so
    ``transforms.ToTensor()`` makes the float32 ``C, H, W`` a model takes, as in torchvision.
    """

    def __init__(
        self,
        size: int = 1000,
        image_size=(3, 224, 224),
        num_classes: int = 10,
        transform=None,
        target_transform=None,
        random_offset: int = 0,
    ):
        if int(size) != size or size < 0:
            raise ValueError(f"FakeData: size must be an integer >= 0, got {size!r}")
        if len(image_size) != 3 or any(int(d) != d or d < 1 for d in image_size):
            raise ValueError(f"FakeData: image_size must be (C, H, W) of positive integers, got {image_size!r}")
        self.size, self.image_size, self.num_classes = int(size), tuple(int(d) for d in image_size), num_classes
        self.transform, self.target_transform, self.random_offset = transform, target_transform, random_offset

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index):
        if not -self.size <= index < self.size:
            raise IndexError(f"FakeData: index {index} is out of range for {self.size} samples")
        index %= self.size
        rng = np.random.default_rng(index + self.random_offset)
        c, h, w = self.image_size
        image = rng.integers(0, 256, (h, w, c) if c > 1 else (h, w), dtype=np.uint8)
        target = np.int64(rng.integers(0, self.num_classes))
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return image, target

"""Map-style datasets: anything with ``__len__`` and ``__getitem__``.

>>> import numpy as np
>>> ds = ArrayDataset(np.arange(10).reshape(5, 2), np.arange(5))
>>> len(ds), ds[1]
(5, (array([2, 3]), np.int64(1)))
>>> train, val = random_split(ds, [4, 1], seed=0)
>>> len(train), len(val)
(4, 1)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


class Dataset:
    """Base class of map-style datasets: subclasses define ``__len__`` and ``__getitem__``.

    ``__getitem__(i)`` returns one sample, usually a tuple ``(input, target)`` of numpy
    arrays or scalars; :class:`~ember.data.DataLoader` stacks samples into batches.
    """

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} must define __len__")

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")


class ArrayDataset(Dataset):
    """Samples are rows of equally long arrays (PyTorch's ``TensorDataset``).

    The loader batches an ``ArrayDataset`` by fancy-indexing the whole arrays at once,
    which is far faster than gathering samples one by one. ``transform`` applies to the
    first field of a sample, ``target_transform`` to the second (torchvision's arguments);
    the loader applies transforms marked ``batched`` (all of :mod:`ember.data.transforms`) to
    whole batches, with its seeded generator.

    >>> ds = ArrayDataset(np.zeros((3, 2)), np.array([0, 1, 2]), target_transform=lambda y: y + 1)
    >>> ds[2][1]
    np.int64(3)
    """

    def __init__(
        self,
        *arrays: Any,
        transform: Callable[..., Any] | None = None,
        target_transform: Callable[..., Any] | None = None,
    ) -> None:
        self.transform, self.target_transform = transform, target_transform
        if not arrays:
            raise ValueError("ArrayDataset needs at least one array")
        arrays = tuple(np.asarray(a) for a in arrays)
        for i, a in enumerate(arrays):
            if a.ndim == 0:
                raise ValueError(f"ArrayDataset: array {i} is a scalar; every array needs a leading sample axis")
        lengths = [len(a) for a in arrays]
        if len(set(lengths)) != 1:
            shapes = ", ".join(str(a.shape) for a in arrays)
            raise ValueError(f"ArrayDataset: arrays must have the same length along axis 0, got shapes {shapes}")
        self.arrays = arrays

    def __len__(self) -> int:
        return len(self.arrays[0])

    def __getitem__(self, index: int) -> Any:
        sample = tuple(a[index] for a in self.arrays)
        if self.transform is None and self.target_transform is None:
            return sample
        return apply_transforms(sample, self.transform, self.target_transform)


def apply_transforms(
    sample: Any, transform: Callable[..., Any] | None, target_transform: Callable[..., Any] | None, rng: Any = None
) -> Any:
    """``sample`` (or a batch) with ``transform`` on field 0 and ``target_transform`` on field 1.

    >>> apply_transforms((1, 2, 3), lambda x: -x, str)
    (-1, '2', 3)
    """
    fields = list(sample)
    for i, t in ((0, transform), (1, target_transform)):
        if t is not None and i < len(fields):
            fields[i] = t(fields[i], rng) if rng is not None and getattr(t, "batched", False) else t(fields[i])
    return tuple(fields)


class TensorDataset(ArrayDataset):
    """torch's ``TensorDataset``: samples are rows of equally long tensors (or arrays).

    The tensors are read once into NumPy arrays, so batches are gathered by fancy indexing.

    >>> import ember
    >>> ds = TensorDataset(ember.arange(6).reshape(3, 2), ember.tensor([0, 1, 0]))
    >>> len(ds), ds[1][0].tolist()
    (3, [2, 3])
    """

    def __init__(
        self,
        *tensors: Any,
        transform: Callable[..., Any] | None = None,
        target_transform: Callable[..., Any] | None = None,
    ) -> None:
        super().__init__(*(np.array(t) for t in tensors), transform=transform, target_transform=target_transform)


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``, in that order.

    >>> Subset(ArrayDataset(np.arange(5)), [4, 0])[0]
    (np.int64(4),)
    """

    def __init__(self, dataset: Dataset, indices: Sequence[int] | Any) -> None:
        self.dataset = dataset
        self.indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = len(dataset)
        if self.indices.size and (self.indices.min() < -n or self.indices.max() >= n):
            raise IndexError(f"Subset: indices must lie in [-{n}, {n}) for a dataset of length {n}")

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[int(self.indices[index])]


class ConcatDataset(Dataset):
    """Several datasets one after another.

    >>> len(ConcatDataset([ArrayDataset(np.arange(3)), ArrayDataset(np.arange(2))]))
    5
    """

    def __init__(self, datasets: Sequence[Dataset]) -> None:
        self.datasets = list(datasets)
        self.offsets = np.cumsum([0] + [len(d) for d in self.datasets])

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __getitem__(self, index: int) -> Any:
        index = int(index)
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for ConcatDataset of length {len(self)}")
        d = int(np.searchsorted(self.offsets, index, side="right")) - 1
        return self.datasets[d][index - int(self.offsets[d])]


def random_split(dataset: Dataset, lengths: Sequence[float], seed: int = 0) -> list[Subset]:
    """Split ``dataset`` into non-overlapping random subsets, reproducibly from ``seed``.

    ``lengths`` are counts summing to ``len(dataset)``, or fractions summing to 1 (the
    remainder after flooring goes one each to the first subsets, as in PyTorch).

    >>> [len(s) for s in random_split(ArrayDataset(np.arange(10)), [0.5, 0.3, 0.2])]
    [5, 3, 2]
    """
    n = len(dataset)
    lengths = list(lengths)
    if lengths and all(0 <= x <= 1 for x in lengths) and math.isclose(sum(lengths), 1) and sum(lengths) != n:
        counts = [int(math.floor(n * f)) for f in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        lengths = counts
    if any(int(x) != x or x < 0 for x in lengths) or sum(lengths) != n:
        raise ValueError(
            f"random_split: lengths {lengths} must be non-negative counts summing to {n} or fractions summing to 1"
        )
    perm = np.random.default_rng(seed).permutation(n)
    bounds = np.cumsum([0] + [int(x) for x in lengths])
    return [Subset(dataset, perm[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def array_view(dataset: Any) -> tuple[Any, Any] | None:
    """``(arrays, indices)`` if ``dataset`` is an ArrayDataset or nested Subsets of one, else None.

    ``indices`` maps the dataset's positions to rows of ``arrays`` (None: the identity).
    The loader uses this to gather whole batches by fancy indexing; a dataset whose
    transforms are not all ``batched`` is asked sample by sample instead (None).
    """
    index = None
    while isinstance(dataset, Subset):
        index = dataset.indices if index is None else dataset.indices[index]
        dataset = dataset.dataset
    if type(dataset).__getitem__ is not ArrayDataset.__getitem__ or not isinstance(dataset, ArrayDataset):
        return None  # a subclass that changes __getitem__ must be asked sample by sample
    if not all(t is None or getattr(t, "batched", False) for t in (dataset.transform, dataset.target_transform)):
        return None
    return dataset.arrays, index


def base_transforms(dataset: Any) -> tuple[Any, Any]:
    """``(transform, target_transform)`` of the ArrayDataset under any Subsets (Nones otherwise)."""
    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    return getattr(dataset, "transform", None), getattr(dataset, "target_transform", None)

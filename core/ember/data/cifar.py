"""CIFAR-10: 32x32 colour images in 10 classes, 50k train / 10k test; and a synthetic
stand-in of the same shape for speed tests.

>>> ds = SyntheticCIFAR10(n=4, seed=0)
>>> ds.data.shape, ds.data.dtype, ds.targets.dtype
((4, 3, 32, 32), dtype('float32'), dtype('int64'))
"""

from __future__ import annotations

import re
import tarfile
from pathlib import Path
from typing import IO, cast

import numpy as np

from .dataset import ArrayDataset
from .errors import DataError
from .safe_pickle import load_arrays
from .sources import FileDataset

MAX_BATCH_BYTES = 10000 * (3 * 32 * 32 + 8)  # one batch: 10k images and, at most, int64 labels
CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


class CIFAR10(FileDataset):
    """CIFAR-10 (Krizhevsky, 2009).

    ``data`` is float32 ``[N, 3, 32, 32]`` in [0, 1], ``targets`` int64 ``[N]``. The first
    load reads the python-format archive (verified, then unpickled with numpy-only
    globals) and caches both splits as IDX files under ``root/cifar10``; later loads read
    those. Arguments as for :class:`~ember.data.MNIST`.
    """

    folder = "cifar10"
    mirrors = ("https://www.cs.toronto.edu/~kriz/",)
    archive = "cifar-10-python.tar.gz"
    # the Toronto page publishes md5 c58f30108f718f92721af3b95e74349a; we pin the file's
    # sha256 (the value Keras uses), which identifies the same 170498071 bytes
    archives = {archive: ("sha256:6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce", 170498071)}
    files = dict.fromkeys(
        ["train-images-idx4-ubyte", "train-labels-idx1-ubyte", "test-images-idx4-ubyte", "test-labels-idx1-ubyte"]
    )
    splits = {
        "train": ("train-images-idx4-ubyte", "train-labels-idx1-ubyte"),
        "test": ("test-images-idx4-ubyte", "test-labels-idx1-ubyte"),
    }
    ways = (
        "with a network, ember downloads {mirrors}cifar-10-python.tar.gz (163 MiB, checked by SHA-256)",
        "or place cifar-10-python.tar.gz in {folder} (the cache; EMBER_DATA moves it)",
        "or train without files on the synthetic set: `ember train synthetic-cifar10` "
        "(ember.data.SyntheticCIFAR10: noise plus a per-class pattern, same shapes)",
    )
    classes = CIFAR10_CLASSES
    shapes = {
        "train-images-idx4-ubyte": (50000, 3, 32, 32),
        "train-labels-idx1-ubyte": (50000,),
        "test-images-idx4-ubyte": (10000, 3, 32, 32),
        "test-labels-idx1-ubyte": (10000,),
    }
    members = {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]}

    @classmethod
    def archive_of(cls, file):
        return cls.archive

    @classmethod
    def convert(cls, archive, path):
        return read_cifar_archive(path, cls.members, cls.splits)

    @classmethod
    def validate(cls, arrays, origin):
        super().validate(arrays, origin)
        for images_name, _ in cls.splits.values():
            if images_name in arrays and arrays[images_name].shape[1:] != (3, 32, 32):
                raise DataError(
                    f"{origin}: {images_name} holds images of shape {arrays[images_name].shape[1:]}, expected (3, 32, 32)."
                )


def read_cifar_archive(path, members, splits) -> dict:
    """``{file: uint8 array}`` from CIFAR's python-format tarball, read in memory (nothing is
    extracted to disk, so member names cannot escape the folder)."""
    path = Path(path)
    wanted = {name for names in members.values() for name in names}
    found = {}
    try:
        with tarfile.open(path, "r:*") as tar:
            for m in tar:
                base = m.name.rsplit("/", 1)[-1]
                if m.isfile() and base in wanted and re.fullmatch(r"(\./)?[\w.-]+/" + re.escape(base), m.name):
                    if m.size > MAX_BATCH_BYTES + (1 << 20):  # checked before a byte is read
                        raise DataError(f"{path}:{m.name}: {m.size} bytes, more than a CIFAR batch can be")
                    found[base] = load_arrays(
                        cast(IO[bytes], tar.extractfile(m)).read(),  # a file: m.isfile()
                        f"{path}:{m.name}",
                        max_bytes=MAX_BATCH_BYTES,
                    )
    except (tarfile.TarError, OSError, EOFError) as e:
        raise DataError(f"{path}: corrupt or truncated archive ({e}). Delete it so it is fetched again.") from e
    missing = sorted(wanted - found.keys())
    if missing:
        raise DataError(f"{path}: archive lacks {', '.join(missing)}; it is not CIFAR-10's python version. Delete it.")
    out = {}
    for split, names in members.items():
        images, labels = zip(*(_batch_arrays(found[n], f"{path}:{n}") for n in names))
        out[splits[split][0]] = np.concatenate(images)
        out[splits[split][1]] = np.concatenate(labels)
    return out


def _batch_arrays(batch, name):
    if not isinstance(batch, dict):
        raise DataError(f"{name}: expected a dict batch, got {type(batch).__name__}")
    # Python 2 pickles read as latin1 give str keys; Python 3 ones may give bytes
    batch = {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in batch.items()}
    data, labels = batch.get("data"), batch.get("labels")
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise DataError(
            f"{name}: 'data' must be a uint8 array of shape (N, 3072), got {getattr(data, 'shape', type(data).__name__)}"
        )
    labels = np.asarray(labels)
    if (
        labels.shape != (len(data),)
        or labels.dtype.kind not in "iu"
        or (labels.size and (labels.min() < 0 or labels.max() > 9))
    ):
        raise DataError(f"{name}: 'labels' must be {len(data)} integers in 0..9")
    # rows are channel-major (1024 red, 1024 green, 1024 blue), so this reshape is NCHW
    return data.reshape(-1, 3, 32, 32), labels.astype(np.uint8)


class SyntheticCIFAR10(ArrayDataset):
    """Random CIFAR-shaped data for speed tests: no files, no network, reproducible by seed.

    Each image is noise plus a fixed per-class pattern, so a model can still learn
    something (useful for smoke tests of training loops).

    >>> a, b = SyntheticCIFAR10(n=8, seed=1), SyntheticCIFAR10(n=8, seed=1)
    >>> bool((a.data == b.data).all()), len(a.classes)
    (True, 10)
    """

    classes = CIFAR10_CLASSES

    def __init__(self, n: int = 10000, seed: int = 0, *, transform=None, target_transform=None):
        rng = np.random.default_rng(seed)
        templates = rng.random((10, 3, 32, 32), dtype=np.float32)
        self.targets = rng.integers(0, 10, size=n, dtype=np.int64)
        self.data = rng.random((n, 3, 32, 32), dtype=np.float32)
        self.data += templates[self.targets]
        self.data *= np.float32(0.5)
        super().__init__(self.data, self.targets, transform=transform, target_transform=target_transform)

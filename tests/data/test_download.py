"""The download path, against a local HTTP server serving generated files."""

import os
import warnings

import numpy as np
import pytest

from ember.data import ChecksumError, DataError, DownloadError
from ember.data.download import cache_dir, check_file, download, parse_checksum
from ember.data.idx import encode_idx


@pytest.fixture
def mnist_files(fakes):
    arrays = fakes.fake_mnist_arrays()
    archives = {name + ".gz": fakes.idx_gz(a) for name, a in arrays.items()}
    return arrays, archives


def serve(server, archives, prefix="/m"):
    for name, data in archives.items():
        server.files[f"{prefix}/{name}"] = data
    return server.url + prefix


def leftovers(folder):
    return sorted(p.name for p in folder.rglob("*")) if folder.exists() else []


def test_cache_dir_resolution(monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_DATA", str(tmp_path / "a"))
    assert cache_dir() == tmp_path / "a"
    monkeypatch.delenv("EMBER_DATA")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "ember" / "datasets"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "ember" / "datasets"


def test_download_verifies_and_caches_idx(server, fakes, mnist_files, isolated_cache):
    arrays, archives = mnist_files
    FakeMNIST = fakes.fake_mnist_class(archives, arrays)
    base = serve(server, archives)
    train = FakeMNIST(train=True, mirrors=[base])
    assert train.data.shape == (20, 1, 28, 28) and train.data.dtype == np.float32
    np.testing.assert_array_equal(train.data[:, 0], arrays["train-images-idx3-ubyte"] / np.float32(255))
    np.testing.assert_array_equal(train.targets, arrays["train-labels-idx1-ubyte"])
    assert train.targets.dtype == np.int64
    # only the plain IDX files stay: archives and partials are gone
    assert leftovers(isolated_cache / "fake-mnist") == ["train-images-idx3-ubyte", "train-labels-idx1-ubyte"]
    n = len(server.log)
    again = FakeMNIST(train=True, mirrors=[base])
    assert len(server.log) == n  # served from the cache
    np.testing.assert_array_equal(again.data, train.data)
    test = FakeMNIST(train=False, mirrors=[base])
    assert len(test) == 10 and {p for p, _ in server.log[n:]} == {
        "/m/t10k-images-idx3-ubyte.gz",
        "/m/t10k-labels-idx1-ubyte.gz",
    }


def test_mirror_env_var_uses_dataset_subfolder(server, fakes, mnist_files, monkeypatch):
    arrays, archives = mnist_files
    serve(server, archives, prefix="/mirror/fake-mnist")
    monkeypatch.setenv("EMBER_DATA_MIRROR", "http://127.0.0.1:9/nothing-here " + server.url + "/mirror/")
    ds = fakes.fake_mnist_class(archives, arrays)(train=False)
    assert len(ds) == 10


def test_wrong_checksum_is_rejected_and_nothing_cached(server, fakes, mnist_files, isolated_cache):
    arrays, archives = mnist_files
    FakeMNIST = fakes.fake_mnist_class(archives, arrays)
    tampered = dict(archives)
    tampered["t10k-labels-idx1-ubyte.gz"] = fakes.idx_gz(np.zeros(10, np.uint8))
    base = serve(server, tampered)
    with pytest.raises(ChecksumError) as info:
        FakeMNIST(train=False, mirrors=[base])
    msg = str(info.value)
    expected = FakeMNIST.archives["t10k-labels-idx1-ubyte.gz"][0].split(":")[1]
    actual = parse_checksum(fakes.sha256(tampered["t10k-labels-idx1-ubyte.gz"]))[1]
    assert "t10k-labels-idx1-ubyte.gz" in msg and expected in msg and actual in msg
    assert "Nothing was cached" in msg
    assert not any(n.endswith(("-ubyte", ".part")) or "labels" in n for n in leftovers(isolated_cache))


def test_corrupted_file_with_valid_checksum_is_a_clear_error(server, fakes, mnist_files, isolated_cache):
    """The checksum table vouches for the bytes, but the IDX inside is truncated."""
    arrays, archives = mnist_files
    broken = dict(archives)
    import gzip

    broken["train-labels-idx1-ubyte.gz"] = gzip.compress(encode_idx(arrays["train-labels-idx1-ubyte"])[:-3])
    FakeMNIST = fakes.fake_mnist_class(broken)  # checksums of the broken files, no content pins
    base = serve(server, broken)
    with pytest.raises(
        DataError, match=r"train-labels-idx1-ubyte.gz: truncated IDX file: header promises shape \(20,\)"
    ):
        FakeMNIST(train=True, mirrors=[base])
    left = leftovers(isolated_cache / "fake-mnist")
    assert "train-labels-idx1-ubyte.gz" not in left  # the unreadable archive is deleted
    assert not any(n.endswith(("-ubyte", ".part", ".tmp")) for n in left)  # and nothing half-written


def test_interrupted_download_resumes_with_range(server, fakes, mnist_files, isolated_cache):
    arrays, archives = mnist_files
    FakeMNIST = fakes.fake_mnist_class(archives, arrays)
    base = serve(server, archives)
    path = "/m/train-images-idx3-ubyte.gz"
    server.cut_once.add(path)
    with pytest.raises(DownloadError, match=r"(?s)connection closed after \d+ of \d+ bytes.*run again to resume"):
        FakeMNIST(train=True, mirrors=[base])
    part = isolated_cache / "fake-mnist" / "train-images-idx3-ubyte.gz.part"
    half = len(archives["train-images-idx3-ubyte.gz"]) // 2
    assert part.stat().st_size == half
    ds = FakeMNIST(train=True, mirrors=[base])
    assert server.requests(path)[-1] == (path, f"bytes={half}-")
    np.testing.assert_array_equal(ds.targets, arrays["train-labels-idx1-ubyte"])
    assert not part.exists()


def test_resume_across_mirrors_in_one_call(server, fakes, mnist_files):
    arrays, archives = mnist_files
    a, b = serve(server, archives, "/a"), serve(server, archives, "/b")
    server.cut_once.add("/a/train-images-idx3-ubyte.gz")
    FakeMNIST = fakes.fake_mnist_class(archives, arrays)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = FakeMNIST(train=True, mirrors=[a, b])
    assert len(ds) == 20
    assert server.requests("/b/train-images-idx3-ubyte.gz")[0][1] is not None  # a Range request


def test_server_ignoring_range_restarts_cleanly(server, tmp_path):
    data = os.urandom(5000)
    server.files["/f.bin"] = data
    server.ignore_range.add("/f.bin")
    dest = tmp_path / "f.bin"
    (tmp_path / "f.bin.part").write_bytes(data[:1000])
    download([server.url + "/f.bin"], dest, "sha256:" + __import__("hashlib").sha256(data).hexdigest(), quiet=True)
    assert dest.read_bytes() == data


def test_oversized_response_is_cut_off_and_deleted(server, tmp_path):
    server.files["/big"] = b"x" * 10_000
    with pytest.raises(DownloadError, match="server offers 10000 bytes, the genuine file has 100"):
        download([server.url + "/big"], tmp_path / "big", "md5:" + "0" * 32, size=100, quiet=True)
    assert list(tmp_path.iterdir()) == []


def test_unreachable_mirror_and_404(server, tmp_path):
    with pytest.raises(DownloadError, match=r"(?s)HTTP 404.*EMBER_DATA_MIRROR"):
        download([server.url + "/missing"], tmp_path / "x", "md5:" + "0" * 32, quiet=True)


def test_check_file_deletes_on_request(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"abc")
    with pytest.raises(ChecksumError, match="f: md5 mismatch: expected 0+, got 900150983cd24fb0d6963f7d28e17f72"):
        check_file(p, "md5:" + "0" * 32, delete=True)
    assert not p.exists()


def test_download_false_names_folders_and_fix(fakes, mnist_files):
    arrays, archives = mnist_files
    with pytest.raises(
        DataError, match=r"(?s)train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz not found.*download=True"
    ):
        fakes.fake_mnist_class(archives, arrays)(train=True, download=False)


def test_offline_data_path_accepts_recompressed_copies(fakes, mnist_files, tmp_path, monkeypatch):
    """Like Debian's package: same content, different gzip bytes. Accepted via content checksums."""
    import gzip

    arrays, archives = mnist_files
    FakeMNIST = fakes.fake_mnist_class(archives, arrays)
    shelf = tmp_path / "shelf" / "fake-mnist"
    shelf.mkdir(parents=True)
    for name, a in arrays.items():
        (shelf / (name + ".gz")).write_bytes(gzip.compress(encode_idx(a), compresslevel=1))
    monkeypatch.setenv("EMBER_DATA_PATH", str(tmp_path / "nowhere") + os.pathsep + str(tmp_path / "shelf"))
    ds = FakeMNIST(train=True, download=False)
    np.testing.assert_array_equal(ds.targets, arrays["train-labels-idx1-ubyte"])
    # a copy whose content differs is ignored with a warning
    (shelf / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(encode_idx(np.zeros(10, np.uint8))))
    with (
        pytest.warns(UserWarning, match="ignoring .*t10k-labels-idx1-ubyte.gz"),
        pytest.raises(DataError, match="not found"),
    ):
        FakeMNIST(train=False, download=False)


def test_corrupt_cache_file_is_detected_and_refetched(server, fakes, mnist_files, isolated_cache):
    arrays, archives = mnist_files
    FakeMNIST = fakes.fake_mnist_class(archives, arrays)
    base = serve(server, archives)
    FakeMNIST(train=False, mirrors=[base])
    cached = isolated_cache / "fake-mnist" / "t10k-images-idx3-ubyte"
    raw = bytearray(cached.read_bytes())
    raw[100] ^= 0xFF
    cached.write_bytes(bytes(raw))
    with pytest.warns(UserWarning, match="does not match its sha256 checksum"):
        ds = FakeMNIST(train=False, mirrors=[base])
    np.testing.assert_array_equal(ds.data[:, 0], arrays["t10k-images-idx3-ubyte"] / np.float32(255))


# -- CIFAR-10's python format ---------------------------------------------------------------------


def test_cifar_download_parse_and_cache(server, fakes, isolated_cache):
    archive, batches = fakes.fake_cifar()
    server.files["/c/cifar-10-python.tar.gz"] = archive
    FakeCIFAR = fakes.fake_cifar_class(archive)
    train = FakeCIFAR(train=True, mirrors=[server.url + "/c"])
    x = np.concatenate([batches[f"data_batch_{i}"][0] for i in range(1, 6)])
    y = np.concatenate([batches[f"data_batch_{i}"][1] for i in range(1, 6)])
    assert train.data.shape == (15, 3, 32, 32) and train.classes[0] == "airplane"
    np.testing.assert_array_equal(train.data, x / np.float32(255))
    np.testing.assert_array_equal(train.targets, y)
    assert leftovers(isolated_cache / "fake-cifar") == sorted(FakeCIFAR.files)  # both splits, archive gone
    n = len(server.log)
    test = FakeCIFAR(train=False, mirrors=[server.url + "/c"])
    assert len(server.log) == n
    np.testing.assert_array_equal(test.targets, batches["test_batch"][1])


def test_cifar_hostile_pickle_is_refused_and_not_run(server, fakes, tmp_path, isolated_cache):
    import pickle

    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    archive, batches = fakes.fake_cifar()
    members = {n: fakes.cifar_batch(*xy) for n, xy in batches.items()}
    members["data_batch_3"] = pickle.dumps({"data": Evil()}, protocol=2)
    hostile = fakes.cifar_tar(members)
    server.files["/c/cifar-10-python.tar.gz"] = hostile
    with pytest.raises(DataError, match="data_batch_3: refused to load: the pickle references"):
        fakes.fake_cifar_class(hostile)(mirrors=[server.url + "/c"])
    assert not marker.exists()
    assert leftovers(isolated_cache / "fake-cifar") == []


def test_cifar_archive_missing_members(server, fakes):
    archive, batches = fakes.fake_cifar()
    partial = fakes.cifar_tar({"data_batch_1": fakes.cifar_batch(*batches["data_batch_1"])})
    server.files["/c/cifar-10-python.tar.gz"] = partial
    with pytest.raises(DataError, match="archive lacks data_batch_2, data_batch_3"):
        fakes.fake_cifar_class(partial)(mirrors=[server.url + "/c"])


def test_synthetic_cifar_is_seeded():
    from ember.data import SyntheticCIFAR10

    a, b, c = SyntheticCIFAR10(64, seed=0), SyntheticCIFAR10(64, seed=0), SyntheticCIFAR10(64, seed=1)
    assert a.data.shape == (64, 3, 32, 32) and a.data.dtype == np.float32 and a.targets.dtype == np.int64
    assert a.data.min() >= 0 and a.data.max() <= 1
    np.testing.assert_array_equal(a.data, b.data)
    assert not np.array_equal(a.data, c.data)

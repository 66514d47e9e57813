"""PyTorch's answers, stored: the tests compare with torch without needing torch installed.

A test that compares ember with torch passes every torch value it checks against through
:func:`known`. What happens then depends on whether torch is installed:

| torch | ``EMBER_WRITE_REFERENCES`` | ``known(value)`` |
|---|---|---|
| absent | - | returns the value stored for this test (torch's code is never run) |
| installed | unset | computes the value with torch, checks it against the stored one, returns it |
| installed | ``1`` | computes the value with torch and stores it (``make_references.py`` does this) |

So the stored files cannot drift: any run with torch installed (CI's second step) recomputes
every stored value and fails on a difference. Without torch, ``torch`` in a test is
:data:`ABSENT`, a stand-in on which every operation gives the stand-in back, so a test's
torch lines run as written and only its ``known(...)`` values matter. A test that branches
on a torch value must wrap that value in ``known`` too; reading the stand-in as a Python
value raises and says so.

Values are stored per test file in ``tests/references/<path>.json.gz`` (JSON; arrays as
dtype, shape and base64 bytes; no pickle), under ``<test id>#<n>``: the n-th ``known`` call
of that test. A value may be a tensor, an
array, a Python scalar, string or None, or lists, tuples and dicts of those.
"""

from __future__ import annotations

import base64
import gzip
import json
import math
import os
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
WRITE = os.environ.get("EMBER_WRITE_REFERENCES") == "1"
# A stored float vs a fresh torch run: BLAS libraries, their kernels for each CPU and torch's
# versions round differently. Each element within RTOL of itself, or within ATOL (the absolute
# tolerance tests/conftest.py compares ember with torch at: a gradient that is zero in exact
# arithmetic is rounding noise of about 1e-6 in both), or within RTOL of the array's largest
# magnitude (an element that training steps brought near zero keeps the rounding of the whole).
# Seen: MKL on an AMD EPYC, against values stored on another CPU: 7e-6 after six RMSprop steps
# on values up to about 0.4; a conv bias's gradient under batch norm, 1.3e-6 of noise.
RTOL, ATOL = 1e-5, 1e-5
HOW_TO_WRITE = "python tests/references/make_references.py (needs torch)"


class Absent:
    """Stands for torch, and for every value made with it, where torch is not installed."""

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self

    def __call__(self, *args, **kwargs):
        return self

    def __getitem__(self, key):
        return self

    def __setitem__(self, key, value):
        pass

    def __setattr__(self, name, value):  # t.grad = None: the stand-in stays the stand-in
        pass

    def __mro_entries__(self, bases):  # class Block(torch.nn.Module): a stand-in class
        return (Absent,)

    def _refuse(self, *args):
        raise TypeError(
            "torch is not installed, so this test cannot read a torch value directly; "
            "wrap it in known(...) from tests/references, or mark the test torch"
        )

    __bool__ = __iter__ = __len__ = __float__ = __int__ = __index__ = __str__ = __repr__ = __array__ = _refuse
    __hash__ = object.__hash__


def _same(self, *args):
    return self


for _name in [
    "add",
    "sub",
    "mul",
    "truediv",
    "floordiv",
    "mod",
    "pow",
    "matmul",
    "and",
    "or",
    "xor",
    "lshift",
    "rshift",
]:
    setattr(Absent, f"__{_name}__", _same)
    setattr(Absent, f"__r{_name}__", _same)
for _name in ["neg", "pos", "abs", "invert", "lt", "le", "gt", "ge", "eq", "ne"]:
    setattr(Absent, f"__{_name}__", _same)

ABSENT = Absent()


_torch: list = []


def load_torch():
    """torch (one thread, so results do not depend on the machine's cores) or :data:`ABSENT`."""
    if not _torch:
        try:
            import torch

            torch.set_num_threads(1)
        except ImportError:
            if WRITE:
                raise RuntimeError("EMBER_WRITE_REFERENCES=1 needs torch installed") from None
            torch = ABSENT
        _torch.append(torch)
    return _torch[0]


# -- encoding a value as JSON (arrays as dtype, shape and base64 of their bytes) --------------
def _encode(value):
    if hasattr(value, "detach") and hasattr(value, "numpy"):  # a torch tensor
        value = value.detach().cpu().numpy()
    if isinstance(value, (np.ndarray, np.generic)):
        a = np.asarray(value)  # tobytes() is C order whatever the layout
        return ["a", a.dtype.str, list(a.shape), base64.b64encode(a.tobytes()).decode("ascii")]
    if value is None or isinstance(value, (bool, int, float, str)):
        return ["s", value]
    if isinstance(value, (list, tuple)):
        return ["l" if isinstance(value, list) else "t", [_encode(v) for v in value]]
    if isinstance(value, dict):
        return ["d", [[_encode(k), _encode(v)] for k, v in value.items()]]
    if type(value).__module__.startswith("torch"):  # torch.dtype, torch.Size, ...
        return _encode(tuple(value) if isinstance(value, tuple) else str(value))
    raise TypeError(f"known(): cannot store a {type(value).__name__}")


def _decode(node):
    tag, body = node[0], node[1]
    if tag == "a":
        dtype, shape, data = node[1:]
        return np.frombuffer(base64.b64decode(data), dtype=np.dtype(dtype)).reshape(shape).copy()
    if tag == "s":
        return body
    if tag in ("l", "t"):
        items = [_decode(v) for v in body]
        return items if tag == "l" else tuple(items)
    return {_decode(k): _decode(v) for k, v in body}


def _check(stored, fresh, where):
    """Raise AssertionError if a fresh torch value differs from the stored one."""
    if isinstance(fresh, np.ndarray) or isinstance(stored, np.ndarray):
        assert isinstance(stored, np.ndarray) and isinstance(fresh, np.ndarray), where
        assert (stored.dtype, stored.shape) == (fresh.dtype, fresh.shape), (
            f"{where}: stored {stored.dtype}{stored.shape}, torch gives {fresh.dtype}{fresh.shape}"
        )
        if fresh.dtype.kind == "f":
            finite = np.abs(stored[np.isfinite(stored)])
            scale = float(finite.max()) if finite.size else 0.0
            atol = max(ATOL, RTOL * scale)
            np.testing.assert_allclose(fresh, stored, rtol=RTOL, atol=atol, equal_nan=True, err_msg=where)
        else:
            np.testing.assert_array_equal(fresh, stored, err_msg=where)
    elif isinstance(fresh, (list, tuple, dict)):
        assert type(stored) is type(fresh) and len(stored) == len(fresh), f"{where}: {stored!r} vs {fresh!r}"
        if isinstance(fresh, dict):
            assert list(stored) == list(fresh), f"{where}: keys {list(stored)} vs {list(fresh)}"
            for k in fresh:
                _check(stored[k], fresh[k], f"{where}[{k!r}]")
        else:
            for i, (s, f) in enumerate(zip(stored, fresh)):
                _check(s, f, f"{where}[{i}]")
    elif isinstance(fresh, float) and isinstance(stored, float):
        assert math.isclose(fresh, stored, rel_tol=RTOL, abs_tol=ATOL) or (math.isnan(fresh) and math.isnan(stored)), (
            f"{where}: stored {stored!r}, torch gives {fresh!r}"
        )
    else:
        assert stored == fresh and type(stored) is type(fresh), f"{where}: stored {stored!r}, torch gives {fresh!r}"


def _agrees(stored_node, fresh) -> bool:
    if stored_node is None:
        return False
    try:
        _check(_decode(stored_node), fresh, "")
    except AssertionError:
        return False
    return True


# -- the store: one gzipped JSON file per test file -------------------------------------------
class Store:
    """The stored values of one test file."""

    def __init__(self, test_file: Path):
        rel = test_file.resolve().relative_to(TESTS).with_suffix("")
        self.path = HERE / (str(rel).replace(os.sep, "__") + ".json.gz")
        self.values: dict = {}
        self.previous: dict = {}  # values forgotten before writing, kept if torch still agrees
        if self.path.is_file():
            self.values = json.loads(gzip.decompress(self.path.read_bytes()))
        self.dirty = False

    def forget(self, test_id: str):
        """Drop every value of a test (before writing it again)."""
        for k in [k for k in self.values if k.rsplit("#", 1)[0] == test_id]:
            self.previous[k] = self.values.pop(k)
            self.dirty = True

    def save(self):
        if self.dirty and not self.values:
            self.path.unlink(missing_ok=True)
        elif self.dirty:
            text = json.dumps(dict(sorted(self.values.items())), separators=(",", ":"))
            self.path.write_bytes(gzip.compress(text.encode(), mtime=0))
            self.dirty = False


_stores: dict[Path, Store] = {}
_current: dict = {}  # the running test: store, id, count of known() calls


def _store(path: Path) -> Store:
    if path not in _stores:
        _stores[path] = Store(path)
    return _stores[path]


def begin(test_file, test_id: str, live: bool = False) -> None:
    """Called by the conftest before each test; ``live`` tests (marked ``torch``) store nothing."""
    path = Path(test_file)
    if WRITE and not live:
        _store(path).forget(test_id)
    _current.update(path=path, id=test_id, n=0, live=live)


def end() -> None:
    _current.clear()


def save_all() -> None:
    for store in _stores.values():
        store.save()


def known(value):
    """The torch value ``value`` (a value, or a function computing it with torch) as NumPy:
    from the stored references without torch, checked against them with it.

    Tensors come back as NumPy arrays; lists, tuples, dicts and Python scalars as themselves.
    """
    if not _current:
        raise RuntimeError("known() is only available inside a test")
    store, key = _store(_current["path"]), f"{_current['id']}#{_current['n']}"
    _current["n"] += 1
    if load_torch() is ABSENT:
        if key not in store.values:
            raise LookupError(f"no stored torch reference {key!r} in {store.path.name}; write it with: {HOW_TO_WRITE}")
        return _decode(store.values[key])
    if callable(value) and not hasattr(value, "detach"):
        value = value()
    encoded = _encode(value)
    fresh = _decode(encoded)
    if _current["live"]:
        pass
    elif WRITE:
        # an unchanged answer keeps its stored bytes: torch's last bits vary from run to run
        store.values[key] = encoded if not _agrees(store.previous.get(key), fresh) else store.previous[key]
        store.dirty = True
    elif key not in store.values:
        raise LookupError(
            f"no stored torch reference {key!r} in {store.path.name} (a new test?); write it with: {HOW_TO_WRITE}"
        )
    else:
        _check(
            _decode(store.values[key]),
            fresh,
            f"stored torch reference {key} ({store.path.name}); if torch changed on "
            f"purpose, rewrite with: {HOW_TO_WRITE}",
        )
    return fresh

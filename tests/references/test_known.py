"""The stored-torch-answers mechanism itself: values survive the round trip exactly, a drifted
value is caught, the stand-in refuses to be read, and no stored value outlives its test."""

import gzip
import json
import re

import numpy as np
import pytest

import references
from references import ABSENT, HERE, TESTS, _check, _decode, _encode


def test_values_round_trip_exactly():
    value = {
        0: {"step": np.array(5, np.float32), "buf": np.arange(6, dtype=np.float16).reshape(2, 3)},
        "groups": [{"betas": (0.9, 0.999), "nesterov": False, "fused": None, "name": "x"}],
        "scalar": np.array(2.5),
        "flags": np.array([True, False]),
        "nan": float("nan"),
    }
    back = _decode(json.loads(json.dumps(_encode(value))))
    assert list(back) == list(value) and back["groups"] == value["groups"]
    assert back[0]["buf"].dtype == np.float16 and back[0]["buf"].shape == (2, 3)
    assert back["scalar"].shape == () and back["flags"].dtype == bool
    _check(back, value, "round trip")


def test_a_drifted_value_is_caught():
    stored = {"w": np.array([1.0, 2.0], np.float32), "n": 3}
    with pytest.raises(AssertionError, match="w"):
        _check(stored, {"w": np.array([1.0, 2.1], np.float32), "n": 3}, "drift")
    with pytest.raises(AssertionError, match="float64"):
        _check(stored, {"w": np.array([1.0, 2.0]), "n": 3}, "dtype")
    with pytest.raises(AssertionError, match="stored 3"):
        _check(stored, {"w": stored["w"], "n": 4}, "int")


def test_the_stand_in_runs_torch_lines_and_refuses_to_be_read():
    t = ABSENT.nn.functional.softmax(ABSENT.tensor([1.0]) * 2 + 1, dim=0)
    assert t is ABSENT and (2 - t) is ABSENT and t[0, 1:] is ABSENT

    class Block(ABSENT.nn.Module):  # subclassing a torch class works too
        pass

    assert isinstance(Block()(t), references.Absent)
    for read in (bool, list, float, str, np.asarray):
        with pytest.raises(TypeError, match="wrap it in known"):
            read(t)


def test_no_stored_value_outlives_its_test():
    """Each stored key names a test function that still exists in its file."""
    stale = []
    for path in HERE.glob("*.json.gz"):
        source = TESTS / (path.name.removesuffix(".json.gz").replace("__", "/") + ".py")
        assert source.is_file(), f"{path.name}: no test file {source.name}"
        defined = set(re.findall(r"^def (test_\w+)", source.read_text(encoding="utf-8"), re.M))
        keys = json.loads(gzip.decompress(path.read_bytes()))
        stale += [f"{path.name}: {k}" for k in keys if re.split(r"[\[#]", k)[0] not in defined]
    assert not stale, (
        f"stored values of tests that no longer exist (rewrite with {references.HOW_TO_WRITE}): {stale[:5]}"
    )

"""Malformed and hostile safetensors files: each is a CheckpointError naming file and cause.

First one test per known way to break a file, then fuzzing (hypothesis, derandomized) that
asserts nothing but CheckpointError ever escapes the reader.
"""

import json
import re
import struct

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ember.io import DTYPES, CheckpointError, TensorBytes, load_bytes, load_file, save_bytes

FUZZ = settings(
    derandomize=True, database=None, deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow]
)


def with_header(header, data=b"", *, pad=True):
    """A file with an arbitrary header (a dict/list is JSON-encoded, bytes used as is)."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    if pad:
        raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + data


def entry(dtype="U8", shape=(2,), offsets=(0, 2)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


VALID = save_bytes({"a": TensorBytes("F32", (2,), b"\0" * 8), "b": TensorBytes("U8", (3,), b"xyz")}, {"k": "v"})

HOSTILE = {
    "empty file": (b"", "too short"),
    "short length": (b"\x01\x02", "too short"),
    "header length past end": (struct.pack("<Q", 1000) + b"{}", "exceeds the 2 bytes"),
    "huge header length": (struct.pack("<Q", 2**64 - 1) + b"{}", "exceeds"),
    "not JSON": (with_header(b"{not json}"), "not valid JSON"),
    "not UTF-8": (with_header(b'{"\xff": 1}'), "not UTF-8"),
    "JSON list": (with_header([1, 2]), "not an object"),
    "entry not object": (with_header({"a": 5}), "entry is a JSON int"),
    "unknown dtype": (with_header({"a": entry(dtype="F128")}, b"\0\0"), "unknown dtype 'F128'"),
    "missing dtype": (with_header({"a": {"shape": [1], "data_offsets": [0, 1]}}, b"\0"), "unknown dtype None"),
    "negative shape": (with_header({"a": entry(shape=(-2,))}, b"\0\0"), "non-negative"),
    "float shape": (with_header({"a": entry(shape=(2.0,))}, b"\0\0"), "non-negative"),
    "bool shape": (with_header({"a": entry(shape=(True,))}, b"\0\0"), "non-negative"),
    "huge shape": (with_header({"a": entry(shape=(10**30, 10**30))}, b"\0\0"), "needs over 2**64 bytes"),
    "shape mismatch": (with_header({"a": entry(dtype="F32", shape=(2,))}, b"\0\0"), "needs 8 bytes"),
    "offsets reversed": (with_header({"a": entry(offsets=(2, 0))}, b"\0\0"), "0 <= begin <= end"),
    "negative offsets": (with_header({"a": entry(offsets=(-2, 0))}, b"\0\0"), "0 <= begin <= end"),
    "three offsets": (with_header({"a": entry(offsets=(0, 1, 2))}, b"\0\0"), "not [begin, end]"),
    "offsets out of range": (with_header({"a": entry(offsets=(0, 2))}, b"\0"), "run past"),
    "overlap": (with_header({"a": entry(), "b": entry(offsets=(1, 3))}, b"\0" * 3), "overlaps"),
    "gap": (with_header({"a": entry(offsets=(1, 3))}, b"\0" * 3), "gap"),
    "trailing bytes": (with_header({"a": entry()}, b"\0" * 3), "trailing"),
    "duplicate name": (
        with_header(
            b'{"a":' + json.dumps(entry()).encode() + b',"a":' + json.dumps(entry(offsets=(2, 4))).encode() + b"}",
            b"\0" * 4,
        ),
        "names 'a' twice",
    ),
    "metadata not strings": (with_header({"__metadata__": {"k": 1}}), "strings to strings"),
    "metadata not object": (with_header({"__metadata__": [1]}), "strings to strings"),
    "deep nesting": (with_header(b"[" * 100_000 + b"]" * 100_000), "not valid JSON"),
    "giant integer": (with_header(b'{"a": {"shape": [' + b"9" * 10_000 + b"]}}"), "not valid JSON"),
    "truncated data": (VALID[:-1], "run past"),
    "truncated header": (VALID[:20], "exceeds"),
    "too many dimensions": (with_header({"a": entry(shape=[0] * 65, offsets=(0, 0))}), "65 dimensions"),
}


def forged_checkpoint(directory, blob):
    """A checkpoint whose tensors file is ``blob`` and whose sidecar vouches for it: size and
    sha256 match, the sidecar's own checksum too, so only parsing can find the fault."""
    import hashlib

    from ember.io import write_checkpoint
    from ember.io.checkpoint import _content_hash

    path = write_checkpoint(directory, 1, {"a": TensorBytes("U8", (2,), b"ok")})
    sidecar_path = path[: -len(".safetensors")] + ".json"
    sidecar = json.loads(open(sidecar_path).read())
    sidecar.update(size=len(blob), sha256=hashlib.sha256(blob).hexdigest())
    sidecar["sidecar_sha256"] = _content_hash(sidecar)
    with open(path, "wb") as f:
        f.write(blob)
    with open(sidecar_path, "w") as f:
        f.write(json.dumps(sidecar))
    return path


@pytest.mark.parametrize("case", HOSTILE)
def test_inspect_verify_parses_what_the_checksum_vouches_for(case, tmp_path):
    from ember.io import list_checkpoints

    blob, cause = HOSTILE[case]
    forged_checkpoint(tmp_path, blob)
    assert list_checkpoints(tmp_path)[0].status == "ok"  # sizes agree: only a parse can tell
    [info] = list_checkpoints(tmp_path, verify=True)
    assert cause in info.status


@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_bytes(case):
    blob, cause = HOSTILE[case]
    with pytest.raises(CheckpointError, match=re.escape(cause)) as info:
        load_bytes(blob, source="evil.safetensors")
    assert info.value.path == "evil.safetensors"
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("case", ["header length past end", "offsets out of range", "truncated data"])
def test_hostile_file_names_the_file(case, tmp_path):
    path = tmp_path / "evil.safetensors"
    path.write_bytes(HOSTILE[case][0])
    with pytest.raises(CheckpointError) as info:
        load_file(path)
    assert str(path) in str(info.value)


def test_huge_header_length_reads_nothing_big(tmp_path, monkeypatch):
    """The header length is checked against the file size before any read is sized by it."""
    import ember.io.safetensors as module

    path = tmp_path / "evil.safetensors"
    path.write_bytes(struct.pack("<Q", 10**15) + b"{}")
    reads = []

    class Tracked:
        def __init__(self, f):
            self.f = f

        def read(self, n=-1):
            reads.append(n)
            return self.f.read(n)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(module, "open", lambda *a: Tracked(open(*a)), raising=False)
    with pytest.raises(CheckpointError, match="exceeds"):
        load_file(path)
    assert reads == [8]


@FUZZ
@given(st.data())
def test_fuzz_mutated_valid_file(data):
    blob = bytearray(VALID)
    for _ in range(data.draw(st.integers(1, 4), label="flips")):
        i = data.draw(st.integers(0, len(blob) - 1), label="at")
        blob[i] = data.draw(st.integers(0, 255), label="byte")
    cut = data.draw(st.integers(0, len(blob)), label="truncate to")
    try:
        tensors, _ = load_bytes(bytes(blob[:cut]))
    except CheckpointError:
        return
    for t in tensors.values():  # a flip in the data section still loads, self-consistently
        n = 1
        for s in t.shape:
            n *= s
        assert len(t.data) == n * DTYPES[t.dtype].itemsize


json_scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=5)
json_values = st.recursive(
    json_scalars,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=4), kids, max_size=4),
    max_leaves=12,
)
small_ints = st.integers(-3, 12) | st.sampled_from([2**31, 2**63, 2**64 + 1, 10**40])
entries = st.fixed_dictionaries(
    {
        "dtype": st.sampled_from(["F32", "U8", "BOOL", "I64", "BF16", "F33", "", "f32"]) | json_scalars,
        "shape": st.lists(small_ints, max_size=4) | json_values,
        "data_offsets": st.lists(small_ints, min_size=2, max_size=2) | json_values,
    }
)
headers = st.dictionaries(st.text(max_size=4), entries | json_values, max_size=4) | json_values


@FUZZ
@given(header=headers, data=st.binary(max_size=40))
def test_fuzz_random_headers(header, data):
    try:
        load_bytes(with_header(header, data))  # NaN/Infinity included: json.dumps allows them
    except CheckpointError:
        pass


@FUZZ
@given(st.binary(max_size=64))
def test_fuzz_random_bytes(blob):
    try:
        load_bytes(blob)
    except CheckpointError:
        pass

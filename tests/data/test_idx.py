import gzip

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from ember.data import DataError, read_idx, write_idx
from ember.data.idx import decode_idx, encode_idx

DTYPES = [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64]


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(DTYPES).flatmap(
        lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=5))
    )
)
def test_encode_decode_round_trip(a):
    b = decode_idx(encode_idx(a))
    assert b.dtype == a.dtype.newbyteorder("=") and b.shape == a.shape
    np.testing.assert_array_equal(b, a)


@pytest.mark.parametrize("name", ["x-idx3-ubyte", "x-idx3-ubyte.gz"])
def test_file_round_trip_plain_and_gzip(tmp_path, name):
    a = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    write_idx(tmp_path / name, a)
    raw = (tmp_path / name).read_bytes()
    assert (raw[:2] == b"\x1f\x8b") == name.endswith(".gz")
    np.testing.assert_array_equal(read_idx(tmp_path / name), a)
    assert [p.name for p in tmp_path.iterdir()] == [name]  # no temp file left behind


def test_known_layout_big_endian():
    raw = bytes([0, 0, 0x0C, 1, 0, 0, 0, 2]) + (1).to_bytes(4, "big") + (258).to_bytes(4, "big")
    a = decode_idx(raw)
    assert a.tolist() == [1, 258] and a.dtype == np.int32 and a.dtype.isnative


def test_truncated_file_names_file_and_sizes(tmp_path):
    p = tmp_path / "train-images-idx3-ubyte"
    p.write_bytes(encode_idx(np.zeros((3, 4, 4), np.uint8))[:-5])
    with pytest.raises(
        DataError,
        match=r"train-images-idx3-ubyte: truncated IDX file: header promises shape \(3, 4, 4\) \(48 data bytes\), found only 43",
    ):
        read_idx(p)


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"\x00\x00", "not an IDX file"),
        (b"\x01\x02\x08\x01" + bytes(8), "magic is 01020801"),
        (b"\x00\x00\x07\x01" + bytes(8), "magic is 00000701"),
        (b"\x00\x00\x08\x03\x00\x00", "truncated IDX header"),
        (encode_idx(np.zeros(2, np.uint8)) + b"xx", "2 unexpected trailing bytes"),
    ],
)
def test_malformed_headers(raw, message):
    with pytest.raises(DataError, match=message):
        decode_idx(raw, "f")


def test_truncated_gzip_is_a_clear_error(tmp_path):
    p = tmp_path / "labels.gz"
    p.write_bytes(gzip.compress(encode_idx(np.arange(100, dtype=np.uint8)))[:-10])
    with pytest.raises(DataError, match="labels.gz: corrupt or truncated gzip data"):
        read_idx(p)


def test_unsupported_dtype():
    with pytest.raises(TypeError, match="IDX cannot store dtype uint16"):
        encode_idx(np.zeros(2, np.uint16))

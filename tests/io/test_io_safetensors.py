"""ember.io.safetensors: round trips, the writer's input checks, the dtype table, numpy helpers."""

import doctest
import importlib
import io
import json
import struct
import subprocess
import sys
import textwrap

import pytest

import ember.io as eio
from ember.io import DTYPES, TensorBytes, dtype_info, load_bytes, load_file, save_bytes, save_file


def as_plain(tensors):
    return {k: (t.dtype, tuple(t.shape), bytes(t.data)) for k, t in tensors.items()}


def test_round_trip_bytes_every_dtype_and_shape(tensors):
    loaded, metadata = load_bytes(save_bytes(tensors, {"a": "1", "ü": "ß"}))
    assert as_plain(loaded) == as_plain(tensors)
    assert metadata == {"a": "1", "ü": "ß"}


@pytest.mark.parametrize("mmap", [False, True])
def test_round_trip_file(tensors, tmp_path, mmap):
    path = tmp_path / "t.safetensors"
    save_file(tensors, path)
    loaded, metadata = load_file(path, mmap=mmap)
    assert as_plain(loaded) == as_plain(tensors)
    assert metadata is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.safetensors"]  # no temp file left


def test_empty_file_and_metadata_only():
    assert load_bytes(save_bytes({})) == ({}, None)
    assert load_bytes(save_bytes({}, {"k": "v"})) == ({}, {"k": "v"})


def test_layout_is_aligned_and_padded(tensors):
    blob = save_bytes(tensors)
    (n,) = struct.unpack("<Q", blob[:8])
    assert n % 8 == 0 and blob[8 : 8 + n].rstrip(b" ").endswith(b"}")
    # Larger dtypes first: every tensor starts on a multiple of its own item size.
    for _name, info in json.loads(blob[8 : 8 + n]).items():
        assert info["data_offsets"][0] % DTYPES[info["dtype"]].itemsize == 0


def test_loaded_data_is_read_only_view():
    loaded, _ = load_bytes(bytearray(save_bytes({"x": TensorBytes("U8", (2,), b"ab")})))
    with pytest.raises(TypeError):
        loaded["x"].data[0] = 1


def test_accepts_ember_dtype_names_and_any_buffer():
    import array

    t = TensorBytes("float64", (2,), array.array("d", [1.5, -2.0]))
    loaded, _ = load_bytes(save_bytes({"t": t}))
    assert loaded["t"].dtype == "F64"
    assert struct.unpack("<2d", loaded["t"].data) == (1.5, -2.0)


@pytest.mark.parametrize(
    "tensor, match",
    [
        (TensorBytes("F32", (2,), b"\0" * 4), "needs 8 bytes, data has 4"),
        (TensorBytes("F99", (1,), b"\0"), "unknown dtype 'F99'"),
        (TensorBytes("U8", (-1,), b""), "non-negative"),
        (TensorBytes("U8", (1.0,), b"\0"), "non-negative"),
        (TensorBytes("U8", (True,), b"\0"), "non-negative"),
    ],
)
def test_writer_rejects_bad_tensors(tensor, match):
    with pytest.raises(ValueError, match=match):
        save_bytes({"t": tensor})


def test_writer_rejects_bad_names_metadata_and_data(tmp_path):
    ok = TensorBytes("U8", (1,), b"\0")
    with pytest.raises(ValueError, match="__metadata__"):
        save_bytes({"__metadata__": ok})
    with pytest.raises(ValueError, match="str to str"):
        save_bytes({"t": ok}, {"k": 1})
    with pytest.raises(TypeError, match="bytes-like"):
        save_bytes({"t": TensorBytes("U8", (1,), [0])})
    with pytest.raises(ValueError):
        save_file({"t": TensorBytes("U8", (2,), b"\0")}, tmp_path / "bad.safetensors")
    assert list(tmp_path.iterdir()) == []  # a refused write creates nothing


def test_dtype_table_is_one_table():
    assert {d.ember for d in DTYPES.values()} >= {
        "float32",
        "float64",
        "float16",
        "bfloat16",
        "int32",
        "int64",
        "uint8",
        "uint32",
        "bool",
    }
    for code, d in DTYPES.items():
        assert dtype_info(code) is d and dtype_info(d.ember) is d
    with pytest.raises(ValueError, match="unknown dtype"):
        dtype_info("float128")


def test_repr_does_not_dump_data():
    assert repr(TensorBytes("U8", (3,), b"abc")) == "TensorBytes(dtype='U8', shape=(3,), data=<3 bytes>)"


def test_numpy_helpers(tensors):
    np = pytest.importorskip("numpy")
    for t in tensors.values():
        if t.dtype in ("BF16", "F8_E5M2", "F8_E4M3"):
            # numpy knows these only through ml_dtypes, which to_numpy imports when it is installed
            try:
                import ml_dtypes  # noqa: F401
            except ImportError:
                with pytest.raises(ValueError, match="numpy has no dtype"):
                    eio.to_numpy(t)
                continue
            assert eio.to_numpy(t).dtype.name == t.ember_dtype
            continue
        arr = eio.to_numpy(t)
        assert arr.shape == t.shape and arr.dtype.name == t.ember_dtype
        back = eio.from_numpy(arr)
        assert (back.dtype, back.shape, bytes(back.data)) == (t.dtype, t.shape, bytes(t.data))
    big_endian = np.arange(3, dtype=">i4")
    assert bytes(eio.from_numpy(big_endian).data) == struct.pack("<3i", 0, 1, 2)
    assert bytes(eio.from_numpy(np.arange(6, dtype=np.int64).reshape(2, 3).T).data) == struct.pack(
        "<6q", 0, 3, 1, 4, 2, 5
    )  # non-contiguous input is copied in C order
    with pytest.raises(ValueError, match="cannot store"):
        eio.from_numpy(np.zeros(2, dtype="datetime64[s]"))


@pytest.mark.parametrize("module", ["errors", "atomic", "safetensors", "numpy_io", "checkpoint", "save"])
def test_docstring_examples_run(module):
    if module == "numpy_io":
        pytest.importorskip("numpy")
    mod = importlib.import_module(f"ember.io.{module}")
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


def test_works_without_numpy(tmp_path):
    """The browser build has no numpy: ember.io must import and work with numpy unimportable."""
    script = textwrap.dedent(f"""
        import sys
        sys.modules["numpy"] = None  # makes every `import numpy` raise ImportError
        try:
            import ember
        except ImportError as e:
            print("SKIP", e); raise SystemExit(0)
        from ember.io import TensorBytes, save_bytes, load_bytes, write_checkpoint, read_checkpoint
        t = {{"w": TensorBytes("F32", (1,), b"\\0\\0\\x80?")}}
        assert load_bytes(save_bytes(t))[0]["w"].data == t["w"].data
        write_checkpoint({str(tmp_path)!r}, 1, t, {{"lr": 0.1}})
        tensors, meta = read_checkpoint({str(tmp_path)!r})
        assert bytes(tensors["w"].data) == b"\\0\\0\\x80?" and meta == {{"lr": 0.1, "step": 1}}
        assert "numpy" not in [m for m in sys.modules if sys.modules[m] is not None]
        print("OK")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    if out.stdout.startswith("SKIP"):
        pytest.skip(f"`import ember` itself needs numpy (core, not io): {out.stdout.strip()}")
    assert out.stdout.strip() == "OK"


def test_dump_to_any_file_object():
    buf = io.BytesIO()
    n = eio.dump({"x": TensorBytes("U8", (1,), b"\1")}, buf)
    assert n == len(buf.getvalue())

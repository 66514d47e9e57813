"""Interoperability with the reference implementation (the `safetensors` package), both ways."""

import pytest

np = pytest.importorskip("numpy")
safetensors = pytest.importorskip("safetensors")
import safetensors.numpy as st_numpy  # noqa: E402

from ember.io import DTYPES, from_numpy, load_file, save_bytes, save_file, to_numpy  # noqa: E402

# The dtypes safetensors.numpy can represent (numpy has no bfloat16, float8 or float4).
NUMPY_CODES = [c for c in DTYPES if c != "BF16" and not c.startswith(("F8_", "F4"))]
METADATA = {"format": "np", "note": 'ünïcode "quoted"\n', "empty": ""}


@pytest.fixture
def numpy_tensors(make_tensors):
    def build(seed):
        return {k: to_numpy(t) for k, t in make_tensors(seed, dtypes=NUMPY_CODES).items()}

    return build


def assert_same_arrays(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert a[k].tobytes() == b[k].tobytes(), k  # bit-exact: NaN payloads, -0.0 included


def test_ember_file_loads_in_reference(tmp_path, numpy_tensors):
    arrays = numpy_tensors(1)
    path = str(tmp_path / "ember.safetensors")
    save_file({k: from_numpy(v) for k, v in arrays.items()}, path, METADATA)
    assert_same_arrays(st_numpy.load_file(path), arrays)
    with safetensors.safe_open(path, framework="np") as f:
        assert f.metadata() == METADATA


def test_reference_file_loads_in_ember(tmp_path, numpy_tensors):
    arrays = numpy_tensors(2)
    path = str(tmp_path / "reference.safetensors")
    st_numpy.save_file(arrays, path, metadata=METADATA)
    tensors, metadata = load_file(path)
    assert_same_arrays({k: to_numpy(t) for k, t in tensors.items()}, arrays)
    assert metadata == METADATA


# The reference orders __metadata__ keys by a hash map (varies between runs); ember sorts them.
# So files are byte-identical whenever the metadata has at most one key.
@pytest.mark.parametrize("metadata", [None, {}, {"format": "np"}])
def test_byte_identical_to_reference(numpy_tensors, metadata):
    arrays = numpy_tensors(3)
    ours = save_bytes({k: from_numpy(v) for k, v in arrays.items()}, metadata)
    assert ours == st_numpy.save(arrays, metadata=metadata)


def test_raw_dtypes_both_ways(make_tensors):
    """BF16 and float8 have no numpy dtype: compare raw bytes through the reference's byte API."""
    if not hasattr(safetensors, "TensorSpec"):
        pytest.skip("this safetensors version has no TensorSpec")
    # The reference's byte API takes F4 as torch's float4_e2m1fn_x2: two values an element of the last dim.
    tensors = {k: t for k, t in make_tensors(4).items() if t.dtype != "F4" or t.shape and t.shape[-1] % 2 == 0}
    buffers, specs = [], {}
    for name, t in tensors.items():
        buf = np.frombuffer(bytes(t.data) or b"\0", np.uint8).copy()  # a valid pointer even when empty
        buffers.append(buf)
        dtype, shape = DTYPES[t.dtype].ember, list(t.shape)
        if t.dtype == "F4":
            dtype, shape = "float4_e2m1fn_x2", shape[:-1] + [shape[-1] // 2]
        specs[name] = safetensors.TensorSpec(dtype=dtype, shape=shape, data_ptr=buf.ctypes.data, data_len=len(t.data))
    reference = safetensors.serialize(specs, metadata={"k": "v"})
    assert save_bytes(tensors, {"k": "v"}) == reference
    decoded = dict(safetensors.deserialize(save_bytes(tensors)))
    assert {k: (v["dtype"], tuple(v["shape"]), bytes(v["data"])) for k, v in decoded.items()} == {
        k: (t.dtype, t.shape, bytes(t.data)) for k, t in tensors.items()
    }


def test_special_float_values_bit_exact(tmp_path):
    values = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3.4e38], dtype=np.float32)
    values = np.concatenate([values, np.frombuffer(b"\x01\x00\xc0\x7f", np.float32)])  # a NaN payload
    path = str(tmp_path / "special.safetensors")
    save_file({"v": from_numpy(values)}, path)
    assert st_numpy.load_file(path)["v"].tobytes() == values.tobytes()
    st_numpy.save_file({"v": values}, path)
    assert bytes(load_file(path)[0]["v"].data) == values.tobytes()


def test_ember_tensors_of_the_optional_integer_dtypes_round_trip(tmp_path):
    import ember

    values = {"int8": [-128, 127], "int16": [-(2**15), 2**15 - 1], "uint16": [0, 2**16 - 1], "uint64": [0, 2**64 - 1]}
    tensors = {name: ember.tensor(v, dtype=name) for name, v in values.items()}
    path = str(tmp_path / "ints.safetensors")
    save_file(tensors, path)
    reference = st_numpy.load_file(path)
    assert {k: (a.dtype.name, a.tolist()) for k, a in reference.items()} == {k: (k, v) for k, v in values.items()}
    ember.save(tensors, str(tmp_path / "ints.ember"))
    back = ember.load(str(tmp_path / "ints.ember"))
    assert {k: (t.dtype.name, t.tolist()) for k, t in back.items()} == {k: (k, v) for k, v in values.items()}

"""float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz) as storage dtypes: rounding to nearest, ties to
even, bit for bit with torch and ml_dtypes; values that move keep float8, arithmetic computes in
float32; safetensors files hold them; ONNX's saturating casts clamp first."""

import numpy as np
import pytest
from references import known

import ember
from ember import dtypes as D

FORMATS = [d.name for d in D.FLOAT8]

# ties at every scale, the largest values and just past them, subnormals, inf, nan, signed zero
TRICKY = np.array(
    [1.0, 1.0625, 1.1875, -3.25, 0.3, 240.0, 248.0, 256.0, 448.0, 464.0, 465.0, 480.0, 57344.0, 59392.0, 61440.0]
    + [
        2.0**-9,
        2.0**-10,
        3 * 2.0**-11,
        2.0**-16,
        2.0**-17,
        1.5 * 2.0**-16,
        1e-30,
        np.inf,
        -np.inf,
        np.nan,
        -0.0,
        -1e-30,
    ],
    np.float32,
)


def codes(t):
    return np.frombuffer(t.backend.to_bytes(t._data), np.uint8)


@pytest.mark.parametrize("name", FORMATS)
def test_rounding_equals_torch_but_e4m3fn_overflows_to_nan(torch, name):
    values = np.concatenate([TRICKY, -TRICKY])
    got = ember.tensor(values).to(getattr(ember, name))
    assert got.dtype.name == name and got.dtype.itemsize == 1
    want = known(lambda: torch.tensor(values).to(getattr(torch, name)).float().numpy())
    back = got.float().numpy()
    if name == "float8_e4m3fn":  # torch saturates e4m3fn to +-448; ember (like ml_dtypes, ONNX's saturate=0) gives NaN
        past = np.abs(values) > 464
        assert np.isnan(back[past & ~np.isnan(values)]).all() and (np.abs(want[past & ~np.isnan(values)]) == 448).all()
        back, want = back[~past], want[~past]
    np.testing.assert_array_equal(back, want)  # NaN where torch has NaN, the same signed zeros
    number = ~np.isnan(want)  # a NaN's sign is no value
    assert (np.signbit(back[number]) == np.signbit(want[number])).all()


@pytest.mark.parametrize("name", FORMATS)
def test_every_code_and_a_million_floats_match_ml_dtypes(name):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(0)
    every = np.arange(256, dtype=np.uint8).view(getattr(ml_dtypes, name)).astype(np.float32)
    x = np.concatenate([rng.integers(0, 2**32, 10**6, dtype=np.uint64).astype(np.uint32).view(np.float32), every])
    x = np.concatenate([x, np.nextafter(every, np.float32(np.inf)), (every[1:] + every[:-1]) / 2])  # ties
    with np.errstate(invalid="ignore", over="ignore"):
        want = x.astype(getattr(ml_dtypes, name)).view(np.uint8)
        got = codes(ember.tensor(x).to(getattr(ember, name)))
        nan = np.isnan(x.astype(getattr(ml_dtypes, name)).astype(np.float32))
    np.testing.assert_array_equal(got[~nan], want[~nan])
    assert np.isnan(ember.tensor(got.view(getattr(ml_dtypes, name))).float().numpy()[nan]).all()


def test_values_that_move_keep_float8_and_arithmetic_is_float32():
    x = ember.tensor(np.arange(12, dtype=np.float32).reshape(3, 4) / 4).to(ember.float8_e4m3fn)
    for y in (x.T, x.reshape(4, 3), x[1:, ::2], ember.cat([x, x]), x.flip(0), ember.where(x > 1, x, 0)):
        assert y.dtype is ember.float8_e4m3fn
    assert (x * 2).dtype is ember.float32 and (x * 2).tolist() == (x.float() * 2).tolist()
    assert (x + ember.ones(4, dtype=ember.float8_e5m2)).dtype is ember.float32  # two float8s meet in float32
    assert ember.promote_types(ember.float8_e5m2, ember.float16) is ember.float16
    assert x.to(ember.int32).tolist() == x.float().to(ember.int32).tolist()


def test_safetensors_hold_float8(tmp_path):
    from ember.io import load_file, save_file, to_numpy

    x = ember.tensor(TRICKY)
    tensors = {"e4m3": x.to(ember.float8_e4m3fn), "e5m2": x.to(ember.float8_e5m2)}
    path = str(tmp_path / "f8.safetensors")
    save_file(tensors, path)
    stored, _ = load_file(path)
    assert {k: t.dtype for k, t in stored.items()} == {"e4m3": "F8_E4M3", "e5m2": "F8_E5M2"}
    assert all(bytes(stored[k].data) == codes(t).tobytes() for k, t in tensors.items())
    ember.save(tensors, str(tmp_path / "f8.ember"))
    back = ember.load(str(tmp_path / "f8.ember"))
    for k, t in tensors.items():
        assert back[k].dtype is t.dtype and codes(back[k]).tobytes() == codes(t).tobytes()
    if pytest.importorskip("ml_dtypes"):
        assert to_numpy(stored["e5m2"]).dtype.name == "float8_e5m2"


def test_onnx_cast_saturates_unless_told_not_to():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    import ember.onnx

    def cast(saturate):
        node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E4M3FN, saturate=saturate)
        g = helper.make_graph(
            [node],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT8E4M3FN, [4])],
        )
        return ember.onnx.load(helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 21)]))

    x = ember.tensor([500.0, -np.inf, 1.0625, np.nan])
    assert cast(1)(x).float().tolist()[:3] == [448.0, -448.0, 1.0]
    assert np.isnan(cast(0)(x).float().numpy()[[0, 1, 3]]).all()


def test_a_backend_that_does_not_list_float8_names_it(lacking_backend):
    assert ember.float8_e5m2 in ember.get_backend("numpy").capabilities().dtypes
    x = ember.tensor([1.0]).to(ember.float8_e5m2)
    lacking = lacking_backend
    for attempt in (lambda: ember.tensor([1.0], backend=lacking).to(ember.float8_e5m2), lambda: x.to(lacking)):
        with pytest.raises(ember.DTypeError, match="float8_e5m2 is not supported by backend 'python-lacking'.*float8"):
            attempt()

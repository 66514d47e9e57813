"""The narrow storage dtypes: int4, uint4, int2, uint2, float4_e2m1fn and float8_e8m0fnu.

Codes bit for bit with ml_dtypes (and e8m0 with torch, which ignores the sign where ml_dtypes
gives NaN); values that move keep the dtype, arithmetic computes in int32 or float32;
safetensors holds float4 (packed) and e8m0; ONNX's e8m0 round modes as ONNX's reference."""

import numpy as np
import pytest
from references import known

import ember
from ember import dtypes as D

NARROW = ["int4", "uint4", "int2", "uint2", "float4_e2m1fn"]


def codes(t):
    return np.frombuffer(t.backend.to_bytes(t._data), np.uint8)


def floats_and_ties():
    """A million random float32 bit patterns, the integers -20..20 and the halves between them,
    and float4's values with their midpoints (its ties)."""
    rng = np.random.default_rng(0)
    x = rng.integers(0, 2**32, 10**6, dtype=np.uint64).astype(np.uint32).view(np.float32)
    steps = np.arange(-40, 41, dtype=np.float32) / 2
    f4 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], np.float32)
    ties = (f4[1:] + f4[:-1]) / 2
    special = np.array([np.inf, -np.inf, np.nan, -0.0, 7.0, 1e9], np.float32)
    return np.concatenate([x, steps, f4, -f4, ties, -ties, special])


@pytest.mark.parametrize("name", NARROW)
def test_every_code_and_a_million_floats_match_ml_dtypes(name):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    kind = getattr(ml_dtypes, name)
    every = np.arange(256 if name.startswith("float8") else 16 if "4" in name else 4, dtype=np.uint8)
    decoded = ember.tensor(every.view(kind)).to(D.STORAGE[D.get(name)]).numpy()
    np.testing.assert_array_equal(decoded, every.view(kind).astype(decoded.dtype))
    x = floats_and_ties()
    with np.errstate(invalid="ignore", over="ignore"):
        want = x.astype(kind).view(np.uint8)
    np.testing.assert_array_equal(codes(ember.tensor(x).to(getattr(ember, name))), want)


def test_e8m0_matches_ml_dtypes_on_non_negative_values_and_torch_on_all():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = floats_and_ties()
    got = codes(ember.tensor(x).to(ember.float8_e8m0fnu))
    every = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu)
    np.testing.assert_array_equal(ember.tensor(every).float().numpy(), every.astype(np.float32))
    with np.errstate(invalid="ignore", over="ignore"):
        want = x.astype(ml_dtypes.float8_e8m0fnu).view(np.uint8)
    # ml_dtypes makes negative values and 0 NaN, where torch (and ember) ignore the sign and give
    # 0 the smallest code, and does not round float32 subnormals up to 2**-126, where torch does
    # (test_e8m0_rounds_as_torch_does)
    positive = ~np.signbit(x) & ~(np.abs(x) < 2.0**-126)
    np.testing.assert_array_equal(got[positive], want[positive])


def test_e8m0_rounds_as_torch_does(torch):
    x = np.array([1.5, 3.0, 0.75, 1.25, 0.0, 1e-40, 2.0**-127, 1.5 * 2.0**-127, -3.0, 2.0**127 * 1.5, np.inf])
    x = x.astype(np.float32)
    want = known(lambda: torch.tensor(x).to(torch.float8_e8m0fnu).view(torch.uint8).numpy())
    np.testing.assert_array_equal(codes(ember.tensor(x).to(ember.float8_e8m0fnu)), want)


def test_integers_wrap_and_floats_truncate_or_become_zero():
    assert ember.tensor([7, 8, -9, 15, 16]).to(ember.int4).tolist() == [7, -8, 7, -1, 0]
    assert ember.tensor([3, 4, -1], dtype=ember.uint2).tolist() == [3, 0, 3]
    assert ember.tensor([2.9, -2.9, 8.0, np.nan, -0.5]).to(ember.int4).tolist() == [2, -2, 0, 0, 0]
    assert ember.tensor([15.5, 16.0, -1.0]).to(ember.uint4).tolist() == [15, 0, 0]


def test_values_that_move_keep_the_dtype_and_arithmetic_widens():
    x = ember.arange(-8, 8).reshape(4, 4).to(ember.int4)
    for y in (x.T, x.reshape(2, 8), x[1:, ::2], ember.cat([x, x]), x.flip(0), ember.where(x > 0, x, 0)):
        assert y.dtype is ember.int4
    assert (x + 1).dtype is ember.int32 and (x + 1).tolist() == (x.to(ember.int32) + 1).tolist()
    assert (x * x).max().item() == 64  # in int32: no wrap-around at 4 bits
    assert ember.promote_types(ember.int4, ember.int8) is ember.int32
    assert ember.promote_types(ember.uint2, ember.float16) is ember.float16
    assert D.int_range(ember.int2) == (-2, 1) and D.int_range(ember.uint4) == (0, 15)
    f = ember.tensor([0.5, 6.0]).to(ember.float4_e2m1fn)
    assert (f * 2).dtype is ember.float32 and (f * 2).tolist() == [1.0, 12.0]
    assert (f + ember.ones(2).to(ember.float8_e8m0fnu)).dtype is ember.float32


def test_safetensors_pack_float4_and_refuse_the_narrow_integers(tmp_path):
    from ember.io import load_file, save_file

    f4 = ember.tensor([[0.5, 1.0, -6.0], [3.0, 0.0, -0.5]]).to(ember.float4_e2m1fn)
    e8 = ember.tensor([1.0, 2.0, 0.25]).to(ember.float8_e8m0fnu)
    path = str(tmp_path / "narrow.safetensors")
    save_file({"f4": f4, "e8": e8}, path)
    stored, _ = load_file(path)
    assert (stored["f4"].dtype, stored["e8"].dtype) == ("F4", "F8_E8M0")
    assert bytes(stored["f4"].data).hex() == "215f90"  # codes 1,2 | 15,5 | 0,9: the first in the low nibble
    ember.save({"f4": f4, "e8": e8}, str(tmp_path / "narrow.ember"))
    back = ember.load(str(tmp_path / "narrow.ember"))
    assert back["f4"].dtype is ember.float4_e2m1fn and back["f4"].tolist() == f4.tolist()
    assert back["e8"].dtype is ember.float8_e8m0fnu and back["e8"].tolist() == [1.0, 2.0, 0.25]
    with pytest.raises(ValueError, match="no code for dtype int4: store it as int8"):
        save_file({"x": ember.tensor([1, 2]).to(ember.int4)}, path)
    with pytest.raises(ValueError, match=r"shape \(3,\) has 3 values, not a multiple of 2"):
        save_file({"x": ember.tensor([1.0, 2.0, 3.0]).to(ember.float4_e2m1fn)}, path)


@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [1, 0])
def test_onnx_cast_to_e8m0_rounds_as_onnx_reference(mode, saturate):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from onnx.numpy_helper import to_float8e8m0

    import ember.onnx

    node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E8M0, saturate=saturate, round_mode=mode)
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT8E8M0, [None])],
    )
    model = ember.onnx.load(helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 25)]))
    rng = np.random.default_rng(1)
    # normal positive floats (the reference's subnormal rule differs: see ops/elementwise.to_e8m0),
    # powers of two, ties, the top of the range, inf and NaN
    x = np.exp2(rng.uniform(-120, 126, 5000)).astype(np.float32)
    x = np.concatenate([x, [1.0, 1.5, 3.0, 0.75, 2.0**-126, 2.0**127, 1.5 * 2.0**127, 3e38, np.inf, np.nan, 0.0]])
    x = x.astype(np.float32)
    want = to_float8e8m0(x, bool(saturate), mode).view(np.uint8)
    if saturate:  # ONNX's table saturates inf to the largest value; its reference makes it NaN
        want = np.where(np.isinf(x), 0xFE, want)
    got = codes(model(ember.tensor(x)))
    nan = want == 0xFF
    np.testing.assert_array_equal(got[~nan], want[~nan])
    assert (got[nan] == 0xFF).all()


def test_a_backend_that_does_not_list_them_names_the_dtype(lacking_backend):
    with pytest.raises(ember.DTypeError, match="dtype int4 is not supported by backend 'python-lacking'"):
        ember.tensor([1, 2], backend=lacking_backend).to(ember.int4)

"""ember.onnx.export: every model of ember.models runs in onnxruntime and re-imports."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.onnx

import ember
import ember.onnx
from ember import models
from ember.onnx import OnnxError

# name -> (constructor keywords, example input)
ZOO = {
    "mlp": ({}, lambda: ember.randn(2, 1, 28, 28)),
    "cnn": ({}, lambda: ember.randn(2, 1, 28, 28)),
    "lenet": ({}, lambda: ember.randn(2, 1, 28, 28)),
    "resnet18": ({}, lambda: ember.randn(2, 3, 32, 32)),
    "transformer": ({"vocab_size": 20}, lambda: ember.randint(0, 20, (2, 16))),
}


def test_the_zoo_is_covered():
    assert sorted(ZOO) == models.names()


def run_ort(blob, *xs):
    s = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
    return s.run(None, {i.name: x.numpy() for i, x in zip(s.get_inputs(), xs)})


@pytest.mark.parametrize("name", sorted(ZOO))
def test_model_exports_runs_in_onnxruntime_and_reimports(name, tmp_path):
    ember.manual_seed(0)
    kw, make = ZOO[name]
    model = models.get(name, **kw).eval()
    x = make()
    path = tmp_path / f"{name}.onnx"
    ember.onnx.export(model, x, path)
    blob = path.read_bytes()
    with ember.no_grad():
        want = model(x).numpy()
    (got,) = run_ort(blob, x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    back = ember.onnx.load(path)
    np.testing.assert_allclose(back(x).numpy(), want, rtol=1e-4, atol=1e-5)
    # parameters keep their state_dict names
    assert set(dict(back.named_parameters())) <= set(model.state_dict())


@pytest.mark.parametrize("opset", [13, 18, 21])
def test_opsets(opset):
    model = ember.nn.Sequential(ember.nn.Linear(5, 4), ember.nn.ReLU(), ember.nn.LayerNorm(4))
    x = ember.randn(3, 5)
    blob = ember.onnx.export(model, x, opset=opset)
    assert onnx.load_model_from_string(blob).opset_import[0].version == opset
    (got,) = run_ort(blob, x)
    np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_several_inputs_and_outputs():
    class Two(ember.nn.Module):
        def forward(self, a, b):
            return a @ b, (a.amax(1) - 1.5).exp()

    a, b = ember.randn(3, 4), ember.randn(4, 2)
    blob = ember.onnx.export(Two(), (a, b))
    got = run_ort(blob, a, b)
    want = Two()(a, b)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5)
    again = ember.onnx.load(blob)(a, b)
    assert isinstance(again, tuple) and len(again) == 2


def test_bad_opset_and_unexportable_primitive():
    model = ember.nn.Linear(2, 2)
    with pytest.raises(OnnxError, match="opset 9 is not supported"):
        ember.onnx.export(model, ember.randn(1, 2), opset=9)

    class Noisy(ember.nn.Module):
        def forward(self, x):
            return x + ember.rand(*x.shape)

    with pytest.raises(OnnxError, match="primitive 'random_bits'.*has no ONNX form"):
        ember.onnx.export(Noisy(), ember.randn(2))


class Ordering(ember.nn.Module):
    """The sorting, running-sum, remainder and bitwise primitives, each output kept apart."""

    def forward(self, x, i):
        top = x.topk(3, 1)
        return (
            top.values,
            top.indices,
            x.sort(0, descending=True).indices,
            x.cumsum(1),
            x % 1.5,
            (i & 6) ^ (i | 1) ^ ~i,
            i % 3,
        )


@pytest.mark.parametrize("opset", [18, 21])
def test_ordering_and_bitwise_primitives_export(opset):
    rng = np.random.default_rng(0)
    x = ember.tensor(rng.integers(-3, 4, (4, 6)).astype(np.float32))  # ties: the index rule matters
    i = ember.tensor(np.arange(-4, 8, dtype=np.int64))
    blob = ember.onnx.export(Ordering(), (x, i), opset=opset)
    want = [t.numpy() for t in Ordering()(x, i)]
    for got, ref in zip(run_ort(blob, x, i), want):
        np.testing.assert_allclose(got, ref, rtol=1e-6)
    for got, ref in zip(ember.onnx.load(blob)(x, i), want):
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-6)


def test_bitwise_export_needs_opset_18_and_unsigned_shifts():
    class Shift(ember.nn.Module):
        def forward(self, i):
            return i << 2

    with pytest.raises(OnnxError, match="needs opset 18 or newer"):
        ember.onnx.export(Shift(), ember.tensor([1, 2]), opset=17)
    with pytest.raises(OnnxError, match="BitShift takes unsigned integers"):
        ember.onnx.export(Shift(), ember.tensor([1, 2]), opset=18)
    blob = ember.onnx.export(Shift(), ember.tensor([1, 200], dtype=ember.uint8), opset=18)
    assert run_ort(blob, ember.tensor([1, 200], dtype=ember.uint8))[0].tolist() == [4, 32]


@pytest.mark.parametrize("dtype", ["int8", "int16", "uint16", "uint64"])
def test_the_optional_integer_dtypes_export_and_reimport(dtype):
    class Mix(ember.nn.Module):
        def forward(self, a, b):
            # what onnxruntime's CPU kernels take in all four dtypes (not Max, Where)
            return a + (a & b), (a * 3).to(ember.float32), (a < b), ember.cat([b[1:], a[:1]])

    info = np.iinfo(dtype)
    a = ember.tensor(np.array([info.min, 0, 7, info.max // 2], dtype=dtype))
    b = ember.tensor(np.array([1, info.max, 7, 2], dtype=dtype))
    blob = ember.onnx.export(Mix(), (a, b), opset=18)
    want = [t.numpy() for t in Mix()(a, b)]
    for got, ref in zip(run_ort(blob, a, b), want):
        assert got.dtype == ref.dtype and got.tolist() == ref.tolist()
    for got, ref in zip(ember.onnx.load(blob)(a, b), want):
        assert got.dtype.name == ref.dtype.name and got.tolist() == ref.tolist()

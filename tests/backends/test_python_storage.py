"""The storage dtypes on the pure-Python backend (backends/python/storage.py) against the
NumPy backend's, code for code: every code of every format, floats around each rounding
boundary, integers, specials, casts between formats, the primitives that move values, bytes,
safetensors and NumPy exchange, and a run that cannot import NumPy."""

import json
import math

import numpy as np
import pytest
from without_numpy import run_without_numpy

import ember
from ember import dtypes as D
from ember.backends.python import storage

STORAGE = sorted(D.STORAGE, key=lambda d: d.name)


def codes(t):
    a = t.numpy()
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint8)


def both(values, dtype, src=D.float32):
    """``values`` cast to ``dtype`` on the python and the numpy backend, as codes."""
    got = ember.tensor(values, dtype=src, backend="python").to(dtype)
    want = ember.tensor(values, dtype=src, backend="numpy").to(dtype)
    return codes(got), codes(want)


def probes(rng):
    """float32 values: every format's values and their midpoints nudged both ways, specials,
    and a log-uniform spread over float32's range."""
    grid = sorted({v for d in storage.VALUES for v in storage.VALUES[d] if isinstance(v, float) and math.isfinite(v)})
    grid = np.array(grid, np.float32)
    mids = (grid[1:].astype(np.float64) + grid[:-1]) / 2
    near = np.concatenate([mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf)]).astype(np.float32)
    spread = np.exp2(rng.uniform(-140, 128, 20_000)).astype(np.float32) * rng.choice([-1, 1], 20_000)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 3.4e38, -3.4e38, 1e-45], np.float32)
    return np.concatenate([grid, -grid, near, -near, spread, special])


@pytest.mark.parametrize("dtype", STORAGE, ids=str)
def test_float32_values_round_to_the_numpy_backends_codes(dtype, rng):
    got, want = both(probes(rng), dtype)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", STORAGE, ids=str)
def test_float64_and_integer_sources(dtype, rng):
    x64 = rng.normal(0, 50, 2000)
    np.testing.assert_array_equal(*both(x64, dtype, D.float64))
    ints = np.concatenate([np.arange(-300, 300), rng.integers(-(2**40), 2**40, 200)])
    np.testing.assert_array_equal(*both(ints, dtype, D.int64))
    np.testing.assert_array_equal(*both([True, False], dtype, D.bool_))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy's own cast of NaN and inf to int32
@pytest.mark.parametrize("dtype", STORAGE, ids=str)
def test_every_code_decodes_and_casts_out_like_numpy(dtype):
    n = 1 << (16 if dtype is D.bfloat16 else 8)
    raw = np.arange(n, dtype=np.uint16 if dtype.itemsize == 2 else np.uint8).tobytes()
    py = ember.tensor([0.0], backend="python")._backend.from_bytes(raw, (n,), dtype)
    npb = ember.get_backend("numpy").from_bytes(raw, (n,), dtype)
    for target in (D.float32, D.float64, D.int32, D.float16):
        a = ember.get_backend("python").to_list(ember.get_backend("python").impls["cast"](py, target))
        b = np.array(ember.get_backend("numpy").impls["cast"](npb, target))
        np.testing.assert_array_equal(np.array(a, dtype=b.dtype), b, err_msg=str(target))


@pytest.mark.parametrize("src", STORAGE, ids=str)
def test_casts_between_formats(src, rng):
    x = rng.normal(0, 4, 500).astype(np.float32)
    for dst in STORAGE:
        got = ember.tensor(x, backend="python").to(src).to(dst)
        want = ember.tensor(x, backend="numpy").to(src).to(dst)
        np.testing.assert_array_equal(codes(got), codes(want), err_msg=f"{src} -> {dst}")


def test_moving_values_keeps_them_and_arithmetic_upcasts(rng):
    x = rng.normal(0, 3, (4, 6)).astype(np.float32)
    for backend in ("python", "numpy"):
        t = ember.tensor(x, backend=backend).to(D.float8_e4m3fn)
        moved = ember.cat([t.T.reshape(3, 8)[::2, 1:], ember.nn.functional.pad(t[:2, :3], (2, 2), value=0.3)])
        picked = ember.where(t > 0, t, 0.7)
        out = (moved.float() * 2, picked, t + t, t.flip(0))
        if backend == "python":
            py = out
        else:
            for a, b in zip(py, out):
                assert a.dtype is b.dtype
                np.testing.assert_array_equal(np.asarray(a.float().numpy()), np.asarray(b.float().numpy()))
    assert py[1].dtype is D.float8_e4m3fn and py[2].dtype is D.float32


def test_bytes_safetensors_and_numpy_exchange(tmp_path, rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = rng.normal(0, 2, 64).astype(np.float32)
    tensors = {d.name: ember.tensor(x, backend="python").to(d) for d in STORAGE if d not in D.NARROW_INTS}
    ember.save(tensors, tmp_path / "s.safetensors")
    back = ember.load(tmp_path / "s.safetensors", map_location="python")
    for name, t in tensors.items():
        assert back[name].dtype is t.dtype and back[name]._backend.name == "python"
        np.testing.assert_array_equal(codes(back[name]), codes(t))
    a = np.array([1.5, -0.25], dtype=ml_dtypes.bfloat16)
    t = ember.tensor(a, backend="python")
    assert t.dtype is D.bfloat16 and t.tolist() == [1.5, -0.25] and t.numpy().dtype == ml_dtypes.bfloat16
    moved = ember.tensor(x).to(D.int4).to("python")
    assert moved.dtype is D.int4 and moved.tolist() == ember.tensor(x).to(D.int4).tolist()


def test_runs_without_numpy(tmp_path):
    """The browser path has no NumPy: storage tensors still round, move and compute."""
    code = (
        "import json, ember\n"
        "x = ember.tensor([0.3, -1.7, 300.0, 9.0], backend='python')\n"
        "out = [x.to(d).float().tolist() for d in (ember.bfloat16, ember.float8_e4m3fn, ember.float4_e2m1fn, ember.int4)]\n"
        "print(json.dumps(out))\n"
    )
    assert json.loads(run_without_numpy(code, tmp_path)) == [
        [0.30078125, -1.703125, 300.0, 9.0],
        [0.3125, -1.75, 288.0, 9.0],
        [0.5, -1.5, 6.0, 6.0],
        [0.0, -1.0, 0.0, 0.0],
    ]

"""ember-cupy on a real GPU. Without one every test here skips with the driver's own reason
(the ``gpu`` fixture); plugins/cupy/gpu_check.sh runs them on the GPU machine."""

import subprocess
import sys

import numpy as np
import pytest

import ember
import ember_cupy
from ember.conformance.optimizers import fused_mismatches
from ember_cupy import catalog, fusion, multi_tensor


def test_every_library_kernel_compiles_and_loads(gpu):
    for k in catalog.library_kernels():
        gpu.rt.function(k)  # NVRTC through cupy.RawModule, then cuModuleLoad


def test_random_bits_match_the_reference(gpu):
    from ember.backends.numpy import backend as nb

    for shape, seed, offset in [((3, 5), 123, 7), ((1000,), 2**40 + 5, 2**33 + 3), ((), 1, 2)]:
        got = gpu.to_numpy(gpu.impls["random_bits"](shape, seed, offset))
        np.testing.assert_array_equal(got, nb.random_bits(shape, seed, offset))


def test_fused_optimizer_steps_match_the_rules(gpu):
    assert fused_mismatches(gpu) == []


def test_fusion_groups_run_on_the_device(gpu, rng):
    x = rng.standard_normal((64, 300)).astype(np.float32)

    def fn(x):
        return ((x * 2 + 1).relu().sum(1, keepdim=True) + x).tanh().amax(0)

    f = ember.jit(fn)
    got = f(ember.tensor(x, backend="cupy"))
    want = fn(ember.tensor(x, backend="numpy"))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    assert f.lower(ember.tensor(x, backend="cupy")).program.compiled >= 1
    assert fusion.FALLBACKS == []  # every fused kernel built with NVRTC


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_jitted_training_steps_match_numpy(gpu, name):
    losses_np, params_np = catalog.run_model(name, "numpy", steps=2)
    losses, params = catalog.run_model(name, "cupy", steps=2)
    np.testing.assert_allclose(losses, losses_np, rtol=1e-4)
    for a, b in zip(params, params_np):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)
    assert fusion.FALLBACKS == []


def test_a_training_step_never_synchronizes(gpu, rng):
    import cupyx

    import ember.nn as nn
    import ember.nn.functional as F

    with ember.backend("cupy"):
        ember.manual_seed(0)
        model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
        opt = ember.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x = ember.tensor(rng.standard_normal((16, 64)).astype(np.float32))
        y = ember.tensor(rng.integers(0, 10, 16))

        @ember.jit
        def step():
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss

        step()
        step()
        before = dict(gpu.transfers)
        with cupyx.allow_synchronize(False):  # CuPy raises DeviceSynchronized on any sync
            for _ in range(3):
                loss = step()
        assert gpu.transfers["to_host"] == before["to_host"]
        assert np.isfinite(loss.item())


def test_multi_tensor_step_is_one_launch(gpu, rng):
    import ember.nn as nn
    import ember.nn.functional as F

    x = rng.standard_normal((8, 6)).astype(np.float32)
    y = rng.integers(0, 3, 8)
    finals = []
    for backend in ("numpy", "cupy"):
        with ember.backend(backend):
            ember.manual_seed(1)
            model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
            opt = ember.optim.Adam(model.parameters(), lr=0.01)
            xs, ys = ember.tensor(x), ember.tensor(y)
            for _ in range(3):
                loss = F.cross_entropy(model(xs), ys)
                opt.zero_grad()
                loss.backward()
                if backend == "cupy":
                    launches = gpu.rt.launches
                    multi_tensor.step(opt)
                    assert gpu.rt.launches - launches == 1
                else:
                    opt.step()
            finals.append([p.numpy() for p in model.parameters()])
    for a, b in zip(*finals):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_dlpack_round_trip_with_torch(gpu):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    t = torch.arange(6, dtype=torch.float32, device="cuda")
    before = dict(gpu.transfers)
    e = ember_cupy.from_dlpack(t)
    assert e.shape == (6,) and e.backend is gpu
    t.add_(1)  # shared memory: ember sees torch's write
    torch.cuda.synchronize()
    back = torch.from_dlpack(ember_cupy.to_dlpack(e * 2))
    assert back.device.type == "cuda"
    torch.testing.assert_close(back, (torch.arange(6, dtype=torch.float32, device="cuda") + 1) * 2)
    assert gpu.transfers == before  # no host copy anywhere
    np.testing.assert_array_equal(e.numpy(), np.arange(6, dtype=np.float32) + 1)
    assert gpu.transfers["to_host"] == before["to_host"] + 1  # .numpy() is an explicit, counted copy


def test_memory_comes_from_cupys_pool(gpu):
    before = gpu.memory_stats()["used_bytes"]
    t = ember.zeros(1024, 1024, backend="cupy")
    assert gpu.memory_stats()["used_bytes"] >= before + 4 * 1024 * 1024
    del t


@pytest.mark.slow
def test_conformance_suite_on_the_gpu(gpu, tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ember.cli",
            "certify",
            "cupy",
            "--require-available",
            "--max-examples",
            "5",
            "--out",
            str(tmp_path),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]


def test_pool_and_batch_norm_kernels_match_the_reference(gpu, rng):
    """The block-cooperative batch-norm sums and the max-pool gather on the device."""
    from ember.conformance import fused_ops

    FUSED = fused_ops()

    def ref(name, *args, **params):
        with ember.no_grad():
            out = FUSED[name](*(None if a is None else ember.tensor(a, backend="numpy") for a in args), **params)
        return [o.numpy() for o in out] if isinstance(out, tuple) else [out.numpy()]

    def run(name, *args, **params):
        out = gpu.fused_impls[name](*(None if a is None else gpu.xp.asarray(a) for a in args), **params)
        return [gpu.to_numpy(o) for o in out] if isinstance(out, tuple) else [gpu.to_numpy(out)]

    x = np.maximum(rng.integers(-2, 3, (64, 32, 26, 26)), 0).astype(np.float32)
    x[0, 0, 1, 1] = np.nan
    params = dict(kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), dilation=(1, 1), ceil_mode=True)
    out = run("max_pool2d", x, **params)
    np.testing.assert_array_equal(out[0], ref("max_pool2d", x, **params)[0])
    g = rng.standard_normal(out[0].shape).astype(np.float32)
    np.testing.assert_array_equal(
        run("max_pool2d_backward", g, x, **params)[0], ref("max_pool2d_backward", g, x, **params)[0]
    )
    x = (rng.standard_normal((128, 64, 16, 16)) * 2 + 1).astype(np.float32)
    w, b = rng.standard_normal(64).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    got, want = run("batch_norm", x, w, b), ref("batch_norm", x, w, b)
    for a, r in zip(got, want):
        np.testing.assert_allclose(a, r, rtol=1e-4, atol=1e-4)
    g = rng.standard_normal(x.shape).astype(np.float32)
    stats = want[1:]
    for a, r in zip(run("batch_norm_backward", g, x, w, b, *stats), ref("batch_norm_backward", g, x, w, b, *stats)):
        np.testing.assert_allclose(a, r, rtol=1e-3, atol=1e-3)


def test_remainder_and_unsigned_arange_are_numpys(gpu):
    """Two differences from NumPy that the first GPU run found (CuPy 14.2): remainder at signed
    zeros and infinities, and an unsigned arange with a negative step."""
    v = np.array([0.0, -0.0, 3.0, -3.0, 5.5, 0.1, np.inf, -np.inf, np.nan], np.float32)
    a, b = np.repeat(v, len(v)), np.tile(v, len(v))
    got = gpu.to_numpy(gpu.impls["remainder"](gpu.xp.asarray(a), gpu.xp.asarray(b)))
    with np.errstate(all="ignore"):
        want = np.remainder(a, b)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    i = np.array([-128, -7, -1, 0, 1, 7, 127], np.int8)
    a, b = np.repeat(i, len(i)), np.tile(i, len(i))
    with np.errstate(all="ignore"):
        want = np.remainder(a, b)
    np.testing.assert_array_equal(gpu.to_numpy(gpu.impls["remainder"](gpu.xp.asarray(a), gpu.xp.asarray(b))), want)
    for dt in (ember.uint8, ember.uint32, ember.uint64):
        got = gpu.to_numpy(gpu.impls["arange"](15, 3, -4, dt))
        np.testing.assert_array_equal(got, np.arange(15, 3, -4, dtype=dt.name))

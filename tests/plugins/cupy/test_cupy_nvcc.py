"""Every kernel the plugin can emit compiles for the GPU it targets (sm_90, the H200), with
nvcc and no device: the hand-written kernels in every variant, and the fusion groups of jitted
MLP and CNN training steps (with the strides they really had on the host harness)."""

import pytest

from ember_cupy import catalog, host as host_module

needs_nvcc = pytest.mark.skipif(host_module.nvcc() is None, reason="nvcc not found on PATH")


def _assert_clean(results):
    bad = [r for r in results if not r["ok"]]
    assert not bad, "\n\n".join(r["log"] for r in bad)
    spills = {r["name"]: r["spill_bytes"] for r in results if r["spill_bytes"]}
    assert not spills, f"kernels spill registers to local memory: {spills}"
    assert all(r["registers"] for r in results), [r["name"] for r in results if not r["registers"]]


@needs_nvcc
def test_library_kernels_compile_for_sm90():
    ks = catalog.library_kernels()
    assert len(ks) > 40
    _assert_clean(catalog.check(ks, "sm_90"))


@pytest.mark.slow
@needs_nvcc
def test_every_optimizer_flag_combination_compiles():
    _assert_clean(catalog.check(catalog.library_kernels(exhaustive=True), "sm_90"))


@pytest.mark.slow
def test_model_step_fusion_kernels_compile_for_sm90(host):
    ks = catalog.model_kernels("cupy-host")
    assert len(ks) >= 10
    strategies = {k.meta["strategy"] for k in ks}
    assert {"elementwise", "block-reduce"} <= strategies
    _assert_clean(catalog.check(ks, "sm_90"))


def test_fusion_kernels_seen_so_far_compile_for_sm90(host):
    """Whatever fusion kernels earlier tests in this session made (at least this one's)."""
    import numpy as np

    import ember

    x = ember.tensor(np.ones((4, 300), np.float32), backend="cupy-host")
    ember.jit(lambda x: (x * 2).exp().sum(1).log())(x)
    ks = [k for k in host.rt.seen.values() if k.name.startswith("ember_fused_")]
    assert ks
    _assert_clean(catalog.check(ks, "sm_90"))
    if catalog.nvrtc_available()[0]:
        assert all(r["ok"] for r in catalog.check_nvrtc(ks)), [r["log"] for r in catalog.check_nvrtc(ks)]


def test_library_kernels_compile_with_nvrtc():
    """NVRTC is what cupy.RawModule uses on the GPU; it has no host headers, so this catches
    what nvcc would forgive."""
    ok, why = catalog.nvrtc_available()
    if not ok:
        pytest.skip(why)
    results = catalog.check_nvrtc(catalog.library_kernels(), "compute_90")
    bad = [r for r in results if not r["ok"]]
    assert not bad, "\n\n".join(r["log"] for r in bad)

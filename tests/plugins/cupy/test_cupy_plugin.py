"""ember-cupy as a plugin: found through its entry point, cheap to import, honest about the
device. These hold on every machine; where there is no GPU the backend must say why."""

import importlib.metadata
import pathlib
import subprocess
import sys
import tomllib

import pytest

import ember
from ember import registry
from ember.conformance import fused_ops
from ember.errors import BackendError

FUSED = fused_ops()
from ember.primitives import PRIMITIVES
from ember_cupy import device
from ember_cupy.backend import FUSED as DECLARED_FUSED, CupyBackend

PLUGIN = pathlib.Path(__file__).resolve().parents[3] / "plugins" / "cupy"


def test_entry_point_names_the_plugin_module():
    eps = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="ember")}
    assert eps.get("cupy") == "ember_cupy"
    assert "cupy-host" not in eps  # the host harness is a checking tool, never auto-registered


def test_distribution_offers_cuda_extras():
    meta = tomllib.loads((PLUGIN / "pyproject.toml").read_text())
    extras = meta["project"]["optional-dependencies"]
    assert any(r.startswith("cupy-cuda12x") for r in extras["cuda12"])
    assert any(r.startswith("cupy-cuda13x") for r in extras["cuda13"])
    assert not any("cupy" in r for r in meta["project"]["dependencies"])  # installs without CUDA
    assert meta["project"]["entry-points"]["ember"] == {"cupy": "ember_cupy"}


def test_discovery_does_not_import_cupy():
    code = (
        "import sys, ember; ember.ones(2) * 2; from ember.registry import REGISTRY; "
        "assert 'cupy' in REGISTRY.infos; print('cupy' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_backends_lists_cupy_with_its_status():
    row = next(r for r in registry.backends() if r["name"] == "cupy")
    ok, why = device.probe()
    if ok:
        assert row["status"] == "ok"
    else:
        assert row["status"] == f"unavailable: {why}"
        assert why and ("CUDA" in why or "CuPy" in why or "cuda" in why)
    assert row["ops"] == len(PRIMITIVES) and row["fused"] == sorted(DECLARED_FUSED)


def test_cli_shows_the_reason():
    out = subprocess.run([sys.executable, "-m", "ember.cli", "backends"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    line = next(l for l in out.stdout.splitlines() if l.startswith("cupy "))
    ok, why = device.probe()
    assert ("ok" in line) if ok else (why[:40] in out.stdout)


def test_use_without_a_device_raises_a_clear_error():
    ok, why = device.probe()
    if ok:
        pytest.skip("a GPU is present: ember.use('cupy') works here")
    with pytest.raises(BackendError) as err:
        ember.use("cupy")
    assert "unavailable" in str(err.value) and why in str(err.value)
    assert ember.get_backend().name != "cupy"


def test_declaration_needs_no_device():
    caps = CupyBackend().capabilities()
    assert set(caps.ops) == set(PRIMITIVES)
    assert set(caps.fused) == set(DECLARED_FUSED) and set(caps.fused) <= set(FUSED)
    assert caps.compiles_groups


def test_host_backend_implements_every_declared_op(host):
    caps = host.capabilities()
    assert set(host.impls) == set(caps.ops)
    assert set(host.fused_impls) == set(caps.fused)
    assert host.available() == (True, "")

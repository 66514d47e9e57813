"""``python -m ember.wasm build``: what the site holds, the patched lock, and refusals."""

import hashlib
import json
import subprocess
import sys
import zipfile

import pytest

from ember.io import load_file, read_checkpoint
from ember.wasm import PYODIDE_VERSION, build

from .conftest import untrained_checkpoint


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_site_layout_and_model_files(untrained_site):
    site = untrained_site
    for name in (
        "index.html",
        "app.js",
        "style.css",
        "ember-site.json",
        "model/model.json",
        "model/model.safetensors",
        "pyodide/pyodide.js",
        "pyodide/pyodide.asm.wasm",
        "pyodide/python_stdlib.zip",
        "pyodide/pyodide-lock.json",
    ):
        assert (site / name).is_file(), name
    assert not list((site / "pyodide").glob("*.map")) and not (site / "pyodide" / "package.json").exists()
    info = json.loads((site / "ember-site.json").read_text())
    assert info["pyodide"] == PYODIDE_VERSION and info["packages"] == ["ember"]
    assert info["numpy"] == {"file_name": info["numpy"]["file_name"], "bundled": False}
    spec = json.loads((site / "model" / "model.json").read_text())
    assert spec["model"] == "mlp" and spec["dataset"] == "mnist" and spec["input_shape"] == [1, 28, 28]
    assert spec["weights_sha256"] == sha256(site / "model" / "model.safetensors")
    weights, meta = load_file(site / "model" / "model.safetensors")
    tensors, _ = read_checkpoint(site.parent / "run")
    assert meta == {"model": "mlp", "dataset": "mnist"}
    assert {f"model/{k}" for k in weights} == set(tensors)  # the model's tensors, nothing else
    assert all(bytes(weights[k].data) == bytes(tensors[f"model/{k}"].data) for k in weights)
    html = (site / "index.html").read_text()
    assert 'src="pyodide/pyodide.js"' in html and 'id="canvas"' in html and 'id="bars"' in html


def test_lock_lists_the_bundled_wheels_with_their_real_sha256(untrained_site):
    pdir = untrained_site / "pyodide"
    lock = json.loads((pdir / "pyodide-lock.json").read_text())
    bundled = json.loads((untrained_site / "ember-site.json").read_text())["bundled"]
    assert set(bundled) == {"ember", "pluggy", "micropip"}
    for name, file_name in bundled.items():
        entry = lock["packages"][name]
        assert entry["file_name"] == file_name and entry["sha256"] == sha256(pdir / file_name), name
        assert entry["imports"] == [name] and entry["install_dir"] == "site"
    assert lock["packages"]["ember"]["depends"] == ["pluggy"]  # numpy is optional in the browser
    assert lock["info"]["python"].startswith("3.14")


def test_ember_wheel_carries_the_webgpu_entry_point_and_no_stray_files(untrained_site):
    wheel = untrained_site / "pyodide" / json.loads((untrained_site / "ember-site.json").read_text())["ember_wheel"]
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        eps = z.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    for name in ("numpy", "python", "webgpu"):  # the built-in backends, found as plugins are
        assert f"{name} = ember.backends.{name}" in eps
        assert f"ember/backends/{name}/__init__.py" in names and f"ember/backends/{name}/backend.py" in names
    assert not [n for n in names if n.startswith("ember/wasm/") and "webgpu" in n]  # ember.wasm: site and runtime only
    assert "ember/wasm/site/app.js" in names  # package data: building works from a wheel
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_refusals_name_the_fix(tmp_path, pyodide_dir, wheels_dir, monkeypatch):
    monkeypatch.setenv("EMBER_WASM_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.delenv("EMBER_PYODIDE_DIR", raising=False)
    with pytest.raises(build.BuildError, match="pass --pyodide DIR.*--fetch"):
        build.find_pyodide(tmp_path)
    fake = tmp_path / "old-pyodide"
    fake.mkdir()
    (fake / "pyodide.asm.wasm").write_bytes(b"")
    (fake / "package.json").write_text('{"version": "0.26.0"}')
    with pytest.raises(build.BuildError, match="holds Pyodide 0.26.0"):
        build.find_pyodide(fake)
    with pytest.raises(build.BuildError, match="no wheel for pluggy, micropip"):
        build.find_wheels(tmp_path)
    import ember
    from ember.train import save_training_state

    save_training_state(tmp_path / "bare", 1, ember.nn.Linear(2, 2))
    with pytest.raises(build.BuildError, match="names no known model"):
        build.export_model(tmp_path / "bare", tmp_path / "out")


def test_command_line_builds_a_site(tmp_path, pyodide_dir, wheels_dir, ember_wheel):
    untrained_checkpoint(tmp_path / "run", model="cnn")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ember.wasm",
            "build",
            str(tmp_path / "site"),
            "--checkpoint",
            str(tmp_path / "run"),
            "--pyodide",
            str(pyodide_dir),
            "--wheels",
            str(wheels_dir),
            "--ember-wheel",
            str(ember_wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "cnn on mnist" in proc.stdout and "python -m http.server" in proc.stdout
    assert json.loads((tmp_path / "site" / "model" / "model.json").read_text())["model"] == "cnn"
    missing = subprocess.run(
        [
            sys.executable,
            "-m",
            "ember.wasm",
            "build",
            str(tmp_path / "x"),
            "--checkpoint",
            str(tmp_path / "run"),
            "--pyodide",
            str(tmp_path / "nowhere"),
            "--wheels",
            str(wheels_dir),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={"EMBER_WASM_CACHE": str(tmp_path / "nocache"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert missing.returncode == 2 and "Pyodide 314.0.7 not found" in missing.stderr

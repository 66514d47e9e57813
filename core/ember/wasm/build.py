"""Assembling the static site: ``python -m ember.wasm build OUT --checkpoint RUN_DIR`` (a model
trained with ``ember train``) or ``--onnx MODEL.onnx`` (an image classifier from elsewhere).

What lands in ``OUT`` (serve it with any static file server, e.g. ``python -m http.server``)::

    index.html app.js style.css        the page (copied from ember/wasm/site/)
    ember-site.json                    what the page reads first: versions, wheels, model files
    model/model.json                   the model: zoo name, dataset, input normalization, classes
                                       (for ONNX: its graph in ember's JSON form, ember.onnx.portable)
    model/model.safetensors            its weights: the checkpoint's ``model/`` tensors, renamed
                                       (for ONNX: the parameters and folded constants)
    pyodide/                           Pyodide's runtime, the wheels, the patched lock file

Inputs, each found in this order (``--fetch`` fills the cache with npm and pip):

- Pyodide: ``--pyodide DIR`` (the npm package's folder), ``$EMBER_PYODIDE_DIR``, then
  ``CACHE/node_modules/pyodide``, where CACHE is ``$EMBER_WASM_CACHE`` or ``~/.cache/ember/wasm``.
- micropip and pluggy wheels (py3-none-any; the npm package carries none): ``--wheels DIR``,
  then ``CACHE/wheels``.
- The ember wheel: ``--ember-wheel FILE``, else built from this source tree with ``pip wheel``.

The lock file is Pyodide's own, with entries for the bundled wheels replaced by ones carrying
their real sha256, so ``loadPyodide({lockFileURL, packages: ["ember"]})`` installs them with
integrity checks on. ember's entry does not depend on numpy: the page runs without it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PYODIDE_VERSION = "314.0.7"  # the npm package the site is built from
MICROPIP_VERSION = "0.11.1"  # PyPI wheel; the npm package ships none
SITE_FILES = ("index.html", "app.js", "style.css")
PYODIDE_SKIP = re.compile(r".*\.(map|d\.ts|html|md)$|^package\.json$")
BUNDLED = ("pluggy", "micropip")  # wheels the site carries besides ember's


class BuildError(RuntimeError):
    """A missing or unusable input; the message says how to provide it."""


def cache_dir() -> Path:
    return Path(os.environ.get("EMBER_WASM_CACHE") or Path.home() / ".cache" / "ember" / "wasm")


# ----------------------------------------------------------------------------- inputs
def find_pyodide(pyodide_dir=None, fetch=False) -> Path:
    """The folder of the npm package ``pyodide@PYODIDE_VERSION`` (checked by its package.json)."""
    candidates = [pyodide_dir, os.environ.get("EMBER_PYODIDE_DIR"), cache_dir() / "node_modules" / "pyodide"]
    for c in candidates:
        if c and (Path(c) / "pyodide.asm.wasm").is_file():
            return _checked_pyodide(Path(c))
    if fetch:
        _run(
            ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(cache_dir()), f"pyodide@{PYODIDE_VERSION}"],
            "npm",
        )
        return _checked_pyodide(cache_dir() / "node_modules" / "pyodide")
    raise BuildError(
        f"Pyodide {PYODIDE_VERSION} not found; pass --pyodide DIR (the npm package folder), set "
        f"EMBER_PYODIDE_DIR, or run with --fetch (npm install pyodide@{PYODIDE_VERSION} into "
        f"{cache_dir()})"
    )


def _checked_pyodide(path: Path) -> Path:
    try:
        version = json.loads((path / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        version = None
    if version != PYODIDE_VERSION:
        raise BuildError(f"{path} holds Pyodide {version}, ember's page is built for {PYODIDE_VERSION}")
    return path


def find_wheels(wheels_dir=None, fetch=False) -> dict:
    """{name: path} of the newest py3-none-any wheel of each BUNDLED package."""
    dirs = [Path(d) for d in (wheels_dir, cache_dir() / "wheels") if d]
    found = _scan_wheels(dirs)
    missing = [n for n in BUNDLED if n not in found]
    if missing and fetch:
        pins = {"micropip": f"micropip=={MICROPIP_VERSION}", "pluggy": "pluggy"}
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--python-version",
                "3.14",
                "--only-binary=:all:",
                "--no-deps",
                "-d",
                str(cache_dir() / "wheels"),
                *(pins[n] for n in missing),
            ],
            "pip download",
        )
        found = _scan_wheels(dirs + [cache_dir() / "wheels"])
        missing = [n for n in BUNDLED if n not in found]
    if missing:
        raise BuildError(
            f"no wheel for {', '.join(missing)}; pass --wheels DIR holding them, or --fetch "
            f"(pip download --python-version 3.14 --only-binary=:all: --no-deps "
            f"micropip=={MICROPIP_VERSION} pluggy)"
        )
    return found


def _scan_wheels(dirs) -> dict:
    found: dict = {}
    for d in dirs:
        for p in sorted(d.glob("*-py3-none-any.whl")) if d.is_dir() else ():
            name, version = _wheel_name(p)
            if name in BUNDLED and (name not in found or _vkey(version) > _vkey(_wheel_name(found[name])[1])):
                found[name] = p
    return found


def _vkey(version: str):
    return tuple(int(x) if x.isdigit() else 0 for x in re.split(r"[.+-]", version))


def _wheel_name(path: Path) -> tuple:
    name, version = Path(path).name.split("-")[:2]
    return name.lower().replace("_", "-"), version


def source_root() -> Path | None:
    """The source tree ember was installed from (editable installs), or None."""
    import ember

    root = Path(ember.__file__).resolve().parents[2]
    pyproject = root / "pyproject.toml"
    if pyproject.is_file() and 'name = "ember"' in pyproject.read_text():
        return root
    return None


def build_ember_wheel(dest: Path) -> Path:
    """``pip wheel --no-deps`` of a clean copy of the source tree (so stale build/ folders and
    other people's scratch files never reach the wheel). pip builds it in an isolated
    environment with the setuptools pyproject.toml asks for, so a bare venv (old setuptools,
    no ``wheel``) builds it too."""
    root = source_root()
    if root is None:
        raise BuildError("ember is not installed from a source tree; pass --ember-wheel FILE")
    with tempfile.TemporaryDirectory(prefix="ember-wheel-") as tmp:
        src = Path(tmp) / "src"
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
        src.mkdir()
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            if (root / name).is_file():
                shutil.copy2(root / name, src / name)
        for name in ("core", "backends"):
            shutil.copytree(root / name, src / name, ignore=ignore)
        _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dest), str(src)], "pip wheel")
    wheels = sorted(dest.glob("ember-*-py3-none-any.whl"))
    if not wheels:
        raise BuildError(f"pip wheel wrote no ember wheel into {dest}")
    return wheels[-1]


def _run(cmd, what):
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except FileNotFoundError:
        raise BuildError(f"{what}: {cmd[0]!r} is not installed") from None
    if proc.returncode:
        raise BuildError(f"{what} failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()[-2000:]}")


# ----------------------------------------------------------------------------- the model
def export_model(checkpoint, dest: Path) -> dict:
    """Write ``model.safetensors`` (the model's tensors only) and ``model.json`` into ``dest``
    from an ``ember train`` checkpoint (its run directory, ``.safetensors`` or ``.json``)."""
    from ember.io import TensorBytes, read_checkpoint, save_bytes
    from ember.train import recipes

    from .runtime import SPEC_FORMAT

    tensors, meta = read_checkpoint(checkpoint)
    config = meta.get("config") or {}
    model, dataset = config.get("model"), config.get("dataset")
    if model is None or dataset not in recipes.DATASETS:
        raise BuildError(
            f"{checkpoint}: the checkpoint's config names no known model/dataset "
            f"(model={model!r}, dataset={dataset!r}); was it written by `ember train`?"
        )
    weights = {
        k[len("model/") :]: TensorBytes(v.dtype, tuple(v.shape), bytes(v.data))
        for k, v in tensors.items()
        if k.startswith("model/")
    }
    if not weights:
        raise BuildError(f"{checkpoint}: no model/ tensors in this checkpoint")
    blob = save_bytes(weights, {"model": model, "dataset": dataset})
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "model.safetensors").write_bytes(blob)
    _, shape, mean, std = recipes.DATASETS[dataset]
    if shape is None or mean is None or std is None:
        raise BuildError(f"{checkpoint}: a {dataset} model reads text; the page classifies drawn images")
    history = (meta.get("extra") or {}).get("history") or [{}]
    spec = {
        "format": SPEC_FORMAT,
        "version": 1,
        "model": model,
        "dataset": dataset,
        "input_shape": list(shape),
        "mean": list(mean),
        "std": list(std),
        "classes": [str(i) for i in range(10)],
        "weights": "model.safetensors",
        "weights_sha256": hashlib.sha256(blob).hexdigest(),
        "weights_bytes": len(blob),
        "checkpoint": {
            "step": meta.get("step", history[-1].get("step")),
            "eval_accuracy": history[-1].get("eval_accuracy"),
        },
    }
    (dest / "model.json").write_text(json.dumps(spec, indent=1) + "\n")
    return spec


def export_onnx_model(path, dest: Path, mean=None, std=None) -> dict:
    """Write ``model.safetensors`` and ``model.json`` into ``dest`` from an ONNX image classifier:
    its graph converted here, where ``onnx`` is installed, to ember's own JSON + safetensors
    (Pyodide has no ``onnx``). Its one input must be images, ``(N, C, H, W)`` with C, H, W
    fixed; the page scales pixels to [0, 1], then applies ``(x - mean) / std`` per channel
    (default 0 and 1)."""
    from ember.onnx import OnnxError, portable

    from .runtime import SPEC_FORMAT

    try:
        graph, blob = portable.save(path)
    except OnnxError as exc:
        raise BuildError(f"{path}: {exc}") from None
    inputs = graph["inputs"]
    shape = inputs[0]["shape"] if len(inputs) == 1 else None
    if shape is None or len(shape) != 4 or None in shape[1:] or inputs[0]["dtype"] != "float32" or "kind" in inputs[0]:
        raise BuildError(
            f"{path}: the page feeds one batch of float32 images (N, C, H, W) with C, H, W fixed; "
            f"the model takes {', '.join(_describe(v) for v in inputs)}"
        )
    c, h, w = shape[1:]
    mean, std = _per_channel(mean, c, 0.0, "--mean"), _per_channel(std, c, 1.0, "--std")
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "model.safetensors").write_bytes(blob)
    spec = {
        "format": SPEC_FORMAT,
        "version": 1,
        "kind": "onnx",
        "model": Path(path).name,
        "dataset": "ONNX",
        "input_shape": [c, h, w],
        "batch": shape[0],
        "mean": mean,
        "std": std,
        "classes": None,
        "weights": "model.safetensors",
        "weights_sha256": hashlib.sha256(blob).hexdigest(),
        "weights_bytes": len(blob),
        "checkpoint": {},
        "graph": graph,
    }
    (dest / "model.json").write_text(json.dumps(spec) + "\n")
    return spec


def _describe(value_info) -> str:
    kind = f"{value_info['kind']} of " if "kind" in value_info else ""
    return f"{value_info['name']} {kind}{value_info['dtype']}{value_info['shape']}"


def _per_channel(values, c, default, flag) -> list:
    values = [default] if values is None else list(values)
    if len(values) == 1:
        values = values * c
    if len(values) != c:
        raise BuildError(f"{flag} takes 1 or {c} values (the model's channels), got {len(values)}")
    return [float(v) for v in values]


# ----------------------------------------------------------------------------- the lock file
def _top_level(wheel: Path) -> list:
    with zipfile.ZipFile(wheel) as z:
        names = {n.split("/")[0] for n in z.namelist()}
    return sorted(
        n[:-3] if n.endswith(".py") else n
        for n in names
        if not n.endswith((".dist-info", ".data")) and (n.endswith(".py") or "." not in n)
    )


def _requires(wheel: Path) -> list:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    out = []
    for line in text.splitlines():
        if line.startswith("Requires-Dist:") and ";" not in line:
            out.append(re.split(r"[\s<>=!~\[(]", line.split(":", 1)[1].strip())[0].lower())
    return out


def lock_entry(wheel: Path, bundled: set) -> dict:
    """A pyodide-lock.json package entry for a pure wheel; it depends on the bundled wheels it
    requires (so ember's entry lists pluggy, not numpy)."""
    name, version = _wheel_name(wheel)
    return {
        "name": name,
        "version": version,
        "file_name": wheel.name,
        "install_dir": "site",
        "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
        "package_type": "package",
        "imports": _top_level(wheel),
        "depends": [r for r in _requires(wheel) if r in bundled],
        "unvendored_tests": False,
        "tool": {},
    }


def patch_lock(lock: dict, wheels: list) -> dict:
    lock = json.loads(json.dumps(lock))
    bundled = {_wheel_name(w)[0] for w in wheels}
    for w in wheels:
        entry = lock_entry(w, bundled)
        lock["packages"][entry["name"]] = entry
    return lock


# ----------------------------------------------------------------------------- the site
def write_pyodide(pdir, pyodide_dir=None, wheels_dir=None, ember_wheel=None, extra_wheels=(), fetch=False) -> tuple:
    """Fill ``pdir`` (replaced) with Pyodide's runtime, the bundled wheels and the patched lock;
    return ``(wheels, lock)``, ember's wheel first. Every page ember serves loads from such a
    folder: the demo site and the ONNX suite's runner (``ember.wasm.onnx_browser``)."""
    pdir = Path(pdir)
    pyodide = find_pyodide(pyodide_dir, fetch)
    wheels = find_wheels(wheels_dir, fetch)
    if pdir.exists():
        shutil.rmtree(pdir)
    pdir.mkdir(parents=True)
    for f in sorted(pyodide.iterdir()):
        if f.is_file() and not PYODIDE_SKIP.match(f.name) and f.name != "pyodide-lock.json":
            shutil.copy2(f, pdir / f.name)
    if ember_wheel is None:
        ember_wheel = build_ember_wheel(pdir)
    else:
        ember_wheel = Path(shutil.copy2(ember_wheel, pdir / Path(ember_wheel).name))
    bundle = [ember_wheel] + [Path(shutil.copy2(wheels[n], pdir / wheels[n].name)) for n in BUNDLED]
    bundle += [Path(shutil.copy2(w, pdir / Path(w).name)) for w in extra_wheels]
    lock = patch_lock(json.loads((pyodide / "pyodide-lock.json").read_text()), bundle)
    (pdir / "pyodide-lock.json").write_text(json.dumps(lock))
    return bundle, lock


def build_site(
    out,
    checkpoint=None,
    *,
    onnx=None,
    mean=None,
    std=None,
    pyodide_dir=None,
    wheels_dir=None,
    ember_wheel=None,
    extra_wheels=(),
    fetch=False,
    check=True,
) -> dict:
    """Assemble the site in ``out`` (created or refreshed) and return its ``ember-site.json``.
    The model is an ``ember train`` ``checkpoint`` or an ``onnx`` image classifier (``mean`` and
    ``std``: its input normalization per channel, see :func:`export_onnx_model`).

    ``extra_wheels`` are copied in and listed in the lock too: numpy's Pyodide wheel (from a
    full Pyodide release) makes the page run on the numpy backend. ``check`` loads the exported
    model on the python backend and runs one prediction, so a site that cannot work is never
    written."""
    if (checkpoint is None) == (onnx is None):
        raise BuildError("give the model: --checkpoint RUN_DIR (ember train) or --onnx MODEL.onnx")
    out = Path(out)
    pdir = out / "pyodide"
    bundle, lock = write_pyodide(pdir, pyodide_dir, wheels_dir, ember_wheel, extra_wheels, fetch)
    ember_wheel = bundle[0]
    if onnx is not None:
        spec = export_onnx_model(onnx, out / "model", mean, std)
    else:
        spec = export_model(checkpoint, out / "model")
    if check:
        from .runtime import Classifier

        c, h, w = spec["input_shape"]
        Classifier.from_files(out / "model", "python").predict(bytes(c * h * w), 1)
    site_dir = Path(__file__).parent / "site"
    for name in SITE_FILES:
        shutil.copy2(site_dir / name, out / name)
    numpy_entry = lock["packages"].get("numpy", {})
    site = {
        "pyodide": PYODIDE_VERSION,
        "indexURL": "pyodide/",
        "lockFileURL": "pyodide/pyodide-lock.json",
        "packages": ["ember"],
        "ember_wheel": ember_wheel.name,
        "bundled": {_wheel_name(w)[0]: w.name for w in bundle},
        "numpy": {
            "file_name": numpy_entry.get("file_name"),
            "bundled": bool(numpy_entry) and (pdir / numpy_entry["file_name"]).is_file(),
        },
        "model": "model/model.json",
        "model_name": spec["model"],
        "dataset": spec["dataset"],
    }
    (out / "ember-site.json").write_text(json.dumps(site, indent=1) + "\n")
    return site

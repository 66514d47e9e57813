"""Fixtures of the browser tests: the inputs of a site build, built sites, Node, Chromium.

What these tests need, and what they skip without (CI installs all of it, see docs/browser.md)::

    npm install --prefix .cache/wasm pyodide@314.0.7
    python -m pip download --python-version 3.14 --only-binary=:all: --no-deps \\
        -d .cache/wasm/wheels micropip==0.11.1 pluggy
    apt-get install -y chromium && python -m pip install playwright     # never `playwright install`

The repo's ``.cache/wasm`` (git-ignored) is looked at first, then ``$EMBER_WASM_CACHE`` /
``~/.cache/ember/wasm``, as ``python -m ember.wasm build`` does.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from ember.wasm import build
from ember.wasm.chromium import (
    Served as Served,  # the tests import it from here
    browser as chromium_browser,
    find_chromium,
    new_page,
)

ROOT = pathlib.Path(__file__).resolve().parents[2]
INSTALL = (
    "npm install --prefix .cache/wasm pyodide@314.0.7; python -m pip download --python-version 3.14 "
    "--only-binary=:all: --no-deps -d .cache/wasm/wheels micropip==0.11.1 pluggy"
)


def _repo_cache():
    return ROOT / ".cache" / "wasm"


@pytest.fixture(scope="session")
def pyodide_dir():
    for candidate in (_repo_cache() / "node_modules" / "pyodide", None):
        try:
            return build.find_pyodide(candidate)
        except build.BuildError as exc:
            reason = str(exc)
    pytest.skip(f"Pyodide npm package missing ({reason}); install with: {INSTALL}")


@pytest.fixture(scope="session")
def wheels_dir():
    for candidate in (_repo_cache() / "wheels", None):
        try:
            found = build.find_wheels(candidate)
            return found["pluggy"].parent if candidate is None else candidate
        except build.BuildError as exc:
            reason = str(exc)
    pytest.skip(f"micropip/pluggy wheels missing ({reason}); fetch with: {INSTALL}")


@pytest.fixture(scope="session")
def ember_wheel(tmp_path_factory):
    """One ember wheel for the session (pip wheel of the source tree takes a few seconds)."""
    return build.build_ember_wheel(tmp_path_factory.mktemp("wheel"))


def untrained_checkpoint(directory, model="mlp"):
    """A checkpoint as ``ember train`` writes it, of an untrained model (fast tests)."""
    import ember
    from ember.train import recipes, save_training_state

    ember.manual_seed(0)
    net = recipes.build_model(model, "mnist")
    return save_training_state(directory, 0, net, config={"model": model, "dataset": "mnist"})


@pytest.fixture(scope="session")
def untrained_site(tmp_path_factory, pyodide_dir, wheels_dir, ember_wheel):
    """A site built around an untrained MLP: everything but a useful model."""
    tmp = tmp_path_factory.mktemp("site-untrained")
    untrained_checkpoint(tmp / "run")
    build.build_site(tmp / "site", tmp / "run", pyodide_dir=pyodide_dir, wheels_dir=wheels_dir, ember_wheel=ember_wheel)
    return tmp / "site"


def mnist_test_images(n=100):
    """(uint8 bytes of the first n MNIST test images, their labels); skips without MNIST."""
    try:
        from ember.data import MNIST

        test = MNIST(train=False)
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"real MNIST not available here: {exc}")
    import numpy as np

    pixels = np.rint(test.data[:n] * 255).astype(np.uint8)
    return pixels.tobytes(), [int(y) for y in test.targets[:n]]


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
    """A real ``ember train mnist`` run (MLP, 5000 images, 1 epoch: ~90% test accuracy)."""
    mnist_test_images(1)
    out = tmp_path_factory.mktemp("trained") / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ember.cli",
            "train",
            "mnist",
            "--model",
            "mlp",
            "--limit-train",
            "5000",
            "--epochs",
            "1",
            "--out",
            str(out),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="session")
def trained_site(tmp_path_factory, trained_run, pyodide_dir, wheels_dir, ember_wheel):
    site = tmp_path_factory.mktemp("site-trained") / "site"
    build.build_site(site, trained_run, pyodide_dir=pyodide_dir, wheels_dir=wheels_dir, ember_wheel=ember_wheel)
    return site


# ----------------------------------------------------------------------------- Node
@pytest.fixture(scope="session")
def node():
    path = shutil.which("node")
    if path is None:
        pytest.skip("node is not installed (apt-get install nodejs)")
    return path


def run_node(node, script: str, cwd, timeout=300) -> dict:
    """Run an ES module under Node; it must print one JSON line last."""
    path = pathlib.Path(cwd) / "check.mjs"
    path.write_text(script)
    proc = subprocess.run([node, str(path)], capture_output=True, text=True, timeout=timeout, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- Chromium
@pytest.fixture(scope="session")
def chromium():
    path = find_chromium()
    if path is None:
        pytest.skip("Chromium is not installed (apt-get install -y chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("Playwright for Python is not installed (pip install playwright; never `playwright install`)")
    return path


@contextlib.contextmanager
def demo_page(chromium, url, webgpu=False, timeout_s=180, viewport=None, before_ready=None):
    """The demo page open in headless Chromium, loaded (``emberDemo.ready``); yields the page.
    Console messages and page errors are kept in ``page.ember_log`` for failure messages;
    ``before_ready(page)`` runs once the document is there, before Pyodide has loaded."""
    with chromium_browser(chromium, webgpu=webgpu) as b:
        for attempt in (1, 2):
            page = new_page(b, timeout_s, viewport)
            try:
                if before_ready is None:
                    page.goto(url)
                else:  # at the navigation's commit, not its load event: a warm Pyodide may be ready by then
                    page.goto(url, wait_until="commit")
                    before_ready(page)
                    page.wait_for_load_state("load")
                ok = page.evaluate("window.emberDemo.ready")
                break
            except Exception as e:  # noqa: BLE001 - Playwright's Error, "Target crashed"
                # A renderer that crashes while the page loads Pyodide (seen in one test of a
                # slow run on a loaded 2-core machine) is the browser's, not the page's: one
                # more load in a new tab. A second crash, or any other error, is the test's failure.
                if attempt == 2 or "crash" not in str(e).lower():
                    raise
        assert ok, f"page failed: {page.evaluate('window.emberDemo.error')}\n" + "\n".join(page.ember_log[-30:])
        yield page

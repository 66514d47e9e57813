"""plugins/template installs as its own distribution, is found through the `ember` entry
point (no --backend-module), and certifies: tiers 0-5 pass."""

import json
import os
import subprocess
import sys
from importlib import metadata

import pytest

from ember.conformance import certify

TEMPLATE = os.path.join(os.path.dirname(__file__), "..", "..", "plugins", "template")


@pytest.fixture
def installed_template():
    try:
        metadata.distribution("ember-template")
        was_installed = True
    except metadata.PackageNotFoundError:
        was_installed = False
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    # build isolation on: pip fetches the setuptools the template's pyproject asks for, as it
    # would for a user; a bare venv's own setuptools 65 cannot build an editable wheel
    proc = subprocess.run(
        pip + ["install", "--no-deps", "-e", os.path.abspath(TEMPLATE)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    yield
    if not was_installed:  # leave the environment as we found it
        subprocess.run(pip + ["uninstall", "-y", "ember-template"], capture_output=True, text=True)


def test_template_is_found_and_certifies(installed_template, tmp_path):
    # a fresh process: this one's registry was filled before the template was installed
    code = "import ember; b = ember.get_backend('template'); print(b.name, type(b).__module__)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stdout.split() == ["template", "ember_template.backend"], proc.stderr[-2000:]
    rc = certify.main(["template", "--tiers", "0,1,2,3,4,5", "--max-examples", "3", "--out", str(tmp_path), "--quiet"])
    cert = json.loads((tmp_path / "certificate.json").read_text())
    assert rc == 0, cert["failures"]
    assert cert["certified_tiers"] == [0, 1, 2, 3, 4, 5]
    assert cert["backend"]["class"] == "ember_template.backend.TemplateBackend"
    assert cert["fused"]["softmax"] == {"float32": "pass", "float64": "pass"}
    # every op it implements passes; the optional primitives (sorting, bitwise) and the optional
    # dtypes (int8, int16, uint16, uint64) it leaves out are undeclared
    from ember import dtypes as D
    from ember.primitives import PRIMITIVES

    optional = {d.name for d in D.OPTIONAL}
    assert all(
        v == "pass" or v == "undeclared" and (not PRIMITIVES[op].required or dtype in optional)
        for op, row in cert["matrix"]["ops"].items()
        for dtype, v in row.items()
        if v != "n/a"
    )

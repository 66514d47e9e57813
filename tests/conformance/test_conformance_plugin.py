"""The suite as a pytest plugin: found through its pytest11 entry point, run with --pyargs."""

import json
import os
import subprocess
import sys


def pytest_run(tmp_path, *args, autoload=True):
    env = dict(os.environ)
    env.pop("PYTEST_ADDOPTS", None)
    if not autoload:
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs", "ember.conformance", *args],
        cwd=tmp_path,
        env=env,
        text=True,
        capture_output=True,
    )


def test_pyargs_run_through_the_entry_point(tmp_path):
    report = tmp_path / "report.json"
    proc = pytest_run(tmp_path, "--ember-backend=numpy", "--ember-tiers=0,1", f"--ember-report={report}")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "28 passed" in proc.stdout  # tier 0 (20, text transfer included) and tier 1 (8)
    data = json.loads(report.read_text())
    assert data["meta"]["backend"] == "numpy" and data["meta"]["available"] is True
    assert {t["tier"] for t in data["tests"]} == {0, 1}
    assert all(t["outcome"] == "passed" for t in data["tests"])
    assert data["meta"]["machine"]["cpu_count"] == os.cpu_count()


def test_explicit_p_option_works_with_and_without_autoload(tmp_path):
    for autoload in (True, False):
        proc = pytest_run(
            tmp_path, "-p", "ember.conformance.plugin", "--ember-backend=numpy", "--ember-tiers=0", autoload=autoload
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert "20 passed" in proc.stdout


def test_plugin_is_inert_for_other_test_suites(pytestconfig):
    # this very session loaded the plugin through its entry point; it must not touch our items
    assert pytestconfig.pluginmanager.has_plugin("ember.conformance.plugin")
    assert pytestconfig.getoption("ember_report") is None

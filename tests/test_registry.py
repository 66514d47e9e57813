"""Backend discovery through real entry points of throw-away distributions.

Each test writes a tiny distribution (a module + a ``.dist-info`` with ``entry_points.txt``)
into a temp directory, puts it on ``sys.path`` of a fresh Python process, and checks what
ember's registry makes of it. A fresh process per case, because discovery runs once.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

import ember


def make_dist(root, name, module_source, api_version=None):
    """Write module ``name`` and an installed-distribution record pointing the ``ember``
    entry-point group at it."""
    (root / f"{name}.py").write_text(textwrap.dedent(module_source))
    info = root / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[ember]\n{name} = {name}\n")


GOOD = """
    from ember import hookimpl, BackendInfo
    from ember.backends.numpy.backend import NumpyBackend

    class Doubled(NumpyBackend):
        name = "doubled"
        version = "0.1"

    @hookimpl
    def ember_backends():
        return [BackendInfo("doubled", Doubled, api_version={api!r}, description="test plugin")]
"""

BROKEN = """
    raise ImportError("this plugin needs libfoo (pip install foo)")
"""


def run(root, code, **env):
    full_env = {**os.environ, "PYTHONPATH": str(root), **env}
    full_env.pop("EMBER_BACKEND", None)
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full_env, timeout=60
    )


LIST = """
    import json, warnings, ember
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        rows = ember.list_backends()
    print(json.dumps({"rows": rows, "warnings": [str(x.message) for x in w],
                      "default": ember.get_backend().name}))
"""


def test_plugin_is_discovered_and_usable(tmp_path):
    make_dist(tmp_path, "goodplug", GOOD.format(api=ember.API_VERSION))
    out = run(tmp_path, LIST)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    names = {r["name"]: r for r in report["rows"]}
    assert names["doubled"]["status"] == "ok"
    assert names["doubled"]["origin"].startswith("goodplug")
    assert report["default"] == "numpy"
    use = run(tmp_path, "import ember; ember.use('doubled'); print((ember.ones(2) + 1).backend.name)")
    assert use.stdout.strip() == "doubled", use.stderr


def test_env_var_selects_backend(tmp_path):
    make_dist(tmp_path, "goodplug", GOOD.format(api=ember.API_VERSION))
    out = run(tmp_path, "import ember; print(ember.zeros(1).backend.name)", EMBER_BACKEND="doubled")
    assert out.stdout.strip() == "doubled", out.stderr


def test_broken_plugin_is_reported_and_skipped(tmp_path):
    make_dist(tmp_path, "badplug", BROKEN)
    out = run(tmp_path, LIST)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["default"] == "numpy"  # numpy stays usable
    assert any("badplug" in w and "libfoo" in w for w in report["warnings"])
    row = next(r for r in report["rows"] if r["name"] == "badplug")
    assert row["status"].startswith("disabled") and "ImportError" in row["status"]


def test_strict_mode_turns_a_broken_plugin_into_an_error(tmp_path):
    make_dist(tmp_path, "badplug", BROKEN)
    out = run(tmp_path, "import ember; ember.zeros(1)", EMBER_STRICT_PLUGINS="1")
    assert out.returncode != 0
    assert "BackendError" in out.stderr and "badplug" in out.stderr and "EMBER_STRICT_PLUGINS" in out.stderr


def test_api_major_mismatch_disables_the_backend(tmp_path):
    make_dist(tmp_path, "oldplug", GOOD.format(api="0.3"))
    out = run(tmp_path, LIST)
    report = json.loads(out.stdout)
    assert "doubled" not in {r["name"] for r in report["rows"] if r["status"] == "ok"}
    assert any("API 0.3" in w for w in report["warnings"])


def test_import_ember_is_light():
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, ember; print(sorted(m for m in ('numpy', 'numba', 'cupy', 'torch') if m in sys.modules))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_unknown_backend_names_the_available_ones():
    with pytest.raises(ember.BackendError) as err:
        ember.use("no-such-backend")
    msg = str(err.value)
    assert "no-such-backend" in msg and "numpy" in msg and "test_registry.py" in msg


def test_backend_context_manager_restores():
    before = ember.get_backend()
    with ember.backend("numpy") as b:
        assert ember.zeros(1).backend is b
    assert ember.get_backend() is before


SAME_AS_METADATA = """
    import json, importlib.metadata as md
    from ember import registry
    ours = sorted([e.name, e.value] for e in registry._entry_points())
    theirs = sorted([e.name, e.value] for e in md.entry_points(group="ember"))
    print(json.dumps({"ours": ours, "theirs": theirs}))
"""


def test_entry_points_read_from_the_path_are_importlib_metadatas(tmp_path):
    """registry._entry_points reads ``entry_points.txt`` itself (importing importlib.metadata
    costs a first backend ~40 ms): the same entry points as importlib.metadata's, the first
    distribution of a name on the path winning, comments and other groups skipped."""
    first, second = tmp_path / "first", tmp_path / "second"
    for root in (first, second):
        root.mkdir()
        make_dist(root, "alpha", GOOD.format(api=None))
    (second / "alpha-0.1.dist-info" / "entry_points.txt").write_text("[ember]\nshadowed = alpha\n")
    info = first / "Beta_Plugin-2.0.dist-info"
    info.mkdir()
    (info / "entry_points.txt").write_text(
        "[console_scripts]\nbeta = beta:main\n\n[ember]\n# a comment\nbeta = beta.plugin:hooks [fast]\n"
    )
    out = run(first, SAME_AS_METADATA, PYTHONPATH=os.pathsep.join([str(first), str(second)]))
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["ours"] == got["theirs"]
    assert ["alpha", "alpha"] in got["ours"] and ["beta", "beta.plugin:hooks [fast]"] in got["ours"]
    assert not any(name == "shadowed" for name, _ in got["ours"])

"""The Backend protocol (ember.backend.BackendProtocol): the built-in backends and the template
plugin satisfy it, at run time (members present) and under mypy (member types), and mypy
rejects a backend that lacks part of it."""

import shutil
import textwrap
from pathlib import Path

import pytest

import ember
from ember.backend import Backend, BackendProtocol

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["numpy", "python"])
def test_builtin_backends_are_instances_of_the_protocol(name):
    assert isinstance(ember.get_backend(name), BackendProtocol)


def test_an_object_missing_members_is_not_a_backend():
    class Half:
        name, version = "half", "0"

    assert not isinstance(Half(), BackendProtocol)
    assert isinstance(Backend(), BackendProtocol)


CHECKED = """
from ember.backend import BackendProtocol
from ember.backends.numpy.backend import NumpyBackend
from ember.backends.python.backend import PythonBackend
from ember_template.backend import TemplateBackend

backends: list[BackendProtocol] = [NumpyBackend(), PythonBackend(), TemplateBackend()]
"""

BROKEN = """
from typing import Any
from ember.backend import BackendProtocol, Capabilities


class NoBytes:                       # everything but to_bytes, and a wrongly typed shape
    name = version = api_version = device = "x"
    impls: dict[str, Any] = {}
    fused_impls: dict[str, Any] = {}
    def available(self) -> tuple[bool, str]: return True, ""
    def capabilities(self) -> Capabilities: return Capabilities()
    def impl(self, name: str) -> Any: return None
    def shape(self, buf: Any) -> str: return ""
    def dtype(self, buf: Any) -> Any: return None
    def from_list(self, flat: list[Any], shape: tuple[int, ...], dtype: Any) -> Any: return None
    def to_list(self, buf: Any) -> list[Any]: return []
    def from_bytes(self, data: bytes, shape: tuple[int, ...], dtype: Any) -> Any: return None
    def from_numpy(self, array: Any) -> Any: return None
    def to_numpy(self, buf: Any) -> Any: return None
    def assign(self, dst: Any, src: Any) -> None: return None
    def synchronize(self) -> None: return None
    def compile(self, group: Any) -> Any: return None
    def jit_runner(self) -> type | None: return None


backend: BackendProtocol = NoBytes()
"""


def test_backends_satisfy_the_protocol_under_mypy(tmp_path, monkeypatch):
    api = pytest.importorskip("mypy.api", reason="mypy is in the lint extra: pip install -e '.[lint]'")
    # mypy reads sources, not setuptools' editable finder: lay the packages out as installed.
    src = tmp_path / "src"
    shutil.copytree(ROOT / "core" / "ember", src / "ember", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(
        ROOT / "backends", src / "ember" / "backends", ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True
    )
    shutil.copytree(
        ROOT / "plugins" / "template" / "ember_template",
        src / "ember_template",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    (tmp_path / "checked.py").write_text(CHECKED)
    (tmp_path / "broken.py").write_text(textwrap.dedent(BROKEN))
    monkeypatch.setenv("MYPYPATH", str(src))
    # No --ignore-missing-imports: an ember that mypy cannot find is an error in checked.py.
    out, err, status = api.run(
        [
            "--no-incremental",
            "--follow-imports=silent",
            "--python-version=3.11",
            "--config-file=",
            str(tmp_path / "checked.py"),
            str(tmp_path / "broken.py"),
        ]
    )
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert not [e for e in errors if "checked.py" in e], out
    # the broken backend is caught, naming what is wrong with it
    broken = "\n".join(e for e in out.splitlines() if "broken.py" in e)
    assert "BackendProtocol" in broken and status == 1, out
    assert "to_bytes" in out and "shape" in out, out

"""Finding and choosing backends.

Discovery is lazy: the first call that needs a backend loads the ``ember`` entry points
(each in its own try/except, so one broken plugin cannot hide the others) and asks every
plugin for its backends through the pluggy hook ``ember_backends``. The built-in backends
(``ember.backends.numpy``, ``.python``, ``.webgpu``) are entry points of ember's own
distribution like any plugin's, so this module names none of them. A backend object is
created only when it is first used.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import sys
import warnings
from collections.abc import Iterator
from importlib.machinery import PathFinder
from typing import TYPE_CHECKING, Any, NamedTuple

import pluggy

from . import hooks
from .backend import API_VERSION, Backend, BackendInfo

if TYPE_CHECKING:  # importlib.metadata loads on first discovery, not with ember
    from importlib.metadata import EntryPoint
from .errors import BackendError, located


class PluginWarning(UserWarning):
    """A plugin was disabled; ember goes on with the others."""


class _Registry:
    def __init__(self) -> None:
        self.infos: dict[str, BackendInfo] = {}
        self.origin: dict[str, str] = {}  # backend name -> plugin it came from
        self.problems: dict[str, str] = {}  # plugin or backend name -> why it is disabled
        self.loaded: dict[str, Backend] = {}
        self.discovered = False
        self.pm: pluggy.PluginManager | None = None

    # -- discovery ------------------------------------------------------------------------------
    def _problem(self, name: str, message: str, exc: BaseException | None = None) -> None:
        self.problems[name] = message
        if os.environ.get("EMBER_STRICT_PLUGINS") == "1":
            raise BackendError(f"plugin {name!r}: {message} (EMBER_STRICT_PLUGINS=1 makes this an error)") from exc
        warnings.warn(f"ember: plugin {name!r} disabled: {message}", PluginWarning, stacklevel=4)

    def discover(self) -> None:
        if self.discovered:
            return
        self.discovered = True
        pm = self.pm = pluggy.PluginManager("ember")
        pm.add_hookspecs(hooks)
        for ep in _entry_points():
            try:
                plugin = ep.load()
                if pm.is_registered(plugin):
                    continue
                pm.register(plugin, name=f"{ep.name} ({ep.value})")
            except Exception as exc:  # noqa: BLE001 - a broken plugin must not take ember down
                self._problem(
                    ep.name,
                    f"import of {ep.value!r} failed with {type(exc).__name__}: {exc}; "
                    f"reinstall it or `pip uninstall` its distribution",
                    exc,
                )
        pm.check_pending()
        # Call each plugin's hook separately: pluggy's order depends on disk, and one failing
        # hook must not lose the others' backends.
        for plugin_name, plugin in pm.list_name_plugin():
            impl = getattr(plugin, "ember_backends", None)
            if impl is None:
                continue
            try:
                infos = list(impl())
            except Exception as exc:  # noqa: BLE001
                self._problem(plugin_name, f"ember_backends() raised {type(exc).__name__}: {exc}", exc)
                continue
            for info in infos:
                self._add(info, plugin_name)

    def _add(self, info: BackendInfo, origin: str) -> None:
        major = str(info.api_version).split(".")[0]
        if major != API_VERSION.split(".")[0]:
            self._problem(
                info.name,
                f"implements backend API {info.api_version} but this ember speaks "
                f"{API_VERSION}; install a version of the plugin made for ember's API {API_VERSION}",
            )
            return
        if info.name in self.infos:
            self._problem(
                info.name, f"backend name already provided by {self.origin[info.name]}; ignoring the one from {origin}"
            )
            return
        self.infos[info.name] = info
        self.origin[info.name] = origin

    def register(self, info: BackendInfo, origin: str = "ember.register_backend") -> None:
        self.discover()
        self.problems.pop(info.name, None)
        self.infos.pop(info.name, None)
        self.loaded.pop(info.name, None)
        self._add(info, origin)

    # -- loading --------------------------------------------------------------------------------
    def get(self, name: str) -> Backend:
        backend = self.loaded.get(name)
        if backend is not None:
            return backend
        self.discover()
        if name not in self.infos:
            known = ", ".join(sorted(self.infos)) or "none"
            why = f" ({self.problems[name]})" if name in self.problems else ""
            raise located(BackendError, f"unknown backend {name!r}{why}; available: {known}. " + install_hint(name))
        try:
            backend = self.infos[name].load()
        except Exception as exc:  # noqa: BLE001
            raise BackendError(f"backend {name!r} failed to load: {type(exc).__name__}: {exc}") from exc
        ok, reason = backend.available()
        if not ok:
            raise located(BackendError, f"backend {name!r} is installed but unavailable here: {reason}")
        self.loaded[name] = backend
        return backend

    def status(self) -> list[dict[str, Any]]:
        """One record per known backend or disabled plugin, for ``ember backends``."""
        self.discover()
        rows = []
        for name, info in sorted(self.infos.items(), key=lambda kv: -kv[1].priority):
            row: dict[str, Any] = {"name": name, "origin": self.origin[name], "description": info.description}
            try:
                backend = info.load() if name not in self.loaded else self.loaded[name]
                ok, reason = backend.available()
                caps = backend.capabilities()
                row.update(
                    version=backend.version,
                    status="ok" if ok else f"unavailable: {reason}",
                    devices=list(caps.devices),
                    ops=len(caps.ops),
                    dtypes=sorted(d.name for d in caps.dtypes),
                    fused=sorted(caps.fused),
                )
            except Exception as exc:  # noqa: BLE001
                row.update(version="?", status=f"broken: {type(exc).__name__}: {exc}")
            rows.append(row)
        for name, why in sorted(self.problems.items()):
            if name not in self.infos:
                rows.append({"name": name, "origin": "", "version": "?", "status": f"disabled: {why}"})
        return rows


#: The plugins in ember's repository and the command that installs each from its root (their
#: distributions, ember-numba and ember-cupy, are not published yet).
INSTALL = {
    "numba": "pip install ./plugins/numba",
    "cupy": "pip install './plugins/cupy[cuda13]'",  # [cuda12] for a CUDA 12 driver
    "template": "pip install ./plugins/template",
}


def install_hint(name: str) -> str:
    """What to run to get backend ``name``.

    >>> install_hint("numba")
    "Install it from ember's repository: `pip install ./plugins/numba`"
    """
    if name in INSTALL:
        return f"Install it from ember's repository: `{INSTALL[name]}`"
    return (
        f"A backend comes from a plugin distribution; ember's repository has "
        f"{', '.join(sorted(INSTALL))} (`pip install ./plugins/NAME`), and `ember backends` lists what is installed"
    )


class _EntryPoint(NamedTuple):
    """An ``ember`` entry point as a distribution's ``entry_points.txt`` states it: the
    name, value and ``load`` of importlib.metadata's."""

    name: str
    value: str

    def load(self) -> Any:
        module, _, attr = self.value.partition("[")[0].partition(":")
        obj = importlib.import_module(module.strip())
        for part in attr.strip().split(".") if attr.strip() else ():
            obj = getattr(obj, part)
        return obj


def _entry_points() -> list[EntryPoint] | list[_EntryPoint]:
    """The ``ember`` entry points of the installed distributions.

    Read from the ``*.dist-info``/``*.egg-info`` folders on ``sys.path`` directly, the first
    distribution of a name winning, as importlib.metadata does: importing importlib.metadata
    (its email parser) and reading every distribution's metadata took ~40 ms of a process's
    first backend, more than the rest of discovery. Where the path holds anything but
    folders (a zip, an egg) or another finder of distributions is installed, importlib.metadata
    reads them instead.
    """
    if any(os.path.isfile(p) for p in sys.path) or any(
        hasattr(f, "find_distributions") and f is not PathFinder for f in sys.meta_path
    ):
        from importlib.metadata import entry_points

        return list(entry_points(group="ember"))
    found, seen = [], set()
    for entry in sys.path:
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for name in names:
            stem, _, kind = name.rpartition(".")
            if kind not in ("dist-info", "egg-info"):
                continue
            dist = re.sub(r"[-_.]+", "_", stem.split("-")[0]).lower()
            if dist in seen:
                continue
            seen.add(dist)
            try:
                with open(os.path.join(entry or ".", name, "entry_points.txt"), encoding="utf-8") as f:
                    text = f.read()
            except OSError:
                continue
            section = None
            for line in text.splitlines():
                line = line.strip()
                if line.startswith("[") and line.endswith("]"):
                    section = line[1:-1].strip()
                elif section == "ember" and "=" in line and not line.startswith(("#", ";")):
                    key, _, value = line.partition("=")
                    found.append(_EntryPoint(key.strip(), value.strip()))
    return found


REGISTRY = _Registry()
_current: list[Backend] = []


def _default_name() -> str:
    env = os.environ.get("EMBER_BACKEND")
    if env:
        return env
    try:
        import numpy  # noqa: F401

        return "numpy"
    except ImportError:
        return "python"


def get_backend(name: str | Backend | None = None) -> Backend:
    """The backend called ``name``, or the current one.

    >>> get_backend("numpy").name
    'numpy'
    """
    if isinstance(name, Backend):
        return name
    if name is not None:
        return REGISTRY.get(name)
    if not _current:
        _current.append(REGISTRY.get(_default_name()))
    return _current[-1]


def use(name: str) -> Backend:
    """Make ``name`` the backend for new tensors, for the rest of the program.

    >>> import ember
    >>> ember.use("numpy").name
    'numpy'
    """
    backend = REGISTRY.get(name)
    if _current:
        _current[-1] = backend
    else:
        _current.append(backend)
    return backend


@contextlib.contextmanager
def backend(name: str) -> Iterator[Backend]:
    """Use ``name`` for new tensors inside a ``with`` block only.

    >>> import ember
    >>> with ember.backend("numpy"):
    ...     ember.ones(2).backend.name
    'numpy'
    """
    get_backend()
    _current.append(REGISTRY.get(name))
    try:
        yield _current[-1]
    finally:
        _current.pop()


async def prepare(name: str) -> str | None:
    """Await the asynchronous setup backend ``name`` declares (``BackendInfo.setup``, e.g. the
    WebGPU device request in the browser): "" when it is ready, else why not; None when no
    plugin offers ``name`` here.

    >>> import asyncio
    >>> asyncio.run(prepare("numpy")), asyncio.run(prepare("no-such-backend"))
    ('', None)
    """
    REGISTRY.discover()
    info = REGISTRY.infos.get(name)
    if info is None:
        return None
    return "" if info.setup is None else await info.setup()


def register_backend(info: BackendInfo) -> None:
    """Register a backend by hand (tests, notebooks, places without entry points)."""
    REGISTRY.register(info)


def backends() -> list[dict[str, Any]]:
    return REGISTRY.status()

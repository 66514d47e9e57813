"""Generated kernels as real, content-addressed modules, so numba's on-disk cache works.

numba caches a compiled function (``cache=True``) next to the file it was defined in, and
cannot cache a function whose source was passed to ``exec`` (it has no file to locate the
cache by). So generated source is written to ``<cache dir>/<hash of the source>.py`` once,
imported from there with importlib, and registered in ``sys.modules`` before it runs, as
numba's cache locator expects. A second process that generates the same source finds both
the module and numba's compiled code (``__pycache__/*.nbi``, ``*.nbc`` beside it) and
compiles nothing.

The directory is ``$EMBER_CACHE/numba`` when ``EMBER_CACHE`` is set, else
``$XDG_CACHE_HOME/ember/numba`` or ``~/.cache/ember/numba``, with one subdirectory per numba
and Python version (the compiled code is specific to both). Where it cannot be written, a
per-process temporary directory is used and nothing survives the process.

Loading what is cached is cheaper than numba makes it: see :func:`install_light_loads`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

PREFIX = "ember_numba_kernel_"
_DIR: list = []  # the directory, resolved once per process
_MODULES: dict = {}  # digest -> module (also in sys.modules)
_PACKAGE: list = []  # package_digest(), once computed
#: ``EMBER_NUMBA_LIGHT_LOAD=0`` loads cached kernels the way numba does (see install_light_loads).
LIGHT = os.environ.get("EMBER_NUMBA_LIGHT_LOAD", "1") != "0"
STATS = {"light": 0, "full": 0}  # cached overloads loaded light, and light loads that fell back


def base_dir() -> Path:
    """Where ember keeps caches: ``$EMBER_CACHE``, else the XDG cache home + ``ember``."""
    env = os.environ.get("EMBER_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "ember"


def cache_dir() -> Path:
    """This process's kernel directory (created on first use)."""
    if _DIR:
        return _DIR[0]
    import numba

    tag = f"numba-{numba.__version__}-py{sys.version_info[0]}{sys.version_info[1]}"
    path = base_dir() / "numba" / tag
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".probe-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError:
        path = Path(tempfile.mkdtemp(prefix="ember-numba-"))
    _DIR.append(path)
    return path


def digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:20]


def package_digest() -> str:
    """A digest of this package's source files, read once per process: generated code that
    calls into the package names it, so that a changed package makes new modules.

    >>> package_digest() == package_digest() and len(package_digest()) == 20
    True
    """
    if not _PACKAGE:
        h = hashlib.sha256()
        root = Path(__file__).resolve().parent
        for path in sorted(root.rglob("*.py")):
            h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
        _PACKAGE.append(h.hexdigest()[:20])
    return _PACKAGE[0]


def load(source: str):
    """The module defined by ``source``, written to the cache directory and imported.

    >>> m = load("def f():\\n    return 42\\n")
    >>> m.f(), m.__name__.startswith(PREFIX)
    (42, True)
    """
    key = digest(source)
    module = _MODULES.get(key)
    if module is not None:
        return module
    name = PREFIX + key
    path = cache_dir() / f"{name}.py"
    if not path.exists() or path.read_text() != source:
        # Write then rename: another process may be importing the same file right now.
        tmp = path.with_name(f".{name}.{os.getpid()}.tmp")
        tmp.write_text(source)
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # numba's cache locator looks the module up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    _MODULES[key] = module
    return module


def files() -> list:
    """The generated modules and numba cache files now on disk (tests count these)."""
    d = cache_dir()
    return sorted(p.name for p in d.glob(PREFIX + "*.py")) + sorted(
        p.name for p in (d / "__pycache__").glob(PREFIX + "*.nb*")
    )


def install_light_loads() -> bool:
    """Let ember's kernels load from numba's disk cache without numba's full set-up.

    Before loading a cached overload numba refreshes its typing and target contexts: it
    imports every module of typing and lowering rules it has and registers them (~70 modules,
    ~0.17 s: most of a warm process's first step), which only *compiling* uses. Loading uses
    the machine code, the symbols it calls and numba's runtime, so the light load initializes
    the runtime (NRT), registers the one set of symbols a rule module adds at import (the hash
    secret), then loads exactly what numba's load would. A compile still refreshes everything
    first (numba's compiler does it itself). Only functions of this package and of its
    generated modules load this way, and any error falls back to numba's own load. The machine
    code is the same either way, so are the results. Returns whether it is installed.
    """
    if not LIGHT:
        return False
    try:
        from numba.core import caching
        from numba.core.runtime import nrt
    except ImportError:
        return False
    full = caching.Cache.load_overload
    if getattr(full, "ember_light", False):
        return True
    if not (hasattr(caching.Cache, "_load_overload") and hasattr(caching.Cache, "_guard_against_spurious_io_errors")):
        return False  # numba's internals moved: keep its own load

    def load_overload(self, sig, target_context):
        module = getattr(getattr(self, "_py_func", None), "__module__", None) or ""
        if not (module.startswith(PREFIX) or module.partition(".")[0] == __package__):
            return full(self, sig, target_context)
        try:
            nrt.rtsys.initialize(target_context)
            importlib.import_module("numba.cpython.hashing")  # its import adds the hash secret's symbols
            with self._guard_against_spurious_io_errors():
                cres = self._load_overload(sig, target_context)
        except Exception:
            STATS["full"] += 1
            return full(self, sig, target_context)
        STATS["light"] += cres is not None
        return cres

    load_overload.ember_light = True  # type: ignore[attr-defined]
    caching.Cache.load_overload = load_overload
    return True

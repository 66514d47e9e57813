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

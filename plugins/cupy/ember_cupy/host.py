"""The host harness: the plugin's kernels and primitives on the CPU, for machines without a GPU.

:class:`HostRuntime` builds each kernel source with ``nvcc -shared -Xcompiler -fPIC
-DEMBER_HOST_HARNESS`` (the same source the GPU gets; the define adds the host loop
``NAME_host``) and calls it through ctypes on NumPy arrays. The backend ``cupy-host`` is
:class:`~ember_cupy.backend.CupyBackend` on this runtime: the plugin's own primitive table,
fused ops and fusion-group compiler, with NumPy standing in for CuPy. It is how the
conformance suite checks the plugin's logic here::

    ember certify cupy-host --backend-module ember_cupy.host

It is registered only by that option (or by tests), never through the entry point, and it
needs ``nvcc`` on the PATH. What it cannot check: CuPy's own kernels, the block-cooperative
reductions (the host loops are serial), and anything about speed. That is gpu_check.sh's job.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile

from ember import BackendInfo, hookimpl

from .runtime import Runtime

CTYPES = {
    "ptr": ctypes.c_void_p,
    "long long": ctypes.c_longlong,
    "unsigned long long": ctypes.c_ulonglong,
    "int": ctypes.c_int,
    "unsigned int": ctypes.c_uint,
    "float": ctypes.c_float,
    "double": ctypes.c_double,
    "bool": ctypes.c_bool,
}


def nvcc() -> str | None:
    """The nvcc on PATH (or in $CUDA_HOME/bin), else None."""
    found = shutil.which("nvcc")
    if found is None and os.environ.get("CUDA_HOME"):
        candidate = os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")
        found = candidate if os.access(candidate, os.X_OK) else None
    return found


def cache_dir() -> str:
    """Where built kernels are kept between runs ($EMBER_CUPY_HOST_CACHE, else a per-user folder
    in the system's temporary directory)."""
    path = os.environ.get("EMBER_CUPY_HOST_CACHE") or os.path.join(
        tempfile.gettempdir(), f"ember-cupy-host-{os.getuid()}"
    )
    os.makedirs(path, exist_ok=True)
    return path


HOST_FLAGS = ("-shared", "-Xcompiler", "-fPIC", "-O2", "-std=c++17", "-DEMBER_HOST_HARNESS")


class BuildError(RuntimeError):
    """nvcc rejected a kernel source (the message holds its diagnostics and the source's path)."""


def build(source: str, key: str, flags=HOST_FLAGS, suffix=".so") -> str:
    """Compile ``source`` once (cached by ``key`` and ``suffix``) and return the output file's
    path; nvcc's messages (e.g. ``-Xptxas -v`` statistics) are kept beside it in ``.log``."""
    exe = nvcc()
    if exe is None:
        raise BuildError("nvcc not found: the host harness needs the CUDA toolkit's compiler on PATH")
    folder = cache_dir()
    out = os.path.join(folder, key + suffix)
    if os.path.exists(out):
        return out
    src = os.path.join(folder, key + ".cu")
    with open(f"{src}.{os.getpid()}.tmp", "w") as f:
        f.write(source)
    os.replace(f"{src}.{os.getpid()}.tmp", src)
    tmp = f"{out}.{os.getpid()}.tmp"
    proc = subprocess.run([exe, *flags, "-o", tmp, src], capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"nvcc failed on {src}:\n{proc.stderr.strip()}")
    with open(out + ".log", "w") as f:
        f.write(proc.stderr)
    os.replace(tmp, out)
    return out


def combined(kernel_list) -> tuple:
    """One translation unit holding every kernel of ``kernel_list`` (their helpers are guarded,
    so units concatenate) and its cache key. One nvcc run instead of one per kernel."""
    unique = list({k.key: k for k in kernel_list}.values())
    key = "all-" + hashlib.sha256("".join(k.key for k in unique).encode()).hexdigest()[:20]
    return "\n".join(k.source for k in unique), key, unique


class HostRuntime(Runtime):
    """NumPy arrays; kernels built for the host and run serially through ctypes."""

    name = "host"

    def __init__(self):
        super().__init__()
        import numpy

        self.xp = numpy
        self.libs: dict = {}

    def function(self, kernel):
        fn = self.libs.get(kernel.key)
        if fn is None:
            fn = self._bind(ctypes.CDLL(build(kernel.source, kernel.key)), kernel)
        return fn

    def _bind(self, lib, kernel):
        fn = getattr(lib, kernel.name + "_host")
        fn.argtypes = [ctypes.c_longlong] + [CTYPES[k] for k in kernel.params]
        fn.restype = None
        self.libs[kernel.key] = fn
        return fn

    def prebuild(self, kernel_list) -> None:
        """Build many kernels with one nvcc run (tests use it: one run costs seconds)."""
        todo = [k for k in kernel_list if k.key not in self.libs]
        if todo:
            source, key, unique = combined(todo)
            lib = ctypes.CDLL(build(source, key))
            for k in unique:
                self._bind(lib, k)

    def _run(self, fn, kernel, n, args):
        conv = []
        for kind, a in zip(kernel.params, args):
            if kind == "ptr":
                if not isinstance(a, self.xp.ndarray):
                    raise TypeError(f"kernel {kernel.name}: expected an array, got {type(a).__name__}")
                conv.append(a.ctypes.data)
            else:
                conv.append(a)
        fn(n, *conv)


def _load():
    from .backend import CupyBackend

    return CupyBackend(HostRuntime(), name="cupy-host")


@hookimpl
def ember_backends():
    """``cupy-host``: the cupy plugin on NumPy + host-built kernels (for checks without a GPU)."""
    return [
        BackendInfo(
            "cupy-host",
            _load,
            priority=-10,
            description="ember-cupy's code on the CPU: NumPy arrays, kernels built by nvcc for the host",
        )
    ]

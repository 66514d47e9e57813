"""Is there a GPU here? One probe, with the driver's own words when the answer is no.

``import cupy`` succeeds on machines without a GPU (and without a driver), so availability is
decided by asking the CUDA runtime for its devices and making one tiny allocation: the error
CuPy raises (``cudaErrorInsufficientDriver``, ``cudaErrorNoDevice``, ...) becomes the reason
``ember backends`` shows and GPU tests skip with.
"""

from __future__ import annotations

INSTALL = "pip install './plugins/cupy[cuda12]' from ember's repository (or [cuda13], matching your driver's CUDA)"


def probe() -> tuple:
    """(True, "") when CuPy can run kernels on a CUDA device, else (False, why and what to do).

    >>> ok, why = probe()
    >>> isinstance(ok, bool) and (ok or len(why) > 0)
    True
    """
    try:
        import cupy
    except ImportError as exc:
        return False, f"CuPy is not installed ({exc}); {INSTALL}"
    except Exception as exc:  # noqa: BLE001 - a broken CUDA install shows up here
        return False, f"importing CuPy failed: {type(exc).__name__}: {exc}"
    if getattr(cupy, "__file__", None) is None:  # a folder named cupy on sys.path (a namespace package), not CuPy
        return False, f"CuPy is not installed (No module named 'cupy'); {INSTALL}"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001
        return False, f"no usable CUDA device: {type(exc).__name__}: {exc}"
    if count == 0:
        return False, "no CUDA device found (cudaGetDeviceCount returned 0)"
    try:
        cupy.zeros(1, dtype=cupy.float32).sum()
    except Exception as exc:  # noqa: BLE001
        return False, f"CUDA device found but unusable: {type(exc).__name__}: {exc}"
    return True, ""


def probe_host() -> tuple:
    """Availability of the host harness (host.py): it needs nvcc and NumPy."""
    from .host import nvcc

    if nvcc() is None:
        return False, "nvcc not found on PATH: the host harness builds kernels with the CUDA toolkit's compiler"
    return True, ""


def describe() -> dict:
    """Name, compute capability and memory of the current device, and the CUDA versions."""
    import cupy

    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return {
        "device": name,
        "compute_capability": dev.compute_capability,
        "memory_bytes": str(props.get("totalGlobalMem", "?")),
        "cuda_runtime": str(cupy.cuda.runtime.runtimeGetVersion()),
        "cuda_driver": str(cupy.cuda.runtime.driverGetVersion()),
        "cupy": cupy.__version__,
    }

"""DLPack exchange: ``x.__dlpack__()`` / ``ember.from_dlpack(obj)``, zero-copy where the
memory allows it.

DLPack is the protocol array libraries use to hand each other memory without copying. The
route by where the memory is:

| memory | ``x.__dlpack__()`` | ``ember.from_dlpack(obj)`` |
|---|---|---|
| a buffer that speaks DLPack itself (numpy, numba: NumPy arrays; cupy: CuPy arrays) | the buffer's own capsule: shared | |
| a buffer that does not (the pure-Python backend) | a NumPy copy's capsule | |
| CPU producer (NumPy, torch CPU, ...) | | a NumPy view of it, on the current CPU backend: shared when that backend keeps NumPy arrays as they are (numpy), else copied in |
| CUDA producer (torch CUDA, CuPy) | | the CUDA backend's view of it (ember-cupy): shared |

>>> import numpy as np, ember
>>> a = np.arange(3.0)
>>> t = ember.from_dlpack(a)
>>> a[0] = 7.0
>>> t.tolist()                                 # the same memory
[7.0, 1.0, 2.0]
>>> np.from_dlpack(t).base is not None        # and back, without a copy
True
"""

from __future__ import annotations

from typing import Any

from . import dispatch

#: DLPack's device-type codes that ember routes (``__dlpack_device__()[0]``).
KDL_CPU, KDL_CUDA = 1, 2


def capsule(t: Any, **kwargs: Any) -> Any:
    """``t.__dlpack__(**kwargs)``: the backend buffer's own capsule, else a NumPy copy's."""
    from .dtypes import STORAGE

    if t.dtype in STORAGE:  # NumPy and CuPy take none of them through DLPack
        from .errors import DTypeError, located

        raise located(
            DTypeError,
            f"a {t.dtype} tensor has no DLPack exchange in ember: convert it first (t.float()), "
            "or use t.numpy() (an ml_dtypes array)",
        )
    buf = t._data
    if hasattr(buf, "__dlpack__"):
        return buf.__dlpack__(**kwargs)
    return t.numpy().__dlpack__(**kwargs)


def device(t: Any) -> tuple[int, int]:
    """``t.__dlpack_device__()``: ``(device type, index)`` of the memory."""
    buf = t._data
    if hasattr(buf, "__dlpack_device__"):
        kind, index = buf.__dlpack_device__()
        return int(kind), int(index)
    return (KDL_CPU, 0)


def from_dlpack(obj: Any, backend: Any = None) -> Any:
    """A tensor sharing memory with ``obj``, any DLPack producer (module table).

    ``backend`` chooses where a CPU producer's memory goes (default: the current backend, if it
    runs on the CPU; else numpy).
    """
    from .devices import backend_for
    from .errors import located

    if not hasattr(obj, "__dlpack__"):
        raise located(
            TypeError,
            f"ember.from_dlpack needs an object with __dlpack__ (a DLPack producer), got {type(obj).__name__}",
        )
    kind = obj.__dlpack_device__()[0] if hasattr(obj, "__dlpack_device__") else KDL_CPU
    if kind == KDL_CUDA:
        target: Any = backend_for(backend or "cuda")  # a CUDA backend has from_dlpack
        return dispatch.wrap(target.from_dlpack(obj), target)
    if kind != KDL_CPU:
        raise located(
            ValueError,
            f"ember.from_dlpack: memory on DLPack device type {kind} is neither CPU (1) "
            f"nor CUDA (2); copy it to the CPU first",
        )
    import numpy as np

    target = backend_for(backend or "cpu")
    view = np.from_dlpack(obj)
    if not view.flags.writeable and isinstance(obj, np.ndarray) and obj.flags.writeable:
        view = obj  # NumPy < 2 imports DLPack memory read-only (and cannot export it again): the array itself
    return dispatch.wrap(target.from_numpy(view), target)

"""The ``webgpu`` backend: ember's primitives as WGSL compute shaders, driven from Python.

It exists only inside Pyodide in a browser that has ``navigator.gpu``: the ``ember_backends``
hook (``__init__.py``) offers it there and nowhere else. Python talks to the GPU through Pyodide's ``js`` module
(``device.createBuffer``, ``queue.writeBuffer``, compute passes); the shaders come from
:mod:`ember.backends.webgpu.wgsl`.

How it works, in the order a forward pass meets it:

- A buffer (``device.WGBuffer``) is a strided *view* of a GPU storage buffer (element
  offset + one stride per dim), so reshape of contiguous data, permute, expand, slice, flip and
  pooling windows are free: no kernel runs. Weights are uploaded once (``model.to("webgpu")``) and every
  result stays on the GPU until someone reads it (``tolist``, ``numpy``, ``item``).
- Elementwise ops, reductions, matmul, conv2d and pad run as compute shaders (the ``GPU``
  table, kernels.py). Work is recorded into one command encoder and submitted when a result is read, so a
  forward pass is one submission and one read-back. int8, int16 and uint16 live in 32-bit
  words; every kernel that writes one wraps the value into its range (``device.WRAP``).
- Everything else, and every dtype WGSL has no storage for (float64, float16, int64, uint8,
  uint64, and the storage dtypes: bfloat16, float8, ...), runs on the host through the pure-Python backend (the ``python`` reference), on a downloaded
  copy. So every primitive works; the table says which ones are fast. ``backend.stats`` counts
  both paths.
- Reading needs to wait for the GPU (``mapAsync``), which Python does with Pyodide's
  ``run_sync`` (JavaScript promise integration): call into Python from JavaScript with
  ``callPromising`` or ``runPythonAsync``.

The browser test runs :mod:`ember.wasm.selfcheck`, which compares each kernel with the
python backend under headless Chromium's WebGPU (SwiftShader).

>>> from ember.backends.webgpu.device import has_navigator_gpu
>>> has_navigator_gpu()       # outside a browser: the entry point offers nothing
False
"""

from __future__ import annotations

import sys

from ember import dtypes as D
from ember.backend import Backend, Capabilities

from .device import (
    DEVICE,
    STATE,
    STORAGE,
    WGBuffer,
    copy,
    device,
    has_navigator_gpu,
    host_backend,
    init,
    new_buffer,
    numel,
    on_gpu,
    to_host,
    unavailable_reason,
)
from .kernels import GPU

__all__ = ["WebGPUBackend", "init", "unavailable_reason", "has_navigator_gpu", "GPU"]


# ----------------------------------------------------------------------------- the backend
def _declined_key(name, args, params) -> str:
    """``"cast float32->float64"``, ``"where bool/int64/int64"``, ``"reshape int64 (host)"``."""
    dtypes = [a.dtype.name for a in args if isinstance(a, WGBuffer)]
    key = f"{name} {'/'.join(dtypes) or 'scalars'}"
    if "dtype" in params:
        key += f"->{D.get(params['dtype']).name}"
    if all(a.dtype in STORAGE and a.store is None for a in args if isinstance(a, WGBuffer)) and dtypes:
        key += " (host)"  # GPU dtypes whose data stayed on the host (a host op made them)
    return key


def _primitive(name, stats):
    gpu = GPU.get(name)
    host = host_backend().IMPLS[name]

    def impl(*args, **params):
        if gpu is not None:
            out = gpu(*args, **params)
            if out is not None:
                stats["gpu"][name] = stats["gpu"].get(name, 0) + 1
                return out
            # The kernel exists but declined these operands (a dtype WGSL cannot store, data
            # that lives on the host only, ...): counted by the operands' dtypes.
            key = _declined_key(name, args, params)
            stats["declined"][key] = stats["declined"].get(key, 0) + 1
        stats["host"][name] = stats["host"].get(name, 0) + 1
        result = host(*(to_host(a) if isinstance(a, WGBuffer) else a for a in args), **params)
        return WGBuffer(result.shape, result.dtype, host=result)

    impl.__name__ = name
    return impl


class WebGPUBackend(Backend):
    """Primitives as WGSL compute shaders on the browser's WebGPU device (see the module doc).

    ``stats`` counts, per primitive, the calls that ran on the GPU and those the host (the
    python backend) answered, and in ``declined`` the host calls of a primitive that has a
    kernel, by primitive and dtype (``"matmul float64"``); ``stats_reset()`` clears it."""

    name = "webgpu"
    device = "webgpu"

    def __init__(self):
        if not DEVICE and not STATE["tried"] and has_navigator_gpu():
            from pyodide.ffi import can_run_sync, run_sync

            if can_run_sync():
                run_sync(init())
            else:
                STATE["reason"] = (
                    "call `await ember.registry.prepare('webgpu')` (or use the backend from "
                    "runPythonAsync / callPromising) before the first use"
                )
        self.stats: dict = {"gpu": {}, "host": {}, "declined": {}}
        self.impls = {n: _primitive(n, self.stats) for n in host_backend().IMPLS}
        self.version = DEVICE[0].description if DEVICE else "unavailable"

    def available(self):
        if DEVICE:
            return True, ""
        return False, unavailable_reason()

    def capabilities(self):
        return Capabilities(
            ops=frozenset(self.impls),
            # int8, int16, uint16 in 32-bit words; uint64, the storage dtypes (bfloat16, ...) and text on the host
            dtypes=frozenset(D.ALL + D.OPTIONAL + tuple(D.STORAGE) + D.TEXT),
            devices=("webgpu",),
            notes={
                "gpu_ops": ", ".join(sorted(GPU)),
                "gpu_dtypes": ", ".join(sorted(d.name for d in STORAGE)),
                "host": "other ops and dtypes run on the python backend",
                "adapter": self.version,
                "fallback_adapter": str(bool(DEVICE and DEVICE[0].fallback_adapter)),
            },
        )

    def stats_reset(self):
        for counts in self.stats.values():
            counts.clear()

    # -- buffers ---------------------------------------------------------------------------------
    def shape(self, buf):
        return buf.shape

    def dtype(self, buf):
        return buf.dtype

    def from_list(self, flat, shape, dtype):
        host = host_backend().PythonBackend().from_list(flat, shape, dtype)
        return WGBuffer(host.shape, host.dtype, host=host)

    def to_list(self, buf):
        return list(to_host(buf).data)

    def from_bytes(self, data, shape, dtype):
        """Upload at once when the dtype lives on the GPU: this is how weights arrive."""
        dtype, shape = D.get(dtype), tuple(shape)
        if dtype in (D.float32, D.int32, D.uint32) and numel(shape) and sys.byteorder == "little":
            expect = 4 * numel(shape)
            if len(data) != expect:
                raise ValueError(f"{len(data)} bytes do not hold {numel(shape)} elements of {dtype}")
            buf = new_buffer(shape, dtype)
            device().write(buf.store.gpu, bytes(data))
            return buf
        host = host_backend().PythonBackend().from_bytes(data, shape, dtype)
        return WGBuffer(host.shape, host.dtype, host=host)

    def to_bytes(self, buf):
        from ..python.buffer import to_bytes

        host = to_host(buf)
        return to_bytes(host.data, host.dtype)

    def assign(self, dst, src):
        if dst.shape != src.shape:
            raise ValueError(f"assign: shapes {dst.shape} and {src.shape} differ")
        if dst.store is None:
            host = to_host(src)
            host_backend().PythonBackend().assign(dst.host, host)
            return
        if src.dtype is not dst.dtype:
            src = self.impls["cast"](src, dst.dtype)
        if not on_gpu(src):
            src = WGBuffer(src.shape, dst.dtype, host=to_host(src))
            on_gpu(src)
        if src.store is dst.store:
            src = copy(src)
        copy(src, dst)
        dst.store.version += 1

    def synchronize(self):
        if DEVICE:
            DEVICE[0].synchronize()

"""The WebGPU device as the ``webgpu`` backend sees it: buffers, uploads, read-backs, launches.

Python talks to the GPU through Pyodide's ``js`` module; nothing here runs outside Pyodide
except pure bookkeeping. In the order a forward pass meets it:

- :func:`init` asks ``navigator.gpu`` for an adapter and a device, once.
- A :class:`WGBuffer` is a strided *view* (element offset + one stride per dim) of a
  :class:`Storage` (one GPUBuffer), and/or a host copy on the python backend. Views make
  reshape, permute, expand, slice, flip and pooling windows free.
- :func:`elementwise` launches one shader over views; the backend's kernels
  (backend.py) are built on it and on :meth:`_Device.dispatch`.
- Dispatches go into one compute pass of one command encoder; a read-back submits it and waits
  (``mapAsync`` through Pyodide's ``run_sync``: call Python from JavaScript with
  ``callPromising`` or ``runPythonAsync``).

>>> contiguous_strides((2, 3, 4))
(12, 4, 1)
"""

from __future__ import annotations

import struct
import sys
from array import array

from ember import dtypes as D
from ember.errors import BackendError

from . import wgsl

#: ember dtype -> WGSL storage type of the dtypes that live on the GPU (bool as u32 0/1; the
#: integers narrower than 32 bits, which WGSL lacks, in a whole word each).
STORAGE = {
    D.float32: "f32",
    D.int32: "i32",
    D.uint32: "u32",
    D.bool_: "u32",
    D.int8: "i32",
    D.int16: "i32",
    D.uint16: "u32",
}
#: the WGSL around a result of a narrow integer that brings it back into its range: a kernel
#: computes in 32 bits and wraps what it writes, as NumPy's arithmetic wraps (i32's >> keeps the sign)
WRAP = {D.int8: ("(((", ") << 24u) >> 24u)"), D.int16: ("(((", ") << 16u) >> 16u)"), D.uint16: ("((", ") & 0xffffu)")}


# ----------------------------------------------------------------------------- the device
def has_navigator_gpu() -> bool:
    """True inside Pyodide in a browser exposing ``navigator.gpu`` (an adapter may still be absent)."""
    if sys.platform != "emscripten":
        return False
    try:
        import js

        return getattr(js.navigator, "gpu", None) is not None
    except (ImportError, AttributeError):
        return False


class _Device:
    """The GPUDevice, its queue, the compiled pipelines and the command encoder being filled."""

    def __init__(self, adapter, device):
        import js
        from pyodide.ffi import create_proxy, to_js

        self.js, self.to_js = js, to_js
        self.adapter, self.device, self.queue = adapter, device, device.queue
        self.pipelines = {}  # WGSL source -> GPUComputePipeline
        self.encoder = None  # the open GPUCommandEncoder, or None
        self.cpass = None  # its open compute pass: one per submission, dispatches in order
        self.released = []  # GPUBuffers to destroy once the encoder is submitted
        self.errors = []  # uncaptured validation / out-of-memory errors
        self.usage = js.GPUBufferUsage.STORAGE | js.GPUBufferUsage.COPY_SRC | js.GPUBufferUsage.COPY_DST
        self._on_error = create_proxy(lambda event: self.errors.append(str(event.error.message)))
        device.addEventListener("uncapturederror", self._on_error)
        info = adapter.info
        self.description = " ".join(
            str(getattr(info, k, "") or "") for k in ("vendor", "architecture", "description")
        ).strip()
        self.fallback_adapter = bool(getattr(info, "isFallbackAdapter", False))

    def obj(self, value):
        return self.to_js(value, dict_converter=self.js.Object.fromEntries)

    def create(self, nbytes: int, usage=None):
        return self.device.createBuffer(
            self.obj({"size": max(4, (nbytes + 3) // 4 * 4), "usage": self.usage if usage is None else usage})
        )

    def write(self, gpu, data: bytes):
        if data:
            self.queue.writeBuffer(gpu, 0, self.to_js(memoryview(data)))

    def pipeline(self, code: str):
        p = self.pipelines.get(code)
        if p is None:
            module = self.device.createShaderModule(self.obj({"code": code}))
            p = self.pipelines[code] = self.device.createComputePipeline(
                self.obj({"layout": "auto", "compute": {"module": module, "entryPoint": "main"}})
            )
        return p

    def dispatch(self, code: str, buffers: list, meta: list, groups: tuple):
        """Record one dispatch: bind ``meta`` (u32 words, binding 0), then ``buffers`` in order."""
        pipeline = self.pipeline(code)
        geo = self.create(4 * len(meta))
        self.write(geo, array("I", meta).tobytes())
        self.released.append(geo)  # dies with this submission
        entries = [{"binding": k, "resource": {"buffer": b}} for k, b in enumerate([geo] + buffers)]
        group = self.device.createBindGroup(self.obj({"layout": pipeline.getBindGroupLayout(0), "entries": entries}))
        if self.cpass is None:
            if self.encoder is None:
                self.encoder = self.device.createCommandEncoder()
            # One pass for all the dispatches: each dispatch sees the writes of the ones before
            # it, and a pass per dispatch costs a CPU-emulated adapter ~1 ms each.
            self.cpass = self.encoder.beginComputePass()
        self.cpass.setPipeline(pipeline)
        self.cpass.setBindGroup(0, group)
        self.cpass.dispatchWorkgroups(*groups)

    def end_pass(self):
        if self.cpass is not None:
            self.cpass.end()
            self.cpass = None

    def flush(self):
        self.end_pass()
        if self.encoder is not None:
            self.queue.submit(self.to_js([self.encoder.finish()]))
            self.encoder = None
        for gpu in self.released:  # safe: destroy waits for submitted work
            gpu.destroy()
        self.released.clear()

    def read(self, gpu, byte_offset: int, nbytes: int) -> bytes:
        """Copy ``nbytes`` from a storage buffer to the host (submits pending work and waits)."""
        if nbytes == 0:
            return b""
        js = self.js
        staging = self.create(nbytes, js.GPUBufferUsage.MAP_READ | js.GPUBufferUsage.COPY_DST)
        self.end_pass()
        if self.encoder is None:
            self.encoder = self.device.createCommandEncoder()
        self.encoder.copyBufferToBuffer(gpu, byte_offset, staging, 0, (nbytes + 3) // 4 * 4)
        self.flush()
        wait(staging.mapAsync(js.GPUMapMode.READ))
        data = js.Uint8Array.new(staging.getMappedRange(), 0, nbytes).to_bytes()
        staging.unmap()
        staging.destroy()
        self.check()
        return data

    def synchronize(self):
        self.flush()
        wait(self.queue.onSubmittedWorkDone())
        self.check()

    def check(self):
        if self.errors:
            errors, self.errors[:] = list(self.errors), []
            raise BackendError("WebGPU reported: " + "; ".join(errors))


DEVICE: list = []  # [] until init() succeeds, then [_Device]
STATE = {"tried": False, "reason": "init() has not run"}


def wait(awaitable):
    from pyodide.ffi import can_run_sync, run_sync

    if not can_run_sync():
        raise BackendError(
            "webgpu: waiting for the GPU needs JavaScript promise integration: call Python "
            "from JavaScript with callPromising() or runPythonAsync()"
        )
    return run_sync(awaitable)


async def init() -> bool:
    """Ask the browser for a WebGPU adapter and device, once. True when the backend can run;
    otherwise :func:`unavailable_reason` says why (no ``navigator.gpu``, no adapter, ...)."""
    if DEVICE:
        return True
    if STATE["tried"]:
        return False
    STATE["tried"] = True
    if not has_navigator_gpu():
        STATE["reason"] = "no navigator.gpu here (not a browser with WebGPU)"
        return False
    import js

    try:
        adapter = await js.navigator.gpu.requestAdapter()
        if not adapter:
            STATE["reason"] = (
                "navigator.gpu.requestAdapter() found no adapter (in Chromium without a GPU, "
                "start it with --enable-unsafe-webgpu for SwiftShader)"
            )
            return False
        device = await adapter.requestDevice()
    except Exception as exc:  # noqa: BLE001 - a browser refusal is a reason, not a crash
        STATE["reason"] = f"requesting a WebGPU device failed: {exc}"
        return False
    DEVICE.append(_Device(adapter, device))
    STATE["reason"] = ""
    return True


def unavailable_reason() -> str:
    return STATE["reason"]


def device() -> _Device:
    if not DEVICE:
        raise BackendError(f"webgpu: no device ({unavailable_reason()})")
    return DEVICE[0]


# ----------------------------------------------------------------------------- buffers
def contiguous_strides(shape) -> tuple:
    out, step = [], 1
    for s in reversed(shape):
        out.append(step)
        step *= s
    return tuple(reversed(out))


def numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


class Storage:
    """One GPUBuffer. When the last view of it dies, it is destroyed after the next submit
    (commands already recorded may still read it). ``version`` counts in-place writes, so a
    host copy knows when it went stale."""

    __slots__ = ("gpu", "nbytes", "version")

    def __init__(self, nbytes: int):
        self.gpu = device().create(nbytes)
        self.nbytes = nbytes
        self.version = 0

    def __del__(self):
        if DEVICE:
            DEVICE[0].released.append(self.gpu)


class WGBuffer:
    """A tensor's data on the webgpu backend: a strided view of a :class:`Storage` and/or a host
    copy (a python-backend ``PyBuffer``). When both exist the GPU is the truth and the host copy a
    cache; buffers whose dtype the GPU cannot hold (float64, int64, ...) live on the host only.

    ``stype`` is the storage type on the GPU; it differs from ``STORAGE[dtype]`` only for
    argmax's int64 result, computed as i32 (indices always fit)."""

    __slots__ = ("shape", "dtype", "stype", "store", "offset", "strides", "host", "host_version")

    def __init__(self, shape, dtype, store=None, offset=0, strides=None, host=None, stype=None):
        self.shape, self.dtype = tuple(shape), dtype
        self.store, self.offset = store, offset
        self.strides = contiguous_strides(self.shape) if strides is None else tuple(strides)
        self.stype = stype or STORAGE.get(dtype)
        self.host = host
        self.host_version = store.version if store is not None else 0

    def __repr__(self):
        where = "gpu" if self.store is not None else "host"
        return f"WGBuffer(shape={self.shape}, dtype={self.dtype}, {where})"

    def view(self, shape, offset, strides):
        return WGBuffer(shape, self.dtype, self.store, offset, strides, stype=self.stype)

    @property
    def contiguous(self) -> bool:
        return all(n == 1 or s == c for n, s, c in zip(self.shape, self.strides, contiguous_strides(self.shape)))


def host_backend():
    from ..python import backend as python_backend

    return python_backend


def _encode_host(host, dtype) -> bytes:
    """Host values in the GPU's storage format."""
    from ..python.buffer import to_bytes

    if dtype is D.bool_:
        return array("I", map(int, host.data)).tobytes()
    if dtype in WRAP:  # one 32-bit word a value
        return array("i" if STORAGE[dtype] == "i32" else "I", host.data).tobytes()
    return to_bytes(host.data, dtype)


def on_gpu(x: WGBuffer) -> bool:
    """Put ``x`` on the GPU if its dtype can live there (uploading a host-only buffer once)."""
    if x.store is not None:
        return True
    if x.dtype not in STORAGE or not numel(x.shape):
        return False
    x.store = Storage(4 * numel(x.shape))
    device().write(x.store.gpu, _encode_host(x.host, x.dtype))
    x.offset, x.strides, x.stype, x.host_version = 0, contiguous_strides(x.shape), STORAGE[x.dtype], 0
    return True


def to_host(x: WGBuffer):
    """``x`` as a python-backend buffer (downloading it, or using a still-valid copy)."""
    if x.host is not None and (x.store is None or x.host_version == x.store.version):
        return x.host
    from ..python.buffer import PyBuffer

    n = numel(x.shape)
    src = x if x.contiguous else copy(x)
    raw = device().read(src.store.gpu, 4 * src.offset, 4 * n) if n else b""
    words = array({"f32": "f", "i32": "i", "u32": "I"}[x.stype])
    words.frombytes(raw)
    if sys.byteorder != "little":
        words.byteswap()
    values = words.tolist()
    if x.dtype is D.bool_:
        values = [v != 0 for v in values]
    x.host, x.host_version = PyBuffer(values, x.shape, x.dtype), x.store.version
    return x.host


def new_buffer(shape, dtype, stype=None) -> WGBuffer:
    stype = stype or STORAGE[dtype]
    return WGBuffer(shape, dtype, Storage(4 * max(1, numel(shape))), 0, None, stype=stype)


# ----------------------------------------------------------------------------- kernel helpers
def bits(value, stype) -> int:
    if stype == "f32":
        return struct.unpack("<I", struct.pack("<f", value))[0]
    return value & 0xFFFFFFFF


def i32(v: int) -> int:
    return v & 0xFFFFFFFF


def launch_grid(n: int) -> tuple:
    g = max(1, -(-n // wgsl.WORKGROUP))
    if g <= 65535:
        return (g, 1, 1)
    return (65535, -(-g // 65535), 1)


def broadcast_strides(x: WGBuffer, shape) -> tuple:
    """Strides reading view ``x`` as ``shape`` (0 along broadcast and new leading dims)."""
    lead = len(shape) - len(x.shape)
    return (0,) * lead + tuple(0 if n == 1 and m != 1 else s for n, m, s in zip(x.shape, shape[lead:], x.strides))


def coalesce(shape, stride_sets):
    """Drop unit dims and merge neighbours that are contiguous in every operand: fewer dims,
    cheaper index math and fewer distinct shaders."""
    dims = [(n, [s[d] for s in stride_sets]) for d, n in enumerate(shape) if n != 1]
    merged = []
    for n, st in dims:
        if merged and all(prev == cur * n for prev, cur in zip(merged[-1][1], st)):
            merged[-1] = (merged[-1][0] * n, st)
        else:
            merged.append((n, st))
    return [n for n, _ in merged], [[st[k] for _, st in merged] for k in range(len(stride_sets))]


def elementwise(expr, operands, stypes, out_dtype, shape, out=None, out_stype=None):
    """Run ``expr`` over ``operands`` (GPU buffers or scalar bit patterns) into a new contiguous
    buffer of ``shape`` (or into the view ``out``)."""
    shape = tuple(shape)
    n = numel(shape)
    if out is None:
        out = new_buffer(shape, out_dtype, out_stype)
    tensors = [x for x in operands if isinstance(x, WGBuffer)]
    scalar_slots = tuple(k for k, x in enumerate(operands) if not isinstance(x, WGBuffer))
    dims, strides = coalesce(shape, [out.strides] + [broadcast_strides(t, shape) for t in tensors])
    meta = [n, i32(out.offset), *dims, *map(i32, strides[0])]
    for t, st in zip(tensors, strides[1:]):
        meta += [i32(t.offset), *map(i32, st)]
    meta += [operands[k] for k in scalar_slots]
    if out.dtype in WRAP:
        expr = WRAP[out.dtype][0] + expr + WRAP[out.dtype][1]
    code = wgsl.elementwise(expr, tuple(stypes), out.stype, len(dims), scalar_slots)
    device().dispatch(code, [out.store.gpu] + [t.store.gpu for t in tensors], meta, launch_grid(n))
    return out


def copy(x: WGBuffer, out=None) -> WGBuffer:
    """A contiguous copy of view ``x`` (or its elements written into the view ``out``)."""
    return elementwise(wgsl.UNARY["copy"], [x], [x.stype], x.dtype, x.shape, out, x.stype)


def all_on_gpu(*xs) -> bool:
    return all(on_gpu(x) for x in xs if isinstance(x, WGBuffer))

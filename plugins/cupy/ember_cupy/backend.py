"""CupyBackend: ember's backend protocol on CuPy arrays (or, for checks, on the host harness).

Buffers are ``cupy.ndarray`` on the current device, allocated from CuPy's memory pool. Every
primitive is a kernel queued on the current stream; nothing in a training step waits for the
device. The only host/device traffic is the buffer methods below (``from_*``, ``to_*``), and
each of them is counted in ``transfers``, so a test can prove a step makes none.

>>> import ember
>>> ok, why = CupyBackend().available()
>>> ok or "CUDA" in why or "CuPy" in why
True
"""

from __future__ import annotations

import ember.dtypes as D
from ember.backend import Backend, Capabilities
from ember.primitives import PRIMITIVES

from . import device, fusion
from .storage import Stored, code_dtype, decode, host_codes, is_text, with_storage

#: Fused ops this backend provides (ember.fused's names).
FUSED = frozenset(
    (
        "softmax",
        "log_softmax",
        "cross_entropy",
        "layer_norm",
        "gelu",
        "scaled_dot_product_attention",
        "sgd_step",
        "adam_step",
        "rmsprop_step",
        "softmax_backward",
        "log_softmax_backward",
        "cross_entropy_backward",
        "layer_norm_backward",
        "gelu_backward",
        "max_pool2d",
        "max_pool2d_backward",
        "batch_norm",
        "batch_norm_backward",
        "sgd_step_foreach",
        "adam_step_foreach",
        "rmsprop_step_foreach",
    )
)  # multi_tensor.py


class CupyBackend(Backend):
    """The ``cupy`` backend. ``runtime`` defaults to the GPU (runtime.DeviceRuntime); the host
    harness passes ``host.HostRuntime``. Nothing touches CuPy until :meth:`available` says yes."""

    version = "0.1.0"

    def __init__(self, runtime=None, name="cupy"):
        self.name = name
        self._runtime = runtime
        self.rt = None
        self.impls: dict = {}
        self.fused_impls: dict = {}
        self.transfers = dict.fromkeys(("to_device", "to_host", "bytes_to_device", "bytes_to_host"), 0)
        self._status = None
        self.device = "cpu" if runtime is not None else "cuda"
        if self.available()[0]:
            self._build()

    # -- availability and declaration ------------------------------------------------------------
    def available(self):
        if self._status is None:
            self._status = device.probe() if self._runtime is None else device.probe_host()
        return self._status

    def _build(self):
        from .fused_ops import make_fused
        from .impls import make_impls
        from .multi_tensor import make_foreach

        if self._runtime is None:
            from .runtime import DeviceRuntime

            self._runtime = DeviceRuntime()
            self.device = f"cuda:{self._runtime.xp.cuda.Device().id}"
        self.rt = self._runtime
        self.xp = self.rt.xp
        import numpy

        self.np = numpy
        self.impls = with_storage(make_impls(self.rt), self)
        self.fused_impls = make_fused(self.rt)
        self.fused_impls.update(make_foreach(self.rt, self.fused_impls))  # multi-tensor optimizer steps

    def capabilities(self):
        notes = {
            "blas": "cuBLAS (cupy.matmul)",
            "conv": "im2col + cuBLAS GEMM, col2im kernel",
            "memory": "CuPy memory pool",
            "fusion": "CUDA C per ember.jit group, NVRTC",
        }
        if self.rt is not None and self._runtime.name == "host":
            notes.update(blas="numpy (host harness)", fusion="CUDA C built for the host by nvcc")
        else:
            notes.update(device.describe() if self.rt is not None else {})
        return Capabilities(
            ops=frozenset(PRIMITIVES),
            # int8, int16, uint16, uint64: CuPy has them; the storage dtypes as codes, text on the host (storage.py)
            dtypes=frozenset(D.ALL + D.OPTIONAL + tuple(D.STORAGE) + D.TEXT),
            devices=(self.device,),
            fused=FUSED,
            compiles_groups=True,
            notes=notes,
            # value checks wait for the next host read (ember.deferred); the host
            # harness declares it too, so it runs the GPU's code paths
            on_device=True,
        )

    # -- buffers ------------------------------------------------------------------------------------
    def shape(self, buf):
        return tuple(buf.shape)

    def dtype(self, buf):
        return D.string if is_text(buf) else D.get(buf.dtype.name)

    def _upload(self, host):
        self.transfers["to_device"] += 1
        self.transfers["bytes_to_device"] += host.nbytes
        return self.xp.array(host, copy=True)

    def _download(self, buf):
        self.transfers["to_host"] += 1
        self.transfers["bytes_to_host"] += buf.nbytes
        return buf.get() if hasattr(buf, "get") else buf.copy()

    def from_list(self, flat, shape, dtype):
        if dtype is D.string:  # text stays on the host (storage.py)
            return self.np.array(flat, dtype=object).reshape(shape)
        if dtype in D.STORAGE:  # ints stay ints (int4 keeps their low bits), floats round
            return Stored(self._upload(host_codes(self.np.array(flat), dtype).reshape(shape)), dtype)
        return self._upload(self.np.array(flat, dtype=dtype.name).reshape(shape))

    def to_list(self, buf):
        if is_text(buf):
            return buf.reshape(-1).tolist()
        if isinstance(buf, Stored):
            return self._download(decode(buf, self.xp)).reshape(-1).tolist()
        return self._download(buf).reshape(-1).tolist()

    def from_bytes(self, data, shape, dtype):
        np = self.np
        if dtype in D.STORAGE:
            return Stored(self._upload(np.frombuffer(data, dtype=code_dtype(dtype)).reshape(shape)), dtype)
        host = np.frombuffer(data, dtype=np.dtype(dtype.name).newbyteorder("<")).astype(dtype.name)
        return self._upload(host.reshape(shape))

    def to_bytes(self, buf):
        np = self.np
        host = self._download(buf.codes if isinstance(buf, Stored) else buf)
        return np.array(host, dtype=host.dtype.newbyteorder("<"), order="C").tobytes()

    def from_numpy(self, array):
        if array.dtype.kind == "O":
            return self.np.array(array, dtype=object)
        name = array.dtype.names[0] if array.dtype.names else array.dtype.name  # the NumPy backend's record
        if name in D.BY_NAME and D.BY_NAME[name] in D.STORAGE:  # or an ml_dtypes array: its codes
            dtype = D.BY_NAME[name]
            return Stored(self._upload(self.np.array(array.view(code_dtype(dtype)), order="C")), dtype)
        # np.array, not ascontiguousarray: that one turns a 0-d array into a 1-d one.
        return self._upload(self.np.array(array, dtype=array.dtype.newbyteorder("="), order="C"))

    def to_numpy(self, buf):
        if is_text(buf):
            return buf.copy()
        if isinstance(buf, Stored):
            from ember.backends.numpy.bfloat16 import ml_dtypes_view

            record = self.np.dtype([(buf.dtype.name, code_dtype(buf.dtype))])
            return ml_dtypes_view(self._download(buf.codes).view(record))
        return self._download(buf)

    def assign(self, dst, src):
        if is_text(dst):
            self.np.copyto(dst, src)
            return
        if isinstance(dst, Stored):
            self.xp.copyto(
                dst.codes, src.codes if isinstance(src, Stored) else self.impls["cast"](src, dst.dtype).codes
            )
            return
        self.xp.copyto(dst, src)

    def synchronize(self):
        if self.rt is not None and self._runtime.name != "host":
            self.xp.cuda.get_current_stream().synchronize()

    def reset_transfers(self) -> dict:
        """Zero the transfer counters; returns their values before."""
        before = dict(self.transfers)
        for k in self.transfers:
            self.transfers[k] = 0
        return before

    # -- DLPack -------------------------------------------------------------------------------------
    def from_dlpack(self, obj):
        """A buffer sharing memory with any DLPack producer on this device (a torch CUDA tensor,
        a CuPy array, ...): no copy, no transfer."""
        return self.xp.from_dlpack(obj)

    def to_dlpack(self, buf):
        """The buffer itself: CuPy arrays are DLPack producers (``torch.from_dlpack(buf)``)."""
        return buf

    # -- ember.jit ----------------------------------------------------------------------------------
    def compile(self, group):
        """A kernel for an ember.jit fusion group (fusion.py), or None to run it op by op."""
        if self.rt is None:
            return None
        return fusion.compile_group(group, self.rt, self.impls)

    def memory_stats(self) -> dict:
        """Bytes in use and held by CuPy's memory pool (zeros on the host harness)."""
        if self.rt is None or self._runtime.name == "host":
            return {"used_bytes": 0, "total_bytes": 0}
        pool = self.xp.get_default_memory_pool()
        return {"used_bytes": pool.used_bytes(), "total_bytes": pool.total_bytes()}

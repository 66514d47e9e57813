"""Runtimes: where the plugin's arrays live and its kernels run.

A runtime is the array module ``xp`` plus ``launch(kernel, n, *args)``. The backend is written
against this pair only, so one implementation serves two runtimes:

* :class:`DeviceRuntime` — CuPy arrays on the GPU; kernels compiled by NVRTC through
  ``cupy.RawModule`` (once per source hash; CuPy also keeps them on disk) and launched on the
  current stream, asynchronously.
* ``host.HostRuntime`` — NumPy arrays on the CPU; the same kernel sources built for the host by
  ``nvcc -shared -DEMBER_HOST_HARNESS`` and called through ctypes. It exists to check the
  plugin's logic and kernels on machines without a GPU; it is not fast.

Every runtime remembers each kernel it launched (``seen``), so a test can compile all of them
for the GPU architecture with nvcc.
"""

from __future__ import annotations

from .kernels import BLOCK

#: C scalar type -> NumPy scalar type that passes it to a kernel by value.
SCALAR_TYPES = {
    "long long": "int64",
    "unsigned long long": "uint64",
    "int": "int32",
    "unsigned int": "uint32",
    "float": "float32",
    "double": "float64",
    "bool": "bool_",
}
MAX_GRID = 1 << 20  # grid-stride loops make any grid size correct; this one fills any GPU


class Runtime:
    """The interface: ``name``, ``xp`` and :meth:`launch`."""

    name = "abstract"
    xp = None

    def __init__(self):
        self.seen: dict = {}  # kernel key -> Kernel, every kernel launched
        self.calls: dict = {}  # kernel key -> how many times it was launched
        self.launches = 0

    def function(self, kernel):
        raise NotImplementedError

    def launch(self, kernel, n: int, *args) -> None:
        """Run ``kernel`` over ``n`` logical threads (or blocks); ``args`` are arrays (for
        "ptr" parameters) and Python numbers, in ``kernel.params`` order."""
        if len(args) != len(kernel.params):
            raise TypeError(f"kernel {kernel.name} takes {len(kernel.params)} arguments, got {len(args)}")
        self.seen.setdefault(kernel.key, kernel)
        self.calls[kernel.key] = self.calls.get(kernel.key, 0) + 1
        if n <= 0:
            return
        self.launches += 1
        self._run(self.function(kernel), kernel, int(n), args)

    def _run(self, fn, kernel, n, args):
        raise NotImplementedError


def contiguous(x):
    """``x`` if it is C-contiguous, else a C-contiguous copy. (Not ``ascontiguousarray``: that
    turns a 0-d array into a 1-d one.)"""
    return x if x.flags.c_contiguous else x.copy(order="C")


def grid_size(kernel, n: int) -> int:
    if kernel.launch == "threads":
        return max(1, min((n + BLOCK - 1) // BLOCK, MAX_GRID))
    return max(1, min(n, MAX_GRID))


class DeviceRuntime(Runtime):
    """CuPy on the current CUDA device."""

    name = "cuda"

    def __init__(self):
        super().__init__()
        import cupy
        import numpy

        self.xp, self.np = cupy, numpy
        self.compiled: dict = {}
        self.scalars = {k: getattr(numpy, v) for k, v in SCALAR_TYPES.items()}

    def function(self, kernel):
        fn = self.compiled.get(kernel.key)
        if fn is None:
            module = self.xp.RawModule(code=kernel.source, options=("-std=c++17",))
            fn = self.compiled[kernel.key] = module.get_function(kernel.name)
        return fn

    def _run(self, fn, kernel, n, args):
        conv = [a if kind == "ptr" else self.scalars[kind](a) for kind, a in zip(kernel.params, args)]
        fn((grid_size(kernel, n),), (BLOCK,), (self.np.int64(n), *conv))

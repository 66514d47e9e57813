"""A kernel as a translation unit: the :class:`Kernel` record, the two shapes every kernel has
(``threads``, ``blocks``; see the package's doc) and what their sources share: the block
reduction, C type names and math function spellings."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from ..render import CTYPE, PRELUDE

BLOCK = 256
SCALARS = ("long long", "unsigned long long", "int", "unsigned int", "float", "double", "bool")


@dataclass(frozen=True)
class Kernel:
    """A CUDA C translation unit and how to launch its entry point ``name``.

    ``params`` are the kinds of the arguments after the leading ``long long n`` ("ptr" or a C
    scalar type); ``launch`` is ``"threads"`` (``n`` logical threads) or ``"blocks"`` (``n``
    logical blocks of ``BLOCK`` threads)."""

    name: str
    source: str
    params: tuple
    launch: str = "threads"
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def key(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:20]


def _kinds(decls):
    kinds = []
    for decl, _ in decls:
        if "*" in decl:
            kinds.append("ptr")
        else:
            base = decl.replace("const ", "").strip()
            assert base in SCALARS, base
            kinds.append(base)
    return tuple(kinds)


def _sig(decls) -> str:
    return ", ".join(f"{d} {n}" for d, n in decls)


def _call(decls) -> str:
    return ", ".join(n for _, n in decls)


def guarded(name: str, code: str) -> str:
    """``code`` defined once per translation unit, however many units are concatenated."""
    return f"#ifndef {name}_DEF\n#define {name}_DEF\n{code}#endif\n"


def unit(body: str) -> str:
    """A translation unit: the prelude (guarded, so units can be concatenated) and ``body``."""
    return f"#ifndef EMBER_PRELUDE\n#define EMBER_PRELUDE\n{PRELUDE}#endif\n{body}"


def threads_kernel(name: str, decls, body: str, meta=None) -> Kernel:
    """A ``threads`` kernel: ``body`` defines ``NAME_thread(long long t, ARGS)``."""
    sig, call = _sig(decls), _call(decls)
    src = unit(f"""{body}
extern "C" __global__ void {name}(long long n, {sig}) {{
  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < n; t += (long long)blockDim.x * gridDim.x)
    {name}_thread(t, {call});
}}
#ifdef EMBER_HOST_HARNESS
extern "C" void {name}_host(long long n, {sig}) {{
  for (long long t = 0; t < n; ++t) {name}_thread(t, {call});
}}
#endif
""")
    return Kernel(name, src, _kinds(decls), "threads", meta or {})


def blocks_kernel(name: str, decls, body: str, meta=None) -> Kernel:
    """A ``blocks`` kernel: ``body`` defines ``__global__ NAME(long long n, ARGS)`` and, under
    ``EMBER_HOST_HARNESS``, ``NAME_host`` with the same arguments."""
    return Kernel(name, unit(body), _kinds(decls), "blocks", meta or {})


#: A tree reduction over one block (BLOCK is a power of two; device only: the host loops are
#: serial) and the combining functors, which host code uses too.
BLOCK_REDUCE_DEF = f"""
template <typename T, typename F>
__device__ inline T ember_block_reduce(T v, T* shm, F combine) {{
  unsigned int t = threadIdx.x;
  shm[t] = v;
  __syncthreads();
  for (unsigned int s = {BLOCK} / 2; s > 0; s >>= 1) {{
    if (t < s) shm[t] = combine(shm[t], shm[t + s]);
    __syncthreads();
  }}
  T r = shm[0];
  __syncthreads();
  return r;
}}
struct ember_add {{ template <typename T> __host__ __device__ T operator()(T a, T b) const {{ return a + b; }} }};
struct ember_maxnan {{ template <typename T> __host__ __device__ T operator()(T a, T b) const {{ return (a > b || a != a) ? a : b; }} }};
struct ember_minnan {{ template <typename T> __host__ __device__ T operator()(T a, T b) const {{ return (a < b || a != a) ? a : b; }} }};
"""


def _reducers() -> str:
    return "#ifndef EMBER_REDUCERS\n#define EMBER_REDUCERS\n" + BLOCK_REDUCE_DEF + "#endif\n"


def _t(dtype) -> str:
    return CTYPE[str(dtype)]


def _fn(name32: str, dtype) -> str:
    """The float32 or float64 spelling of a C math function (``expf`` / ``exp``)."""
    return name32 if str(dtype) == "float32" else name32[:-1]

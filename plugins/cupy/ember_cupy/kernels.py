"""The hand-written kernels, as CUDA C sources made by small Python functions.

A :class:`Kernel` is a whole translation unit plus how to launch it. Every kernel follows one
of two shapes, so the same source runs on a GPU and, built for the host with
``-DEMBER_HOST_HARNESS``, on the CPU (tests/plugins/cupy use that to check kernels against
NumPy on machines without a GPU):

* ``threads``: the source defines ``__host__ __device__ NAME_thread(long long t, ARGS)``, the
  work of logical thread ``t``; :func:`threads_kernel` adds the ``__global__ NAME(n, ARGS)``
  grid-stride loop and the host loop ``NAME_host(n, ARGS)``.
* ``blocks``: one block of ``BLOCK`` threads per row (softmax, cross-entropy, layer norm, a
  fused reduction); the rows' arithmetic is in ``__host__ __device__`` functions shared by the
  device kernel (block-cooperative, a shared-memory tree) and the serial host loop.

Sources are keyed by their SHA-256 (runtime.py compiles each once).

>>> k = random_bits_kernel()
>>> k.name, k.launch, k.params
('ember_random_bits', 'threads', ('ptr', 'long long', 'unsigned long long', 'unsigned long long'))
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

from . import render
from .render import CTYPE, PRELUDE, literal

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


# ----------------------------------------------------------------------------- random bits
PHILOX = r"""
__host__ __device__ inline void ember_philox4x32_10(unsigned int c[4], unsigned int k0, unsigned int k1) {
  for (int round = 0; round < 10; ++round) {
    unsigned long long p0 = 0xD2511F53ULL * (unsigned long long)c[0];
    unsigned long long p1 = 0xCD9E8D57ULL * (unsigned long long)c[2];
    unsigned int n0 = (unsigned int)(p1 >> 32) ^ c[1] ^ k0;
    unsigned int n1 = (unsigned int)p1;
    unsigned int n2 = (unsigned int)(p0 >> 32) ^ c[3] ^ k1;
    unsigned int n3 = (unsigned int)p0;
    c[0] = n0; c[1] = n1; c[2] = n2; c[3] = n3;
    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
  }
}
"""


def random_bits_kernel() -> Kernel:
    """``random_bits``: logical thread ``t`` computes Philox block ``offset // 4 + t`` and writes
    the words of it that fall in ``[offset, offset + count)`` (the spec in ember.primitives)."""
    body = guarded("ember_philox", PHILOX) + r"""
__host__ __device__ inline void ember_random_bits_thread(long long t, unsigned int* out, long long count,
                                                         unsigned long long seed, unsigned long long offset) {
  unsigned long long block = offset / 4 + (unsigned long long)t;
  unsigned int c[4] = {(unsigned int)block, (unsigned int)(block >> 32), 0u, 0u};
  ember_philox4x32_10(c, (unsigned int)seed, (unsigned int)(seed >> 32));
  for (int w = 0; w < 4; ++w) {
    long long i = (long long)(4 * block + (unsigned long long)w - offset);
    if (i >= 0 && i < count) out[i] = c[w];
  }
}
"""
    decls = [("unsigned int*", "out"), ("long long", "count"), ("unsigned long long", "seed"),
             ("unsigned long long", "offset")]
    return threads_kernel("ember_random_bits", decls, body)


def random_bits_threads(count: int, offset: int) -> int:
    """How many Philox blocks (logical threads) ``count`` words from ``offset`` touch."""
    first, last = offset // 4, (offset + count + 3) // 4
    return max(last - first, 0)


# ----------------------------------------------------------------------------- elementwise
def unary_kernel(op: str, dtype) -> Kernel:
    """One float function over a contiguous array (``erf``; the primitives CuPy lacks)."""
    t = _t(dtype)
    e = render.expr(op, dtype, ["x[i]"])
    name = f"ember_{op}_{dtype}"
    body = f"__host__ __device__ inline void {name}_thread(long long i, const {t}* x, {t}* y) {{ y[i] = {e}; }}\n"
    return threads_kernel(name, [(f"const {t}*", "x"), (f"{t}*", "y")], body)


def gelu_body(dtype, approximate: str) -> str:
    """``__host__ __device__ T ember_gelu_<dtype>_<approximate>(T x)``: ember.fused.FUSED["gelu"]'s ops in order."""
    t, name = _t(dtype), f"ember_gelu_{dtype}_{approximate}"
    if approximate == "tanh":
        c, k = literal(0.7978845608028654, dtype), literal(0.044715, dtype)
        half, one = literal(0.5, dtype), literal(1, dtype)
        return guarded(name, f"__host__ __device__ inline {t} {name}({t} x) {{\n"
                             f"  {t} inner = (x + x * x * x * {k}) * {c};\n"
                             f"  return x * {half} * ({_fn('tanhf', dtype)}(inner) + {one});\n}}\n")
    c, half, one = literal(0.7071067811865476, dtype), literal(0.5, dtype), literal(1, dtype)
    return guarded(name, f"__host__ __device__ inline {t} {name}({t} x) {{\n"
                         f"  return x * {half} * ({_fn('erff', dtype)}(x * {c}) + {one});\n}}\n")


def gelu_backward_body(dtype, approximate: str) -> str:
    """``__host__ __device__ T NAME(T g, T x)``: ember.fused.FUSED["gelu_backward"]'s ops in order."""
    t, name = _t(dtype), f"ember_gelu_backward_{dtype}_{approximate}"
    half, one = literal(0.5, dtype), literal(1, dtype)
    if approximate == "tanh":
        k, c, c3 = literal(0.7978845608028654, dtype), literal(0.044715, dtype), literal(3 * 0.044715, dtype)
        return guarded(name, f"__host__ __device__ inline {t} {name}({t} g, {t} x) {{\n"
                             f"  {t} th = {_fn('tanhf', dtype)}((x + x * x * x * {c}) * {k});\n"
                             f"  {t} slope = (x * x * {c3} + {one}) * {k};\n"
                             f"  return g * ((th + {one}) * {half} + x * {half} * ({one} - th * th) * slope);\n}}\n")
    c, mhalf = literal(0.7071067811865476, dtype), literal(-0.5, dtype)
    inv = literal(1 / math.sqrt(2 * math.pi), dtype)
    return guarded(name, f"__host__ __device__ inline {t} {name}({t} g, {t} x) {{\n"
                         f"  {t} cdf = ({_fn('erff', dtype)}(x * {c}) + {one}) * {half};\n"
                         f"  {t} pdf = {_fn('expf', dtype)}(x * x * {mhalf}) * {inv};\n"
                         f"  return g * (cdf + x * pdf);\n}}\n")


def gelu_backward_kernel(dtype, approximate="none") -> Kernel:
    t, name = _t(dtype), f"ember_gelu_backward_{dtype}_{approximate}"
    body = gelu_backward_body(dtype, approximate) + \
        (f"__host__ __device__ inline void {name}_k_thread(long long i, const {t}* g, const {t}* x, {t}* y) "
         f"{{ y[i] = {name}(g[i], x[i]); }}\n")
    return threads_kernel(f"{name}_k", [(f"const {t}*", "g"), (f"const {t}*", "x"), (f"{t}*", "y")], body)


def gelu_kernel(dtype, approximate="none") -> Kernel:
    t, name = _t(dtype), f"ember_gelu_{dtype}_{approximate}"
    body = gelu_body(dtype, approximate) + \
        f"__host__ __device__ inline void {name}_k_thread(long long i, const {t}* x, {t}* y) {{ y[i] = {name}(x[i]); }}\n"
    return threads_kernel(f"{name}_k", [(f"const {t}*", "x"), (f"{t}*", "y")], body)


# ----------------------------------------------------------------------------- rows
def _row_max_sum(t: str) -> str:
    """Device code: ``m`` = NaN-propagating max of row ``xr``, ``s`` = sum of exp(x - m) in double."""
    return f"""    {t} m = {render.reduce_identity('max', 'float32' if t == 'float' else 'float64')};
    for (long long j = threadIdx.x; j < C; j += blockDim.x) m = ember_maxnan()(m, xr[j]);
    m = ember_block_reduce(m, shm_t, ember_maxnan());
    double s = 0.0;
    for (long long j = threadIdx.x; j < C; j += blockDim.x) s += (double)EXP(xr[j] - m);
    s = ember_block_reduce(s, shm_d, ember_add());
"""


def _row_max_sum_host(t: str) -> str:
    return f"""    {t} m = {render.reduce_identity('max', 'float32' if t == 'float' else 'float64')};
    for (long long j = 0; j < C; ++j) m = ember_maxnan()(m, xr[j]);
    double s = 0.0;
    for (long long j = 0; j < C; ++j) s += (double)EXP(xr[j] - m);
"""


def softmax_kernel(dtype, log: bool) -> Kernel:
    """softmax / log_softmax over the last dim of a contiguous (rows, C) array, one block a row:
    shift by the row max, sum the exponentials in double, then ``e / s`` or ``(x - m) - log s``."""
    t = _t(dtype)
    name = f"ember_{'log_' if log else ''}softmax_{dtype}"
    out = f"(xr[j] - m) - {_fn('logf', dtype)}(({t})s)" if log else f"EXP(xr[j] - m) / ({t})s"
    body = _reducers() + f"""
#define EXP {_fn('expf', dtype)}
extern "C" __global__ void {name}(long long rows, const {t}* x, {t}* y, long long C) {{
  __shared__ {t} shm_t[{BLOCK}];
  __shared__ double shm_d[{BLOCK}];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {{
    const {t}* xr = x + r * C;
    {t}* yr = y + r * C;
{_row_max_sum(t)}    for (long long j = threadIdx.x; j < C; j += blockDim.x) yr[j] = {out};
  }}
}}
#ifdef EMBER_HOST_HARNESS
extern "C" void {name}_host(long long rows, const {t}* x, {t}* y, long long C) {{
  for (long long r = 0; r < rows; ++r) {{
    const {t}* xr = x + r * C;
    {t}* yr = y + r * C;
{_row_max_sum_host(t)}    for (long long j = 0; j < C; ++j) yr[j] = {out};
  }}
}}
#endif
#undef EXP
"""
    return blocks_kernel(name, [(f"const {t}*", "x"), (f"{t}*", "y"), ("long long", "C")], body)


def cross_entropy_kernel(dtype, target_dtype="int64") -> Kernel:
    """Per row of contiguous logits (rows, C): ``picked[r] = log_softmax(x[r])[target[r]]``, or 0
    where ``target[r] == ignore``; the caller divides the sum by the rows that count. A target
    outside [0, C) gives NaN (no host sync to raise)."""
    t, it = _t(dtype), _t(target_dtype)
    name = f"ember_cross_entropy_{dtype}_{target_dtype}"
    nan, zero = literal(float("nan"), dtype), literal(0, dtype)
    pick = f"""long long k = (long long)target[r];
      picked[r] = k == ignore ? {zero} : (k < 0 || k >= C) ? {nan} : (xr[k] - m) - {_fn('logf', dtype)}(({t})s);"""
    body = _reducers() + f"""
#define EXP {_fn('expf', dtype)}
extern "C" __global__ void {name}(long long rows, const {t}* x, const {it}* target, {t}* picked, long long C,
                                  long long ignore) {{
  __shared__ {t} shm_t[{BLOCK}];
  __shared__ double shm_d[{BLOCK}];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {{
    const {t}* xr = x + r * C;
{_row_max_sum(t)}    if (threadIdx.x == 0) {{
      {pick}
    }}
  }}
}}
#ifdef EMBER_HOST_HARNESS
extern "C" void {name}_host(long long rows, const {t}* x, const {it}* target, {t}* picked, long long C,
                            long long ignore) {{
  for (long long r = 0; r < rows; ++r) {{
    const {t}* xr = x + r * C;
{_row_max_sum_host(t)}    {{
      {pick}
    }}
  }}
}}
#endif
#undef EXP
"""
    decls = [(f"const {t}*", "x"), (f"const {it}*", "target"), (f"{t}*", "picked"), ("long long", "C"),
             ("long long", "ignore")]
    return blocks_kernel(name, decls, body)


def cross_entropy_backward_kernel(dtype, target_dtype="int64") -> Kernel:
    """ember.fused.FUSED["cross_entropy_backward"] per row of contiguous logits (rows, C):
    ``dx[r] = (softmax(x[r]) - one_hot(target[r])) * scale[0]``, zero where ``target[r] ==
    ignore``. ``scale`` is the upstream gradient over the rows that count, on the device."""
    t, it = _t(dtype), _t(target_dtype)
    name = f"ember_cross_entropy_backward_{dtype}_{target_dtype}"
    one, zero = literal(1, dtype), literal(0, dtype)
    write = f"dr[j] = (EXP(xr[j] - m) / ({t})s - (j == k ? {one} : {zero})) * sc"
    sig = f"long long rows, const {t}* x, const {it}* target, const {t}* scale, {t}* dx, long long C, long long ignore"
    body = _reducers() + f"""
#define EXP {_fn('expf', dtype)}
extern "C" __global__ void {name}({sig}) {{
  __shared__ {t} shm_t[{BLOCK}];
  __shared__ double shm_d[{BLOCK}];
  {t} sc = scale[0];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {{
    const {t}* xr = x + r * C;
    {t}* dr = dx + r * C;
    long long k = (long long)target[r];
    if (k == ignore) {{                   // the same for the whole block: no thread skips a reduction
      for (long long j = threadIdx.x; j < C; j += blockDim.x) dr[j] = {zero};
      continue;
    }}
{_row_max_sum(t)}    for (long long j = threadIdx.x; j < C; j += blockDim.x) {write};
  }}
}}
#ifdef EMBER_HOST_HARNESS
extern "C" void {name}_host({sig}) {{
  {t} sc = scale[0];
  for (long long r = 0; r < rows; ++r) {{
    const {t}* xr = x + r * C;
    {t}* dr = dx + r * C;
    long long k = (long long)target[r];
    if (k == ignore) {{
      for (long long j = 0; j < C; ++j) dr[j] = {zero};
      continue;
    }}
{_row_max_sum_host(t)}    for (long long j = 0; j < C; ++j) {write};
  }}
}}
#endif
#undef EXP
"""
    decls = [(f"const {t}*", "x"), (f"const {it}*", "target"), (f"const {t}*", "scale"), (f"{t}*", "dx"),
             ("long long", "C"), ("long long", "ignore")]
    return blocks_kernel(name, decls, body)


def softmax_backward_kernel(dtype, log: bool) -> Kernel:
    """The VJP of softmax (``y * (g - sum(g * y))``) or log_softmax (``g - exp(y) * sum(g)``)
    from its output ``y``, over the last dim of contiguous (rows, C) arrays, one block a row;
    the sum in double."""
    t = _t(dtype)
    name = f"ember_{'log_' if log else ''}softmax_backward_{dtype}"
    term = "(double)gr[j]" if log else "(double)gr[j] * (double)yr[j]"
    write = f"dr[j] = gr[j] - {_fn('expf', dtype)}(yr[j]) * ({t})s" if log else f"dr[j] = yr[j] * (gr[j] - ({t})s)"
    sig = f"long long rows, const {t}* y, const {t}* g, {t}* dx, long long C"
    body = _reducers() + f"""
extern "C" __global__ void {name}({sig}) {{
  __shared__ double shm_d[{BLOCK}];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {{
    const {t}* yr = y + r * C;
    const {t}* gr = g + r * C;
    {t}* dr = dx + r * C;
    double s = 0.0;
    for (long long j = threadIdx.x; j < C; j += blockDim.x) s += {term};
    s = ember_block_reduce(s, shm_d, ember_add());
    for (long long j = threadIdx.x; j < C; j += blockDim.x) {write};
  }}
}}
#ifdef EMBER_HOST_HARNESS
extern "C" void {name}_host({sig}) {{
  for (long long r = 0; r < rows; ++r) {{
    const {t}* yr = y + r * C;
    const {t}* gr = g + r * C;
    {t}* dr = dx + r * C;
    double s = 0.0;
    for (long long j = 0; j < C; ++j) s += {term};
    for (long long j = 0; j < C; ++j) {write};
  }}
}}
#endif
"""
    decls = [(f"const {t}*", "y"), (f"const {t}*", "g"), (f"{t}*", "dx"), ("long long", "C")]
    return blocks_kernel(name, decls, body)


def layer_norm_kernel(dtype, has_weight: bool, has_bias: bool) -> Kernel:
    """Layer norm of each contiguous row of D values: mean and biased variance (two passes, in
    double), then ``(x - mean) * (1 / sqrt(var + eps))``, times ``w[j]``, plus ``b[j]``."""
    t = _t(dtype)
    name = f"ember_layer_norm_{dtype}_{int(has_weight)}{int(has_bias)}"
    decls = [(f"const {t}*", "x"), (f"{t}*", "y")]
    if has_weight:
        decls.append((f"const {t}*", "w"))
    if has_bias:
        decls.append((f"const {t}*", "b"))
    decls += [("long long", "D"), (t, "eps")]
    one = literal(1, dtype)
    sqrt = _fn("sqrtf", dtype)
    val = "c * rstd" + (" * w[j]" if has_weight else "") + (" + b[j]" if has_bias else "")
    sig = _sig(decls)
    body = _reducers() + f"""
__host__ __device__ inline {t} {name}_rstd(double sq, long long D, {t} eps) {{
  {t} var = ({t})(sq / (double)D);
  return {one} / {sqrt}(var + eps);
}}
extern "C" __global__ void {name}(long long rows, {sig}) {{
  __shared__ double shm_d[{BLOCK}];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {{
    const {t}* xr = x + r * D;
    {t}* yr = y + r * D;
    double s = 0.0;
    for (long long j = threadIdx.x; j < D; j += blockDim.x) s += (double)xr[j];
    {t} mean = ({t})(ember_block_reduce(s, shm_d, ember_add()) / (double)D);
    double sq = 0.0;
    for (long long j = threadIdx.x; j < D; j += blockDim.x) {{ double c = (double)(xr[j] - mean); sq += c * c; }}
    {t} rstd = {name}_rstd(ember_block_reduce(sq, shm_d, ember_add()), D, eps);
    for (long long j = threadIdx.x; j < D; j += blockDim.x) {{ {t} c = xr[j] - mean; yr[j] = {val}; }}
  }}
}}
#ifdef EMBER_HOST_HARNESS
extern "C" void {name}_host(long long rows, {sig}) {{
  for (long long r = 0; r < rows; ++r) {{
    const {t}* xr = x + r * D;
    {t}* yr = y + r * D;
    double s = 0.0;
    for (long long j = 0; j < D; ++j) s += (double)xr[j];
    {t} mean = ({t})(s / (double)D);
    double sq = 0.0;
    for (long long j = 0; j < D; ++j) {{ double c = (double)(xr[j] - mean); sq += c * c; }}
    {t} rstd = {name}_rstd(sq, D, eps);
    for (long long j = 0; j < D; ++j) {{ {t} c = xr[j] - mean; yr[j] = {val}; }}
  }}
}}
#endif
"""
    return blocks_kernel(name, decls, body)


def layer_norm_backward_kernel(dtype, has_weight: bool) -> Kernel:
    """The input gradient of layer norm, one block per contiguous row of D values: the row's
    mean and 1/std as the forward kernel computes them, then with ``gw = g * w[j]`` (or g)
    ``dx = (gw - mean(gw) - xhat * mean(gw * xhat)) * rstd``, both means in double. Each row's
    mean and 1/std are kept (double) for :func:`layer_norm_params_kernel`."""
    t = _t(dtype)
    name = f"ember_layer_norm_backward_{dtype}_{int(has_weight)}"
    decls = [(f"const {t}*", "x"), (f"const {t}*", "g")] + ([(f"const {t}*", "w")] if has_weight else []) + \
        [(f"{t}*", "dx"), ("double*", "mean_out"), ("double*", "rstd_out"), ("long long", "D"), (t, "eps")]
    one, sqrt = literal(1, dtype), _fn("sqrtf", dtype)
    gw = "g_[j] * w[j]" if has_weight else "g_[j]"
    sig = _sig(decls)

    def row(par, reduce_d):
        """One row's code; ``par``: this thread's stride loop head; ``reduce_d(v)``: the row total."""
        return f"""    const {t}* xr = x + r * D;
    const {t}* g_ = g + r * D;
    {t}* dr = dx + r * D;
    double s = 0.0;
    for ({par}) s += (double)xr[j];
    {t} mean = ({t})({reduce_d('s')} / (double)D);
    double sq = 0.0;
    for ({par}) {{ double c = (double)(xr[j] - mean); sq += c * c; }}
    {t} var = ({t})({reduce_d('sq')} / (double)D);
    {t} rstd = {one} / {sqrt}(var + eps);
    double a = 0.0, b = 0.0;
    for ({par}) {{ {t} gwj = {gw}; a += (double)gwj; b += (double)gwj * (double)((xr[j] - mean) * rstd); }}
    {t} ma = ({t})({reduce_d('a')} / (double)D), mb = ({t})({reduce_d('b')} / (double)D);
    for ({par}) {{ {t} gwj = {gw}; dr[j] = (gwj - ma - (xr[j] - mean) * rstd * mb) * rstd; }}
"""
    device = row("long long j = threadIdx.x; j < D; j += blockDim.x",
                 lambda v: f"ember_block_reduce({v}, shm_d, ember_add())")
    host = row("long long j = 0; j < D; ++j", lambda v: v)
    body = _reducers() + f"""
extern "C" __global__ void {name}(long long rows, {sig}) {{
  __shared__ double shm_d[{BLOCK}];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {{
{device}    if (threadIdx.x == 0) {{ mean_out[r] = (double)mean; rstd_out[r] = (double)rstd; }}
  }}
}}
#ifdef EMBER_HOST_HARNESS
extern "C" void {name}_host(long long rows, {sig}) {{
  for (long long r = 0; r < rows; ++r) {{
{host}    mean_out[r] = (double)mean; rstd_out[r] = (double)rstd;
  }}
}}
#endif
"""
    return blocks_kernel(name, decls, body)


def layer_norm_params_kernel(dtype) -> Kernel:
    """Layer norm's weight and bias gradients: logical thread ``j`` sums column ``j`` over the
    rows, ``dw[j] = sum(g * xhat)`` and ``db[j] = sum(g)`` in double (reading the row statistics
    :func:`layer_norm_backward_kernel` kept)."""
    t = _t(dtype)
    name = f"ember_layer_norm_params_{dtype}"
    decls = [(f"const {t}*", "x"), (f"const {t}*", "g"), ("const double*", "mean"), ("const double*", "rstd"),
             (f"{t}*", "dw"), (f"{t}*", "db"), ("long long", "rows"), ("long long", "D")]
    body = f"""__host__ __device__ inline void {name}_thread(long long j, {_sig(decls)}) {{
  double a = 0.0, b = 0.0;
  for (long long r = 0; r < rows; ++r) {{
    {t} xhat = (x[r * D + j] - ({t})mean[r]) * ({t})rstd[r];
    a += (double)(g[r * D + j] * xhat);
    b += (double)g[r * D + j];
  }}
  dw[j] = ({t})a;
  db[j] = ({t})b;
}}
"""
    return threads_kernel(name, decls, body)


# ----------------------------------------------------------------------------- pooling
POOL_PARAMS = ("H", "W", "OH", "OW", "KH", "KW", "SH", "SW", "PH", "PW", "DH", "DW")


def _window_argmax(dtype) -> str:
    """``__host__ __device__ long long NAME(plane, ..., T* best)``: a max-pool window's maximum
    and its flat index in the plane (-1: padding). Cells outside the plane count as -inf; the
    first maximum wins and a later NaN replaces it (ember.fused.FUSED["max_pool2d"]'s choice)."""
    t, name = _t(dtype), f"ember_window_argmax_{dtype}"
    lowest = render.reduce_identity("max", dtype)
    return guarded(name, f"""__host__ __device__ inline long long {name}(const {t}* xp, long long H, long long W,
    long long top, long long left, long long KH, long long KW, long long DH, long long DW, {t}* best_out) {{
  {t} best = {lowest};
  long long arg = -1;
  for (long long a = 0; a < KH; ++a) {{
    long long r = top + a * DH;
    for (long long b = 0; b < KW; ++b) {{
      long long c = left + b * DW;
      bool inside = r >= 0 && r < H && c >= 0 && c < W;
      {t} v = inside ? xp[r * W + c] : {lowest};
      if ((a == 0 && b == 0) || v > best || v != v) {{ best = v; arg = inside ? r * W + c : -1; }}
    }}
  }}
  *best_out = best;
  return arg;
}}
""")


def max_pool_kernel(dtype) -> Kernel:
    """max_pool2d over contiguous planes (P, H, W): logical thread ``t`` is output element
    (p, i, j) of (P, OH, OW) and writes its window's maximum."""
    t = _t(dtype)
    name = f"ember_max_pool_{dtype}"
    decls = [(f"const {t}*", "x"), (f"{t}*", "y")] + [("long long", n) for n in POOL_PARAMS]
    body = _window_argmax(dtype) + f"""__host__ __device__ inline void {name}_thread(long long t, {_sig(decls)}) {{
  long long j = t % OW, i = (t / OW) % OH, p = t / (OW * OH);
  {t} best;
  ember_window_argmax_{dtype}(x + p * H * W, H, W, i * SH - PH, j * SW - PW, KH, KW, DH, DW, &best);
  y[t] = best;
}}
"""
    return threads_kernel(name, decls, body)


def max_pool_backward_kernel(dtype) -> Kernel:
    """The VJP of max_pool2d as a gather: logical thread ``t`` is input element (p, r, c) and
    adds the gradient of every window whose first maximum it is, in the windows' order (the
    reference's scatter-add order: equal sums, no atomics). Windows recompute their argmax."""
    t = _t(dtype)
    name = f"ember_max_pool_backward_{dtype}"
    decls = [(f"const {t}*", "x"), (f"const {t}*", "g"), (f"{t}*", "dx")] + [("long long", n) for n in POOL_PARAMS]
    body = _window_argmax(dtype) + f"""__host__ __device__ inline void {name}_thread(long long t, {_sig(decls)}) {{
  long long c = t % W, r = (t / W) % H, p = t / (W * H);
  const {t}* xp = x + p * H * W;
  {t} acc = 0, best;
  for (long long a = KH - 1; a >= 0; --a) {{          // window row i grows as a falls
    long long ii = r + PH - a * DH;
    if (ii < 0 || ii % SH) continue;
    long long i = ii / SH;
    if (i >= OH) continue;
    for (long long b = KW - 1; b >= 0; --b) {{
      long long jj = c + PW - b * DW;
      if (jj < 0 || jj % SW) continue;
      long long j = jj / SW;
      if (j >= OW) continue;
      if (ember_window_argmax_{dtype}(xp, H, W, i * SH - PH, j * SW - PW, KH, KW, DH, DW, &best) == r * W + c)
        acc += g[(p * OH + i) * OW + j];
    }}
  }}
  dx[t] = acc;
}}
"""
    return threads_kernel(name, decls, body)


# ----------------------------------------------------------------------------- batch norm
def _per_channel_kernel(name, decls, channel) -> Kernel:
    """One block per channel ``c`` of contiguous (N, C, L) operands, ``IDX(j)`` the index of
    the channel's element j. ``channel(par, reduce_d, first)`` writes one channel's work:
    ``par`` heads each loop over its elements, ``reduce_d(v)`` sums a double across the loop's
    threads, ``first`` holds in one thread. The device shares the loops among a block's
    threads; the host harness runs them in one."""
    sig = _sig(decls)
    device = channel("long long j = threadIdx.x; j < N * L; j += blockDim.x",
                     lambda v: f"ember_block_reduce({v}, shm_d, ember_add())", "threadIdx.x == 0")
    host = channel("long long j = 0; j < N * L; ++j", lambda v: v, "true")
    body = _reducers() + f"""
#define IDX(j) (((j) / L * C + c) * L + (j) % L)
extern "C" __global__ void {name}(long long C, {sig}) {{
  __shared__ double shm_d[{BLOCK}];
  for (long long c = blockIdx.x; c < C; c += gridDim.x) {{
{device}  }}
}}
#ifdef EMBER_HOST_HARNESS
extern "C" void {name}_host(long long C, {sig}) {{
  for (long long c = 0; c < C; ++c) {{
{host}  }}
}}
#endif
#undef IDX
"""
    return blocks_kernel(name, decls, body)


def batch_norm_kernel(dtype, has_weight: bool, has_bias: bool) -> Kernel:
    """Batch norm in training mode, one block per channel c of contiguous x (N, C, L): mean and
    biased variance in double (two passes; the mean rounded to the dtype before centering, as
    the reference centers), then ``(x - mean) / sqrt(var + eps) * w[c] + b[c]``; the channel's
    mean and variance are written for the running averages and the backward pass."""
    t = _t(dtype)
    name = f"ember_batch_norm_{dtype}_{int(has_weight)}{int(has_bias)}"
    decls = [(f"const {t}*", "x"), (f"{t}*", "y"), (f"{t}*", "mean"), (f"{t}*", "var")]
    decls += [(f"const {t}*", "w")] if has_weight else []
    decls += [(f"const {t}*", "b")] if has_bias else []
    decls += [("long long", "N"), ("long long", "L"), ("double", "eps")]
    scale = "(1.0 / sqrt(v + eps))" + (" * (double)w[c]" if has_weight else "")
    shift = "(double)b[c]" if has_bias else "0.0"

    def channel(par, reduce_d, first):
        return f"""    double s = 0.0;
    for ({par}) s += (double)x[IDX(j)];
    {t} m = ({t})({reduce_d('s')} / (double)(N * L));
    double q = 0.0;
    for ({par}) {{ double d = (double)x[IDX(j)] - (double)m; q += d * d; }}
    double v = {reduce_d('q')} / (double)(N * L);
    double scale = {scale}, shift = {shift};
    for ({par}) y[IDX(j)] = ({t})(((double)x[IDX(j)] - (double)m) * scale + shift);
    if ({first}) {{ mean[c] = m; var[c] = ({t})v; }}
"""
    return _per_channel_kernel(name, decls, channel)


def batch_norm_backward_kernel(dtype, has_weight: bool) -> Kernel:
    """Batch norm's gradients, one block per channel: ``sum(g)`` and ``sum(g * xhat)`` in
    double, then ``dx = (gw - mean(gw) - xhat * mean(gw * xhat)) * rstd`` (gw = g * w[c]) and
    the weight and bias gradients (those two sums), from the forward's saved mean and variance."""
    t = _t(dtype)
    name = f"ember_batch_norm_backward_{dtype}_{int(has_weight)}"
    decls = [(f"const {t}*", "x"), (f"const {t}*", "g"), (f"const {t}*", "mean"), (f"const {t}*", "var")]
    decls += [(f"const {t}*", "w")] if has_weight else []
    decls += [(f"{t}*", "dx"), (f"{t}*", "dw"), (f"{t}*", "db"), ("long long", "N"), ("long long", "L"),
              ("double", "eps")]
    wc = "(double)w[c]" if has_weight else "1.0"

    def channel(par, reduce_d, first):
        return f"""    double m = (double)mean[c], rs = 1.0 / sqrt((double)var[c] + eps);
    double sg = 0.0, sgx = 0.0;
    for ({par}) {{ double gj = (double)g[IDX(j)]; sg += gj; sgx += gj * ((double)x[IDX(j)] - m); }}
    sg = {reduce_d('sg')};
    sgx = {reduce_d('sgx')} * rs;                       // sum(g * xhat)
    double count = (double)(N * L), wc = {wc};
    double k_g = wc * rs, k_x = wc * sgx / count * rs * rs, k_0 = wc * sg / count * rs;
    for ({par}) dx[IDX(j)] = ({t})((double)g[IDX(j)] * k_g - ((double)x[IDX(j)] - m) * k_x - k_0);
    if ({first}) {{ dw[c] = ({t})sgx; db[c] = ({t})sg; }}
"""
    return _per_channel_kernel(name, decls, channel)


# ----------------------------------------------------------------------------- optimizer steps
def _lerp(t, start, end, weight_name, big) -> str:
    """ember.optim.functional._lerp: torch's two-sided form. ``big`` (weight >= 0.5): the
    scalar passed is ``1 - weight``, computed in Python like the reference does."""
    if big:
        return f"({end} - ({end} - {start}) * {weight_name})"
    return f"({start} + ({end} - {start}) * {weight_name})"


def _step_function(name, t, ptrs, scalars, lines) -> tuple:
    """(name, source, pointer names, scalar names) of an optimizer's per-element device
    function ``name(i, ...)`` with body ``lines``; the gradient ``g`` is the one read-only pointer."""
    args = ", ".join([f"{t}* __restrict__ {n}" if n != "g" else f"const {t}* __restrict__ g" for n in ptrs]
                     + [f"{t} {s}" for s in scalars])
    src = guarded(name, f"__host__ __device__ inline void {name}(long long i, {args}) {{\n"
                        + "\n".join(lines) + "\n}\n")
    return name, src, ptrs, scalars


def adam_body(dtype, *, amsgrad, maximize, weight_decay, decoupled, big_lerp) -> tuple:
    """``__host__ __device__`` Adam/AdamW update of element ``i``, operation for operation as
    ember.optim.functional.adam_step. Returns (function name, source, pointer names, scalar names)."""
    t = _t(dtype)
    flags = f"{int(amsgrad)}{int(maximize)}{int(bool(weight_decay))}{int(decoupled)}{int(big_lerp)}"
    name = f"ember_adam_{dtype}_{flags}"
    ptrs = ["p", "g", "m", "v"] + (["vmax"] if amsgrad else [])
    scalars = ["decay", "wd", "w1", "c2", "beta2", "neg_step", "bc2", "eps"]
    lines = [f"  {t} grad = g[i];", f"  {t} param = p[i];"]
    if maximize:
        lines.append("  grad = -grad;")
    if weight_decay:
        lines.append("  param = param * decay;" if decoupled else "  grad = grad + param * wd;")
    lines.append(f"  {t} ea = {_lerp(t, 'm[i]', 'grad', 'w1', big_lerp)};")
    lines.append(f"  {t} eas = v[i] * beta2 + grad * c2 * grad;")
    second = "eas"
    if amsgrad:
        lines.append("  vmax[i] = ((vmax[i] > eas || vmax[i] != vmax[i]) ? vmax[i] : eas);")
        second = "vmax[i]"
    lines.append(f"  {t} denom = {_fn('sqrtf', dtype)}({second}) / bc2 + eps;")
    lines += ["  m[i] = ea;", "  v[i] = eas;", "  p[i] = param + ea * neg_step / denom;"]
    return _step_function(name, t, ptrs, scalars, lines)


def sgd_body(dtype, *, maximize, weight_decay, momentum, dampening, nesterov, first) -> tuple:
    """SGD update of element ``i`` as ember.optim.functional.sgd_step; ``first``: no momentum
    buffer yet (it starts as a copy of the gradient)."""
    t = _t(dtype)
    flags = "".join(str(int(bool(f))) for f in (maximize, weight_decay, momentum, dampening, nesterov, first))
    name = f"ember_sgd_{dtype}_{flags}"
    ptrs = ["p", "g"] + (["buf"] if momentum else [])
    scalars = ["wd", "mom", "damp", "neg_lr"]
    lines = [f"  {t} d = g[i];", f"  {t} param = p[i];"]
    if maximize:
        lines.append("  d = -d;")
    if weight_decay:
        lines.append("  d = d + param * wd;")
    if momentum:
        if first:
            lines.append(f"  {t} b = d;")
        else:
            lines.append(f"  {t} b = buf[i] * mom + {'d * damp' if dampening else 'd'};")
        lines.append("  buf[i] = b;")
        lines.append("  d = d + b * mom;" if nesterov else "  d = b;")
    lines.append("  p[i] = param + d * neg_lr;")
    return _step_function(name, t, ptrs, scalars, lines)


def rmsprop_body(dtype, *, maximize, weight_decay, momentum, centered, big_lerp) -> tuple:
    """RMSprop update of element ``i`` as ember.optim.functional.rmsprop_step."""
    t = _t(dtype)
    flags = f"{int(maximize)}{int(bool(weight_decay))}{int(bool(momentum))}{int(centered)}{int(big_lerp)}"
    name = f"ember_rmsprop_{dtype}_{flags}"
    ptrs = ["p", "g", "sq"] + (["ga"] if centered else []) + (["buf"] if momentum else [])
    scalars = ["wd", "alpha", "c1", "w1", "eps", "mom", "neg_lr"]
    sqrt = _fn("sqrtf", dtype)
    lines = [f"  {t} grad = g[i];", f"  {t} param = p[i];"]
    if maximize:
        lines.append("  grad = -grad;")
    if weight_decay:
        lines.append("  grad = grad + param * wd;")
    lines.append(f"  {t} s = sq[i] * alpha + grad * c1 * grad;")
    lines.append("  sq[i] = s;")
    if centered:
        lines.append(f"  {t} a = {_lerp(t, 'ga[i]', 'grad', 'w1', big_lerp)};")
        lines.append("  ga[i] = a;")
        lines.append(f"  {t} avg = {sqrt}(s - a * a) + eps;")
    else:
        lines.append(f"  {t} avg = {sqrt}(s) + eps;")
    if momentum:
        lines.append(f"  {t} b = buf[i] * mom + grad / avg;")
        lines.append("  buf[i] = b;")
        lines.append("  p[i] = param + b * neg_lr;")
    else:
        lines.append("  p[i] = param + grad * neg_lr / avg;")
    return _step_function(name, t, ptrs, scalars, lines)


BODIES = {"adam_step": adam_body, "sgd_step": sgd_body, "rmsprop_step": rmsprop_body}


def step_kernel(rule: str, dtype, **flags) -> Kernel:
    """One optimizer rule over one contiguous tensor: logical thread ``i`` updates element ``i``
    in place (param and state; the gradient is read only)."""
    fname, src, ptrs, scalars = BODIES[rule](dtype, **flags)
    t = _t(dtype)
    decls = [(f"{t}*" if p != "g" else f"const {t}*", p) for p in ptrs] + [(t, s) for s in scalars]
    body = src + (f"__host__ __device__ inline void {fname}_k_thread(long long i, {_sig(decls)}) "
                  f"{{ {fname}(i, {_call(decls)}); }}\n")
    return threads_kernel(f"{fname}_k", decls, body, meta={"ptrs": ptrs, "scalars": scalars})


def multi_step_kernel(rule: str, dtype, sizes, **flags) -> Kernel:
    """One optimizer rule over many contiguous tensors in one launch. Logical thread ``t`` is
    element ``t - start[k]`` of tensor ``k``; ``k`` is found by a balanced tree of comparisons
    on the (compile-time) prefix sums of ``sizes``, so no pointer table travels to the device."""
    fname, src, ptrs, scalars = BODIES[rule](dtype, **flags)
    t = _t(dtype)
    starts = [0]
    for s in sizes:
        starts.append(starts[-1] + int(s))
    decls = [(f"{t}*" if p != "g" else f"const {t}*", f"{p}{k}") for k in range(len(sizes)) for p in ptrs]
    decls += [(t, s) for s in scalars]
    scalar_call = ", ".join(scalars)

    def tree(lo, hi, indent):
        pad = "  " * indent
        if hi - lo == 1:
            call = ", ".join(f"{p}{lo}" for p in ptrs)
            return f"{pad}{fname}(t - {starts[lo]}LL, {call}, {scalar_call});\n"
        mid = (lo + hi) // 2
        return (f"{pad}if (t < {starts[mid]}LL) {{\n{tree(lo, mid, indent + 1)}{pad}}} else {{\n"
                f"{tree(mid, hi, indent + 1)}{pad}}}\n")

    name = f"{fname}_multi{len(sizes)}_{hashlib.sha256(repr(tuple(sizes)).encode()).hexdigest()[:8]}"
    body = src + (f"__host__ __device__ inline void {name}_thread(long long t, {_sig(decls)}) {{\n"
                  f"{tree(0, len(sizes), 1)}}}\n")
    return threads_kernel(name, decls, body, meta={"ptrs": ptrs, "scalars": scalars, "total": starts[-1]})


# ----------------------------------------------------------------------------- im2col's adjoint
def col2im_kernel(dtype) -> Kernel:
    """The adjoint of the windows view (``windows_grad``) as a gather: logical thread ``t`` is
    one element of the (N*C, H, W) result and sums the window elements that read it, so there
    are no atomics and no ``kh * kw`` strided passes. ``g`` is contiguous (N*C, OH, OW, KH, KW)."""
    t = _t(dtype)
    acc = "double" if str(dtype) in ("float32", "float64") else t
    name = f"ember_col2im_{dtype}"
    body = f"""
__host__ __device__ inline void {name}_thread(long long t, const {t}* g, {t}* out, long long H, long long W,
    long long OH, long long OW, long long KH, long long KW, long long SH, long long SW, long long DH, long long DW) {{
  long long x = t % W, y = (t / W) % H, nc = t / (W * H);
  {acc} acc = 0;
  for (long long i = 0; i < KH; ++i) {{
    long long yy = y - i * DH;
    if (yy < 0 || yy % SH) continue;
    long long oy = yy / SH;
    if (oy >= OH) continue;
    for (long long j = 0; j < KW; ++j) {{
      long long xx = x - j * DW;
      if (xx < 0 || xx % SW) continue;
      long long ox = xx / SW;
      if (ox >= OW) continue;
      acc += ({acc})g[(((nc * OH + oy) * OW + ox) * KH + i) * KW + j];
    }}
  }}
  out[t] = ({t})acc;
}}
"""
    decls = [(f"const {t}*", "g"), (f"{t}*", "out")] + [("long long", n) for n in
                                                       ("H", "W", "OH", "OW", "KH", "KW", "SH", "SW", "DH", "DW")]
    return threads_kernel(name, decls, body)

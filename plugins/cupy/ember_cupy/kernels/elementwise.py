"""Elementwise kernels: Philox random bits, a unary op, remainder, and GELU with its backward op."""

from __future__ import annotations

import math

from .. import render
from ..render import literal
from .source import Kernel, _fn, _t, guarded, threads_kernel

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
    body = (
        guarded("ember_philox", PHILOX)
        + r"""
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
    )
    decls = [
        ("unsigned int*", "out"),
        ("long long", "count"),
        ("unsigned long long", "seed"),
        ("unsigned long long", "offset"),
    ]
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


def remainder_body(dtype) -> str:
    """``__host__ __device__ T ember_remainder_<dtype>(T a, T b)``: NumPy's remainder, bit for bit.

    Floats: C's exact ``fmod``, moved by one ``b`` when its sign differs from ``b``'s, and a zero
    takes ``b``'s sign (NumPy's divmod; CuPy's ``a - floor(a / b) * b`` is NaN for an infinite
    ``b``, has no -0.0, and rounds). Integers: 0 for ``b == 0``, and for ``b == -1`` (so the
    most negative value's overflow never happens).
    """
    t, name = _t(dtype), f"ember_remainder_{dtype}"
    if str(dtype) in render.FLOATS:
        zero = f"({t})0"
        body = (
            f"  {t} m = {_fn('fmodf', dtype)}(a, b);\n"
            f"  if (m != {zero}) {{ if ((b < {zero}) != (m < {zero})) m += b; }}\n"
            f"  else m = {_fn('copysignf', dtype)}({zero}, b);\n"
            "  return m;\n"
        )
    elif str(dtype).startswith("uint"):
        body = f"  return b == 0 ? ({t})0 : ({t})(a % b);\n"
    else:
        body = (
            f"  if (b == 0 || b == -1) return ({t})0;\n"
            f"  {t} m = ({t})(a % b);\n"
            f"  if (m != 0 && ((m < 0) != (b < 0))) m = ({t})(m + b);\n"
            "  return m;\n"
        )
    return guarded(name, f"__host__ __device__ inline {t} {name}({t} a, {t} b) {{\n{body}}}\n")


def remainder_kernel(dtype) -> Kernel:
    """``remainder`` over two contiguous arrays of one shape and dtype (:func:`remainder_body`)."""
    t, name = _t(dtype), f"ember_remainder_{dtype}"
    body = remainder_body(dtype) + (
        f"__host__ __device__ inline void {name}_all_thread(long long i, const {t}* a, const {t}* b, {t}* y) "
        f"{{ y[i] = {name}(a[i], b[i]); }}\n"
    )
    return threads_kernel(f"{name}_all", [(f"const {t}*", "a"), (f"const {t}*", "b"), (f"{t}*", "y")], body)


def gelu_body(dtype, approximate: str) -> str:
    """``__host__ __device__ T ember_gelu_<dtype>_<approximate>(T x)``: ember.fused.FUSED["gelu"]'s ops in order."""
    t, name = _t(dtype), f"ember_gelu_{dtype}_{approximate}"
    if approximate == "tanh":
        c, k = literal(0.7978845608028654, dtype), literal(0.044715, dtype)
        half, one = literal(0.5, dtype), literal(1, dtype)
        return guarded(
            name,
            f"__host__ __device__ inline {t} {name}({t} x) {{\n"
            f"  {t} inner = (x + x * x * x * {k}) * {c};\n"
            f"  return x * {half} * ({_fn('tanhf', dtype)}(inner) + {one});\n}}\n",
        )
    c, half, one = literal(0.7071067811865476, dtype), literal(0.5, dtype), literal(1, dtype)
    return guarded(
        name,
        f"__host__ __device__ inline {t} {name}({t} x) {{\n"
        f"  return x * {half} * ({_fn('erff', dtype)}(x * {c}) + {one});\n}}\n",
    )


def gelu_backward_body(dtype, approximate: str) -> str:
    """``__host__ __device__ T NAME(T g, T x)``: ember.fused.FUSED["gelu_backward"]'s ops in order."""
    t, name = _t(dtype), f"ember_gelu_backward_{dtype}_{approximate}"
    half, one = literal(0.5, dtype), literal(1, dtype)
    if approximate == "tanh":
        k, c, c3 = literal(0.7978845608028654, dtype), literal(0.044715, dtype), literal(3 * 0.044715, dtype)
        return guarded(
            name,
            f"__host__ __device__ inline {t} {name}({t} g, {t} x) {{\n"
            f"  {t} th = {_fn('tanhf', dtype)}((x + x * x * x * {c}) * {k});\n"
            f"  {t} slope = (x * x * {c3} + {one}) * {k};\n"
            f"  return g * ((th + {one}) * {half} + x * {half} * ({one} - th * th) * slope);\n}}\n",
        )
    c, mhalf = literal(0.7071067811865476, dtype), literal(-0.5, dtype)
    inv = literal(1 / math.sqrt(2 * math.pi), dtype)
    return guarded(
        name,
        f"__host__ __device__ inline {t} {name}({t} g, {t} x) {{\n"
        f"  {t} cdf = ({_fn('erff', dtype)}(x * {c}) + {one}) * {half};\n"
        f"  {t} pdf = {_fn('expf', dtype)}(x * x * {mhalf}) * {inv};\n"
        f"  return g * (cdf + x * pdf);\n}}\n",
    )


def gelu_backward_kernel(dtype, approximate="none") -> Kernel:
    t, name = _t(dtype), f"ember_gelu_backward_{dtype}_{approximate}"
    body = gelu_backward_body(dtype, approximate) + (
        f"__host__ __device__ inline void {name}_k_thread(long long i, const {t}* g, const {t}* x, {t}* y) "
        f"{{ y[i] = {name}(g[i], x[i]); }}\n"
    )
    return threads_kernel(f"{name}_k", [(f"const {t}*", "g"), (f"const {t}*", "x"), (f"{t}*", "y")], body)


def gelu_kernel(dtype, approximate="none") -> Kernel:
    t, name = _t(dtype), f"ember_gelu_{dtype}_{approximate}"
    body = (
        gelu_body(dtype, approximate)
        + f"__host__ __device__ inline void {name}_k_thread(long long i, const {t}* x, {t}* y) {{ y[i] = {name}(x[i]); }}\n"
    )
    return threads_kernel(f"{name}_k", [(f"const {t}*", "x"), (f"{t}*", "y")], body)

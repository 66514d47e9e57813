"""Sliding-window kernels: max-pool and its backward op, and col2im (the windows view's adjoint,
``windows_grad``, as a gather)."""

from __future__ import annotations

from .. import render
from .source import Kernel, _sig, _t, guarded, threads_kernel

# ----------------------------------------------------------------------------- pooling
POOL_PARAMS = ("H", "W", "OH", "OW", "KH", "KW", "SH", "SW", "PH", "PW", "DH", "DW")


def _window_argmax(dtype) -> str:
    """``__host__ __device__ long long NAME(plane, ..., T* best)``: a max-pool window's maximum
    and its flat index in the plane (-1: padding). Cells outside the plane count as -inf; the
    first maximum wins and a later NaN replaces it (ember.fused.FUSED["max_pool2d"]'s choice)."""
    t, name = _t(dtype), f"ember_window_argmax_{dtype}"
    lowest = render.reduce_identity("max", dtype)
    return guarded(
        name,
        f"""__host__ __device__ inline long long {name}(const {t}* xp, long long H, long long W,
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
""",
    )


def max_pool_kernel(dtype) -> Kernel:
    """max_pool2d over contiguous planes (P, H, W): logical thread ``t`` is output element
    (p, i, j) of (P, OH, OW) and writes its window's maximum."""
    t = _t(dtype)
    name = f"ember_max_pool_{dtype}"
    decls = [(f"const {t}*", "x"), (f"{t}*", "y")] + [("long long", n) for n in POOL_PARAMS]
    body = (
        _window_argmax(dtype)
        + f"""__host__ __device__ inline void {name}_thread(long long t, {_sig(decls)}) {{
  long long j = t % OW, i = (t / OW) % OH, p = t / (OW * OH);
  {t} best;
  ember_window_argmax_{dtype}(x + p * H * W, H, W, i * SH - PH, j * SW - PW, KH, KW, DH, DW, &best);
  y[t] = best;
}}
"""
    )
    return threads_kernel(name, decls, body)


def max_pool_backward_kernel(dtype) -> Kernel:
    """The VJP of max_pool2d as a gather: logical thread ``t`` is input element (p, r, c) and
    adds the gradient of every window whose first maximum it is, in the windows' order (the
    reference's scatter-add order: equal sums, no atomics). Windows recompute their argmax."""
    t = _t(dtype)
    name = f"ember_max_pool_backward_{dtype}"
    decls = [(f"const {t}*", "x"), (f"const {t}*", "g"), (f"{t}*", "dx")] + [("long long", n) for n in POOL_PARAMS]
    body = (
        _window_argmax(dtype)
        + f"""__host__ __device__ inline void {name}_thread(long long t, {_sig(decls)}) {{
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
    )
    return threads_kernel(name, decls, body)


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
    decls = [(f"const {t}*", "g"), (f"{t}*", "out")] + [
        ("long long", n) for n in ("H", "W", "OH", "OW", "KH", "KW", "SH", "SW", "DH", "DW")
    ]
    return threads_kernel(name, decls, body)

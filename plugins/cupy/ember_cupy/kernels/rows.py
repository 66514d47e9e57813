"""Row kernels, one block per row: softmax, log-softmax, cross-entropy, layer norm, their backward
ops, and layer norm's weight and bias gradients."""

from __future__ import annotations

from .. import render
from ..render import literal
from .source import (
    BLOCK,
    Kernel,
    _fn,
    _reducers,
    _sig,
    _t,
    blocks_kernel,
    threads_kernel,
)


def _row_max_sum(t: str) -> str:
    """Device code: ``m`` = NaN-propagating max of row ``xr``, ``s`` = sum of exp(x - m) in double."""
    return f"""    {t} m = {render.reduce_identity("max", "float32" if t == "float" else "float64")};
    for (long long j = threadIdx.x; j < C; j += blockDim.x) m = ember_maxnan()(m, xr[j]);
    m = ember_block_reduce(m, shm_t, ember_maxnan());
    double s = 0.0;
    for (long long j = threadIdx.x; j < C; j += blockDim.x) s += (double)EXP(xr[j] - m);
    s = ember_block_reduce(s, shm_d, ember_add());
"""


def _row_max_sum_host(t: str) -> str:
    return f"""    {t} m = {render.reduce_identity("max", "float32" if t == "float" else "float64")};
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
    body = (
        _reducers()
        + f"""
#define EXP {_fn("expf", dtype)}
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
    )
    return blocks_kernel(name, [(f"const {t}*", "x"), (f"{t}*", "y"), ("long long", "C")], body)


def cross_entropy_kernel(dtype, target_dtype="int64") -> Kernel:
    """Per row of contiguous logits (rows, C): ``picked[r] = log_softmax(x[r])[target[r]]``, or 0
    where ``target[r] == ignore``; the caller divides the sum by the rows that count. A target
    outside [0, C) gives NaN (no host sync to raise)."""
    t, it = _t(dtype), _t(target_dtype)
    name = f"ember_cross_entropy_{dtype}_{target_dtype}"
    nan, zero = literal(float("nan"), dtype), literal(0, dtype)
    pick = f"""long long k = (long long)target[r];
      picked[r] = k == ignore ? {zero} : (k < 0 || k >= C) ? {nan} : (xr[k] - m) - {_fn("logf", dtype)}(({t})s);"""
    body = (
        _reducers()
        + f"""
#define EXP {_fn("expf", dtype)}
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
    )
    decls = [
        (f"const {t}*", "x"),
        (f"const {it}*", "target"),
        (f"{t}*", "picked"),
        ("long long", "C"),
        ("long long", "ignore"),
    ]
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
    body = (
        _reducers()
        + f"""
#define EXP {_fn("expf", dtype)}
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
    )
    decls = [
        (f"const {t}*", "x"),
        (f"const {it}*", "target"),
        (f"const {t}*", "scale"),
        (f"{t}*", "dx"),
        ("long long", "C"),
        ("long long", "ignore"),
    ]
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
    body = (
        _reducers()
        + f"""
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
    )
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
    body = (
        _reducers()
        + f"""
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
    )
    return blocks_kernel(name, decls, body)


def layer_norm_backward_kernel(dtype, has_weight: bool) -> Kernel:
    """The input gradient of layer norm, one block per contiguous row of D values: the row's
    mean and 1/std as the forward kernel computes them, then with ``gw = g * w[j]`` (or g)
    ``dx = (gw - mean(gw) - xhat * mean(gw * xhat)) * rstd``, both means in double. Each row's
    mean and 1/std are kept (double) for :func:`layer_norm_params_kernel`."""
    t = _t(dtype)
    name = f"ember_layer_norm_backward_{dtype}_{int(has_weight)}"
    decls = (
        [(f"const {t}*", "x"), (f"const {t}*", "g")]
        + ([(f"const {t}*", "w")] if has_weight else [])
        + [(f"{t}*", "dx"), ("double*", "mean_out"), ("double*", "rstd_out"), ("long long", "D"), (t, "eps")]
    )
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
    {t} mean = ({t})({reduce_d("s")} / (double)D);
    double sq = 0.0;
    for ({par}) {{ double c = (double)(xr[j] - mean); sq += c * c; }}
    {t} var = ({t})({reduce_d("sq")} / (double)D);
    {t} rstd = {one} / {sqrt}(var + eps);
    double a = 0.0, b = 0.0;
    for ({par}) {{ {t} gwj = {gw}; a += (double)gwj; b += (double)gwj * (double)((xr[j] - mean) * rstd); }}
    {t} ma = ({t})({reduce_d("a")} / (double)D), mb = ({t})({reduce_d("b")} / (double)D);
    for ({par}) {{ {t} gwj = {gw}; dr[j] = (gwj - ma - (xr[j] - mean) * rstd * mb) * rstd; }}
"""

    device = row(
        "long long j = threadIdx.x; j < D; j += blockDim.x", lambda v: f"ember_block_reduce({v}, shm_d, ember_add())"
    )
    host = row("long long j = 0; j < D; ++j", lambda v: v)
    body = (
        _reducers()
        + f"""
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
    )
    return blocks_kernel(name, decls, body)


def layer_norm_params_kernel(dtype) -> Kernel:
    """Layer norm's weight and bias gradients: logical thread ``j`` sums column ``j`` over the
    rows, ``dw[j] = sum(g * xhat)`` and ``db[j] = sum(g)`` in double (reading the row statistics
    :func:`layer_norm_backward_kernel` kept)."""
    t = _t(dtype)
    name = f"ember_layer_norm_params_{dtype}"
    decls = [
        (f"const {t}*", "x"),
        (f"const {t}*", "g"),
        ("const double*", "mean"),
        ("const double*", "rstd"),
        (f"{t}*", "dw"),
        (f"{t}*", "db"),
        ("long long", "rows"),
        ("long long", "D"),
    ]
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

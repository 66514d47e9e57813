"""Batch norm (training) and its backward op: one block per channel."""

from __future__ import annotations

from .source import BLOCK, Kernel, _reducers, _sig, _t, blocks_kernel


# ----------------------------------------------------------------------------- batch norm
def _per_channel_kernel(name, decls, channel) -> Kernel:
    """One block per channel ``c`` of contiguous (N, C, L) operands, ``IDX(j)`` the index of
    the channel's element j. ``channel(par, reduce_d, first)`` writes one channel's work:
    ``par`` heads each loop over its elements, ``reduce_d(v)`` sums a double across the loop's
    threads, ``first`` holds in one thread. The device shares the loops among a block's
    threads; the host harness runs them in one."""
    sig = _sig(decls)
    device = channel(
        "long long j = threadIdx.x; j < N * L; j += blockDim.x",
        lambda v: f"ember_block_reduce({v}, shm_d, ember_add())",
        "threadIdx.x == 0",
    )
    host = channel("long long j = 0; j < N * L; ++j", lambda v: v, "true")
    body = (
        _reducers()
        + f"""
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
    )
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
    {t} m = ({t})({reduce_d("s")} / (double)(N * L));
    double q = 0.0;
    for ({par}) {{ double d = (double)x[IDX(j)] - (double)m; q += d * d; }}
    double v = {reduce_d("q")} / (double)(N * L);
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
    decls += [
        (f"{t}*", "dx"),
        (f"{t}*", "dw"),
        (f"{t}*", "db"),
        ("long long", "N"),
        ("long long", "L"),
        ("double", "eps"),
    ]
    wc = "(double)w[c]" if has_weight else "1.0"

    def channel(par, reduce_d, first):
        return f"""    double m = (double)mean[c], rs = 1.0 / sqrt((double)var[c] + eps);
    double sg = 0.0, sgx = 0.0;
    for ({par}) {{ double gj = (double)g[IDX(j)]; sg += gj; sgx += gj * ((double)x[IDX(j)] - m); }}
    sg = {reduce_d("sg")};
    sgx = {reduce_d("sgx")} * rs;                       // sum(g * xhat)
    double count = (double)(N * L), wc = {wc};
    double k_g = wc * rs, k_x = wc * sgx / count * rs * rs, k_0 = wc * sg / count * rs;
    for ({par}) dx[IDX(j)] = ({t})((double)g[IDX(j)] * k_g - ((double)x[IDX(j)] - m) * k_x - k_0);
    if ({first}) {{ dw[c] = ({t})sgx; db[c] = ({t})sg; }}
"""

    return _per_channel_kernel(name, decls, channel)

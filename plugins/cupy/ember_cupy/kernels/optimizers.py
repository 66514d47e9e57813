"""The optimizer steps (SGD, Adam, RMSprop) as elementwise kernels over one tensor, and the
multi-tensor form that steps a whole parameter group in one launch."""

from __future__ import annotations

import hashlib

from .source import Kernel, _call, _fn, _sig, _t, guarded, threads_kernel


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
    args = ", ".join(
        [f"{t}* __restrict__ {n}" if n != "g" else f"const {t}* __restrict__ g" for n in ptrs]
        + [f"{t} {s}" for s in scalars]
    )
    src = guarded(
        name, f"__host__ __device__ inline void {name}(long long i, {args}) {{\n" + "\n".join(lines) + "\n}\n"
    )
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
    body = src + (
        f"__host__ __device__ inline void {fname}_k_thread(long long i, {_sig(decls)}) "
        f"{{ {fname}(i, {_call(decls)}); }}\n"
    )
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
        return (
            f"{pad}if (t < {starts[mid]}LL) {{\n{tree(lo, mid, indent + 1)}{pad}}} else {{\n"
            f"{tree(mid, hi, indent + 1)}{pad}}}\n"
        )

    name = f"{fname}_multi{len(sizes)}_{hashlib.sha256(repr(tuple(sizes)).encode()).hexdigest()[:8]}"
    body = src + (
        f"__host__ __device__ inline void {name}_thread(long long t, {_sig(decls)}) {{\n{tree(0, len(sizes), 1)}}}\n"
    )
    return threads_kernel(name, decls, body, meta={"ptrs": ptrs, "scalars": scalars, "total": starts[-1]})

"""ember.jit fusion groups to CUDA C: one kernel per group.

A group (``ember.jit.passes.Group``) is an elementwise chain over one shape, optionally one
reduction (sum, max or min) and an elementwise tail over the reduction's result shape. Its
kernel reads every input once per element it needs, keeps intermediate values in registers,
and writes only the group's outputs (the values read outside it). Inputs are read through
their strides, so a transposed, sliced or broadcast input costs no copy; the strides are
known only at the first call, so :class:`FusedGroup` renders (and caches) one kernel per
input layout, usually exactly one.

Two kernel shapes (kernels/): an elementwise group and a reduction with few terms per
output are ``threads`` kernels (one logical thread per output element); a reduction with
many terms per output is a ``blocks`` kernel (one block per output element, a shared-memory
tree). The per-element work is ``__host__ __device__`` code, so the host harness runs the
exact arithmetic of every group on the CPU.

>>> from ember.jit.graph import Var
>>> from ember.jit.passes import Group
>>> x = Var(0, "input", (), {"index": 0}, (4, 3), "float32")
>>> y = Var(1, "exp", (x,), {}, (4, 3), "float32")
>>> z = Var(2, "add", (y, 1.0), {}, (4, 3), "float32")
>>> g = Group("elementwise", [y, z], (4, 3)); g.inputs, g.outputs = [x], [z]
>>> k = group_kernel(g, [((4, 3), (3, 1), "float32")])
>>> k.launch, k.meta["n"], "expf" in k.source
('threads', 12, True)
"""

from __future__ import annotations

import hashlib
import math

from . import kernels, render
from .kernels import source
from .render import Unsupported, ctype, literal

#: A reduction with at least this many terms per output element gets a block per output.
BLOCK_TERMS = 128
#: ... and so does one with few outputs (too few threads to fill the GPU otherwise).
FEW_OUTPUTS = 1024

COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")
LOGICAL = ("logical_and", "logical_or", "logical_xor", "logical_not")


def contiguous_strides(shape) -> tuple:
    """Row-major strides in elements.

    >>> contiguous_strides((2, 3, 4))
    (12, 4, 1)
    """
    out, step = [], 1
    for s in reversed(shape):
        out.append(step)
        step *= s
    return tuple(reversed(out))


def _is_var(a) -> bool:
    return hasattr(a, "op") and hasattr(a, "shape")


def _index_code(names, dims, linear, prefix) -> list:
    """C lines splitting ``linear`` into per-dim indices ``prefix{d}`` over ``dims`` (row-major)."""
    q = f"{prefix}q_{linear}"
    lines = [f"  long long {q} = {linear};"]
    for d, size in reversed(list(zip(names, dims))):
        if size == 1:
            lines.append(f"  const long long {prefix}{d} = 0;")
        else:
            lines.append(f"  const long long {prefix}{d} = {q} % {size}LL; {q} /= {size}LL;")
    return lines


def _offset(in_shape, in_strides, domain, prefix) -> str:
    """The element offset of a (broadcast) input at the current index of ``domain``."""
    lead = len(domain) - len(in_shape)
    terms = [
        f"{prefix}{lead + k} * {st}LL" for k, (s, st) in enumerate(zip(in_shape, in_strides)) if s != 1 and st != 0
    ]
    return " + ".join(terms) or "0"


class _Emitter:
    """Writes the C statements of one stage (pre: the group's shape; post: the reduction's)."""

    def __init__(self, layouts, inputs):
        self.layouts = layouts  # input position -> (shape, strides, dtype)
        self.position = {v.id: k for k, v in enumerate(inputs)}
        self.lines: list = []
        self.names: dict = {}  # var id -> C name in this stage
        self.loaded: dict = {}

    def operand(self, a, stage, domain, linear, prefix):
        if not _is_var(a):
            return None
        if a.id in self.names:
            return self.names[a.id]
        if a.id not in self.position:
            raise Unsupported(f"{a!r} is neither in the group nor one of its inputs")
        k = self.position[a.id]
        key = (k, stage)
        if key not in self.loaded:
            shape, strides, dtype = self.layouts[k]
            contiguous = tuple(shape) == tuple(domain) and all(
                s == 1 or a == b for s, a, b in zip(shape, strides, contiguous_strides(domain))
            )
            off = linear if contiguous else _offset(shape, strides, domain, prefix)
            name = f"x{k}{stage}"
            self.lines.append(f"  const {ctype(dtype)} {name} = in{k}[{off}];")
            self.loaded[key] = name
        return self.loaded[key]

    def node(self, v, stage, domain, linear, prefix):
        args, dts = [], []
        for a in v.args:
            name = self.operand(a, stage, domain, linear, prefix)
            args.append(name)
            dts.append(str(a.dtype) if _is_var(a) else None)
        args, dts = _scalars(v, args, dts)
        code = render.expr(v.op, v.dtype, args, dts, v.params)
        name = f"v{v.id}"
        self.lines.append(f"  const {ctype(v.dtype)} {name} = {code};")
        self.names[v.id] = name
        return name


def _scalars(v, args, dts):
    """Python scalars in ``v.args`` as C literals, in the dtype NEP 50 gives them."""
    var_dts = [d for d in dts if d is not None]
    if v.op in COMPARE:
        other = var_dts[0] if var_dts else str(v.dtype)
        floaty = any(isinstance(a, float) for a in v.args if not _is_var(a))
        if floaty and other not in render.FLOATS:
            # an int tensor against 0.5 compares as float64, as in NumPy
            return (
                [f"(double){n}" if n is not None else literal(a, "float64") for n, a in zip(args, v.args)],
                ["float64"] * len(args),
            )
        return ([n if n is not None else literal(a, other) for n, a in zip(args, v.args)], [d or other for d in dts])
    if v.op in LOGICAL:
        return [n if n is not None else literal(a, "bool") for n, a in zip(args, v.args)], ["bool"] * len(args)
    if v.op == "where":
        out = [args[0] if args[0] is not None else literal(v.args[0], "bool")]
        out += [n if n is not None else literal(a, v.dtype) for n, a in zip(args[1:], v.args[1:])]
        return out, ["bool", str(v.dtype), str(v.dtype)]
    return [n if n is not None else literal(a, v.dtype) for n, a in zip(args, v.args)], [d or str(v.dtype) for d in dts]


def _check(group):
    for v in list(group.nodes) + list(group.inputs):
        ctype(v.dtype)  # raises Unsupported for float16
    if group.kind not in ("elementwise", "reduce"):
        raise Unsupported(f"group kind {group.kind}")
    if any(v.size == 0 for v in group.nodes):
        raise Unsupported("an empty tensor (nothing to launch)")


def _finish(body_fn, sig_decls, group, launch, n, extra_meta) -> kernels.Kernel:
    """Name the kernel after a hash of its body, so equal groups share one compiled kernel."""
    probe = body_fn("ember_fused_NAME")
    name = "ember_fused_" + hashlib.sha256(probe.encode()).hexdigest()[:16]
    body = body_fn(name)
    meta = {"n": n, "outputs": [(tuple(v.shape), str(v.dtype)) for v in group.outputs], **extra_meta}
    if launch == "threads":
        return kernels.threads_kernel(name, sig_decls, body, meta)
    return kernels.blocks_kernel(name, sig_decls, body, meta)


def group_kernel(group, layouts) -> kernels.Kernel:
    """The kernel of ``group`` for inputs with ``layouts`` ([(shape, strides in elements,
    dtype)], one per ``group.inputs``). Arguments: the inputs, then the outputs (contiguous,
    in ``group.outputs`` order). Raises :class:`Unsupported` for what it cannot fuse."""
    _check(group)
    decls = [(f"const {ctype(dt)}* __restrict__", f"in{k}") for k, (_, _, dt) in enumerate(layouts)]
    out_index = {v.id: k for k, v in enumerate(group.outputs)}
    decls += [(f"{ctype(v.dtype)}* __restrict__", f"out{k}") for k, v in enumerate(group.outputs)]
    if group.reduce is None:
        return _elementwise(group, layouts, decls, out_index)
    return _reduction(group, layouts, decls, out_index)


def _elementwise(group, layouts, decls, out_index):
    shape = tuple(group.shape)
    em = _Emitter(layouts, group.inputs)
    em.lines += _index_code(range(len(shape)), shape, "t", "i")
    for v in group.nodes:
        em.node(v, "", shape, "t", "i")
        if v.id in out_index:
            em.lines.append(f"  out{out_index[v.id]}[t] = v{v.id};")
    sig = source._sig(decls)
    code = "\n".join(em.lines)

    def body(name):
        return f"__host__ __device__ inline void {name}_thread(long long t, {sig}) {{\n{code}\n}}\n"

    return _finish(body, decls, group, "threads", math.prod(shape), {"strategy": "elementwise"})


def _reduction(group, layouts, decls, out_index):
    red = group.reduce
    shape = tuple(group.shape)
    nd = len(shape)
    axes = sorted({a % max(nd, 1) for a in red.params["axes"]})
    kept = [d for d in range(nd) if d not in axes]
    n_out = math.prod(shape[d] for d in kept)
    n_red = math.prod(shape[d] for d in axes)
    acc_t = render.accumulator(red.op, red.dtype)
    combine = {"sum": "ember_add", "max": "ember_maxnan", "min": "ember_minnan"}[red.op]
    ident = render.reduce_identity(red.op, red.dtype)
    cs = contiguous_strides(shape)

    pre = [v for v in group.nodes if v is not red and v.id not in _post_ids(group)]
    post = [v for v in group.nodes if v.id in _post_ids(group)]
    pre_ids = {v.id for v in pre}
    for v in post:
        if any(_is_var(a) and a.id in pre_ids for a in v.args):
            raise Unsupported("the tail reads a value from before the reduction")

    # pre stage: full index from (o over kept dims, r over reduced dims)
    em = _Emitter(layouts, group.inputs)
    em.lines += _index_code(kept, [shape[d] for d in kept], "o", "i")
    em.lines += _index_code(axes, [shape[d] for d in axes], "r", "i")
    em.lines.append("  const long long lin = " + (" + ".join(f"i{d} * {cs[d]}LL" for d in range(nd)) or "0") + ";")
    for v in pre:
        em.node(v, "", shape, "lin", "i")
        if v.id in out_index:
            em.lines.append(f"  out{out_index[v.id]}[lin] = v{v.id};")
    operand = (
        em.operand(red.args[0], "", shape, "lin", "i") if red.args[0].id not in em.names else em.names[red.args[0].id]
    )
    em.lines.append(f"  return ({acc_t}){operand};")
    pre_code = "\n".join(em.lines)

    # post stage: the reduction's result shape, linear index o
    out_shape = tuple(red.shape)
    ep = _Emitter(layouts, group.inputs)
    ep.lines += _index_code(range(len(out_shape)), out_shape, "o", "j")
    ep.lines.append(f"  const {ctype(red.dtype)} v{red.id} = ({ctype(red.dtype)})acc;")
    ep.names[red.id] = f"v{red.id}"
    if red.id in out_index:
        ep.lines.append(f"  out{out_index[red.id]}[o] = v{red.id};")
    for v in post:
        ep.node(v, "p", out_shape, "o", "j")
        if v.id in out_index:
            ep.lines.append(f"  out{out_index[v.id]}[o] = v{v.id};")
    post_code = "\n".join(ep.lines)

    sig, call = source._sig(decls), source._call(decls)
    blocks = n_red >= BLOCK_TERMS or n_out < FEW_OUTPUTS

    def body(name):
        common = (
            f"__host__ __device__ inline {acc_t} {name}_pre(long long o, long long r, {sig}) {{\n{pre_code}\n}}\n"
            f"__host__ __device__ inline void {name}_post(long long o, {acc_t} acc, {sig}) {{\n{post_code}\n}}\n"
        )
        serial = (
            f"  {acc_t} acc = {ident};\n"
            f"  for (long long r = 0; r < {n_red}LL; ++r) acc = {combine}()(acc, {name}_pre(o, r, {call}));\n"
            f"  {name}_post(o, acc, {call});\n"
        )
        if not blocks:
            return (
                source._reducers()
                + common
                + f"__host__ __device__ inline void {name}_thread(long long o, {sig}) {{\n{serial}}}\n"
            )
        return (
            source._reducers()
            + common
            + f"""extern "C" __global__ void {name}(long long n, {sig}) {{
  __shared__ {acc_t} shm[{kernels.BLOCK}];
  for (long long o = blockIdx.x; o < n; o += gridDim.x) {{
    {acc_t} acc = {ident};
    for (long long r = threadIdx.x; r < {n_red}LL; r += blockDim.x) acc = {combine}()(acc, {name}_pre(o, r, {call}));
    acc = ember_block_reduce(acc, shm, {combine}());
    if (threadIdx.x == 0) {name}_post(o, acc, {call});
  }}
}}
#ifdef EMBER_HOST_HARNESS
extern "C" void {name}_host(long long n, {sig}) {{
  for (long long o = 0; o < n; ++o) {{
{serial}  }}
}}
#endif
"""
        )

    return _finish(
        body,
        decls,
        group,
        "blocks" if blocks else "threads",
        n_out,
        {"strategy": "block-reduce" if blocks else "thread-reduce", "terms": n_red},
    )


def _post_ids(group) -> set:
    """Ids of the nodes after the reduction (those reading, directly or not, its result)."""
    post = {group.reduce.id}
    for v in group.nodes:
        if any(_is_var(a) and a.id in post for a in v.args):
            post.add(v.id)
    post.discard(group.reduce.id)
    return post


# ----------------------------------------------------------------------------- the callable
def layout(buf, xp_dtype_name=None) -> tuple:
    """(shape, strides in elements, dtype name) of an array (CuPy or NumPy)."""
    item = buf.dtype.itemsize
    return tuple(buf.shape), tuple(s // item for s in buf.strides), xp_dtype_name or buf.dtype.name


class FusedGroup:
    """What ``CupyBackend.compile(group)`` returns: called with the group's input buffers, it
    launches the group's kernel (rendered for their layouts on first sight) and returns the
    tuple of output buffers, new arrays from the memory pool.

    If a kernel fails to build (an NVRTC error this code was never meant to produce), the group
    warns once, counts the failure in :data:`FALLBACKS` and runs its nodes one by one with the
    backend's primitives from then on: a training run survives, and the GPU tests, which
    require ``FALLBACKS`` to stay empty, still see it."""

    def __init__(self, group, runtime, impls=None):
        self.group, self.runtime, self.impls = group, runtime, impls
        self.kernels: dict = {}
        self.outputs = [(tuple(v.shape), str(v.dtype)) for v in group.outputs]
        self.broken = None

    def kernel_for(self, bufs) -> kernels.Kernel:
        key = tuple((b.strides, b.dtype.str) for b in bufs)
        k = self.kernels.get(key)
        if k is None:
            k = self.kernels[key] = group_kernel(self.group, [layout(b) for b in bufs])
        return k

    def __call__(self, *bufs):
        if self.broken is not None:
            return self.run_nodes(bufs)
        k = self.kernel_for(bufs)
        xp = self.runtime.xp
        try:
            self.runtime.function(k)  # builds (or finds) the kernel
        except Exception as exc:  # noqa: BLE001 - see the class docstring
            if self.impls is None:
                raise
            import warnings

            self.broken = f"{type(exc).__name__}: {exc}"
            FALLBACKS.append((k.name, self.broken))
            warnings.warn(
                f"ember-cupy: fused kernel {k.name} failed to build ({self.broken}); running its "
                f"{len(self.group.nodes)} ops one by one. Please report this.",
                RuntimeWarning,
                stacklevel=2,
            )
            return self.run_nodes(bufs)
        outs = [xp.empty(shape, dtype=dtype) for shape, dtype in self.outputs]
        self.runtime.launch(k, k.meta["n"], *bufs, *outs)
        return tuple(outs)

    def run_nodes(self, bufs):
        """The group's nodes one by one with the backend's primitives (the fallback)."""
        env = {v.id: b for v, b in zip(self.group.inputs, bufs)}
        for v in self.group.nodes:
            env[v.id] = self.impls[v.op](*[env[a.id] if _is_var(a) else a for a in v.args], **v.params)
        return tuple(env[v.id] for v in self.group.outputs)


#: (kernel name, error) of every fused kernel that failed to build in this process.
FALLBACKS: list = []


def compile_group(group, runtime, impls=None):
    """A :class:`FusedGroup` for ``group``, or None when it cannot be fused (float16, an op
    without a CUDA C template, an empty tensor): ember.jit then runs its nodes one by one."""
    try:
        group_kernel(group, [(tuple(v.shape), contiguous_strides(v.shape), str(v.dtype)) for v in group.inputs])
    except Unsupported:
        return None
    return FusedGroup(group, runtime, impls)

"""Elementwise programs to numba source: the renderer table and the loop nests around it.

An elementwise *program* is a short SSA list of primitives over some inputs; one primitive
(``add``) is a program of one node, an ``ember.jit`` fusion group a longer one. Rendering it
gives the source of a module with one ``kernel`` over flat, C-contiguous buffers, a loop
under ``prange`` (launch.run gives it one thread or all). numba compiles it the first time
it is called and caches it on disk (cache.py).

Broadcasting never reaches the inner loop as arithmetic: the caller collapses the output
shape and each operand's element strides to at most :data:`MAX_RANK` dims (:func:`collapse`),
and the kernel is generated for the pattern of the *last* dim — each operand either walks it
(stride 1) or stays put (stride 0) — so the inner loop is a straight, vectorizable loop.
Outer dims take their strides as arguments.

Every node's value is converted to its dtype (``np.float32(...)``), so a chain rounds exactly
where NumPy would, op by op.

>>> p = Program(inputs=[("array", "float32"), ("scalar", "float32")],
...             nodes=[("t0", "mul", ("x0", "x1"), {}, "float32"),
...                    ("t1", "maximum", ("t0", 0.0), {}, "float32")], outputs=["t1"])
>>> "np.float32((x0 * x1))" in render(p, rank=1, inner=(True,))
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

MAX_RANK = 4  # collapsed rank above which the caller falls back to NumPy
CHUNK = 4096  # elements per parallel task when the whole loop is one flat dim

#: dtype name -> the numba/NumPy constructor that rounds a value to it.
CTOR = {
    "bool": "np.bool_",
    "uint8": "np.uint8",
    "uint32": "np.uint32",
    "int32": "np.int32",
    "int64": "np.int64",
    "float32": "np.float32",
    "float64": "np.float64",
}

#: primitive -> expression over its argument names {0}, {1}, {2}. The semantics are the
#: primitives' specs (IEEE-754 results under error_model="numpy"; NaN propagates through
#: maximum/minimum; where selects). float16 never reaches a kernel (NumPy keeps it).
EXPR = {
    "neg": "(-{0})",
    "exp": "math.exp({0})",
    "log": "math.log({0})",
    "sin": "math.sin({0})",
    "cos": "math.cos({0})",
    "tanh": "math.tanh({0})",
    "sqrt": "math.sqrt({0})",
    "reciprocal": "(1.0 / {0})",
    "abs": "abs({0})",
    "sign": "np.sign({0})",
    "floor": "np.floor({0})",
    "erf": "math.erf({0})",
    "logical_not": "(not {0})",
    "add": "({0} + {1})",
    "sub": "({0} - {1})",
    "mul": "({0} * {1})",
    "div": "({0} / {1})",
    "pow": "({0} ** {1})",
    "maximum": "({0} if ({0} >= {1} or {0} != {0}) else {1})",
    "minimum": "({0} if ({0} <= {1} or {0} != {0}) else {1})",
    "eq": "({0} == {1})",
    "ne": "({0} != {1})",
    "lt": "({0} < {1})",
    "le": "({0} <= {1})",
    "gt": "({0} > {1})",
    "ge": "({0} >= {1})",
    "logical_and": "({0} and {1})",
    "logical_or": "({0} or {1})",
    "logical_xor": "({0} != {1})",
    "where": "({1} if {0} else {2})",
    "cast": "{0}",
}
FLOAT_ONLY = frozenset(["exp", "log", "sin", "cos", "tanh", "sqrt", "reciprocal", "erf", "div", "pow", "floor"])
LOGICAL = frozenset(("logical_not", "logical_and", "logical_or", "logical_xor"))


@dataclass
class Program:
    """``inputs``: ("array", dtype) or ("scalar", dtype), named x0, x1, ... in order.
    ``nodes``: (name, op, args, params, dtype), args being names or Python scalars.
    ``outputs``: names of the values to store, each into its own output buffer."""

    inputs: list
    nodes: list
    outputs: list
    dtypes: dict = field(default_factory=dict)

    def __post_init__(self):
        for i, (_, dt) in enumerate(self.inputs):
            self.dtypes[f"x{i}"] = dt
        for name, _, _, _, dt in self.nodes:
            self.dtypes[name] = dt


def literal(value, dtype: str) -> str:
    """A Python scalar as source, rounded to ``dtype`` like NumPy's weak scalars."""
    if isinstance(value, bool) or dtype == "bool":
        return "True" if value else "False"
    if isinstance(value, float):
        if math.isnan(value):
            text = "math.nan"
        elif math.isinf(value):
            text = "math.inf" if value > 0 else "(-math.inf)"
        else:
            text = repr(value)
    else:
        text = repr(int(value))
    return f"{CTOR[dtype]}({text})"


def _node_expr(program: Program, op, args, dtype) -> str:
    # The dtype a scalar argument takes: that of the node's other array arguments (for
    # compare/where the node's own dtype is bool, not the operands').
    named = [program.dtypes[a] for a in args if isinstance(a, str)]
    operand_dt = (named[-1] if named else dtype) if op not in ("where",) else dtype
    if op == "where":
        operand_dt = next((program.dtypes[a] for a in args[1:] if isinstance(a, str)), dtype)
    parts = []
    for i, a in enumerate(args):
        if isinstance(a, str):
            parts.append(a)
        else:
            parts.append(literal(a, "bool" if (op == "where" and i == 0) or op in LOGICAL else operand_dt))
    expr = EXPR[op].format(*parts)
    if op == "cast" and dtype == "bool":
        expr = f"({parts[0]} != 0)"
    return f"{CTOR[dtype]}({expr})"


def body(program: Program) -> list:
    """The statements computing every node from the loaded inputs (one per node)."""
    return [f"{name} = {_node_expr(program, op, args, dtype)}" for name, op, args, params, dtype in program.nodes]


def render(program: Program, rank: int, inner: tuple, parallel: bool = True) -> str:
    """Module source with ``kernel`` for ``program`` over a ``rank``-dim index
    space; ``inner[k]`` says whether array input k walks the last dim (else it is broadcast
    along it). Arguments: the ``rank`` sizes, then per array input its ``rank - 1`` outer
    strides, then the inputs (arrays flat, scalars as values), then the flat outputs.
    ``parallel=False`` compiles ``prange`` as a plain loop (for work that never gets threads;
    numba compiles it several times faster)."""
    arrays = [i for i, (kind, _) in enumerate(program.inputs) if kind == "array"]
    sizes = [f"n{d}" for d in range(rank)]
    strides = [f"s{k}_{d}" for k in arrays for d in range(rank - 1)]
    ins = [f"a{i}" if kind == "array" else f"c{i}" for i, (kind, _) in enumerate(program.inputs)]
    outs = [f"o{j}" for j in range(len(program.outputs))]
    params = ", ".join(sizes + strides + ins + outs)

    setup = [f"x{i} = {CTOR[dt]}(c{i})" for i, (kind, dt) in enumerate(program.inputs) if kind == "scalar"]
    compute = body(program)
    last = f"n{rank - 1}"

    def kernel(name, loop):
        lines = [
            f"@numba.njit(cache=True, error_model='numpy', nogil=True, parallel={parallel})",
            f"def {name}({params}):",
        ]
        lines += [f"    {s}" for s in setup]
        if rank == 1:
            # Unsigned indices: with signed ones numba wraps negative indices around, and
            # that check keeps LLVM from vectorizing the loop (10x slower).
            lines += [
                f"    nchunk = (n0 + {CHUNK - 1}) // {CHUNK}",
                f"    for c in {loop}(nchunk):",
                f"        lo = uint64(c * {CHUNK})",
                f"        m = uint64(min({CHUNK}, n0 - c * {CHUNK}))",
            ]
            lines += [f"        x{k} = a{k}[0]" for k in arrays if not inner[arrays.index(k)]]
            lines.append("        for jj in range(m):")
            lines.append("            j = lo + jj")
            lines += [f"            x{k} = a{k}[j]" for k in arrays if inner[arrays.index(k)]]
            lines += [f"            {s}" for s in compute]
            lines += [f"            o{j}[j] = {o}" for j, o in enumerate(program.outputs)]
        else:
            outer = " * ".join(sizes[:-1])
            lines += [f"    m = uint64({last})", f"    for r in {loop}({outer}):"]
            rest = "r"
            index = []
            for d in range(rank - 2, -1, -1):
                if d == 0:
                    index.append(f"        i0 = {rest}")
                else:
                    index.append(f"        i{d} = {rest} % n{d}")
                    index.append(f"        q{d} = {rest} // n{d}")
                    rest = f"q{d}"
            lines += index
            for k in arrays:
                base = " + ".join(f"i{d} * s{k}_{d}" for d in range(rank - 1))
                lines.append(f"        b{k} = uint64({base})")
            lines.append(f"        bo = uint64(r * {last})")
            lines += [f"        x{k} = a{k}[b{k}]" for k in arrays if not inner[arrays.index(k)]]
            lines.append("        for j in range(m):")
            lines += [f"            x{k} = a{k}[b{k} + j]" for k in arrays if inner[arrays.index(k)]]
            lines += [f"            {s}" for s in compute]
            lines += [f"            o{j}[bo + j] = {o}" for j, o in enumerate(program.outputs)]
        return lines

    src = [
        "# Generated by ember_numba.render: an elementwise program.",
        "import math",
        "import numpy as np",
        "import numba",
        "from numba import prange, uint64",
        "",
    ]
    src += kernel("kernel", "prange") + [""]
    return "\n".join(src)


def collapse(shape: tuple, strides: list) -> tuple:
    """Merge adjacent dims that every operand walks contiguously, and drop size-1 dims.

    ``strides`` holds one tuple of element strides per operand (0 where it broadcasts); the
    output is C-contiguous over ``shape``. Returns (shape, strides), at least one dim.

    >>> collapse((2, 3, 4), [(12, 4, 1), (0, 1, 0)])
    ((2, 3, 4), [(12, 4, 1), (0, 1, 0)])
    >>> collapse((2, 3, 4), [(12, 4, 1), (0, 0, 1)])
    ((6, 4), [(4, 1), (0, 1)])
    """
    dims = [d for d, n in enumerate(shape) if n != 1]
    if not dims:
        return (1,), [(0,) for _ in strides]
    out_shape = [shape[dims[0]]]
    out_strides = [[s[dims[0]]] for s in strides]
    for d in dims[1:]:
        n = shape[d]
        if all(st[-1] == s[d] * n for st, s in zip(out_strides, strides)):
            out_shape[-1] *= n
            for st, s in zip(out_strides, strides):
                st[-1] = s[d]
        else:
            out_shape.append(n)
            for st, s in zip(out_strides, strides):
                st.append(s[d])
    return tuple(out_shape), [tuple(st) for st in out_strides]


def element_strides(shape: tuple, out_shape: tuple) -> tuple:
    """Element strides of a C-contiguous operand of ``shape`` broadcast to ``out_shape``.

    >>> element_strides((3, 1), (2, 3, 4))
    (0, 1, 0)
    """
    lead = len(out_shape) - len(shape)
    strides, step = [0] * len(out_shape), 1
    for d in range(len(shape) - 1, -1, -1):
        if shape[d] != 1:
            strides[lead + d] = step
        step *= shape[d]
    return tuple(strides)


# ----------------------------------------------------------------------------- reduce groups
INIT = {"sum": "0", "max": "-math.inf", "min": "math.inf"}
#: acc, v -> the accumulator after taking in v. max/min propagate NaN: a NaN ``v`` wins, and
#: nothing wins over a NaN ``acc`` (every comparison with it is false). Written as selects,
#: not branches, so the column layout's inner loop vectorizes.
COMBINE = {
    "sum": "{0} + {1}",
    "max": "({1} if ({1} > {0} or {1} != {1}) else {0})",
    "min": "({1} if ({1} < {0} or {1} != {1}) else {0})",
}
#: The same as statements: in the row layout's scalar loop a branch is taken rarely and is
#: faster than the select (~3x for max, measured).
BRANCH = {
    "sum": ["acc += v"],
    "max": ["if v > acc or v != v:", "    acc = v"],
    "min": ["if v < acc or v != v:", "    acc = v"],
}


def partials(A, B, AT, layout) -> int:
    """The elements of a reduce kernel's ``part``: partial results per chunk of AT rows (the
    column layout's accumulators too, so there even with one chunk).

    >>> partials(1000, 10, 250, "rows"), partials(1000, 10, 1000, "rows"), partials(1000, 10, 1000, "columns")
    (40, 0, 10)
    """
    na = -(-A // AT)
    return na * B if layout == "columns" or na > 1 else 0


def render_reduce(
    pre: Program,
    reduce_op: str,
    red_arg: str,
    post: Program,
    post_inputs: list,
    pre_outputs: list,
    post_outputs: list,
    inner: tuple,
    acc_dtype: str,
    layout: str = "rows",
    width: int = 0,
    parallel: bool = True,
) -> str:
    """Module source with ``kernel`` for an ember.jit reduce group: elementwise ``pre``
    over an (A, B, C) index space (C-ordered: element (a, b, c) at ``(a*B + b)*C + c``),
    ``reduce_op`` of value ``red_arg`` over A and C (the value is then named ``r``), and
    elementwise ``post`` over B.

    The loop order follows the layout, so that the innermost loop walks memory contiguously:

    * ``"rows"`` (C > 1: the reduced run is innermost, e.g. a row sum): a task per kept index
      b reduces its rows of C elements; ``inner[k]`` says whether input k walks C;
    * ``"columns"`` (C == 1: the kept run is innermost, e.g. a bias gradient): a task per tile
      of BT kept indices walks the rows a, updating BT accumulators with one straight loop;
      ``inner[k]`` says whether input k walks B (else it is broadcast along it). A nonzero
      ``width`` fixes the tile width (= B) in the source: a loop of a few elements with a
      known count is unrolled and vectorized (3x faster for 4 columns, measured).

    The A rows are cut into chunks of AT rows, each chunk's tasks reducing into partial
    results that a second loop combines in chunk order (a reduction with few kept values
    still gets several tasks); with one chunk each task finishes its own results.

    ``pre.inputs`` are the group inputs read in the pre stage (strides over A, B, C as
    arguments); ``post_inputs`` (indices into ``pre.inputs``, named like them) are read at b
    in the post stage (one stride each). ``pre_outputs`` are stored over (A, B, C),
    ``post_outputs`` (which may include ``r``) at b.
    Arguments: A, B, C, AT, BT, strides, inputs, pre outputs, post outputs, and ``part``: the
    partial results, ``acc_dtype`` scratch of :func:`partials` elements. The caller allocates
    it: allocating inside the kernel would make numba's loader import its array lowering rules
    (~40 ms) in a process that only loads cached kernels.
    ``parallel``: as for :func:`render` (the tasks, hence the sums, are the same either way).

    >>> p = Program(inputs=[("array", "float32")], nodes=[("t0", "abs", ("x0",), {}, "float32")],
    ...             outputs=[])
    >>> post = Program(inputs=p.inputs, nodes=[], outputs=[]); post.dtypes["r"] = "float32"
    >>> src = render_reduce(p, "sum", "t0", post, [], [], ["r"], (True,), "float64", "columns")
    >>> "part[po + j] = part[po + j] + v" in src
    True
    """
    assert layout in ("rows", "columns"), layout
    n = len(pre.inputs)
    strides = [f"s{k}_{d}" for k in range(n) for d in "abc"] + [f"p{k}" for k in post_inputs]
    ins = [f"a{k}" for k in range(n)]
    outs = [f"o{j}" for j in range(len(pre_outputs) + len(post_outputs))]
    params = ", ".join(["A", "B", "C", "AT", "BT"] + strides + ins + outs + ["part"])
    reads = {a for _, _, args, _, _ in pre.nodes for a in args if isinstance(a, str)}
    used_pre = sorted(int(a[1:]) for a in reads | {red_arg} | set(pre_outputs) if a.startswith("x"))
    combine = COMBINE[reduce_op]
    init = f"{CTOR[acc_dtype]}({INIT[reduce_op]})"

    def finish(pad):
        """Statements turning ``acc`` into the results at kept index ``b``."""
        lines = [f"r = {CTOR[post.dtypes['r']]}(acc)"]
        lines += [f"x{k} = a{k}[uint64(b * p{k})]" for k in post_inputs]
        lines += body(post)
        lines += [f"o{len(pre_outputs) + j}[b] = {o}" for j, o in enumerate(post_outputs)]
        return [pad + s for s in lines]

    def element(pad, index):
        """Statements for one element: compute, store the pre outputs at ``bo + index``."""
        lines = [f"x{k} = a{k}[b{k} + {index}]" for k in used_pre if inner[k]]
        lines += body(pre)
        lines += [f"o{j}[bo + {index}] = {o}" for j, o in enumerate(pre_outputs)]
        return [pad + s for s in lines]

    fm = ", fastmath={'reassoc'}" if reduce_op == "sum" else ""
    lines = [
        f"@numba.njit(cache=True, error_model='numpy', nogil=True, parallel={parallel}{fm})",
        f"def kernel({params}):",
        "    na = (A + AT - 1) // AT",
        "    nb = (B + BT - 1) // BT",
        "    for t in prange(na * nb):",
        "        ia = t // nb",
        "        ib = t - ia * nb",
        "        alo = ia * AT",
        "        ahi = min(A, alo + AT)",
        "        blo = ib * BT",
        "        bhi = min(B, blo + BT)",
    ]
    if layout == "rows":
        lines += [
            "        m = uint64(C)",
            "        for b in range(blo, bhi):",
            f"            acc = {init}",
            "            for a in range(alo, ahi):",
        ]
        lines += [f"                b{k} = uint64(a * s{k}_a + b * s{k}_b)" for k in used_pre]
        lines.append("                bo = uint64((a * B + b) * C)")
        lines += [f"                x{k} = a{k}[b{k}]" for k in used_pre if not inner[k]]
        lines.append("                for c in range(m):")
        lines += element(" " * 20, "c")
        lines += [f"                    v = {red_arg}"] + [" " * 20 + b for b in BRANCH[reduce_op]]
        lines.append("            if na == 1:")
        lines += finish(" " * 16)
        lines += ["            else:", "                part[ia * B + b] = acc"]
    else:
        lines += [
            f"        n = uint64({width or 'bhi - blo'})",
            "        po = uint64(ia * B + blo)",
            "        for j in range(n):",
            f"            part[po + j] = {init}",
            "        for a in range(alo, ahi):",
        ]
        lines += [f"            b{k} = uint64(a * s{k}_a + blo * s{k}_b)" for k in used_pre]
        lines.append("            bo = uint64(a * B + blo)")
        lines += [f"            x{k} = a{k}[b{k}]" for k in used_pre if not inner[k]]
        lines.append("            for j in range(n):")
        lines += element(" " * 16, "j")
        lines += [
            f"                v = {red_arg}",
            f"                part[po + j] = {combine.format('part[po + j]', 'v')}",
            "        if na == 1:",
            "            for b in range(blo, bhi):",
            "                acc = part[b]",
        ]
        lines += finish(" " * 16)
    lines += [
        "    if na > 1:",
        "        for b in prange(B):",
        "            acc = part[b]",
        "            for ia in range(1, na):",
        "                v = part[ia * B + b]",
        f"                acc = {combine.format('acc', 'v')}",
    ]
    lines += finish(" " * 12)
    src = [
        "# Generated by ember_numba.render: a reduce group of ember.jit.",
        "import math",
        "import numpy as np",
        "import numba",
        "from numba import prange, uint64",
        "",
    ]
    return "\n".join(src + lines + [""])

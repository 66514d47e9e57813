"""The WGSL shaders of the WebGPU backend: op templates as tables, kernels as small generators.

Every kernel reads its geometry from one ``geo`` buffer of u32 words (binding 0; ``meta`` is a
WGSL reserved word), so a shader depends only on the op, the storage types and the rank, never on
sizes: one compiled pipeline serves every shape of that rank. Tensors are strided views (an element offset and one stride
per dim, negative for flips), so permute, expand, slice, flip and pooling windows never copy.

Geometry layouts (all u32; strides and offsets are i32 bit patterns):

- elementwise: ``n, out_off, shape[R], out_strides[R], (off, strides[R]) per tensor input,
  scalar bits...``
- reduce: ``n_out, n_red, off, kept_shape[K], kept_strides[K], red_shape[J], red_strides[J]``
- matmul: ``M, N, K, off_a, off_b, a_m, a_k, b_k, b_n, batch_shape[B], a_batch[B], b_batch[B]``
- conv2d: ``see CONV_FIELDS``
- pad: ``n, off, shape[R], in_shape[R], in_strides[R], lo[R], value bits``
- take: ``n, inner, m, n_axis, off`` (the indices in their own i32 buffer)

>>> src = elementwise("add", ("f32", "f32"), "f32", rank=2)
>>> "fn main" in src and "x0 + x1" in src
True
"""

from __future__ import annotations

WORKGROUP = 256  # threads per workgroup of the 1-d kernels
CONV_FIELDS = (
    "n",
    "c",
    "h",
    "w",
    "o",
    "cg",
    "kh",
    "kw",
    "oh",
    "ow",
    "sh",
    "sw",
    "ph",
    "pw",
    "dh",
    "dw",
    "og",
    "x_off",
    "x_s0",
    "x_s1",
    "x_s2",
    "x_s3",
    "w_off",
    "w_s0",
    "w_s1",
    "w_s2",
    "w_s3",
)

# ----------------------------------------------------------------------------- op templates
# {0}, {1}, {2}: the operands (a loaded element or a scalar from geo); {T}: the storage type.
UNARY = {
    "neg": "(-{0})",
    "abs": "abs({0})",
    "sign": "sign({0})",
    "floor": "floor({0})",
    "exp": "exp({0})",
    "log": "log_ext({0})",
    "sin": "sin({0})",
    "cos": "cos({0})",
    # WGSL's tanh may be sinh/cosh, which is inf/inf for large |x|: clamp to the limit.
    "tanh": "select(tanh({0}), sign({0}), abs({0}) > 10.0)",
    "sqrt": "sqrt({0})",
    "reciprocal": "(1.0 / {0})",
    "copy": "{0}",
    "logical_not": "select(0u, 1u, {0} == {T}(0))",
}
BINARY = {
    "add": "({0} + {1})",
    "sub": "({0} - {1})",
    "mul": "({0} * {1})",
    "div": "({0} / {1})",
    "maximum": "max_nan({0}, {1})",
    "minimum": "min_nan({0}, {1})",
}
BOOL_BINARY = {"add": "({0} | {1})", "mul": "({0} & {1})", "maximum": "({0} | {1})", "minimum": "({0} & {1})"}
# WGSL lets a compiler assume floats are never NaN (SwiftShader folds `x != x` to false), so
# NaNs are found by their bits (is_nan, in _NAN_HELPERS): a comparison with NaN is false, `ne` true.
COMPARE = {
    n: f"select(0u, 1u, {{0}} {op} {{1}} && !is_nan({{0}}) && !is_nan({{1}}))"
    for n, op in (("eq", "=="), ("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">="))
}
COMPARE["ne"] = "select(0u, 1u, {0} != {1} || is_nan({0}) || is_nan({1}))"
LOGICAL = {"logical_and": "({0} & {1})", "logical_or": "({0} | {1})", "logical_xor": "({0} ^ {1})"}
WHERE = "select({2}, {1}, {0} != 0u)"
TEMPLATES = {**UNARY, **BINARY, **COMPARE, **LOGICAL, "where": WHERE}

# Which storage types each op runs on; anything else goes to the host (the python backend).
FLOAT_ONLY = {"exp", "log", "sin", "cos", "tanh", "sqrt", "reciprocal", "floor", "div"}
SIGNED_ONLY = {"neg", "abs", "sign"}


def cast_expr(src: str, dst: str, src_bool: bool, dst_bool: bool) -> str:
    """A WGSL expression converting ``{0}`` (storage type ``src``) to ``dst``."""
    if dst_bool:
        return f"select(0u, 1u, {{0}} != {src}(0))"
    if src == dst:
        return "{0}"
    return f"{dst}({{0}})"  # bool (u32 0/1) converts like an integer


_NAN_HELPERS = """
fn is_nan(a: {T}) -> bool {{ {is_nan} }}
fn max_nan(a: {T}, b: {T}) -> {T} {{ if (is_nan(a) || a > b) {{ return a; }} return b; }}
fn min_nan(a: {T}, b: {T}) -> {T} {{ if (is_nan(a) || a < b) {{ return a; }} return b; }}
"""


# SwiftShader's log(0) is -88.03, not -inf. Infinity and NaN come from bit patterns held in
# variables: WGSL refuses them as constants.
LOG_HELPER = """
fn log_ext(x: f32) -> f32 {
  var ninf = 0xff800000u;
  var nan = 0x7fc00000u;
  if (x == 0.0) { return bitcast<f32>(ninf); }
  if (x < 0.0) { return bitcast<f32>(nan); }
  return log(x);
}
"""


def nan_helpers(t: str) -> str:
    """is_nan, max_nan and min_nan for storage type ``t`` (integers have no NaN)."""
    test = "return (bitcast<u32>(a) & 0x7fffffffu) > 0x7f800000u;" if t == "f32" else "return false;"
    return _NAN_HELPERS.format(T=t, is_nan=test)


def _scalar(t: str, index: str) -> str:
    return f"geo[{index}]" if t == "u32" else f"bitcast<{t}>(geo[{index}])"


def _header(out_type: str, in_types) -> str:
    lines = [
        "@group(0) @binding(0) var<storage, read> geo: array<u32>;",
        f"@group(0) @binding(1) var<storage, read_write> res: array<{out_type}>;",
    ]
    lines += [f"@group(0) @binding({2 + k}) var<storage, read> src{k}: array<{t}>;" for k, t in enumerate(in_types)]
    return "\n".join(lines)


def _entry(body: str) -> str:
    return (
        f"@compute @workgroup_size({WORKGROUP})\n"
        "fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {\n"
        f"  let i = gid.x + gid.y * nwg.x * {WORKGROUP}u;\n" + body + "}\n"
    )


def elementwise(expr: str, operand_types, out_type: str, rank: int, scalar_slots=()) -> str:
    """A shader computing ``res[i] = expr(operands)`` over a strided output of ``rank`` dims.

    ``operand_types[k]`` is the storage type of operand k; operands listed in ``scalar_slots``
    are scalars read from geo (after the tensors), the others tensors bound in order.
    ``expr`` is a template of UNARY/BINARY/... or a bare op name from those tables.
    """
    expr = TEMPLATES.get(expr, expr)
    tensors = [k for k in range(len(operand_types)) if k not in scalar_slots]
    R = rank
    body = ["  if (i >= geo[0]) { return; }", "  var rem = i;", "  var o = bitcast<i32>(geo[1]);"]
    body += [f"  var p{j} = bitcast<i32>(geo[{2 + 2 * R + j * (R + 1)}]);" for j in range(len(tensors))]
    if R:
        body.append(f"  for (var d = {R - 1}; d >= 0; d = d - 1) {{")
        body.append("    let size = geo[2 + d];")
        body.append("    let idx = i32(rem % size);")
        body.append("    rem = rem / size;")
        body.append(f"    o = o + idx * bitcast<i32>(geo[{2 + R} + d]);")
        body += [
            f"    p{j} = p{j} + idx * bitcast<i32>(geo[{3 + 2 * R + j * (R + 1)} + d]);" for j in range(len(tensors))
        ]
        body.append("  }")
    names, scalar_base = [], 2 + 2 * R + len(tensors) * (R + 1)
    for k, t in enumerate(operand_types):
        if k in scalar_slots:
            names.append(_scalar(t, str(scalar_base + list(scalar_slots).index(k))))
        else:
            j = tensors.index(k)
            body.append(f"  let x{j} = src{j}[p{j}];")
            names.append(f"x{j}")
    T = operand_types[-1] if operand_types else out_type
    body.append(f"  res[o] = {expr.format(*names, T=T)};")
    helpers = (nan_helpers(T) if "_nan(" in expr else "") + (LOG_HELPER if "log_ext(" in expr else "")
    return _header(out_type, [operand_types[k] for k in tensors]) + helpers + "\n" + _entry("\n".join(body) + "\n")


def pad(t: str, rank: int) -> str:
    """``res`` (contiguous) = the input placed at offset ``lo``, ``value`` elsewhere."""
    R = rank
    body = [
        "  if (i >= geo[0]) { return; }",
        "  var rem = i;",
        "  var p = bitcast<i32>(geo[1]);",
        "  var inside = true;",
    ]
    if R:
        body += [
            f"  for (var d = {R - 1}; d >= 0; d = d - 1) {{",
            "    let size = geo[2 + d];",
            f"    let idx = i32(rem % size) - bitcast<i32>(geo[{2 + 3 * R} + d]);",
            "    rem = rem / size;",
            f"    if (idx < 0 || idx >= i32(geo[{2 + R} + d])) {{ inside = false; }}",
            f"    p = p + idx * bitcast<i32>(geo[{2 + 2 * R} + d]);",
            "  }",
        ]
    body += [
        "  if (inside) {",
        "    res[i] = src0[p];",
        "  } else {",
        f"    res[i] = {_scalar(t, str(2 + 4 * R))};",
        "  }",
    ]
    return _header(t, [t]) + "\n" + _entry("\n".join(body) + "\n")


# ----------------------------------------------------------------------------- reductions
REDUCE_INIT = {"sum": "{T}(0)", "max": "first", "min": "first", "argmax": "first"}
REDUCE_STEP = {
    "sum": "acc = acc + v;",
    "max": "acc = max_nan(acc, v);",
    "min": "acc = min_nan(acc, v);",
    # the first maximum wins; the first NaN beats everything (NumPy's argmax)
    "argmax": "if (!is_nan(acc) && (v > acc || is_nan(v))) { acc = v; best = j; }",
}


def reduce(op: str, t: str, kept: int, reduced: int) -> str:
    """One thread per output element, looping over the ``reduced`` trailing dims of a view."""
    K, J = kept, reduced
    kept_shape, kept_str = 3, 3 + K
    red_shape, red_str = 3 + 2 * K, 3 + 2 * K + J

    def offset(var, count, shape_at, stride_at, target):
        if not count:
            return []
        return [
            f"  var rem_{var} = {var};",
            f"  for (var d = {count - 1}; d >= 0; d = d - 1) {{",
            f"    let size = geo[{shape_at} + d];",
            f"    {target} = {target} + i32(rem_{var} % size) * bitcast<i32>(geo[{stride_at} + d]);",
            f"    rem_{var} = rem_{var} / size;",
            "  }",
        ]

    body = ["  if (i >= geo[0]) { return; }", "  var base = bitcast<i32>(geo[2]);"]
    body += offset("i", K, kept_shape, kept_str, "base")
    load = (
        ["    var p = base;"]
        + ["  " + line for line in offset("j", J, red_shape, red_str, "p")]
        + ["    let v = src0[p];"]
    )
    if REDUCE_INIT[op] == "first":
        body += ["  var acc = src0[base];", "  var best = 0u;"]
    else:
        body += [f"  var acc = {REDUCE_INIT[op].format(T=t)};"]
    body += ["  for (var j = 0u; j < geo[1]; j = j + 1u) {"] + load + [f"    {REDUCE_STEP[op]}", "  }"]
    body.append("  res[i] = i32(best);" if op == "argmax" else "  res[i] = acc;")
    out_type = "i32" if op == "argmax" else t
    helpers = nan_helpers(t) if op in ("max", "min", "argmax") else ""
    return _header(out_type, [t]) + helpers + "\n" + _entry("\n".join(body) + "\n")


# ----------------------------------------------------------------------------- gather
def take(t: str) -> str:
    """NumPy's take along one axis of a contiguous input: ``res[o, j, k] = src0[o, idx[j], k]``
    (geo: ``n_out, inner, m (indices), n (axis length), offset``; src1: the indices as i32, in range)."""
    body = [
        "  if (i >= geo[0]) { return; }",
        "  let inner = geo[1];",
        "  let k = i % inner;",
        "  let j = (i / inner) % geo[2];",
        "  let o = i / (inner * geo[2]);",
        "  res[i] = src0[geo[4] + (o * geo[3] + u32(src1[j])) * inner + k];",
    ]
    return _header(t, [t, "i32"]) + "\n" + _entry("\n".join(body) + "\n")


# ----------------------------------------------------------------------------- matmul
MATMUL_LAYOUTS = ("general", "kk4", "kn4")


def matmul(t: str, batch_rank: int, layout: str = "general") -> str:
    """Batched matmul of strided views, one shader per layout (grid: (threads, 1, batch)):

    - ``general``: any strides, one output per thread.
    - ``kk4``: A's rows and B's columns contiguous along K (``x @ w.T``, how Linear multiplies),
      K a multiple of 4: vec4 dot products, four outputs of a row per thread (A read once).
    - ``kn4``: B's rows contiguous along N, N a multiple of 4: one vec4 of outputs per thread.

    Register-blocked dot products rather than workgroup tiles: the tiles' barriers are what a
    CPU-emulated adapter (SwiftShader) handles worst, and at these sizes a GPU does not miss them.
    """
    B = batch_rank
    v = f"vec4<{t}>"
    batch = ["  var oa = bitcast<i32>(geo[3]);", "  var ob = bitcast<i32>(geo[4]);"]
    if B:
        batch += [
            "  var rem = gid.z;",
            f"  for (var d = {B - 1}; d >= 0; d = d - 1) {{",
            "    let size = geo[9 + d];",
            "    let idx = i32(rem % size);",
            "    rem = rem / size;",
            f"    oa = oa + idx * bitcast<i32>(geo[{9 + B} + d]);",
            f"    ob = ob + idx * bitcast<i32>(geo[{9 + 2 * B} + d]);",
            "  }",
        ]
    a_type, b_type, res_type = (v, v, t) if layout == "kk4" else (t, v, v) if layout == "kn4" else (t, t, t)
    head = f"""@group(0) @binding(0) var<storage, read> geo: array<u32>;
@group(0) @binding(1) var<storage, read_write> res: array<{res_type}>;
@group(0) @binding(2) var<storage, read> a: array<{a_type}>;
@group(0) @binding(3) var<storage, read> b: array<{b_type}>;
@compute @workgroup_size({WORKGROUP})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {{
  let M = geo[0]; let N = geo[1]; let K = geo[2];
  let am = bitcast<i32>(geo[5]); let ak = bitcast<i32>(geo[6]);
  let bk = bitcast<i32>(geo[7]); let bn = bitcast<i32>(geo[8]);
{chr(10).join(batch)}
  let out0 = gid.z * M * N;
"""
    if layout == "general":
        body = f"""  let i = gid.x;
  if (i >= M * N) {{ return; }}
  let row = i / N; let col = i % N;
  var pa = oa + i32(row) * am; var pb = ob + i32(col) * bn;
  var acc = {t}(0);
  for (var k = 0u; k < K; k = k + 1u) {{
    acc = acc + a[pa] * b[pb];
    pa = pa + ak; pb = pb + bk;
  }}
  res[out0 + i] = acc;
}}
"""
    elif layout == "kk4":
        # offsets and strides arrive in elements; all are multiples of 4 here, so /4 indexes vec4s
        sums = []
        for j in range(4):
            sums.append(
                f"  if (c0 + {j}u < N) {{ res[out0 + row * N + c0 + {j}u] = s{j}.x + s{j}.y + s{j}.z + s{j}.w; }}"
            )
        body = f"""  let n4 = (N + 3u) / 4u;
  let i = gid.x;
  if (i >= M * n4) {{ return; }}
  let row = i / n4; let c0 = (i % n4) * 4u;
  let pa = (oa + i32(row) * am) / 4;
  let last = i32(N) - 1;
  let p0 = (ob + i32(c0) * bn) / 4;
  let p1 = (ob + min(i32(c0) + 1, last) * bn) / 4;
  let p2 = (ob + min(i32(c0) + 2, last) * bn) / 4;
  let p3 = (ob + min(i32(c0) + 3, last) * bn) / 4;
  var s0 = {v}(0); var s1 = {v}(0); var s2 = {v}(0); var s3 = {v}(0);
  for (var k = 0; k < i32(K / 4u); k = k + 1) {{
    let av = a[pa + k];
    s0 = s0 + av * b[p0 + k];
    s1 = s1 + av * b[p1 + k];
    s2 = s2 + av * b[p2 + k];
    s3 = s3 + av * b[p3 + k];
  }}
{chr(10).join(sums)}
}}
"""
    else:
        body = f"""  let n4 = N / 4u;
  let i = gid.x;
  if (i >= M * n4) {{ return; }}
  let row = i / n4; let c4 = i32(i % n4);
  var pa = oa + i32(row) * am;
  var pb = ob / 4 + c4;
  let bk4 = bk / 4;
  var acc = {v}(0);
  for (var k = 0u; k < K; k = k + 1u) {{
    acc = acc + a[pa] * b[pb];
    pa = pa + ak; pb = pb + bk4;
  }}
  res[(out0 + row * N) / 4u + u32(c4)] = acc;
}}
"""
    return head + body


# ----------------------------------------------------------------------------- conv2d
def conv2d(t: str) -> str:
    """Direct convolution: one thread per output (n, o, oy, ox), zero padding by bounds checks
    (no padded copy), groups, stride and dilation from geo; x and w are strided views."""
    fields = "\n".join(
        f"  let {name} = i32(geo[{k}]);"
        if not name.endswith("off") and "_s" not in name
        else f"  let {name} = bitcast<i32>(geo[{k}]);"
        for k, name in enumerate(CONV_FIELDS)
    )
    n_out = "u32(n * o * oh * ow)"
    return f"""@group(0) @binding(0) var<storage, read> geo: array<u32>;
@group(0) @binding(1) var<storage, read_write> res: array<{t}>;
@group(0) @binding(2) var<storage, read> x: array<{t}>;
@group(0) @binding(3) var<storage, read> wt: array<{t}>;
@compute @workgroup_size({WORKGROUP})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
  let i = gid.x + gid.y * nwg.x * {WORKGROUP}u;
{fields}
  if (i >= {n_out}) {{ return; }}
  let ox = i32(i % u32(ow));
  let oy = i32((i / u32(ow)) % u32(oh));
  let oc = i32((i / u32(ow * oh)) % u32(o));
  let b = i32(i / u32(ow * oh * o));
  let g = oc / og;
  var acc = {t}(0);
  for (var c = 0; c < cg; c = c + 1) {{
    let xc = x_off + b * x_s0 + (g * cg + c) * x_s1;
    let wc = w_off + oc * w_s0 + c * w_s1;
    for (var ky = 0; ky < kh; ky = ky + 1) {{
      let iy = oy * sh - ph + ky * dh;
      if (iy < 0 || iy >= h) {{ continue; }}
      for (var kx = 0; kx < kw; kx = kx + 1) {{
        let ix = ox * sw - pw + kx * dw;
        if (ix < 0 || ix >= w) {{ continue; }}
        acc = acc + x[xc + iy * x_s2 + ix * x_s3] * wt[wc + ky * w_s2 + kx * w_s3];
      }}
    }}
  }}
  res[i] = acc;
}}
"""

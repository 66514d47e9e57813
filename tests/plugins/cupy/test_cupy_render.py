"""render.py: C types, exact literals, and the elementwise templates against NumPy (one fused
kernel per dtype holding every op, run on the host harness)."""

import math
import struct

import numpy as np
import pytest

import ember
from ember.jit.graph import Var
from ember.jit.passes import Group
from ember_cupy import fusion, render
from ember_cupy.render import Unsupported, literal

NUMPY = ember.get_backend("numpy")


@pytest.mark.parametrize("value", [0.1, 1 / 3, -2.5e-30, 1e30, 3.4e38, 5e-45, -0.0, 123456789.0])
def test_float32_literals_are_exact(value):
    text = literal(value, "float32")
    assert text.startswith("(float)") and text.endswith("f")
    want = struct.unpack("<f", struct.pack("<f", value))[0]
    assert float.fromhex(text[len("(float)") : -1]) == want
    assert math.copysign(1, float.fromhex(text[len("(float)") : -1])) == math.copysign(1, want)


@pytest.mark.parametrize("value", [0.1, 1 / 3, 2.0**-1074, 1.7976931348623157e308, -0.0])
def test_float64_literals_are_exact(value):
    text = literal(value, "float64")
    assert float.fromhex(text[len("(double)") :]) == value


def test_specials_and_integer_wrapping():
    assert literal(math.inf, "float32") == "ember_f32_bits(0x7f800000u)"
    assert literal(-math.inf, "float64") == "ember_f64_bits(0xfff0000000000000ULL)"
    assert "0x7fc00000" in literal(math.nan, "float32")
    assert literal(-1, "uint8") == "((unsigned char)255LL)"  # NumPy's wrap
    assert literal(2**31, "int32") == "((int)-2147483648LL)"
    assert literal(2.9, "int64") == "((long long)2LL)"  # truncation
    assert literal(True, "bool") == "true"
    with pytest.raises(Unsupported):
        literal(1.0, "float16")
    with pytest.raises(Unsupported):
        render.ctype("float16")


# ----------------------------------------------------------------------------- the op table
UNARY_FLOAT = ["neg", "exp", "log", "sin", "cos", "tanh", "sqrt", "reciprocal", "abs", "sign", "floor", "erf"]
BINARY_FLOAT = ["add", "sub", "mul", "div", "pow", "maximum", "minimum"]
BINARY_INT = ["add", "sub", "mul", "maximum", "minimum"]
COMPARE = ["eq", "ne", "lt", "le", "gt", "ge"]


def _values(dtype):
    if dtype in ("float32", "float64"):
        x = np.array([0.0, -0.0, 1.5, -2.25, 0.3, 7.0, -1e-3, 80.0, np.inf, -np.inf, np.nan, 2.0], dtype)
        y = np.array([2.0, 0.0, -1.5, 3.0, np.nan, 0.5, 4.0, -0.25, 1.0, np.inf, 1.0, -3.0], dtype)
        return x, y
    info = np.iinfo(dtype)
    x = np.array([0, 1, 5, info.max, info.min, 7, 3, 100 % (info.max + 1), 2, 9, 11, 13], dtype)
    y = np.array([3, info.max, 5, 1, 2, 0, 3, 6, info.min, 9, 1, 4], dtype)
    return x, y


def _table(dtype):
    """(op, params, arg names) rows for ``dtype``."""
    rows = []
    if dtype.startswith("float"):
        rows += [(op, {}, ("x",)) for op in UNARY_FLOAT]
        rows += [(op, {}, ("x", "y")) for op in BINARY_FLOAT]
        rows += [("add", {}, ("x", 0.1)), ("mul", {}, (-2.5, "y")), ("pow", {}, ("x", 2.0))]
    else:
        rows += [(op, {}, ("x",)) for op in ("neg", "abs", "sign")]
        rows += [(op, {}, ("x", "y")) for op in BINARY_INT]
        rows += [("add", {}, ("x", 3)), ("sub", {}, (1, "y"))]
    rows += [(op, {}, ("x", "y")) for op in COMPARE]
    rows += [("lt", {}, ("x", 2)), ("ge", {}, ("x", 0.5))]
    rows += [
        ("cast", {"dtype": ember.dtypes.get(t)}, ("x",))
        for t in ("bool", "int32", "int64", "float32", "float64")
        if t != dtype
    ]
    return rows


def _run_table(host, dtype):
    x, y = _values(dtype)
    if dtype.startswith("float"):  # casts to int: only values every C compiler agrees on
        xc = np.where(np.isfinite(x), x, 1.0).astype(dtype)
    else:
        xc = x
    n = x.shape
    vx = Var(0, "input", (), {"index": 0}, n, ember.dtypes.get(dtype))
    vy = Var(1, "input", (), {"index": 1}, n, ember.dtypes.get(dtype))
    vxc = Var(2, "input", (), {"index": 2}, n, ember.dtypes.get(dtype))
    env = {"x": vx, "y": vy}
    nodes, refs = [], []
    for op, params, args in _table(dtype):
        src = {"x": vxc, "y": vy} if op == "cast" else env
        vargs = [src[a] if isinstance(a, str) else a for a in args]
        avals = [(a.shape, a.dtype) if isinstance(a, Var) else a for a in vargs]
        shape, out_dtype = ember.primitives.abstract_eval(op, *avals, **params)
        v = Var(10 + len(nodes), op, vargs, params, shape, out_dtype)
        nodes.append(v)
        data = {"x": xc if op == "cast" else x, "y": y}
        bufs = [data[a] if isinstance(a, str) else a for a in args]
        with np.errstate(all="ignore"):
            refs.append(NUMPY.impls[op](*bufs, **params))
    g = Group("elementwise", nodes, n)
    g.inputs, g.outputs = [vx, vy, vxc], nodes
    outs = fusion.FusedGroup(g, host.rt)(x, y, xc)
    return list(zip(_table(dtype), outs, refs))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "uint8", "uint32"])
def test_templates_match_numpy(host, dtype):
    for (op, params, args), got, want in _run_table(host, dtype):
        label = f"{op}{args} {params} on {dtype}"
        assert got.dtype == want.dtype, label
        if got.dtype.kind == "f" and op not in (
            "cast",
            "neg",
            "abs",
            "add",
            "sub",
            "mul",
            "maximum",
            "minimum",
            "floor",
            "sign",
        ):
            tol = {"float32": 4e-7, "float64": 4e-15}[str(got.dtype)]
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol if op == "erf" else 0, err_msg=label)
        else:
            np.testing.assert_array_equal(got, want, err_msg=label)


def test_logical_and_where_on_bool(host):
    a = np.array([True, False, True, False])
    b = np.array([True, True, False, False])
    va = Var(0, "input", (), {"index": 0}, (4,), ember.bool_)
    vb = Var(1, "input", (), {"index": 1}, (4,), ember.bool_)
    ops = [
        ("logical_and", (va, vb)),
        ("logical_or", (va, vb)),
        ("logical_xor", (va, vb)),
        ("logical_not", (va,)),
        ("where", (va, 1.5, -2.0)),
        ("cast", (va,)),
    ]
    nodes = []
    for i, (op, args) in enumerate(ops):
        params = {"dtype": ember.float32} if op == "cast" else {}
        dt = ember.float32 if op in ("where", "cast") else ember.bool_
        nodes.append(Var(10 + i, op, args, params, (4,), dt))
    g = Group("elementwise", nodes, (4,))
    g.inputs, g.outputs = [va, vb], nodes
    got = fusion.FusedGroup(g, host.rt)(a, b)
    want = [a & b, a | b, a ^ b, ~a, np.where(a, np.float32(1.5), np.float32(-2.0)), a.astype(np.float32)]
    for (op, _), gv, w in zip(ops, got, want):
        np.testing.assert_array_equal(gv, w, err_msg=op)

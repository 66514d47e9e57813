"""CUDA C, as tables: ember dtypes to C types, Python numbers to exact literals, and one C
expression template per elementwise primitive.

Everything here is string work, so it runs (and is tested) without a device. The templates
compute what the NumPy reference computes: NaN-propagating ``maximum``/``minimum``, C
truncation for float-to-int casts (NumPy's on x86-64 for in-range values), IEEE results for
``log(0)`` and ``1/0``. A primitive or dtype without a template raises :class:`Unsupported`;
the fusion code then leaves that group to run op by op.

>>> expr("maximum", "float32", ["a", "b"])
'(((a) > (b) || (a) != (a)) ? (a) : (b))'
>>> literal(0.1, "float32")
'(float)0x1.99999a0000000p-4f'
"""

from __future__ import annotations

import math
import struct


class Unsupported(Exception):
    """This op/dtype has no CUDA C template; run it op by op instead."""


#: ember dtype name -> C type. float16 has none: it needs cuda_fp16.h, which NVRTC may not
#: find on every install, so float16 groups run op by op (CuPy's own kernels) instead.
CTYPE = {
    "bool": "bool",
    "uint8": "unsigned char",
    "int8": "signed char",
    "uint16": "unsigned short",
    "int16": "short",
    "uint32": "unsigned int",
    "int32": "int",
    "int64": "long long",
    "uint64": "unsigned long long",
    "float32": "float",
    "float64": "double",
}
FLOATS = ("float32", "float64")
#: the integers and their widths in bits; C computes the narrower ones in int, so their results
#: are cast back (wrapping as NumPy does)
BITS = {"uint8": 8, "int8": 8, "uint16": 16, "int16": 16, "uint32": 32, "int32": 32, "int64": 64, "uint64": 64}
INTS = tuple(BITS)
NARROW = ("uint8", "int8", "uint16", "int16")
#: The type a float32 sum accumulates in: double costs nothing on a memory-bound reduction
#: and keeps a 100k-term sum as accurate as NumPy's pairwise one.
ACCUMULATOR = {
    "float32": "double",
    "float64": "double",
    "int32": "int",
    "int64": "long long",
    "uint8": "unsigned char",
    "int8": "signed char",
    "uint16": "unsigned short",
    "int16": "short",
    "uint32": "unsigned int",
    "uint64": "unsigned long long",
}


def ctype(dtype) -> str:
    name = str(dtype)
    if name not in CTYPE:
        raise Unsupported(f"no CUDA C type for dtype {name}")
    return CTYPE[name]


#: Bit patterns of the IEEE specials (C has no portable inf/nan literal that both NVRTC and the
#: host compiler accept without headers).
PRELUDE = r"""
__host__ __device__ inline float ember_f32_bits(unsigned int b) { union { unsigned int u; float f; } v; v.u = b; return v.f; }
__host__ __device__ inline double ember_f64_bits(unsigned long long b) { union { unsigned long long u; double f; } v; v.u = b; return v.f; }
"""


def literal(value, dtype) -> str:
    """An exact C literal of Python number ``value`` converted to ``dtype`` (NEP 50: a Python
    scalar takes the array's dtype). Floats are written in hex, so nothing is lost in print.

    >>> literal(float("inf"), "float64"), literal(3, "int64"), literal(True, "bool")
    ('ember_f64_bits(0x7ff0000000000000ULL)', '((long long)3LL)', 'true')
    >>> literal(-1, "uint64"), literal(200, "int8")
    ('((unsigned long long)18446744073709551615ULL)', '((signed char)-56LL)')
    """
    name = str(dtype)
    if name == "bool":
        return "true" if value else "false"
    if name in INTS:
        if isinstance(value, float):
            if not math.isfinite(value):
                raise Unsupported(f"cannot write {value} as {name}")
            value = int(value)  # truncation toward zero, like a C cast
        bits = BITS[name]
        value = int(value) % (1 << bits)
        if name.startswith("int") and value >= 1 << (bits - 1):
            value -= 1 << bits  # wrap like NumPy's conversion
        if value == -(1 << 63):
            return "((long long)(-9223372036854775807LL - 1))"
        return f"(({CTYPE[name]}){value}{'ULL' if name == 'uint64' else 'LL'})"
    if name == "float32":
        (bits,) = struct.unpack("<I", struct.pack("<f", float(value)))
        f = struct.unpack("<f", struct.pack("<I", bits))[0]
        return f"ember_f32_bits(0x{bits:08x}u)" if not math.isfinite(f) else f"(float){f.hex()}f"
    if name == "float64":
        value = float(value)
        if not math.isfinite(value):
            (bits,) = struct.unpack("<Q", struct.pack("<d", value))
            return f"ember_f64_bits(0x{bits:016x}ULL)"
        return f"(double){value.hex()}"
    raise Unsupported(f"no CUDA C literal for dtype {name}")


# ----------------------------------------------------------------------------- op templates
def _f(fn32, fn64):
    return {"float32": fn32, "float64": fn64}


#: unary float functions: name -> (float32 call, float64 call)
FLOAT_UNARY = {
    "exp": _f("expf", "exp"),
    "log": _f("logf", "log"),
    "sin": _f("sinf", "sin"),
    "cos": _f("cosf", "cos"),
    "tanh": _f("tanhf", "tanh"),
    "sqrt": _f("sqrtf", "sqrt"),
    "erf": _f("erff", "erf"),
    "floor": _f("floorf", "floor"),
    "abs": _f("fabsf", "fabs"),
}


def expr(op: str, dtype, args: list, arg_dtypes=None, params=None) -> str:
    """The C expression of elementwise primitive ``op`` whose result has ``dtype``, over argument
    expressions ``args`` (already of the operands' C types; ``arg_dtypes`` names them).

    >>> expr("where", "float32", ["c", "x", "y"])
    '((c) ? (x) : (y))'
    >>> expr("cast", "int32", ["x"], ["float32"], {"dtype": "int32"})
    '((int)(x))'
    """
    name = str(dtype)
    a = [f"({x})" for x in args]
    src = str((arg_dtypes or [name])[0])
    if op in FLOAT_UNARY:
        if name in FLOATS:
            return f"{FLOAT_UNARY[op][name]}{a[0]}"
        if op == "abs" and name in INTS:
            return f"({a[0]} < 0 ? ({ctype(name)})-{a[0]} : {a[0]})" if name[0] == "i" else a[0]
        if op == "floor" and name in INTS:
            return a[0]
        raise Unsupported(f"{op} of {name}")
    if op == "neg":
        if name in FLOATS or name in ("int32", "int64"):
            return f"(-{a[0]})"
        if name in INTS:
            return f"(({ctype(name)})({'0u - ' if name[0] == 'u' else '-'}{a[0]}))"
        raise Unsupported(f"neg of {name}")
    if op == "reciprocal":
        if name in FLOATS:
            return f"({literal(1, name)} / {a[0]})"
        raise Unsupported(f"reciprocal of {name}")
    if op == "sign":
        if name in FLOATS:
            one, zero = literal(1, name), literal(0, name)
            return f"({a[0]} != {a[0]} ? {a[0]} : ({a[0]} > {zero} ? {one} : ({a[0]} < {zero} ? -{one} : {zero})))"
        if name in INTS:
            t = ctype(name)
            return f"(({t})(({a[0]} > 0) - ({a[0]} < 0)))" if name[0] == "i" else f"(({t})({a[0]} > 0))"
        raise Unsupported(f"sign of {name}")
    if op == "logical_not":
        return f"(!{a[0]})"
    if op in ("add", "sub", "mul"):
        if name not in FLOATS and name not in INTS:
            raise Unsupported(f"{op} of {name}")
        sym = {"add": "+", "sub": "-", "mul": "*"}[op]
        if op == "mul" and name == "uint16":  # in int, 65535 * 65535 would overflow (undefined)
            return f"(({ctype(name)})((unsigned int){a[0]} * (unsigned int){a[1]}))"
        out = f"({a[0]} {sym} {a[1]})"
        return f"(({ctype(name)}){out})" if name in NARROW else out
    if op == "div":
        if name not in FLOATS:
            raise Unsupported(f"div of {name}")
        return f"({a[0]} / {a[1]})"
    if op == "pow":
        if name not in FLOATS:
            raise Unsupported(f"pow of {name}")
        return f"{'powf' if name == 'float32' else 'pow'}({args[0]}, {args[1]})"
    if op == "maximum":
        return f"(({a[0]} > {a[1]} || {a[0]} != {a[0]}) ? {a[0]} : {a[1]})"
    if op == "minimum":
        return f"(({a[0]} < {a[1]} || {a[0]} != {a[0]}) ? {a[0]} : {a[1]})"
    if op in ("eq", "ne", "lt", "le", "gt", "ge"):
        sym = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}[op]
        return f"({a[0]} {sym} {a[1]})"
    if op == "logical_and":
        return f"({a[0]} && {a[1]})"
    if op == "logical_or":
        return f"({a[0]} || {a[1]})"
    if op == "logical_xor":
        return f"((bool){a[0]} != (bool){a[1]})"
    if op == "where":
        return f"({a[0]} ? {a[1]} : {a[2]})"
    if op == "cast":
        if name == "bool":
            return f"({a[0]} != 0)"
        if src in FLOATS and name == "uint64":  # past 2**63 directly, negative ones wrap as below
            return f"({a[0]} < 0 ? (unsigned long long)(long long){a[0]} : (unsigned long long){a[0]})"
        if src in FLOATS and name in INTS and name.startswith("uint"):
            # NumPy on x86-64 converts through int64 and wraps (-1.0 -> 255 for uint8).
            return f"(({ctype(name)})(long long){a[0]})"
        return f"(({ctype(name)}){a[0]})"
    raise Unsupported(f"no CUDA C template for primitive {op!r}")


# ----------------------------------------------------------------------------- reductions
def reduce_identity(op: str, dtype) -> str:
    """The value a partial reduction starts from."""
    name = str(dtype)
    if op == "sum":
        return literal(0, name) if name not in ACCUMULATOR or name in INTS else "0.0"
    lowest = {
        "float32": "ember_f32_bits(0xff800000u)",
        "float64": "ember_f64_bits(0xfff0000000000000ULL)",
        "int8": "(-128)",
        "int16": "(-32768)",
        "int32": "(-2147483647 - 1)",
        "int64": "(-9223372036854775807LL - 1)",
        "uint8": "0",
        "uint16": "0",
        "uint32": "0u",
        "uint64": "0ull",
    }
    highest = {
        "float32": "ember_f32_bits(0x7f800000u)",
        "float64": "ember_f64_bits(0x7ff0000000000000ULL)",
        "int8": "127",
        "int16": "32767",
        "int32": "2147483647",
        "int64": "9223372036854775807LL",
        "uint8": "255",
        "uint16": "65535",
        "uint32": "4294967295u",
        "uint64": "18446744073709551615ull",
    }
    table = lowest if op == "max" else highest
    if name not in table:
        raise Unsupported(f"{op} of {name}")
    return table[name]


def reduce_combine(op: str, acc: str, x: str) -> str:
    """The C expression combining accumulator ``acc`` with value ``x`` (NaN propagates)."""
    if op == "sum":
        return f"({acc} + {x})"
    if op == "max":
        return f"(({acc} > {x} || {acc} != {acc}) ? {acc} : {x})"
    if op == "min":
        return f"(({acc} < {x} || {acc} != {acc}) ? {acc} : {x})"
    raise Unsupported(f"reduction {op!r}")


def accumulator(op: str, dtype) -> str:
    name = str(dtype)
    if name not in ACCUMULATOR:
        raise Unsupported(f"{op} of {name}")
    return ACCUMULATOR[name] if op == "sum" else CTYPE[name]

"""Every WebGPU kernel against the pure-Python backend, inside the browser.

The conformance suite needs numpy and pytest, which the browser lacks; this is its stand-in for
the webgpu backend: each case builds inputs on the python backend (ember's Philox generator,
so every run draws the same numbers), runs one op on both backends, and compares: exactly for
integers and bools, within float32 tolerance for floats. It also checks the op really ran on
the GPU (``backend.stats``), so a silent host fallback cannot pass for a kernel.

Run it from the page (``await emberDemo.selfcheck()``) or from Python in Pyodide::

    await ember.registry.prepare("webgpu")
    ember.wasm.selfcheck.run()    # [{"case": ..., "ok": ..., "max_err": ..., "gpu": [...]}, ...]
"""

from __future__ import annotations

import math

import ember
from ember import nn

RTOL, ATOL = 2e-5, 2e-5
# WGSL promises sin and cos only to an absolute 2**-11 on [-pi, pi] (its accuracy table).
CASE_ATOL = {"sin": 2**-11, "cos": 2**-11}
HOST_OK = {"arange"}  # made on the host and uploaded once


def _inputs(seed):
    gen = ember.Generator(seed)

    def randn(*shape):
        return ember.randn(*shape, generator=gen, backend="python")

    def randint(lo, hi, *shape, dtype=ember.int32):
        return ember.randint(lo, hi, shape, generator=gen, backend="python").to(dtype)

    return randn, randint


def _cases():
    """(name, primitives that must run on the GPU, inputs, function of the inputs)."""
    randn, randint = _inputs(0)
    a, b, c = randn(3, 4), randn(3, 4), randn(2, 3, 1)
    x4 = randn(2, 3, 5, 7)
    ints, ints2 = randint(-50, 50, 4, 6), randint(-50, 50, 6)
    yield "add/sub/mul/div", {"add", "sub", "mul", "div"}, (a, b), lambda a, b: ((a + b) * a - b) / (b.abs() + 1)
    yield "broadcast", {"add", "mul"}, (c, b), lambda c, b: c + b * 2.5
    yield "maximum/minimum", {"maximum", "minimum"}, (a, b), lambda a, b: ember.maximum(a, b) - ember.minimum(a, 0.25)
    for op in ("exp", "log", "sqrt", "tanh", "sin", "cos", "neg", "abs", "floor", "reciprocal", "sign"):
        x = a.tanh() * 3.1 if op in ("sin", "cos") else a.abs() + 0.5 if op in ("log", "sqrt") else a * 3
        yield op, {op}, (x,), lambda x, op=op: getattr(x, op)()
    yield (
        "compare/where",
        {"gt", "le", "eq", "where"},
        (a, b),
        lambda a, b: ember.where(a > b, a, b) + ember.where(a <= 0, 1.0, 0.0) + (a == a).float(),
    )
    yield (
        "logical",
        {"logical_and", "logical_or", "logical_not"},
        (a, b),
        lambda a, b: (((a > 0) & (b > 0)) | ~(a > b)).float(),
    )
    yield "int32 arithmetic", {"add", "mul", "maximum"}, (ints, ints2), lambda x, y: ember.maximum(x * y + 7, y)
    yield "cast", {"cast"}, (a,), lambda a: ((a * 10).int() + (a > 0).int()).float() * 0.5
    i8, i16, u16 = (ints * 5).to(ember.int8), (ints * 900).to(ember.int16), (ints2 * 1500).to(ember.uint16)
    yield (
        "int8/int16/uint16 in 32-bit words, wrapped after each op",
        {"add", "sub", "mul", "neg", "maximum", "gt", "where", "cast"},
        (i8, i16, u16),
        lambda a, b, c: (
            (a * a + 100).int()  # int8 products and sums past 127 wrap
            + (-b * 3 - b).int()  # int16's past 32767
            + ember.where(c > 30000, c * c, c - 40000).int()  # uint16 past 65535 and below 0
            + ember.maximum(a, -a).int()  # -(-128) is -128 in int8
            + (a.float() * 2.5).to(ember.uint16).int()  # negative floats wrap through int32
        ),
    )
    # int64 indices (what Tensor.take makes) live on the host; the gather runs on the GPU
    idx, idx2 = randint(-3, 3, 2, 5, dtype=ember.int64), randint(0, 5, 4, dtype=ember.int64)
    yield (
        "take",
        {"take"},
        (x4, idx, idx2, ints),
        lambda x, i, j, n: x.take(i, 1) * 2 + x.permute(0, 3, 2, 1).take(j, 1).sum() + n.take(j, 1).float().sum(),
    )
    yield (
        "full",
        {"full"},
        (a,),
        lambda a: (
            ember.full((3, 4), -2.5, backend=a.backend)
            + ember.full((4,), 7, dtype=ember.int32, backend=a.backend).float()
            + ember.full((1,), True, backend=a.backend).float()
        ),
    )
    yield "relu (gt + where)", {"gt", "where"}, (x4,), lambda x: x.relu()
    yield (
        "views: permute/slice/flip/expand",
        {"add"},
        (x4,),
        lambda x: x.permute(0, 2, 1, 3)[:, 1:4, ::2, 1::3] + x.flip(1).permute(0, 2, 1, 3)[:, 1:4, ::2, 1::3],
    )
    yield "sum", {"sum"}, (x4,), lambda x: x.sum((1, 3)) + x.sum(0).sum((0, 1, 2))
    yield "max/min keepdim", {"max", "min"}, (x4,), lambda x: x.amax(2, keepdim=True) - x.amin(-1, keepdim=True)
    yield (
        "argmax",
        {"argmax"},
        (x4,),
        lambda x: x.argmax(1).float() + x.permute(0, 3, 2, 1).argmax(-1).permute(0, 2, 1).float(),
    )
    yield "softmax", {"exp", "sum", "max"}, (a,), lambda a: a.softmax(-1)
    yield "matmul", {"matmul"}, (randn(33, 40), randn(40, 17)), lambda a, b: a @ b
    yield "matmul x @ w.T", {"matmul"}, (randn(5, 24), randn(12, 24)), lambda x, w: x @ w.T
    yield "matmul batched", {"matmul"}, (randn(2, 1, 4, 5), randn(3, 5, 6)), lambda a, b: a @ b
    yield "conv2d", {"conv2d"}, (randn(2, 3, 9, 8), randn(4, 3, 3, 3)), lambda x, w: nn.functional.conv2d(x, w)
    yield (
        "conv2d stride/pad/dilation",
        {"conv2d"},
        (randn(1, 2, 11, 10), randn(3, 2, 3, 2)),
        lambda x, w: nn.functional.conv2d(x, w, stride=2, padding=(1, 2), dilation=(2, 1)),
    )
    yield (
        "conv2d groups",
        {"conv2d"},
        (randn(2, 4, 7, 7), randn(6, 2, 3, 3)),
        lambda x, w: nn.functional.conv2d(x, w, padding=1, groups=2),
    )
    yield "max_pool2d 3/2", {"maximum", "slice"}, (x4,), lambda x: nn.functional.max_pool2d(x, 3, 2)
    yield "avg_pool2d", {"add", "slice"}, (x4,), lambda x: nn.functional.avg_pool2d(x, 2)
    yield "pad", {"pad"}, (x4,), lambda x: nn.functional.pad(x, (1, 2, 0, 1), value=-1.5)
    yield "concatenate", {"concatenate"}, (a, b), lambda a, b: ember.cat([a, b.T.contiguous().T, a[:, :1]], 1)
    yield (
        "linear + bias",
        {"matmul", "add"},
        (randn(7, 10), randn(4, 10), randn(4)),
        lambda x, w, b: nn.functional.linear(x, w, b),
    )


def _models():
    ember.manual_seed(0)
    with ember.backend("python"):
        yield "mlp 784-128-10", ember.models.get("mlp", hidden=(128,)), (3, 1, 28, 28)
        yield "lenet", ember.models.get("cnn"), (2, 1, 28, 28)


def _compare(got, want, atol=ATOL) -> float:
    """Largest error relative to the tolerance (<= 1 passes); inf on a shape or dtype mismatch."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return math.inf
    g, w = got.reshape(-1).tolist(), want.reshape(-1).tolist()
    worst = 0.0
    for u, v in zip(g, w):
        if u != u or v != v:
            if not (u != u and v != v):
                return math.inf
            continue
        if want.dtype.is_floating_point:
            worst = max(worst, abs(u - v) / (atol + RTOL * abs(v)))
        elif u != v:
            return math.inf
    return worst


def run() -> list:
    """Run every case; one record per case (``ok`` is the verdict)."""
    gpu = ember.get_backend("webgpu")
    results = []

    def record(name, must, fn, inputs):
        gpu.stats_reset()
        try:
            with ember.no_grad():
                want = fn(*inputs)
                got = fn(*(t.to("webgpu") for t in inputs))
                err = _compare(got.to("python"), want, CASE_ATOL.get(name, ATOL))
            ran = set(gpu.stats["gpu"])
            missing = sorted(must - ran)
            host = set(gpu.stats["host"]) - HOST_OK
            results.append(
                {
                    "case": name,
                    "ok": err <= 1 and not missing and not host,
                    "max_err": err,
                    "gpu": sorted(ran),
                    "host": sorted(gpu.stats["host"]),
                    "missing_on_gpu": missing,
                }
            )
        except Exception as exc:  # noqa: BLE001 - report, keep checking the rest
            results.append({"case": name, "ok": False, "error": f"{type(exc).__name__}: {exc}"})

    for name, must, inputs, fn in _cases():
        record(name, must, fn, inputs)
    for name, model, shape in _models():
        model.eval()
        x = ember.randn(*shape, generator=ember.Generator(1), backend="python")
        gpu_model = _copy_to(model, "webgpu")
        record(
            f"model {name}",
            {"matmul"},
            lambda inp, m=model, g=gpu_model: (g if inp.backend.name == "webgpu" else m)(inp),
            (x,),
        )
    return results


def _copy_to(model, backend):
    import copy

    clone = copy.deepcopy(model)
    return clone.to(backend)

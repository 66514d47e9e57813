"""``ember onnx run`` and ``ember onnx test``.

ember onnx run MODEL.onnx [--backend NAME] [--input FILE.npy ...] [--repeat N] [--jit]
ember onnx test [--backend NAME] [--set node|models|all] [--cases REGEX] [--backend-module MODULE] [--out FILE]

``--backend webgpu`` converts the cases here and runs them in headless Chromium
(ember.wasm.onnx_browser): the webgpu backend exists only inside the browser's Pyodide.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from ..errors import EmberError
from .reader import OnnxError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ember onnx", description="run ONNX models and the official ONNX suite")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run a model: print its outputs and timing")
    r.add_argument("model", help="an .onnx file")
    r.add_argument("--backend", default=None, help="ember backend (default: the current one)")
    r.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="FILE.npy",
        help="one .npy per graph input, in order (default: random inputs of the declared shapes)",
    )
    r.add_argument("--repeat", type=int, default=5, help="timed runs after the first (default 5)")
    r.add_argument(
        "--jit",
        action="store_true",
        help="run the model through ember.jit (the first runs trace and compile; the repeats run the compiled graph)",
    )
    t = sub.add_parser("test", help="run the official ONNX backend cases and print the pass table")
    t.add_argument(
        "--backend",
        default="numpy",
        help="ember backend (default numpy); webgpu runs the cases in headless Chromium (docs/onnx.md)",
    )
    t.add_argument("--set", choices=("node", "models", "all"), default="all")
    t.add_argument("--cases", default=None, metavar="REGEX", help="only the cases whose name matches (default: all)")
    t.add_argument(
        "--backend-module",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE (dotted name or .py path) first and register its ember_backends(), as "
        "`ember certify` does (e.g. ember_cupy.host for the backend cupy-host; default: none)",
    )
    t.add_argument(
        "--out", default=None, metavar="FILE.json", help="also write every case's result as JSON (default: none)"
    )
    web = t.add_argument_group("webgpu (Pyodide in headless Chromium)")
    web.add_argument("--site", default=None, help="folder for the runner's page and cases (default: a temporary one)")
    web.add_argument("--pyodide", default=None, help="folder of the npm package pyodide@314.0.7 (as ember.wasm build)")
    web.add_argument("--wheels", default=None, help="folder holding the micropip and pluggy wheels")
    web.add_argument("--fetch", action="store_true", help="fetch missing Pyodide/wheels with npm and pip")
    return p


def _inputs(model, files):
    import numpy as np

    declared = model.graph.input
    known = {i.name for i in model.graph.initializer}
    declared = [v for v in declared if v.name not in known]
    if files:
        if len(files) != len(declared):
            raise OnnxError(
                f"the model takes {len(declared)} input(s) "
                f"({', '.join(v.name for v in declared)}), got {len(files)} --input file(s)"
            )
        out = []
        for f in files:
            try:
                out.append(np.load(f, allow_pickle=False))
            except (OSError, ValueError) as e:
                raise OnnxError(f"cannot read --input {f}: {e}") from None
        return out
    from onnx import helper

    rng = np.random.default_rng(0)
    out = []
    for v in declared:
        t = v.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in t.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
        kind = np.dtype(dtype).kind
        if kind == "O":  # a string input: one word in every element
            out.append(np.full(shape, "text", dtype=object))
            continue
        a = rng.standard_normal(shape) if kind == "f" else rng.integers(0, 2, shape)
        out.append(a.astype(dtype))
    return out


def run(args) -> int:
    import contextlib

    import ember

    # a context, not ember.use: a caller's process keeps its backend after an in-process call
    with ember.backend(args.backend) if args.backend else contextlib.nullcontext():
        return _run(args)


def _run(args) -> int:
    import ember

    from ..jit import jit
    from .graph import OnnxModule
    from .reader import read_model

    model = read_model(args.model)
    t0 = time.perf_counter()
    m = OnnxModule(model)
    loaded = time.perf_counter() - t0
    xs = [ember.tensor(a) for a in _inputs(model, args.input)]
    forward = jit(m) if args.jit else m
    times = []
    for _ in range(1 + max(args.repeat, 0)):
        t0 = time.perf_counter()
        with ember.no_grad():
            outs = forward(*xs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        values = [_host(o) for o in outs]  # the host read ends the timed run
        times.append(time.perf_counter() - t0)
    for name, v in zip(m.output_names, values):
        print(f"{name}: {_summary(v)}")
    rest = times[1:] or times
    print(
        f"backend {ember.get_backend().name}{' under ember.jit' if args.jit else ''}: load {loaded * 1e3:.1f} ms, first run {times[0] * 1e3:.1f} ms, "
        f"median of {len(rest)} {statistics.median(rest) * 1e3:.2f} ms"
    )
    return 0


def _host(value):
    """An output on the host: a tensor as a NumPy array, a sequence (a list) element by element,
    ZipMap's dicts and an empty optional (None) as they are."""
    if isinstance(value, list):
        return [_host(v) for v in value]
    return value.numpy() if hasattr(value, "numpy") else value


def _summary(v) -> str:
    """One line: a tensor's shape, dtype and first values; a sequence's length and first element."""
    if isinstance(v, list):
        return f"a sequence of {len(v)}" + (f", the first {_summary(v[0])}" if v else "")
    if not hasattr(v, "reshape"):
        return repr(v)[:200]
    flat = v.reshape(-1)[:6].tolist()
    dtype = "string" if v.dtype.kind == "O" else v.dtype
    return f"shape {tuple(v.shape)} {dtype} {flat}{' ...' if v.size > 6 else ''}"


def _backend_modules(specs) -> None:
    if not specs:
        return
    try:
        from ..conformance.plugin import import_backend_module
    except ImportError as e:
        raise OnnxError(f"--backend-module needs the test tools (pytest): {e}") from None
    for spec in specs:
        try:
            import_backend_module(spec)
        except Exception as e:  # noqa: BLE001 - the user's module, reported on one line
            raise OnnxError(f"--backend-module {spec}: importing it raised {type(e).__name__}: {e}") from None


def _check_browser() -> None:
    from ..wasm.chromium import find_chromium

    if find_chromium() is None:
        raise OnnxError("--backend webgpu runs in headless Chromium, which is not installed (apt-get install chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        raise OnnxError("--backend webgpu drives Chromium with Playwright: pip install playwright") from None


def _run_webgpu(cases, args) -> tuple:
    """(results, placements, records, adapter) of the cases in headless Chromium."""
    import tempfile

    from ..wasm import onnx_browser
    from ..wasm.build import BuildError

    def progress(done, total, records):
        passed = sum(r["reason"] is None for r in records)
        print(f"  {done}/{total} cases run in the page, {passed} passed", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="ember-onnx-webgpu-") as tmp:
        try:
            return onnx_browser.run_suite(
                cases,
                args.site or tmp,
                progress=progress,
                pyodide_dir=args.pyodide,
                wheels_dir=args.wheels,
                fetch=args.fetch,
            )
        except BuildError as e:  # Pyodide or the wheels missing: how to get them
            raise OnnxError(str(e)) from None
        except Exception as e:  # noqa: BLE001 - Chromium or the page failed: one line, not a traceback
            raise OnnxError(f"the webgpu run in Chromium failed: {type(e).__name__}: {e}") from None


def test(args) -> int:
    import json
    import re

    from . import suite
    from .known_failures import expected
    from .reader import onnx_module

    onnx_module()  # a clear error, not a traceback, without the onnx extra
    from ..registry import get_backend

    _backend_modules(args.backend_module)
    webgpu = args.backend == "webgpu"
    if webgpu:
        _check_browser()  # webgpu exists only inside the browser's Pyodide
    else:
        get_backend(args.backend)  # one line for a backend missing or without its device, not one per case
    sets = []
    if args.set in ("node", "all"):
        sets.append(("node cases", suite.node_cases()))
    if args.set in ("models", "all"):
        sets.append(("model sets", suite.model_cases()))
    if args.cases:
        sets = [(title, [c for c in cases if re.search(args.cases, c.name)]) for title, cases in sets]
    results, placements, records = {}, None, []
    t0 = time.perf_counter()
    if webgpu:
        results, placements, records, adapter = _run_webgpu([c for _, cases in sets for c in cases], args)
        print(f"webgpu adapter: {adapter}; {time.perf_counter() - t0:.0f} s in all\n")
    for title, cases in sets:
        if webgpu:
            part = {c.name: results[c.name] for c in cases}
        else:
            t0 = time.perf_counter()
            part = suite.run_suite(cases, args.backend)
            results.update(part)
        took = "" if webgpu else f" ({time.perf_counter() - t0:.0f} s)"
        print(f"ONNX {title} on {args.backend}{took}:\n")
        print(suite.table(part, placements) + "\n")
    if webgpu:
        from ..wasm.onnx_browser import summary

        print(summary(records) + "\n")
    if args.out:
        by_name = {r["name"]: r for r in records}
        rows = [
            {**by_name.get(n, {}), "name": n, "category": c, "plain": p, "reason": r, "seconds": s}
            for n, (c, p, r, s) in results.items()
        ]
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"backend": args.backend, "cases": rows}, f, indent=0)
    known = expected(args.backend)
    new_fail = sorted(n for n, r in results.items() if r[2] and n not in known)
    new_pass = sorted(n for n, r in results.items() if not r[2] and n in known)
    for n in new_fail:
        print(f"unexpected failure: {n}: {results[n][2]}")
    note = _ml_dtypes_note(new_fail)
    if note:
        print(note)
    for n in new_pass:
        print(f"now passes (remove from known_failures.py): {n}")
    return 1 if new_fail and args.backend in ("numpy", "webgpu") else 0


def _ml_dtypes_note(failed) -> str | None:
    """A line for failed casts to the 4- and 2-bit integers when ml_dtypes, which makes those
    cases' expected values as they are collected, is older than 0.7 (its rule changed then).

    >>> _ml_dtypes_note(["test_abs"]) is None
    True
    """
    import re

    casts = [n for n in failed if re.fullmatch(r"test_cast(like)?_\w+_to_U?INT[24](_expanded)?", n)]
    try:
        import ml_dtypes
    except ImportError:
        return None
    version = tuple(int(p) for p in re.findall(r"\d+", ml_dtypes.__version__)[:2])
    if not casts or version >= (0, 7):
        return None
    return (
        f"note: {len(casts)} of these cast to 4- or 2-bit integers, whose expected values ml_dtypes "
        f"{ml_dtypes.__version__} made: before 0.7 it kept an out-of-range value's low bits, where 0.7 "
        "and ember give 0 (pip install 'ml_dtypes>=0.7')"
    )


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args) if args.command == "run" else test(args)
    except EmberError as err:
        print(f"ember: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2

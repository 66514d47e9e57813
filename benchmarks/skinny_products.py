"""The skinny products (ember_numba.skinny) against OpenBLAS (NumPy's matmul), per shape.

Both run in one process, alternating call by call, each call on weights taken in turn from
``--copies`` copies (so they come from memory, as a model's do, not from the cache), on one
thread and on ``--threads`` threads (skinny.matmul's row blocks on the plugin's threads;
OpenBLAS on its own). Prints per shape the median time of each and the ratio skinny / OpenBLAS
(median of the per-call ratios, with the range of the middle half).

``--model resnet50`` instead times the whole model (benchmarks/onnx_models.py's file, loaded
with ember.onnx, under ember.jit on numba, on ``--threads`` threads) with the skinny product
on and off (``skinny.VECTORS``), alternating call by call in one process, beside onnxruntime
on as many threads.

    python -m benchmarks.skinny_products --calls 40
    python -m benchmarks.skinny_products --model resnet50 --threads 1 --calls 25
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from benchmarks import recording

#: ResNet-50's skinny products at batch 1: (O, K, P); the 3x3 layers' im2col included.
SHAPES = [
    (2048, 512, 49),
    (512, 2048, 49),
    (512, 4608, 49),
    (1024, 256, 196),
    (256, 1024, 196),
    (256, 2304, 196),
    (512, 128, 784),
]


def _quartiles(values) -> str:
    q = statistics.quantiles(values, n=4)
    return f"{statistics.median(values):.3f} ({q[0]:.3f}-{q[2]:.3f})"


def whole_model(name, threads, calls) -> None:
    """The model at batch 1 with the skinny product on and off, and onnxruntime, in turns."""

    from benchmarks import onnx_models
    from ember_numba import skinny

    with onnx_models.exported(name) as path:
        ort, _ = onnx_models.make_runner("ort", path, threads)
        ember, _ = onnx_models.make_runner("numba+jit", path, threads)
    side = onnx_models.MODELS[name][3]
    x = np.random.default_rng(0).standard_normal((1, 3, side, side)).astype(np.float32)
    ref, found = ort(x), skinny.VECTORS
    for on in (found, False):
        skinny.VECTORS = on
        err = float(np.max(np.abs(ember(x) - ref) / (np.abs(ref) + 1e-3)))
        print(f"skinny {'on' if on else 'off'}: max rel. err against onnxruntime {err:.1e}")
        for _ in range(3):
            ember(x)
    times: dict = {"ort": [], "skinny": [], "blas": []}
    for i in range(calls):
        # onnxruntime's pool threads spin for a while after a call, so each call is followed by
        # an untimed pause (onnx_models.PAUSE); skinny and BLAS take turns after onnxruntime
        for t in ("ort", "skinny", "blas") if i % 2 == 0 else ("ort", "blas", "skinny"):
            skinny.VECTORS = found and t == "skinny"
            t0 = time.perf_counter()
            (ort if t == "ort" else ember)(x)
            times[t].append(time.perf_counter() - t0)
            time.sleep(onnx_models.PAUSE)
    skinny.VECTORS = found
    print(f"{name}, batch 1, {threads} thread(s), {calls} calls each; ms and ratios: median (quartiles)")
    for t, label in (("ort", "onnxruntime"), ("skinny", "numba+jit, skinny on"), ("blas", "numba+jit, OpenBLAS")):
        print(f"{label}: {_quartiles([1e3 * s for s in times[t]])} ms")
    for a, b in (("skinny", "ort"), ("blas", "ort"), ("skinny", "blas")):
        print(f"{a} / {b}: {_quartiles([p / q for p, q in zip(times[a], times[b])])}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--copies", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--shapes", default="", help="O,K,P;O,K,P... (default: ResNet-50's)")
    ap.add_argument("--model", default="", help="time this model of benchmarks.onnx_models instead")
    args = ap.parse_args(argv)
    recording.warn_blas_overrides("python -m benchmarks.skinny_products")
    if args.model:
        return whole_model(args.model, args.threads, args.calls)
    import threadpoolctl

    from ember_numba import skinny

    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes.split(";")] if args.shapes else SHAPES
    rng = np.random.default_rng(0)
    print("threads | O x K @ K x P | skinny ms | OpenBLAS ms | skinny / OpenBLAS (quartiles)")
    for nt in sorted({1, args.threads}):
        for o, k, p in shapes:
            ws = [rng.standard_normal((o, k), dtype=np.float32) for _ in range(args.copies)]
            x = rng.standard_normal((k, p), dtype=np.float32)
            out = np.empty((o, p), np.float32)
            ref = ws[0].astype(np.float64) @ x
            got = skinny.matmul(ws[0], x, threads=nt)
            assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max(), "skinny.matmul is wrong"
            times: dict = {"skinny": [], "blas": []}
            with threadpoolctl.threadpool_limits(nt, user_api="blas"):
                for i in range(args.calls + 3):
                    w = ws[i % args.copies]
                    for name in ("skinny", "blas") if i % 2 else ("blas", "skinny"):
                        t0 = time.perf_counter()
                        if name == "skinny":
                            skinny.matmul(w, x, out, threads=nt)
                        else:
                            np.matmul(w, x, out=out)
                        if i >= 3:
                            times[name].append(time.perf_counter() - t0)
            ratios = [a / b for a, b in zip(times["skinny"], times["blas"])]
            print(
                f"{nt} | {o}x{k} @ {k}x{p} | {1e3 * statistics.median(times['skinny']):.3f}"
                f" | {1e3 * statistics.median(times['blas']):.3f} | {_quartiles(ratios)}"
            )


if __name__ == "__main__":
    main()

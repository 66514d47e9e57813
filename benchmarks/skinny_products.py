"""The skinny products (ember_numba.skinny) against OpenBLAS (NumPy's matmul), per shape.

Both run in one process, alternating call by call, each call on weights taken in turn from
``--copies`` copies (so they come from memory, as a model's do, not from the cache), on one
thread and on ``--threads`` threads (skinny.matmul's row blocks on the plugin's threads;
OpenBLAS on its own). Prints per shape the median time of each and the ratio skinny / OpenBLAS
(median of the per-call ratios, with the range of the middle half).

    python -m benchmarks.skinny_products --calls 40
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

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


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--copies", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--shapes", default="", help="O,K,P;O,K,P... (default: ResNet-50's)")
    args = ap.parse_args(argv)
    import threadpoolctl

    from ember_numba import blas, skinny

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
            ratios = sorted(a / b for a, b in zip(times["skinny"], times["blas"]))
            q = statistics.quantiles(ratios, n=4)
            print(
                f"{nt} | {o}x{k} @ {k}x{p} | {1e3 * statistics.median(times['skinny']):.3f}"
                f" | {1e3 * statistics.median(times['blas']):.3f}"
                f" | {statistics.median(ratios):.2f}x ({q[0]:.2f}-{q[2]:.2f})"
            )
    del blas


if __name__ == "__main__":
    main()

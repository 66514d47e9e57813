"""ResNet-18's (W3) layers one at a time, ember's numba kernels against PyTorch's (oneDNN),
calls alternating in one process, so another process's load slows both alike.

    python -m benchmarks.layers_vs_torch --threads 1 --batch 128
    python -m benchmarks.layers_vs_torch --threads 2 --kinds s1

Per layer: the forward, and the backward as PyTorch runs it (input and weight gradients in
one op; ember's two primitives summed), the median wall time of ``--calls`` calls each and
their ratio (ember / PyTorch: below 1, ember is faster). The threads are set for both (ember
through ``EMBER_NUM_THREADS``, read when the numba plugin loads, so it is set here first).
Random data; the stem's backward includes the input gradient, which a training step skips.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from benchmarks import recording

#: Layer kind -> its ResNet-18 (CIFAR) layers: (name, C, O, H, kernel, stride, padding).
LAYERS = {
    "s2": [
        ("3x3 s2 64->128 32x32", 64, 128, 32, 3, 2, 1),
        ("3x3 s2 128->256 16x16", 128, 256, 16, 3, 2, 1),
        ("3x3 s2 256->512 8x8", 256, 512, 8, 3, 2, 1),
    ],
    "1x1": [
        ("1x1 s2 64->128 32x32", 64, 128, 32, 1, 2, 0),
        ("1x1 s2 128->256 16x16", 128, 256, 16, 1, 2, 0),
        ("1x1 s2 256->512 8x8", 256, 512, 8, 1, 2, 0),
    ],
    "stem": [("stem 3->64 32x32", 3, 64, 32, 3, 1, 1)],
    "s1": [(f"3x3 s1 {c}->{c} {h}x{h}", c, c, h, 3, 1, 1) for c, h in ((64, 32), (128, 16), (256, 8), (512, 4))],
}
#: Batch norm's maps: (C, H).
BATCH_NORMS = ((64, 32), (128, 16), (256, 8), (512, 4))


def pair(ours, theirs, calls):
    """Median seconds of ``ours()`` and ``theirs()``, called in turn (which goes first alternates)."""
    ours(), theirs()
    times: tuple[list, list] = ([], [])
    for i in range(calls):
        order = ((ours, times[0]), (theirs, times[1]))
        for fn, acc in order if i % 2 else order[::-1]:
            t0 = time.perf_counter()
            fn()
            acc.append(time.perf_counter() - t0)
    return statistics.median(times[0]), statistics.median(times[1])


def _row(name, what, times):
    (f_e, f_t), (b_e, b_t) = times
    return (
        f"{name:24s} forward ember {f_e * 1e3:8.2f} torch {f_t * 1e3:8.2f} ms ({f_e / f_t:.2f}x); "
        f"{what} ember {b_e * 1e3:8.2f} torch {b_t * 1e3:8.2f} ms ({b_e / b_t:.2f}x)"
    )


def convolution(name, c, o, h, k, s, p, batch, calls, rng):
    """One convolution layer's row: forward, and input + weight gradients."""
    import numpy as np
    import torch

    from ember_numba import conv

    x = rng.standard_normal((batch, c, h, h), dtype=np.float32)
    w = rng.standard_normal((o, c, k, k), dtype=np.float32) * 0.1
    y = conv._conv2d(x, w, (s, s), (p, p))
    g = rng.standard_normal(y.shape, dtype=np.float32)
    xt, wt, gt = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(g)
    with torch.no_grad():
        forward = pair(
            lambda: conv._conv2d(x, w, (s, s), (p, p)),
            lambda: torch.nn.functional.conv2d(xt, wt, None, s, p),
            calls,
        )
        backward = pair(
            lambda: (
                conv._conv2d_grad_input(g, w, x.shape, (s, s), (p, p)),
                conv._conv2d_grad_weight(x, g, w.shape, (s, s), (p, p)),
            ),
            lambda: torch.ops.aten.convolution_backward(
                gt, xt, wt, None, [s, s], [p, p], [1, 1], False, [0, 0], 1, [True, True, False]
            ),
            calls,
        )
    return _row(name, "dX+dW", (forward, backward))


def batch_norm(c, h, batch, calls, rng):
    """One batch norm's row (training mode): forward, and backward."""
    import numpy as np
    import torch

    from ember_numba.fused import channels

    x = rng.standard_normal((batch, c, h, h), dtype=np.float32)
    g = rng.standard_normal(x.shape, dtype=np.float32)
    w, b = np.ones(c, np.float32), np.zeros(c, np.float32)
    xt, gt, wt, bt = (torch.from_numpy(a) for a in (x, g, w, b))
    _, mean, var = channels.batch_norm(x, w, b)
    with torch.no_grad():
        _, t_mean, t_rstd = torch.ops.aten.native_batch_norm(xt, wt, bt, None, None, True, 0.1, 1e-5)
        forward = pair(
            lambda: channels.batch_norm(x, w, b),
            lambda: torch.ops.aten.native_batch_norm(xt, wt, bt, None, None, True, 0.1, 1e-5),
            calls,
        )
        backward = pair(
            lambda: channels.batch_norm_backward(g, x, w, b, mean, var),
            lambda: torch.ops.aten.native_batch_norm_backward(
                gt, xt, wt, None, None, t_mean, t_rstd, True, 1e-5, [True, True, True]
            ),
            calls,
        )
    return _row(f"batch norm {c}x{h}x{h}", "backward", (forward, backward))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--calls", type=int, default=9)
    ap.add_argument("--kinds", default="s2,1x1,stem,bn", help="of s2, 1x1, stem, s1 (Winograd), bn")
    args = ap.parse_args(argv)
    recording.warn_blas_overrides("python -m benchmarks.layers_vs_torch")
    os.environ["EMBER_NUM_THREADS"] = str(args.threads)  # before the numba plugin starts its threads

    import numpy as np
    import torch

    import ember

    ember.use("numba")
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    print(
        f"ember numba / PyTorch {torch.__version__}, {args.threads} threads each, batch {args.batch}, medians of {args.calls} calls"
    )
    for kind in args.kinds.split(","):
        if kind == "bn":
            rows = (batch_norm(c, h, args.batch, args.calls, rng) for c, h in BATCH_NORMS)
        else:
            rows = (convolution(*layer, args.batch, args.calls, rng) for layer in LAYERS[kind])
        for row in rows:
            print(row, flush=True)


if __name__ == "__main__":
    main()

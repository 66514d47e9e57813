"""One measurement in its own process; prints one JSON line.

    python -m benchmarks.child --workload W1-train --framework ember --backend numpy --steps 300

The runner starts one of these per (round, workload, backend), so no measurement inherits
another's caches, allocator state or threads. Threads are pinned before numpy or torch load.
``--framework gemm`` measures the float32 matrix-product peak of ``--backend`` numpy or torch.

The line always comes, whatever happens: ``status`` is "ok", "unavailable" (the framework, the
backend or a layer it needs is not installed or not written yet) or "failed" (it ran and broke),
with the reason.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import time

from benchmarks.recording import BLAS_OVERRIDES

STARTED = time.monotonic()  # before numpy, torch or ember load: W5 counts their import

_LIMITS = None  # threadpoolctl's limiter, kept alive: collecting it undoes the limits
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMBA_NUM_THREADS",
)
#: Where compiled code is cached: a cold run (W5-cold) points each at an empty directory.
COLD_CACHE_VARIABLES = ("EMBER_CACHE", "NUMBA_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")


def pin_threads(n):
    """Pin every thread pool to ``n``: environment first (read when a library loads), then
    threadpoolctl for pools already loaded."""
    for var in THREAD_VARIABLES:
        os.environ[var] = str(n)
    try:
        import threadpoolctl
    except ImportError:
        return
    global _LIMITS
    _LIMITS = threadpoolctl.threadpool_limits(n)


def pools():
    """The thread pools loaded now and their sizes (threadpoolctl), for the report."""
    try:
        import threadpoolctl
    except ImportError:
        return None
    keys = ("internal_api", "version", "num_threads", "threading_layer", "architecture")
    # the library's file name, not its path: a committed report must not carry the machine's folders
    return [
        {**{k: p.get(k) for k in keys}, "filepath": os.path.basename(p.get("filepath") or "")}
        for p in threadpoolctl.threadpool_info()
    ]


def maxrss_mib():
    import resource

    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return round(kib / (1 << 20 if sys.platform == "darwin" else 1 << 10), 1)


def classify(exc):
    """'unavailable' for what is missing (an import, a name, a backend or one of its
    primitives); 'failed' for anything that broke while running."""
    names = {c.__name__ for c in type(exc).__mro__}
    return "unavailable" if names & {"ImportError", "AttributeError", "BackendError"} else "failed"


def measure_steps(step, fw, steps, warmup, max_seconds):
    """Time each step (synchronized). A slow backend still reports, and the record says where
    it was cut: warm-up ends once it has taken ``max_seconds / 2`` (len(warmup_step_s) <
    warmup), measurement once ``max_seconds`` have passed (steps_run < steps_asked)."""
    times, warm = [], []
    for i in range(warmup + steps):
        if i < warmup and sum(warm) > max_seconds / 2:
            continue
        t0 = time.perf_counter()
        out = step()
        fw.sync()
        (warm if i < warmup else times).append(time.perf_counter() - t0)
        if i == 0:
            first = out.sum().item()  # the loss (a checksum of the logits for inference)
        if i >= warmup and sum(times) > max_seconds:
            break
    return times, warm, [first, out.sum().item()]


def load(args):
    """Pin every pool to ``args.threads``, then import the framework (or the GEMM library).

    Pinning comes first so that a backend may choose less within the budget and keep its
    choice: ember-numba runs BLAS on one thread and splits products itself (its blas.py);
    pinning afterwards would turn that into nested threading no user would run."""
    from benchmarks import workloads as W

    pin_threads(args.threads)
    if args.framework == "gemm":
        lib = importlib.import_module(args.backend)
        if args.backend == "torch":
            lib.set_num_threads(args.threads)
        return None, pools()
    fw = W.FRAMEWORKS[args.framework](args.backend, args.threads)
    return fw, pools()


def torch_build(torch):
    """The BLAS and vector ISA torch was built with and uses (threadpoolctl cannot see a
    statically linked MKL)."""
    config = torch.__config__.show()
    blas = config.split("BLAS_INFO=")[1].split(",")[0] if "BLAS_INFO=" in config else "?"
    isa = [line.split(":")[1].strip() for line in config.splitlines() if "CPU capability" in line]
    return {"blas": blas, "cpu_capability": isa[0] if isa else "?", "threads": torch.get_num_threads()}


def run(args):
    from benchmarks import workloads as W

    try:
        fw, pools = load(args)
    except Exception as exc:
        exc.scope = "backend"  # the framework or backend itself is missing: every workload fails alike
        raise
    imported = time.monotonic()
    out = {"threadpools": pools}
    if "torch" in sys.modules:
        out["torch_build"] = torch_build(sys.modules["torch"])
    if fw is None:
        rates = W.gemm(args.backend, args.gemm_n, args.steps)
        out.update(metrics={"gflops": max(rates)}, samples=rates, n=args.gemm_n)
        return out
    out["version"] = fw.version
    work = W.WORKLOADS[args.workload]

    if work.kind == "overhead":
        reps = [W.eager_overhead(fw, args.chain) for _ in range(args.warmup + args.steps)]
        measured = reps[args.warmup :]
        out.update(
            metrics={
                "fwd_us_per_op": statistics.median(r[0] for r in measured),
                "bwd_us_per_op": statistics.median(r[1] for r in measured),
            },
            chain=args.chain,
            samples=measured,
            warmup_samples=reps[: args.warmup],
        )
        return out

    step = work.setup(fw, args.batch)
    built = time.monotonic()
    # W5 times every one of its few steps, however slow: the third is the point of it.
    max_seconds = float("inf") if work.kind == "first-step" else args.max_seconds
    times, warm, losses = measure_steps(step, fw, args.steps, args.warmup, max_seconds)
    out.update(
        step_s=times,
        warmup_step_s=warm,
        loss_first_last=losses,
        steps_run=len(times),
        steps_asked=args.steps,
        batch=args.batch,
    )
    if work.kind == "first-step":
        launched = float(os.environ.get("EMBER_BENCH_LAUNCH", STARTED))
        out["metrics"] = {
            "launch_to_first_step_s": built - launched + times[0],
            "import_s": imported - STARTED,
            "build_s": built - imported,
            **{f"step{i + 1}_s": t for i, t in enumerate(times)},
        }
        if len(times) >= W.FIRST_STEPS:
            out["metrics"]["launch_to_step3_s"] = built - launched + sum(times[: W.FIRST_STEPS])
        out["cache_dirs"] = {k: os.environ.get(k) for k in COLD_CACHE_VARIABLES}
    else:
        out["metrics"] = {"samples_per_s": args.batch * len(times) / sum(times)}
    return out


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.child", description=__doc__.split("\n")[0])
    p.add_argument("--workload", default="")
    p.add_argument("--framework", required=True, choices=["ember", "torch", "gemm"])
    p.add_argument("--backend", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--chain", type=int, default=10_000, help="W4: length of the chain of adds")
    p.add_argument("--gemm-n", type=int, default=2048)
    p.add_argument(
        "--max-seconds",
        type=float,
        default=float("inf"),
        help="stop measuring after this many seconds of steps (reported as steps_run)",
    )
    args = p.parse_args(argv)
    # Libraries may print (compile logs, warnings): keep stdout for our one line.
    line_out, sys.stdout = sys.stdout, sys.stderr
    record = {"workload": args.workload or "gemm", "framework": args.framework, "backend": args.backend}
    try:
        record.update(run(args), status="ok")
    except Exception as exc:  # noqa: BLE001 - every outcome is a result to report
        import traceback

        record.update(
            status=classify(exc),
            scope=getattr(exc, "scope", "workload"),
            reason=f"{type(exc).__name__}: {exc}".strip()[:2000],
            traceback=traceback.format_exc()[-4000:],
        )
    record["maxrss_mib"] = maxrss_mib()
    record["env"] = {k: os.environ.get(k) for k in (*THREAD_VARIABLES, *BLAS_OVERRIDES, "OMP_WAIT_POLICY")}
    print(json.dumps(record), file=line_out, flush=True)


if __name__ == "__main__":
    main()

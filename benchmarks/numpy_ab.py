"""A workload before and after a change to a backend, side by side (numpy+jit unless
``--backend`` names another target, such as ``numba+jit``).

Like dispatch_overhead.py (whose package layout it reuses), both versions, a git revision
(``--base``, default ``main``) and the working tree, are copied into a temporary folder laid
out as the installed package (with the numba plugin's package next to it), and each timing
runs in its own process that imports exactly one version. A process builds the workload (benchmarks/workloads.py), runs ``--warmup`` steps,
then times ``--steps`` steps one by one (a training step up to its loss read as a number, an
inference workload's forward call up to its logits read into a NumPy array) and reports the fastest (the one the machine's load
disturbed least; ``--mean``: their mean, the benchmark harness's samples/s measure, which
counts the slow steps too; ``--cpu``: CPU time instead of wall time) and its peak RSS. Rounds alternate which version runs first; the report gives the ratio of
step times (working tree / base) as the median of the rounds with its range.

    python -m benchmarks.numpy_ab --workload W2-train --batch 128 --rounds 5
    python -m benchmarks.numpy_ab --workload W3-train --backend numba+jit --rounds 3
    python -m benchmarks.numpy_ab --workload W3-infer-b1 --backend numba+jit --steps 20
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from benchmarks import recording
from benchmarks.dispatch_overhead import ROOT, TOPS, _from_git, _from_tree, alternating, spread, untraced
from benchmarks.workloads import WORKLOADS

CHILD = r"""
import sys, time
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", "")
                    and "editable" not in type(f).__module__]
sys.path.insert(0, sys.argv[1])
sys.path.insert(1, sys.argv[2])
import ember
assert ember.__file__.startswith(sys.argv[1]), ember.__file__
from benchmarks.workloads import WORKLOADS, Ember
workload, batch, warmup, steps = sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
step = WORKLOADS[workload].setup(Ember(sys.argv[7], 2), batch)
if sys.argv[7].startswith("numba"):
    import ember_numba
    assert ember_numba.__file__.startswith(sys.argv[1]), ember_numba.__file__
for _ in range(warmup):
    step()
clock = time.process_time if sys.argv[8] == "cpu" else time.perf_counter
times = []
for _ in range(steps):
    t0 = clock()
    out = step()
    # the host read ends the step: a training step's loss as a number, a forward call's
    # (batch, classes) logits as an array
    out.item() if out.numel() == 1 else out.numpy()
    times.append(clock() - t0)
import resource
print(min(times), sum(times) / len(times), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)  # RSS in KiB
"""


def _time(tree, args):
    out = subprocess.run(
        [
            sys.executable,
            "-W",
            "ignore",
            "-c",
            CHILD,
            tree,
            ROOT,
            args.workload,
            str(args.batch),
            str(args.warmup),
            str(args.steps),
            args.backend,
            "cpu" if args.cpu else "wall",
        ],
        capture_output=True,
        text=True,
        check=True,
        env=untraced(dict(os.environ, EMBER_BACKEND=args.backend.partition("+")[0])),
    ).stdout
    best, mean, rss = out.split()[-3:]
    return float(mean if args.mean else best), int(rss) / 1024


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="main", help="git revision to compare against")
    ap.add_argument("--workload", default="W2-train")
    ap.add_argument("--batch", type=int, help="default: the workload's own (W3-infer-b1: 1), else 128")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--backend", default="numpy+jit", help="the ember target timed: numpy+jit, numba+jit, numba, ...")
    ap.add_argument("--mean", action="store_true", help="compare the steps' mean time, not the fastest step")
    ap.add_argument(
        "--cpu",
        action="store_true",
        help="time each step's CPU time (process_time: all the process's threads, BLAS's spinning "
        "workers too; with OPENBLAS_NUM_THREADS=1 the step's work, which others' load moves less)",
    )
    args = ap.parse_args(argv)
    if args.workload not in WORKLOADS or WORKLOADS[args.workload].setup is None:
        stepped = ", ".join(w for w, k in WORKLOADS.items() if k.setup is not None)
        print(f"numpy_ab: --workload {args.workload}: not a workload with steps ({stepped})", file=sys.stderr)
        raise SystemExit(2)
    if args.batch is None:
        args.batch = WORKLOADS[args.workload].batch or 128
    recording.warn_blas_overrides("python -m benchmarks.numpy_ab")
    tmp = tempfile.mkdtemp(prefix="ember-numpy-ab-")
    try:
        base, work = os.path.join(tmp, "base"), os.path.join(tmp, "work")
        # a numba target takes the plugin's package of the same version too
        tops = TOPS + (("plugins/numba/ember_numba",) if args.backend.startswith("numba") else ())
        _from_git(args.base, base, tops)
        _from_tree(work, tops)
        ratios, peaks = [], []
        for r, (b, bm), (w, wm) in alternating(args.rounds, lambda: _time(base, args), lambda: _time(work, args)):
            ratios.append(w / b)
            peaks.append((bm, wm))
            print(
                f"round {r + 1}: {args.backend} {args.workload} batch {args.batch}: "
                f"{b * 1e3:.3g} -> {w * 1e3:.3g} ms/step{' (mean)' if args.mean else ''}, peak RSS {bm:.0f} -> {wm:.0f} MiB"
            )
        print(
            f"step time, working tree / {args.base}: {spread(ratios)}; peak RSS median "
            f"{statistics.median(p[0] for p in peaks):.0f} -> {statistics.median(p[1] for p in peaks):.0f} MiB"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

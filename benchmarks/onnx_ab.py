"""One switch of ember's code off and on, alternating call by call in one process: a model under
ember.jit on numba, per call CPU time and per step medians.

    python -m benchmarks.onnx_ab --model resnet50 --flag ember_numba.conv.SOLO_BANDS --threads 1 --calls 80

``--flag`` names a module attribute (``package.module.NAME``) that the code reads at call time;
arm "old" sets it to ``--old`` (default False), arm "new" to ``--new`` (default True), and
the two take turns, each first in every other round, each call followed by an untimed pause
(onnx_models.PAUSE). On a shared machine the call's spread hides a change of a few tenths of a
millisecond, so each step of the jitted program is timed too (step_profile's timer), and the
steps whose medians differ are listed. ``--threads 2 --one`` forces every thread choice onto
one thread of two (onnx_threads.forced): the road the benchmark takes where it keeps a layer on
one thread; ``--all`` onto all of them, so a change to the threads' hand-offs is measured on
every layer, not only where a busy moment left the choice. CPU time is the process's
(``time.process_time``): on one thread, the work itself.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import os
import statistics
import time

import numpy as np

from benchmarks import onnx_models, onnx_threads, recording, step_profile

ARMS = ("old", "new")


def measure(path, side, flag, values, calls, threads, road=None):
    """({arm: [CPU s a call]}, {arm: {step: [s]}}, program, the largest difference of the
    arms' outputs)."""
    module, name = flag.rsplit(".", 1)
    target = importlib.import_module(module)
    if not hasattr(target, name):
        raise SystemExit(f"{module} has no attribute {name}")
    made = step_profile._programs()
    run, _ = onnx_models.make_runner("numba+jit", path, threads)
    undo = onnx_threads.forced([road]) if road else (lambda: None)
    kept = getattr(target, name)
    x = np.random.default_rng(0).standard_normal((1, 3, side, side)).astype(np.float32)
    try:
        outs = {}
        for arm in ARMS * 3:  # traced, compiled, both arms' buffers made
            setattr(target, name, values[arm])
            outs[arm] = run(x)
        cpu: dict = {a: [] for a in ARMS}
        steps: dict = {a: {} for a in ARMS}
        for i in range(calls):
            for arm in ARMS[i % 2 :] + ARMS[: i % 2]:
                setattr(target, name, values[arm])
                with step_profile.instrumented(made[-1], step_profile.timer(steps[arm])):
                    c = time.process_time()
                    run(x)
                    cpu[arm].append(time.process_time() - c)
                time.sleep(onnx_models.PAUSE)
    finally:
        setattr(target, name, kept)
        undo()
    return cpu, steps, made[-1], float(np.abs(outs["new"] - outs["old"]).max())


def report(cpu, steps, program, diff, every=False, least=0.02) -> str:
    """Markdown: the calls' CPU time per arm and new / old paired; the steps whose medians differ
    by at least ``least`` ms (all of them with ``every``) and the steps' sums."""
    q = lambda v: f"{np.median(v):.3f} ({np.percentile(v, 25):.3f}-{np.percentile(v, 75):.3f})"  # noqa: E731
    paired = [n / o for n, o in zip(cpu["new"], cpu["old"])]
    old_ms, new_ms = (1e3 * np.median(cpu[a]) for a in ARMS)
    lines = [
        f"CPU ms a call, median: old {old_ms:.2f}, new {new_ms:.2f}; new / old paired {q(paired)}; "
        f"outputs' largest difference {diff:.3g}",
        "",
        "| step | layer | shape | old ms | new ms | new / old |",
        "| ---: | --- | --- | ---: | ---: | ---: |",
    ]
    sums = [0.0, 0.0]
    for i in sorted(steps["old"]):
        old, new = (1e3 * statistics.median(steps[a].get(i, [0.0])) for a in ARMS)
        sums[0], sums[1] = sums[0] + old, sums[1] + new
        if every or abs(new - old) >= least:
            v = program.origin[i]
            lines.append(
                f"| {i} | {step_profile._name(v)} | {tuple(v.shape)} | {old:.3f} | {new:.3f} | {new / max(old, 1e-9):.2f} |"
            )
    lines.append(f"| | every step | | {sums[0]:.2f} | {sums[1]:.2f} | {sums[1] / max(sums[0], 1e-9):.3f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> str:
    p = argparse.ArgumentParser(prog="python -m benchmarks.onnx_ab", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet50", help=f"of {', '.join(onnx_models.MODELS)}")
    p.add_argument("--flag", required=True, help="package.module.NAME, read by the code at call time")
    p.add_argument("--old", default="False", help="the old arm's value (a Python literal)")
    p.add_argument("--new", default="True", help="the new arm's value (a Python literal)")
    p.add_argument("--threads", type=int, default=1, help="numba's threads (1: a one-thread pool)")
    p.add_argument("--one", action="store_true", help="every thread choice forced onto one thread")
    p.add_argument("--all", action="store_true", help="every thread choice forced onto all threads")
    p.add_argument("--calls", type=int, default=40, help="rounds (one call of each arm a round)")
    p.add_argument("--exporter", choices=("torch", "ember"), default=None, help="default: torch where installed")
    p.add_argument("--every", action="store_true", help="list every step, not only those that differ")
    args = p.parse_args(argv)
    if args.one and args.all:
        p.error("--one and --all: choose one road")
    forced = "one" if args.one else "all" if args.all else None
    recording.warn_blas_overrides("python -m benchmarks.onnx_ab")
    try:
        values = {"old": ast.literal_eval(args.old), "new": ast.literal_eval(args.new)}
    except (ValueError, SyntaxError):
        p.error(f"--old {args.old!r} / --new {args.new!r}: each must be a Python literal (1048576, not 1 << 20)")
    side = onnx_models.MODELS[args.model][3]
    with onnx_models.exported(args.model, args.exporter) as path:
        cpu, steps, program, diff = measure(path, side, args.flag, values, args.calls, args.threads, forced)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    road = f"{args.threads} thread(s)" + (f", every choice forced onto {forced}" if forced else "")
    text = (
        f"{args.model}, batch 1, numba+jit on {road}; {args.flag}: old {args.old}, new {args.new}; "
        f"{args.calls} rounds; 1-min load at the end {load:.2f}\n\n" + report(cpu, steps, program, diff, args.every)
    )
    print(text)
    return text


if __name__ == "__main__":
    main()

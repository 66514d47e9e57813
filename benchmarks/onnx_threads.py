"""Does the second core pay? A model under ember.jit on numba, every thread choice forced to one
thread or to all, the two alternating call by call in one process.

    python -m benchmarks.onnx_threads --model resnet50 --calls 80

``launch.ThreadChoice`` picks one thread or all per layer by measurement; forcing the choice
shows what each road costs on its own. Each round runs both (in turn first), each call followed
by an untimed pause (onnx_models.PAUSE), and records the wall time and the process's CPU time
(all its threads) of each call. On a shared machine the other processes take the second core
now and then: each round's CPU time of other processes is read from ``/proc/stat`` (Linux), and
the rounds in which they used less than ``--quiet`` cores are summarized apart from the rest.
``--steps`` also times each step of the jitted program inside the calls (step_profile's timer)
and lists, per layer, each arm's median and the ratio: which layers gain from the second core
and which lose (``--top`` rows, the layers where the arms differ most first).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time

import numpy as np

from benchmarks import onnx_models, recording, step_profile

ARMS = ("one", "all")


def busy_seconds() -> float:
    """CPU seconds all processes have used (not idle, not waiting for I/O), or NaN without /proc/stat."""
    try:
        with open("/proc/stat") as f:
            v = [int(t) for t in f.readline().split()[1:9]]
    except OSError:
        return float("nan")
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def forced(arm: list):
    """Make every ThreadChoice take what ``arm[0]`` says ("one" or "all"); returns the undo."""
    from ember_numba import launch

    cls = launch.ThreadChoice
    choose, record = cls.__dict__["choose"], cls.__dict__["record"]
    cls.choose = lambda self, key, watch=False: (arm[0] == "one", False, choose(self, key, watch)[2])  # type: ignore[method-assign]
    cls.record = lambda self, *a: None  # type: ignore[method-assign]

    def undo():
        cls.choose, cls.record = choose, record  # type: ignore[method-assign]

    return undo


def measure(path, side, calls, threads=2, steps=None):
    """{arm: [(wall s, cpu s)]} over ``calls`` rounds, and each round's other processes' cores;
    with ``steps`` (a dict), each arm's per-step times of the jitted program too, as
    ``steps[arm][i]`` (seconds a call) and ``steps["program"]``."""
    made = step_profile._programs() if steps is not None else None
    run, _ = onnx_models.make_runner("numba+jit", path, threads)
    x = np.random.default_rng(0).standard_normal((1, 3, side, side)).astype(np.float32)
    arm = ["one"]
    undo = forced(arm)
    try:
        for a in ARMS * 3:  # traced, compiled, both roads' buffers made
            arm[0] = a
            run(x)
        times: dict = {a: [] for a in ARMS}
        others = []
        for i in range(calls):
            b0, c0, w0 = busy_seconds(), time.process_time(), time.perf_counter()
            for a in ARMS[i % 2 :] + ARMS[: i % 2]:
                arm[0] = a
                timed = contextlib.nullcontext()
                if made:
                    steps["program"] = made[-1]
                    timed = step_profile.instrumented(made[-1], step_profile.timer(steps.setdefault(a, {})))
                with timed:
                    c, t = time.process_time(), time.perf_counter()
                    run(x)
                    times[a].append((time.perf_counter() - t, time.process_time() - c))
                time.sleep(onnx_models.PAUSE)
            mine = time.process_time() - c0
            others.append((busy_seconds() - b0 - mine) / (time.perf_counter() - w0))
    finally:
        undo()
    return times, others


def summary(times, rounds) -> list[str]:
    """Markdown rows: per arm the median (quartiles) wall and CPU ms, and all / one paired."""
    if not rounds:
        return []
    q = lambda v: f"{np.percentile(v, 50):.1f} ({np.percentile(v, 25):.1f}-{np.percentile(v, 75):.1f})"  # noqa: E731
    rows = []
    for a in ARMS:
        wall = [1e3 * times[a][i][0] for i in rounds]
        cpu = [1e3 * times[a][i][1] for i in rounds]
        ratio = [times[a][i][0] / times["one"][i][0] for i in rounds]
        rows.append(
            f"| {a} | {len(rounds)} | {q(wall)} | {q(cpu)} | {np.median(ratio):.3f} ({np.percentile(ratio, 25):.3f}-{np.percentile(ratio, 75):.3f}) |"
        )
    return rows


def per_step(steps, top, rounds=None) -> list[str]:
    """Markdown rows: the ``top`` layers whose arms differ most (ms a call), each arm's median
    over ``rounds`` (default: all), all / one, and the sums over every step."""
    program = steps.get("program")
    if program is None or "one" not in steps or "all" not in steps:
        return []
    rows = []
    for i in sorted(steps["one"]):
        one, alls = (1e3 * statistics.median(_at(steps[a].get(i, [0.0]), rounds)) for a in ARMS)
        v = program.origin[i]
        rows.append((abs(alls - one), i, step_profile._name(v), tuple(v.shape), one, alls))
    total = [sum(r[4] for r in rows), sum(r[5] for r in rows)]
    lines = ["| step | layer | shape | one ms | all ms | all / one |", "| ---: | --- | --- | ---: | ---: | ---: |"]
    for _, i, name, shape, one, alls in sorted(sorted(rows, reverse=True)[:top], key=lambda r: r[1]):
        lines.append(f"| {i} | {name} | {shape} | {one:.3f} | {alls:.3f} | {alls / max(one, 1e-9):.2f} |")
    lines.append(f"| | every step | | {total[0]:.2f} | {total[1]:.2f} | {total[1] / max(total[0], 1e-9):.2f} |")
    return lines


def _at(values, rounds):
    """``values`` of the rounds listed (all of them where ``rounds`` is None or names none of them)."""
    picked = [values[i] for i in rounds or () if i < len(values)]
    return picked or values


def main(argv=None) -> str:
    p = argparse.ArgumentParser(prog="python -m benchmarks.onnx_threads", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet50", help=f"of {', '.join(onnx_models.MODELS)}")
    p.add_argument("--calls", type=int, default=60, help="rounds (one call of each arm a round)")
    p.add_argument("--quiet", type=float, default=0.25, help="other processes' cores below which a round is quiet")
    p.add_argument("--exporter", choices=("torch", "ember"), default=None, help="default: torch where installed")
    p.add_argument("--steps", action="store_true", help="also time each step: per layer, one thread against all")
    p.add_argument("--top", type=int, default=30, help="layers listed with --steps")
    args = p.parse_args(argv)
    recording.warn_blas_overrides("python -m benchmarks.onnx_threads")
    steps: dict | None = {} if args.steps else None
    with onnx_models.exported(args.model, args.exporter) as path:
        times, others = measure(path, onnx_models.MODELS[args.model][3], args.calls, steps=steps)
    quiet = [i for i, o in enumerate(others) if o < args.quiet]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    head = [
        "| arm | rounds | wall ms | CPU ms (all threads) | wall / one's, paired |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    text = (
        f"{args.model}, batch 1, numba+jit on 2 threads, {args.calls} rounds; other processes' cores a round: "
        f"median {statistics.median(others):.2f}; 1-min load at the end {load:.2f}\n\n"
        f"All rounds:\n\n" + "\n".join(head + summary(times, list(range(args.calls)))) + "\n\n"
        f"Quiet rounds (other processes under {args.quiet} cores):\n\n"
        + ("\n".join(head + summary(times, quiet)) if quiet else "(none)")
        + "\n"
    )
    if steps is not None:
        text += "\nPer step, all rounds (median ms a call):\n\n" + "\n".join(per_step(steps, args.top)) + "\n"
        if quiet:
            text += "\nPer step, quiet rounds:\n\n" + "\n".join(per_step(steps, args.top, quiet)) + "\n"
    print(text)
    return text


if __name__ == "__main__":
    main()

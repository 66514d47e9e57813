"""Page faults and system time of compiled steps: per step, and which runner steps fault.

    python -m benchmarks.step_faults --workload W3-train --batch 32 --steps 6 --nodes 6
    python -m benchmarks.step_faults --workload resnet50-b1 --steps 20

``resource.getrusage`` counts the process's own minor faults and CPU time (all its threads),
so unlike wall time it does not move with other processes' load. A fresh allocation of the
size of an activation is mmapped by glibc and faulted page by page on first write: the faults
and the system time they cost show where a step allocates instead of reusing a buffer.
``--nodes N`` runs N more steps with each runner step measured alone, and sums them per
runner step: faults come in bursts, in some steps only.
"""

from __future__ import annotations

import argparse
import resource
import statistics

from benchmarks import recording
from benchmarks.step_profile import _name, _programs, instrumented


def _usage():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_minflt, r.ru_stime, r.ru_utime


def _delta(before, after):
    return tuple(b - a for a, b in zip(before, after))


def _setup(workload, backend, batch):
    """The step function of ``workload`` (a training workload, or ``resnet50-b1``: ONNX inference)."""
    if workload == "resnet50-b1":
        import numpy as np

        from benchmarks import onnx_models

        with onnx_models.exported("resnet50", "ember") as path:
            run, _ = onnx_models.make_runner(backend, path, 2)
        x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
        return lambda: run(x)
    from benchmarks.workloads import WORKLOADS, Ember

    step = WORKLOADS[workload].setup(Ember(backend, 2), batch)
    return lambda: step().item()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="W3-train")
    ap.add_argument("--backend", default="numba+jit")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--nodes", type=int, default=0, help="steps more, summed per runner step (those that fault most)")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    recording.warn_blas_overrides("python -m benchmarks.step_faults")

    made = _programs()
    step = _setup(args.workload, args.backend, args.batch)
    for _ in range(args.warmup):  # traced, planned, kernels compiled
        step()
    per = []
    for _ in range(args.steps):
        before = _usage()
        step()
        per.append(_delta(before, _usage()))
    faults, sys_t, user_t = (statistics.median(c) for c in zip(*per))
    mean_faults, mean_sys = (statistics.fmean(c) for c in list(zip(*per))[:2])
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{args.workload} on {args.backend}, batch {1 if args.workload == 'resnet50-b1' else args.batch}, "
        f"{args.steps} steps: median "
        f"{faults:.0f} minor faults/step (min {min(p[0] for p in per)}, max {max(p[0] for p in per)}), "
        f"system {sys_t * 1e3:.1f} ms/step, user {user_t * 1e3:.1f} ms/step (means: {mean_faults:.0f} faults, "
        f"{mean_sys * 1e3:.1f} ms system); peak RSS {rss:.0f} MiB"
    )
    print("faults per step:", [p[0] for p in per], "system ms:", [round(p[1] * 1e3) for p in per])
    if not args.nodes or not made:
        return
    program = made[-1]
    rows: dict = {}  # runner step -> its faults, system and user time, summed

    def counted(i, fn, bufs):
        before = _usage()
        out = fn(*bufs)
        rows[i] = [r + d for r, d in zip(rows.get(i, (0, 0, 0)), _delta(before, _usage()))]
        return out

    whole = (0, 0, 0)
    with instrumented(program, counted):
        for _ in range(args.nodes):
            before = _usage()
            step()
            whole = tuple(w + d for w, d in zip(whole, _delta(before, _usage())))
    inside = [sum(c) for c in zip(*rows.values())]
    f, s, u = (w - i for w, i in zip(whole, inside))
    print(f"runner steps by faults, summed over {args.nodes} steps; outside them (the rest of each call):")
    print(f"{f:7d} faults {s * 1e3:6.1f} ms sys {u * 1e3:7.1f} ms user")
    for i, (f, s, u) in sorted(rows.items(), key=lambda r: -r[1][0])[: args.top]:
        v = program.origin[i]
        print(f"{f:7d} faults {s * 1e3:6.1f} ms sys {u * 1e3:7.1f} ms user  #{i:<4d} {_name(v):28s} {tuple(v.shape)}")


if __name__ == "__main__":
    main()

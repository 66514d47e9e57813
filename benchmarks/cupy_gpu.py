"""ember-cupy against PyTorch CUDA, side by side: training throughput of the MLP and ResNet-18.

The harness in this folder times CPU frameworks; this runs the same models
(``workloads.mlp`` / ``resnet18``) on one GPU: PyTorch eager on CUDA, ember on ``cupy``
eagerly, and ember on ``cupy`` through ``ember.jit``. Each run is a fresh process (one
workload, one framework), so a crash or a timeout costs one row, not the report. It lives
here, not in the plugin, because it needs the repository's workloads; the plugin itself
imports only the installed ``ember``.

    python -m benchmarks.cupy_gpu --out DIR [--workloads mlp,resnet18] [--steps 20]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from . import workloads

BATCH = {"mlp": 128, "resnet18": 128}
SHAPE = {"mlp": (784,), "resnet18": (3, 32, 32)}
TARGETS = ("torch-cuda", "ember-cupy", "ember-cupy-jit", "ember-cupy-multi")


def _sync(target, backend):
    if target == "torch-cuda":
        import torch

        torch.cuda.synchronize()
    else:
        import ember

        ember.get_backend(backend).synchronize()


def run_one(workload: str, target: str, steps: int, warmup: int, backend: str = "cupy") -> dict:
    """Time ``steps`` training steps of ``workload`` on ``target`` after ``warmup`` steps."""
    import numpy as np

    build = workloads.mlp if workload == "mlp" else workloads.resnet18
    rng = np.random.RandomState(0)
    x = rng.standard_normal((BATCH[workload], *SHAPE[workload])).astype(np.float32)
    y = rng.randint(0, 10, size=BATCH[workload]).astype(np.int64)
    t0 = time.perf_counter()
    if target == "torch-cuda":
        import torch

        torch.manual_seed(0)
        model = build(torch.nn).cuda().train()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        xs, ys = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()

        def step():
            loss = torch.nn.functional.cross_entropy(model(xs), ys)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss

        version = torch.__version__
    else:
        import ember
        import ember.nn.functional as F
        from ember_cupy import multi_tensor

        if backend == "cupy-host":  # the CPU stand-in, to check this script without a GPU
            from ember_cupy.host import ember_backends

            ember.register_backend(ember_backends()[0])
        ember.use(backend)
        ember.manual_seed(0)
        model = build(ember.nn)
        model.train()
        opt = ember.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        xs, ys = ember.tensor(x), ember.tensor(y)
        multi = target == "ember-cupy-multi"

        def step():
            loss = F.cross_entropy(model(xs), ys)
            opt.zero_grad()
            loss.backward()
            if multi:
                multi_tensor.step(opt)
            else:
                opt.step()
            return loss

        if target == "ember-cupy-jit":
            step = ember.jit(step)
        version = ember.__version__
    losses = [float(step()) for _ in range(1)]  # first step: compiles, traces
    _sync(target, backend)
    first = time.perf_counter() - t0
    for _ in range(warmup):
        step()
    _sync(target, backend)
    t1 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    _sync(target, backend)
    seconds = time.perf_counter() - t1
    losses.append(float(loss))
    out = {
        "workload": workload,
        "target": target,
        "batch": BATCH[workload],
        "steps": steps,
        "seconds": seconds,
        "samples_per_s": steps * BATCH[workload] / seconds,
        "ms_per_step": 1000 * seconds / steps,
        "first_step_s": first,
        "losses": losses,
        "version": version,
    }
    if target != "torch-cuda":
        import ember

        b = ember.get_backend(backend)
        out.update(backend=backend, transfers=dict(b.transfers), kernels=len(b.rt.seen), memory=b.memory_stats())
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cupy_gpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for bench.json and bench.md")
    p.add_argument("--workloads", default="mlp,resnet18")
    p.add_argument("--targets", default=",".join(TARGETS))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--timeout", type=float, default=150, help="seconds per (workload, target) process")
    p.add_argument("--backend", default="cupy", help="ember backend of the ember targets (cupy-host: a CPU check)")
    p.add_argument("--one", nargs=2, metavar=("WORKLOAD", "TARGET"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(*args.one, args.steps, args.warmup, args.backend)))
        return 0
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for w in args.workloads.split(","):
        for t in args.targets.split(","):
            cmd = [
                sys.executable,
                "-m",
                "benchmarks.cupy_gpu",
                "--out",
                args.out,
                "--one",
                w,
                t,
                "--steps",
                str(args.steps),
                "--warmup",
                str(args.warmup),
                "--backend",
                args.backend,
            ]
            started = time.perf_counter()
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
                if proc.returncode == 0:
                    row = json.loads(proc.stdout.strip().splitlines()[-1])
                else:
                    row = {"workload": w, "target": t, "error": proc.stderr.strip()[-2000:]}
            except subprocess.TimeoutExpired:
                row = {"workload": w, "target": t, "error": f"timed out after {args.timeout:.0f} s"}
            row["wall_s"] = time.perf_counter() - started
            rows.append(row)
            _write(args.out, rows)  # after every row: a time limit keeps what ran
            brief = {k: (v[-300:] if k == "error" else v) for k, v in row.items()}
            print(json.dumps(brief), flush=True)
    print(table(rows))
    return 0


def _write(folder, rows):
    with open(os.path.join(folder, "bench.json"), "w") as f:
        json.dump(rows, f, indent=1)
    with open(os.path.join(folder, "bench.md"), "w") as f:
        f.write(table(rows))


def table(rows) -> str:
    """A Markdown table: samples/s and the ratio to PyTorch CUDA of the same workload."""
    lines = [
        "| workload | target | samples/s | ms/step | vs torch-cuda | first step (s) | note |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    ref = {r["workload"]: r.get("samples_per_s") for r in rows if r["target"] == "torch-cuda"}
    for r in rows:
        if "error" in r:
            lines.append(
                f"| {r['workload']} | {r['target']} | - | - | - | - | failed: "
                f"{r['error'].splitlines()[-1][:120] if r['error'] else '?'} |"
            )
            continue
        base = ref.get(r["workload"])
        ratio = f"{r['samples_per_s'] / base:.2f}x" if base else "-"
        lines.append(
            f"| {r['workload']} | {r['target']} | {r['samples_per_s']:.0f} | {r['ms_per_step']:.2f} | "
            f"{ratio} | {r['first_step_s']:.1f} | loss {r['losses'][0]:.3f} -> {r['losses'][-1]:.3f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())

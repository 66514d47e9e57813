"""Where a model's time goes, layer by layer: ember (numba+jit) beside onnxruntime, on 1 and 2 threads.

For each thread count, ember's jitted program has each of its steps timed inside the call
(benchmarks.step_profile's timer), median over ``--calls`` calls after a warm-up that lets its
thread choices settle; onnxruntime's session of as many intra-op threads reports each node's
time through its own profiler (``enable_profiling``), median over the same number of calls.
ember's convolution, pooling and classifier steps are paired with onnxruntime's Conv, MaxPool
and Gemm nodes in the order both run them, and summed by kind of layer.

    python -m benchmarks.onnx_layers --model resnet50 --threads 1,2 --calls 20

The thread counts run from the largest down: at one thread ember's choice between one thread
and all (launch.ThreadChoice) records one-thread times under "all", which would mislead a
larger count measured after it. Each call is followed by an untimed pause (onnx_models.PAUSE):
onnxruntime's threads spin on after a call. The output pairs go by position, so read them as
a map of where the time is, not as a per-layer certificate.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import numpy as np

from benchmarks import onnx_models, recording
from benchmarks.step_profile import _name, _programs, instrumented, timer

#: ember's steps that onnxruntime runs as a node of its own (Conv, MaxPool, Gemm), in run order.
LAYER_STEPS = (
    "conv2d_bias_relu",
    "conv2d_bias",
    "conv2d",
    "pointwise_bias_relu",
    "pointwise_bias",
    "max_pool2d",
    "matmul",
)
ORT_LAYERS = ("Conv", "FusedConv", "MaxPool", "Gemm")


def kind(name, shape, first) -> str:
    """The row of the summary table a paired layer adds to."""
    if first:
        return "first convolution"
    if name == "max_pool2d":
        return "max pool"
    if name == "matmul" and len(shape) == 2:
        return "classifier"
    if name.startswith("pointwise") or name == "matmul":
        return "1x1 convolutions"
    return "other convolutions"


def ember_steps(path, threads, calls, x, made):
    """[(step name, output shape, median ms)] of the layers' steps, the median call and the
    other steps' sum in ms (``made``: benchmarks.step_profile's list of the programs ember.jit makes)."""
    run, _ = onnx_models.make_runner("numba+jit", path, threads)
    for _ in range(max(8, calls)):  # traced, compiled, thread choices tried
        run(x)
    program = made[-1]
    times: dict = {}
    calls_ms = []
    with instrumented(program, timer(times)):
        for _ in range(calls):
            t0 = time.perf_counter()
            run(x)
            calls_ms.append(1e3 * (time.perf_counter() - t0))
            time.sleep(onnx_models.PAUSE)
    rows, rest = [], 0.0
    for i in sorted(times):
        v, ms = program.origin[i], 1e3 * statistics.median(times[i])
        if _name(v) in LAYER_STEPS:
            rows.append((_name(v), tuple(v.shape), ms))
        else:
            rest += ms
    return rows, statistics.median(calls_ms), rest


def ort_nodes(path, threads, calls, x):
    """[(node name, op type, median ms)] of onnxruntime's layer nodes, the median call and the
    other nodes' sum in ms."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.enable_profiling = True
    opts.profile_file_prefix = os.path.join(tempfile.gettempdir(), f"ember-ort-{os.getpid()}")
    session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: x}
    warm = 5
    for _ in range(warm):
        session.run(None, feed)
    calls_ms = []
    for _ in range(calls):
        t0 = time.perf_counter()
        session.run(None, feed)
        calls_ms.append(1e3 * (time.perf_counter() - t0))
        time.sleep(onnx_models.PAUSE)
    profile = session.end_profiling()
    with open(profile) as f:
        events = json.load(f)
    os.remove(profile)
    per: dict = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            per.setdefault((e["name"][: -len("_kernel_time")], e["args"].get("op_name")), []).append(e["dur"] / 1e3)
    medians = {k: statistics.median(t[warm:] or t) for k, t in per.items()}
    rows = [(n, op, ms) for (n, op), ms in medians.items() if op in ORT_LAYERS]
    rest = sum(ms for (_, op), ms in medians.items() if op not in ORT_LAYERS)
    return rows, statistics.median(calls_ms), rest


def report(counts, ember, ort) -> str:
    """Markdown: the layers paired, then the sums by kind of layer."""
    head = " | ".join(f"ember {n}t | ort {n}t" for n in counts)
    lines = [f"| # | ember step | shape | ort node | {head} |", "|" + " --- |" * (4 + 2 * len(counts))]
    first = counts[0]
    pairs = list(zip(ember[first][0], ort[first][0]))
    sums: dict = {}
    for i, ((name, shape, _), (node, op, _)) in enumerate(pairs):
        cells, row = [], sums.setdefault(kind(name, shape, i == 0), {})
        for n in counts:
            e, o = ember[n][0][i][2], ort[n][0][i][2]
            cells += [f"{e:.3f}", f"{o:.3f}"]
            row[n] = (row.get(n, (0.0, 0.0))[0] + e, row.get(n, (0.0, 0.0))[1] + o)
        lines.append(f"| {i} | {name} | {shape} | {op} {node[-32:]} | {' | '.join(cells)} |")
    if len(ember[first][0]) != len(ort[first][0]):
        lines.append(
            f"\n({len(ember[first][0])} ember steps against {len(ort[first][0])} onnxruntime nodes: pairs are approximate)"
        )
    ratios = " | ".join(f"ember / ort, {n}t" for n in counts)
    lines += ["", f"| layers | {head} | {ratios} |", "|" + " --- |" * (1 + 3 * len(counts))]
    total = {n: [0.0, 0.0] for n in counts}
    for k, row in sums.items():
        for n in counts:
            total[n][0] += row[n][0]
            total[n][1] += row[n][1]
        lines.append(f"| {k} | {_cells(row, counts)} |")
    lines.append(f"| all layers | {_cells(total, counts)} |")
    rest = {n: (ember[n][2], ort[n][2]) for n in counts}
    lines.append(f"| other steps / nodes | {_cells(rest, counts)} |")
    calls = ", ".join(f"{n} thread(s): ember {ember[n][1]:.1f} ms, onnxruntime {ort[n][1]:.1f} ms" for n in counts)
    return "\n".join(lines) + f"\n\nWhole calls (median): {calls}.\n"


def _cells(row, counts) -> str:
    """ember's and onnxruntime's sums per thread count, then ember's over onnxruntime's."""
    sums = " | ".join(f"{row[n][0]:.2f} | {row[n][1]:.2f}" for n in counts)
    return sums + " | " + " | ".join(f"{row[n][0] / max(row[n][1], 1e-9):.2f}x" for n in counts)


def main(argv=None) -> str:
    p = argparse.ArgumentParser(prog="python -m benchmarks.onnx_layers", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet50", help=f"of {', '.join(onnx_models.MODELS)}")
    p.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--exporter", choices=("torch", "ember"), default=None, help="default: torch where installed")
    args = p.parse_args(argv)
    recording.warn_blas_overrides("python -m benchmarks.onnx_layers")
    counts = sorted({int(n) for n in args.threads.split(",")}, reverse=True)
    side = onnx_models.MODELS[args.model][3]
    x = np.random.default_rng(0).standard_normal((1, 3, side, side)).astype(np.float32)
    ember, ort, made = {}, {}, _programs()
    with onnx_models.exported(args.model, args.exporter) as path:
        for n in counts:
            ember[n] = ember_steps(path, n, args.calls, x, made)
            ort[n] = ort_nodes(path, n, args.calls, x)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    text = f"{args.model}, batch 1, {args.calls} calls a thread count, 1-min load at the end {load:.2f}; ms\n\n"
    text += report(counts, ember, ort)
    print(text)
    return text


if __name__ == "__main__":
    main()

"""ImageNet-sized ONNX models on ember against onnxruntime, side by side in one run.

Issue #17's speed goal: a ResNet-50-class model at batch 1 on numba within 1.5x of
onnxruntime's CPU time. This script builds the standard ResNet (He et al. 2016, the ImageNet
variant: 7x7 stem, max pool, four stages, global average pool, 1000 classes) with random
weights, exports it to ONNX, and times the same file on

- ``ort``: onnxruntime's CPU provider, default session options, intra-op threads = the cores;
- ``numba``: ``ember.onnx.load`` on the numba backend, eager;
- ``numba+jit`` / ``numpy+jit``: the loaded module's forward through ``ember.jit``.

Every target gets the same input; its output is checked against onnxruntime's (rtol 1e-3)
before anything is timed. Then the targets take turns, one call each per round, the first of
the round rotating (ort, numba, numba+jit; numba, numba+jit, ort; ...), so drift of the machine
falls on all of them alike, and an untimed pause follows each call (``PAUSE``), so no target
runs while onnxruntime's threads still spin after their call; each
ratio is ember's time over onnxruntime's *of the same round*, reported as the median with its
range. The first call (tracing and compiling included) is reported apart.

    python -m benchmarks.onnx_models [--models resnet50,resnet18] [--batches 1,8] [--rounds 10]

The model is built with ``torch.nn`` and written by ``torch.onnx.export`` where torch is
installed (``--exporter torch``: what users bring), else with ``ember.nn`` and
``ember.onnx.export`` (``--exporter ember``). Results go to ``--out`` as JSON and Markdown.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import recording

TARGETS = ("ort", "numba", "numba+jit", "numpy+jit")
#: name -> (block kind, blocks per stage, stem width, image side)
MODELS = {
    "resnet50": ("bottleneck", (3, 4, 6, 3), 64, 224),
    "resnet18": ("basic", (2, 2, 2, 2), 64, 224),
    "tiny": ("bottleneck", (1, 1, 1, 1), 8, 32),  # the smoke test's: seconds, not minutes
}
CLASSES = 1000
#: Seconds of untimed pause after each timed call. onnxruntime's intra-op threads spin after a
#: call returns (its default ``session.intra_op.allow_spinning``): on the 2-core development
#: machine its other threads used 29-37 ms of CPU time during a 50-200 ms sleep after each call.
#: numba+jit called right after it took 1.55x (quartiles 1.14-1.66) the time of a numba+jit
#: call right after that one, where a call after a numba+jit call took 1.01x (0.97-1.10) the next
#: one's (ResNet-50, batch 1, 30 rounds, load 2.8). No target needs its threads spinning from one
#: round to the next (the other targets run in between), so the pause takes the spin out of the
#: next target's time and nothing from onnxruntime's. Every call follows the same pause: on a busy
#: machine the scheduler favours a process that has slept (onnxruntime after a 0.1 s pause took
#: 0.77x its time right after a numba+jit call, where nothing spins).
PAUSE = 0.1


# ---------------------------------------------------------------------------------- the model
def resnet(nn, kind, blocks, width, classes=CLASSES):
    """The ImageNet ResNet, written once for ``torch.nn`` and ``ember.nn`` (same names).

    ``kind`` is "basic" (two 3x3 convolutions: ResNet-18/34) or "bottleneck" (1x1, 3x3, 1x1
    with 4x expansion: ResNet-50/101/152); batch norm everywhere, in eval mode once built.
    """
    expansion = 4 if kind == "bottleneck" else 1

    def conv_bn(cin, cout, k, stride=1):
        return [nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout)]

    class Block(nn.Module):
        def __init__(self, cin, mid, stride):
            super().__init__()
            cout = mid * expansion
            if kind == "bottleneck":  # stride on the 3x3, as torchvision's v1.5
                layers = conv_bn(cin, mid, 1) + [nn.ReLU()] + conv_bn(mid, mid, 3, stride) + [nn.ReLU()]
                layers += conv_bn(mid, cout, 1)
            else:
                layers = conv_bn(cin, mid, 3, stride) + [nn.ReLU()] + conv_bn(mid, cout, 3)
            self.body = nn.Sequential(*layers)
            self.shortcut = nn.Sequential(*conv_bn(cin, cout, 1, stride)) if stride != 1 or cin != cout else None

        def forward(self, x):
            return (self.body(x) + (x if self.shortcut is None else self.shortcut(x))).relu()

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(*conv_bn(3, width, 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
            layers, cin = [], width
            for i, n in enumerate(blocks):
                mid = width * 2**i
                for j in range(n):
                    layers.append(Block(cin, mid, 2 if i > 0 and j == 0 else 1))
                    cin = mid * expansion
            self.layers = nn.Sequential(*layers)
            self.fc = nn.Linear(cin, classes)

        def forward(self, x):
            return self.fc(self.layers(self.stem(x)).mean((2, 3)))

    return ResNet()


@contextlib.contextmanager
def exported(name, exporter=None, batch=1, **options):
    """The path of model ``name`` written by :func:`export` (``exporter``: torch where installed)
    into a temporary folder, removed with the folder on leaving, a failed measurement too: a
    ResNet-50 file is 100 MB, and the copies that tools left behind once filled the disk.

    >>> with exported("tiny", "ember") as path:
    ...     os.path.getsize(path) > 0
    True
    >>> os.path.exists(path)
    False
    """
    exporter = exporter or ("torch" if _has_torch() else "ember")
    with tempfile.TemporaryDirectory(prefix="ember-onnx-") as folder:
        path = os.path.join(folder, f"{name}-{batch}.onnx")
        export(name, exporter, path, batch, **options)
        yield path


def export(name, exporter, path, batch=1, seed=0, batchnorm=False):
    """Build model ``name`` with random weights (and batch-norm statistics), write it to ``path``
    for inputs of ``batch`` images (ember writes the example's shapes; so does torch, here).
    ``batchnorm``: torch keeps the BatchNormalization nodes (no constant folding), as files of
    other exporters and model zoos have them; by default it folds them into the convolutions."""
    kind, blocks, width, side = MODELS[name]
    if exporter == "torch":
        import torch

        torch.manual_seed(seed)
        model = resnet(torch.nn, kind, blocks, width).eval()
        _randomize_statistics(model.named_buffers(), lambda a: torch.from_numpy(a))
        x = torch.randn(batch, 3, side, side)
        # The TorchScript exporter (dynamo=False) folds each batch norm into its convolution, as
        # deployed files have it; the torch.export-based one needs onnxscript.
        torch.onnx.export(
            model,
            (x,),
            path,
            dynamo=False,
            input_names=["x"],
            output_names=["logits"],
            do_constant_folding=not batchnorm,
        )
        return
    import ember
    import ember.onnx

    ember.use("numpy")
    ember.manual_seed(seed)
    model = resnet(ember.nn, kind, blocks, width).eval()
    _randomize_statistics(model.named_buffers(), ember.tensor)
    ember.onnx.export(model, ember.randn(batch, 3, side, side), path)


def _randomize_statistics(buffers, to_tensor):
    """Running means and variances away from 0 and 1: folding them must be right, not a no-op."""
    rng = np.random.default_rng(1)
    for name, b in buffers:
        shape = tuple(b.shape)
        if name.endswith("running_mean"):
            b.copy_(to_tensor(rng.normal(0, 0.1, shape).astype(np.float32)))
        elif name.endswith("running_var"):
            b.copy_(to_tensor(rng.uniform(0.5, 1.5, shape).astype(np.float32)))


# ---------------------------------------------------------------------------------- the targets
def make_runner(target, path, threads):
    """A function ``run(x: np.ndarray) -> np.ndarray`` for ``target``, and what it runs on."""
    if target == "ort":
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        return lambda x: session.run(None, {name: x})[0], f"onnxruntime {ort.__version__}"
    import ember
    import ember.onnx

    backend, _, mode = target.partition("+")
    ember.use(backend)
    if backend == "numba":
        from ember_numba import threads as numba_threads

        numba_threads.set_num_threads(threads)
    model = ember.onnx.load(path).to(backend).eval()
    forward = ember.jit(model) if mode == "jit" else model

    def run(x):
        with ember.backend(backend), ember.no_grad():
            return forward(ember.tensor(x)).numpy()  # the host read ends the call

    return run, f"ember {ember.__version__} on {backend}{' under ember.jit' if mode else ''}"


def measure(name, batch, targets, path, rounds, warmup, threads, pause=0.0):
    """One model at one batch size: first calls, the output check, then interleaved rounds,
    ``pause`` seconds after each timed call."""
    side = MODELS[name][3]
    x = np.random.default_rng(0).standard_normal((batch, 3, side, side)).astype(np.float32)
    rows, runners = {}, {}
    for t in targets:
        row = rows[t] = {"model": name, "batch": batch, "target": t}
        try:
            t0 = time.perf_counter()
            run, row["runs_on"] = make_runner(t, path, threads)
            row["load_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            row["output"] = run(x)
            row["first_call_s"] = time.perf_counter() - t0
            for _ in range(warmup):  # jit traces the first calls and compiles after
                run(x)
            runners[t] = run
        except Exception as e:  # a failing target is a row that says why, not a lost report
            row["error"] = f"{type(e).__name__}: {e}"
    ref = rows.get("ort", {}).get("output")
    for t, row in rows.items():
        out = row.pop("output", None)
        if ref is not None and out is not None and t != "ort":
            err = float(np.max(np.abs(out - ref) / (np.abs(ref) + 1e-3)))
            row["max_rel_err"] = err
            if not np.allclose(out, ref, rtol=1e-3, atol=1e-4):
                row["error"] = f"output differs from onnxruntime's (max relative error {err:.2e})"
                runners.pop(t, None)
    for row in rows.values():
        row["seconds"] = []
    order = list(runners.items())
    for r in range(rounds):
        # the first target rotates, so drift of the machine falls on every target alike; and
        # each call is followed by an untimed pause: onnxruntime's pool threads spin on after a
        # call (about 30 ms of CPU time on the 2-core development machine), which took a core
        # from whatever ran next (see PAUSE)
        for t, run in order[r % len(order) :] + order[: r % len(order)]:
            t0 = time.perf_counter()
            run(x)
            rows[t]["seconds"].append(time.perf_counter() - t0)
            time.sleep(pause)
    base = rows.get("ort", {}).get("seconds")
    for t, row in rows.items():
        s = row["seconds"]
        if s:
            row["median_ms"], row["min_ms"], row["max_ms"] = (1e3 * statistics.median(s), 1e3 * min(s), 1e3 * max(s))
        if s and base and t != "ort":
            ratios = [a / b for a, b in zip(s, base)]
            row["ratio"], row["ratio_min"], row["ratio_max"] = statistics.median(ratios), min(ratios), max(ratios)
    return list(rows.values())


def table(rows) -> str:
    """Markdown: median latency (range), ratio to onnxruntime of the same rounds, first call."""
    lines = [
        "| model | batch | target | median ms (min–max) | time / onnxruntime (range) | first call s | note |",
        "| --- | ---: | --- | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        if "median_ms" not in r:
            lines.append(f"| {r['model']} | {r['batch']} | {r['target']} | – | – | – | {r.get('error', '?')[:160]} |")
            continue
        ratio = "1 (reference)" if r["target"] == "ort" else "–"
        if "ratio" in r:
            ratio = f"{r['ratio']:.2f}x ({r['ratio_min']:.2f}–{r['ratio_max']:.2f})"
        note = f"max rel. err {r['max_rel_err']:.1e}" if "max_rel_err" in r else ""
        lines.append(
            f"| {r['model']} | {r['batch']} | {r['target']} | {r['median_ms']:.1f} ({r['min_ms']:.1f}–{r['max_ms']:.1f}) "
            f"| {ratio} | {r['first_call_s']:.3g} | {note} |"
        )
    return "\n".join(lines) + "\n"


def machine(threads) -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, {threads} threads per target, "
        f"1-min load average at start {load:.2f}, Python {platform.python_version()}, numpy {np.__version__}"
        + "".join(f", {k}={v}" for k, v in recording.blas_overrides().items())
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.onnx_models", description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="resnet50,resnet18", help=f"of {', '.join(MODELS)}")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--targets", default=",".join(TARGETS))
    p.add_argument("--rounds", type=int, default=10, help="timed calls per target, interleaved")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls after the first (jit compiles in them)")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="threads of every target (default: cores)")
    p.add_argument("--exporter", choices=("torch", "ember"), default=None, help="default: torch where installed")
    p.add_argument(
        "--batchnorm", action="store_true", help="torch exporter: keep BatchNormalization nodes (default: folded)"
    )
    p.add_argument("--pause", type=float, default=PAUSE, help="untimed seconds after each timed call (see PAUSE)")
    p.add_argument("--out", default="benchmarks/results", help="folder for onnx-models-DATE.json and .md")
    args = p.parse_args(argv)
    recording.warn_blas_overrides("python -m benchmarks.onnx_models")
    exporter = args.exporter or ("torch" if _has_torch() else "ember")
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d-%H%M", time.gmtime())
    header = f"Machine: {machine(args.threads)}. Exporter: {exporter}{' (BatchNormalization kept)' if args.batchnorm else ''}. Rounds: {args.rounds}, warm-up {args.warmup}, pause {args.pause} s after each call.\n\n"
    env = {k: os.environ.get(k) for k in recording.BLAS_OVERRIDES}
    rows = []
    for name in args.models.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            path = str(out / f"{name}-{batch}.onnx")
            export(name, exporter, path, batch, batchnorm=args.batchnorm)
            rows += measure(name, batch, targets, path, args.rounds, args.warmup, args.threads, args.pause)
            os.remove(path)
            (out / f"onnx-models-{stamp}.json").write_text(
                json.dumps({"machine": header, "env": env, "rows": rows}, indent=1)
            )
            print(table(rows[-len(targets) :]), flush=True)
    text = header + table(rows)
    (out / f"onnx-models-{stamp}.md").write_text(text)
    print(text)
    return 1 if any("error" in r for r in rows) else 0


def _has_torch() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


if __name__ == "__main__":
    sys.exit(main())

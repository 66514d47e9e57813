"""Where one compiled training or inference step spends its time: each step of ember.jit's program timed
on its own, in the step (in-step) and, with ``--hot``, repeated alone on the same buffers
(hot caches), so a kernel slow in itself tells apart from one slowed by what ran before it.

    python -m benchmarks.step_profile --workload W1-train --backend numba+jit --hot
    python -m benchmarks.step_profile --workload W2-train --groups
    python -m benchmarks.step_profile --workload W3-train --layers
    python -m benchmarks.step_profile --workload W3-infer-b1 --batch 1 --layers
    python -m benchmarks.step_profile --workload W3-train --idle

``--layers`` adds up the runner steps by kind of layer (:func:`layer_kind`: convolutions by
kernel, stride and primitive, batch norm, ReLU, ...), beside the time a step spends outside
them (the runner, allocation) and its system and user CPU time; benchmarks/torch_ops.py
groups PyTorch's own per-op times the same way, for a side-by-side map.

``--idle`` also takes the process's CPU time (all threads) around each runner step: a step
whose CPU time is under its wall time times the threads left cores idle (a pass on one thread,
uneven blocks, a hand-off). It prints those idle core-milliseconds by kind of layer and the
runner steps that leave the most.

Run speed measurements through the project's quiet-machine wrapper (docs/performance.md).
The in-step times add up to the step's time; "hot" times of a product are its speed with its
operands in cache, of an elementwise pass its speed when not waiting on memory.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import resource
import statistics
import time

from benchmarks import recording
from benchmarks.workloads import WORKLOADS, Ember

#: Threads the profiled backend runs on (the benchmarks' two).
THREADS = 2


def _finish(out):
    """Wait for a step's result: a training step's loss, an inference step's outputs."""
    return out.numpy()


def _programs():
    """Every ember.jit program made from here on (a list that fills up)."""
    from ember.jit import runner

    made, init = [], runner.Program.__init__

    def recording(self, *args, **kw):
        init(self, *args, **kw)
        made.append(self)

    runner.Program.__init__ = recording
    return made


def _each_step(program, inputs, captures, rng, on_step):
    """``program.run`` with each runner step called as ``on_step(i, fn, bufs)``, which returns
    the step's result (and measures it)."""
    env = program.start(inputs, captures, rng)
    for i, (fn, out, args, free) in enumerate(program.steps):
        env[out] = on_step(i, fn, [env[a] for a in args])
        for f in free:
            env[f] = None
    return [env[s] for s in program.out_slots]


@contextlib.contextmanager
def instrumented(program, on_step):
    """Within the block, ``program`` (and no other) runs its steps through ``on_step``."""
    cls = type(program)
    real = cls.run
    cls.run = lambda self, *a: _each_step(self, *a, on_step) if self is program else real(self, *a)
    try:
        yield
    finally:
        cls.run = real


def timer(times, kept=None, cpu=None):
    """An ``on_step`` for :func:`instrumented` that times each runner step into ``times[i]``
    (and keeps its arguments in ``kept[i]``, and the process's CPU seconds in ``cpu[i]``)."""

    def timed(i, fn, bufs):
        if kept is not None:
            kept[i] = bufs
        c0 = time.process_time() if cpu is not None else 0.0
        t0 = time.perf_counter()
        out = fn(*bufs)
        times.setdefault(i, []).append(time.perf_counter() - t0)
        if cpu is not None:
            cpu.setdefault(i, []).append(time.process_time() - c0)
        return out

    return timed


def _name(v):
    return str(v.params.get("name", v.op)) if v.op in ("fused", "numpy_kernel") else v.op


#: Convolution ops -> the primitive's name in :func:`layer_kind` (the rewrites' fused kernels too).
CONV_PRIMITIVES = {
    "conv2d": "forward",
    "conv2d_bias": "forward",
    "conv2d_bias_relu": "forward",
    "conv2d_grad_input": "input gradient",
    "conv2d_grad_weight": "weight gradient",
}
#: Other ops -> their group; an op not named here is its own group.
OP_GROUPS = {
    "batch_norm": "batch norm",
    "batch_norm_backward": "batch norm backward",
    "gt": "ReLU (gt/where)",
    "where": "ReLU (gt/where)",
    "relu_max_pool2d_backward": "pooling",
    "max_pool2d": "pooling",
    "max_pool2d_backward": "pooling",
    "add": "add",
    "mul": "scalar ops (update, running stats)",
    "fused_output": "scalar ops (update, running stats)",
    "matmul": "linear, pooling by mean, loss",
    "mean": "linear, pooling by mean, loss",
    "sum": "linear, pooling by mean, loss",
    "div": "linear, pooling by mean, loss",
    "cross_entropy": "linear, pooling by mean, loss",
    "cross_entropy_backward": "linear, pooling by mean, loss",
}


def conv_kind(weight_shape, stride, primitive):
    """``"3x3 s2 forward"``; a convolution reading at most 4 channels (an image) is the ``stem``."""
    o, c, kh, kw = weight_shape
    return f"stem {primitive}" if c <= 4 else f"{kh}x{kw} s{stride[0]} {primitive}"


def layer_kind(v):
    """The group of runner step ``v`` (the Var it computes) in ``--layers``."""
    name = _name(v)
    if name in CONV_PRIMITIVES:
        shape = v.params["weight_shape"] if name == "conv2d_grad_weight" else v.inputs[1].shape
        return conv_kind(shape, tuple(v.params.get("stride", (1, 1))), CONV_PRIMITIVES[name])
    return OP_GROUPS.get(name, name)


def layers(program, times, steps, usage):
    """Print the median times of ``program``'s runner steps added up by :func:`layer_kind`,
    and the time each step spent outside them (the runner's loop, freeing buffers: the median
    of each step's own difference, not of the medians'); ``steps`` the steps' wall times,
    ``usage`` their (system, user) CPU seconds (all threads)."""
    groups, counts = collections.Counter(), collections.Counter()
    for i, t in times.items():
        kind = layer_kind(program.origin[i])
        groups[kind] += statistics.median(t)
        counts[kind] += 1
    nodes = sum(groups.values())
    outside = statistics.median(t - sum(ts[k] for ts in times.values()) for k, t in enumerate(steps))
    system, user = (statistics.median(u[k] for u in usage) for k in (0, 1))
    print(
        f"by layer: step median {statistics.median(steps) * 1e3:.1f} ms, runner steps {nodes * 1e3:.1f} ms "
        f"(medians), outside them {outside * 1e3:.1f} ms; CPU a step: system {system * 1e3:.1f} ms, user {user * 1e3:.1f} ms"
    )
    for kind, t in groups.most_common():
        print(f"{t * 1e3:10.2f} ms {100 * t / nodes:5.1f}%  {counts[kind]:4d}  {kind}")


def idle(program, times, cpu, threads, top):
    """Print the idle core time of ``program``'s runner steps (``threads`` x wall - CPU, medians),
    by :func:`layer_kind` and for the ``top`` steps that leave the most."""
    rows, groups = [], collections.defaultdict(lambda: [0.0, 0.0, 0])
    for i, t in times.items():
        wall, used = statistics.median(t), statistics.median(cpu[i])
        rows.append((threads * wall - used, wall, used, i))
        g = groups[layer_kind(program.origin[i])]
        g[0], g[1], g[2] = g[0] + wall, g[1] + used, g[2] + 1
    wall, used = sum(r[1] for r in rows), sum(r[2] for r in rows)
    print(f"idle cores: {(threads * wall - used) * 1e3:.1f} core-ms of {threads * wall * 1e3:.1f} ({threads} threads)")
    for kind, (w, c, n) in sorted(groups.items(), key=lambda kv: kv[1][1] - threads * kv[1][0]):
        print(f"{(threads * w - c) * 1e3:10.2f} core-ms idle  CPU/wall {c / w:4.2f}  {n:4d}  {kind}")
    for gap, w, c, i in sorted(rows, reverse=True)[:top]:
        v = program.origin[i]
        print(
            f"{gap * 1e3:9.2f} core-ms  {w * 1e3:9.2f} ms  CPU/wall {c / w:4.2f}  #{i:<3d} {_name(v):28s} {tuple(v.shape)}"
        )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="W1-train")
    ap.add_argument("--backend", default="numba+jit")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--top", type=int, default=30, help="rows shown")
    ap.add_argument("--hot", action="store_true", help="also time each step repeated alone")
    ap.add_argument("--groups", action="store_true", help="print the program's fusion groups")
    ap.add_argument("--layers", action="store_true", help="add up the runner steps by kind of layer")
    ap.add_argument("--idle", action="store_true", help="the cores each runner step leaves idle (CPU against wall)")
    args = ap.parse_args(argv)
    recording.warn_blas_overrides("python -m benchmarks.step_profile")

    if not args.backend.endswith("+jit"):
        ap.error(f"--backend {args.backend}: the profile times ember.jit's program; name a +jit target, e.g. numba+jit")
    made = _programs()
    step = WORKLOADS[args.workload].setup(Ember(args.backend, THREADS), args.batch)
    for _ in range(5):  # traced, planned, kernels compiled
        step()
    best = min(_once(step) for _ in range(args.steps))
    program = made[-1]  # the training step's (earlier ones: a first-step trace)
    times: dict = {}
    cpu: dict | None = {} if args.idle else None  # runner step -> the process's CPU seconds

    steps, usage = [], []
    with instrumented(program, timer(times, cpu=cpu)):
        for _ in range(args.steps):
            r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            _finish(step())
            steps.append(time.perf_counter() - t0)
            r1 = resource.getrusage(resource.RUSAGE_SELF)
            usage.append((r1.ru_stime - r0.ru_stime, r1.ru_utime - r0.ru_utime))
    kept: dict = {}  # runner step -> its arguments, for --hot
    if args.hot:
        # One more step keeps every runner step's arguments: alive together they are memory
        # the allocator cannot hand out again, and a step timed so would fault fresh pages in.
        with instrumented(program, timer({}, kept)):
            _finish(step())
    rows = sorted(((statistics.median(t), i) for i, t in times.items()), reverse=True)
    print(
        f"{args.workload} on {args.backend}, batch {args.batch}: best step {best * 1e3:.2f} ms; "
        f"{len(program.steps)} runner steps, sum of their medians {sum(r[0] for r in rows) * 1e3:.2f} ms"
    )
    for t, i in rows[: args.top]:
        v = program.origin[i]
        hot = ""
        if args.hot:
            hot = f"{_hot(program.steps[i][0], kept[i]) * 1e6:9.1f} µs hot"
        print(f"{t * 1e6:9.1f} µs  {hot}  #{i:<3d} {_name(v):28s} {tuple(v.shape)}")
    if args.layers:
        layers(program, times, steps, usage)
    if cpu is not None:
        idle(program, times, cpu, THREADS, args.top)
    if args.groups:
        for g in program.groups:
            kind = (g.kind if g.fused else "-") + (" compiled" if program.kernels.get(id(g)) else "")
            print(f"{kind}: " + "; ".join(f"{_name(v)}{tuple(v.shape)}" for v in g.nodes))


def _once(step):
    """Seconds of one training step (its loss read back: asynchronous devices finish)."""
    t0 = time.perf_counter()
    _finish(step())
    return time.perf_counter() - t0


def _hot(fn, bufs, repeats=20):
    """The fastest of ``repeats`` calls of runner step ``fn`` on the same buffers."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*bufs)
        best = min(best, time.perf_counter() - t0)
    return best


if __name__ == "__main__":
    main()

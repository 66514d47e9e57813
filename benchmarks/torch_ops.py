"""PyTorch's own per-op times of a training step, grouped as ``step_profile --layers`` groups
ember's, for a side-by-side map of where each spends a step.

    python -m benchmarks.torch_ops --workload W3-train --mode compile --threads 2

torch.profiler's self CPU time of each op on the thread that called it (its wall time there,
the op's own worker threads included), summed over ``--steps`` steps and divided by them.
PyTorch runs a convolution's input and weight gradients as one op (``convolution_backward``):
those are one group here. Under torch.compile the elementwise work (batch norm, ReLU, adds)
runs inside the compiled graphs' own kernels: the graphs' self time is its own group.
"""

from __future__ import annotations

import argparse
import collections
import time

from benchmarks import recording
from benchmarks.step_profile import conv_kind
from benchmarks.workloads import WORKLOADS, Torch

#: Convolution ops -> (primitive, where their stride is among the op's arguments).
CONVOLUTIONS = {
    "aten::mkldnn_convolution": ("forward", 4),
    "aten::convolution_backward": ("input + weight gradients", 4),
}
#: Other ops -> their group (anything else: "other").
OP_GROUPS = {
    "aten::native_batch_norm": "batch norm",
    "aten::native_batch_norm_backward": "batch norm backward",
    "aten::clamp_min": "ReLU",
    "aten::relu": "ReLU",
    "aten::threshold_backward": "ReLU",
    "aten::max_pool2d_with_indices": "pooling",
    "aten::max_pool2d_with_indices_backward": "pooling",
    "aten::mm": "linear, pooling by mean, loss",
    "aten::addmm": "linear, pooling by mean, loss",
    "aten::mean": "linear, pooling by mean, loss",
    "aten::_log_softmax": "linear, pooling by mean, loss",
    "aten::_log_softmax_backward_data": "linear, pooling by mean, loss",
    "aten::nll_loss_forward": "linear, pooling by mean, loss",
    "aten::nll_loss_backward": "linear, pooling by mean, loss",
}
#: Elementwise ops: on a batch's activations the residual adds, on parameters the update.
ELEMENTWISE = frozenset(("aten::add", "aten::add_", "aten::copy_", "aten::mul_", "aten::zero_", "aten::fill_"))


def op_kind(event, batch):
    """The group of one profiler event (an op), or None for an op that only calls others."""
    name, shapes = event.name, event.input_shapes
    if name in CONVOLUTIONS:
        primitive, at = CONVOLUTIONS[name]
        weight = shapes[1] if name == "aten::mkldnn_convolution" else shapes[2]
        stride = event.concrete_inputs[at] if len(event.concrete_inputs) > at else None
        return conv_kind(weight, tuple(stride or (1, 1)), primitive)
    if name in OP_GROUPS:
        return OP_GROUPS[name]
    if name.startswith("## Call CompiledFxGraph"):
        return "compiled graphs' own kernels (batch norm, ReLU, adds)"
    if name.startswith("aten::_foreach") or name in ELEMENTWISE:
        activation = shapes and shapes[0] and len(shapes[0]) == 4 and shapes[0][0] == batch
        return "add" if activation else "parameter update, gradients"
    return "other"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="W3-train")
    ap.add_argument("--mode", default="eager", choices=("eager", "compile"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=2)
    args = ap.parse_args(argv)
    recording.warn_blas_overrides("python -m benchmarks.torch_ops")

    from torch.profiler import ProfilerActivity, profile

    step = WORKLOADS[args.workload].setup(Torch(args.mode, args.threads), args.batch)
    for _ in range(4):  # compiled, warm
        step()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(args.steps):
            step()
    groups, counts = collections.Counter(), collections.Counter()
    for event in prof.events():
        kind = op_kind(event, args.batch)
        groups[kind] += event.self_cpu_time_total / 1e3 / args.steps  # µs -> ms a step
        counts[kind] += 1
    total = sum(groups.values())
    print(
        f"{args.workload} on torch {args.mode}, {args.threads} threads, batch {args.batch}: steps "
        f"{', '.join(f'{t * 1e3:.0f}' for t in times)} ms unprofiled; ops' self time {total:.1f} ms a step"
    )
    for kind, t in groups.most_common():
        print(f"{t:10.2f} ms {100 * t / total:5.1f}%  {counts[kind] // args.steps:4d}  {kind}")


if __name__ == "__main__":
    main()

"""benchmarks/step_profile.py --layers and benchmarks/torch_ops.py: a training step's time by
kind of layer, ember's runner steps and PyTorch's ops grouped by the same names."""

import re

import pytest
from bench_helpers import assert_blas_warning, run_module

from benchmarks.step_profile import conv_kind


def _run(module, *args):
    proc = run_module(module, *args, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert_blas_warning(proc.stderr, f"python -m {module}")
    return proc.stdout.strip().splitlines()


def _groups(lines):
    rows = [re.match(r" *([\d.]+) ms +([\d.]+)% +(\d+)  (.+)$", line) for line in lines]
    assert all(rows), lines
    return {r[4]: (float(r[1]), float(r[2]), int(r[3])) for r in rows}


def test_convolutions_are_named_by_kernel_stride_and_primitive():
    assert conv_kind((128, 64, 3, 3), (2, 2), "forward") == "3x3 s2 forward"
    assert conv_kind((128, 64, 1, 1), (2, 2), "input gradient") == "1x1 s2 input gradient"
    assert conv_kind((64, 3, 3, 3), (1, 1), "weight gradient") == "stem weight gradient"


def test_layers_add_up_the_runner_steps_of_a_lenet_step():
    args = ["--workload", "W2-train", "--backend", "numpy+jit", "--batch", "8", "--steps", "3", "--top", "0"]
    lines = _run("benchmarks.step_profile", *args, "--layers")
    total = float(re.search(r"sum of their medians ([\d.]+) ms", lines[0])[1])
    head = re.match(
        r"by layer: step median [\d.]+ ms, runner steps ([\d.]+) ms \(medians\), outside them -?[\d.]+ ms; "
        r"CPU a step: system [\d.]+ ms, user [\d.]+ ms$",
        lines[1],
    )
    assert head and float(head[1]) == pytest.approx(total, abs=0.1)
    groups = _groups(lines[2:])
    for primitive in ("forward", "input gradient", "weight gradient"):
        assert groups[f"3x3 s1 {primitive}"][2] == 1  # LeNet's second convolution
    assert groups["stem forward"][2] == 1  # its first reads the one-channel image
    assert sum(n for _, _, n in groups.values()) == int(re.search(r"(\d+) runner steps", lines[0])[1])
    assert sum(share for _, share, _ in groups.values()) == pytest.approx(100, abs=0.5)


def test_idle_cores_and_hot_times_of_a_lenet_step():
    """--idle: each runner step's idle core time (threads x wall - the process's CPU), by kind
    and for the top steps; --hot times the top steps again alone, from a step of their own."""
    args = ["--workload", "W2-train", "--backend", "numpy+jit", "--batch", "8", "--steps", "3", "--top", "2"]
    lines = _run("benchmarks.step_profile", *args, "--idle", "--hot")
    assert all(re.search(r"µs +[\d.]+ µs hot +#\d+", line) for line in lines[1:3]), lines[:3]
    head = next(i for i, line in enumerate(lines) if line.startswith("idle cores:"))
    assert re.match(r"idle cores: -?[\d.]+ core-ms of [\d.]+ \(2 threads\)$", lines[head])
    kinds = [re.match(r" *-?[\d.]+ core-ms idle  CPU/wall [\d.]+ +(\d+)  (.+)$", line) for line in lines[head + 1 : -2]]
    assert all(kinds) and {k[2] for k in kinds} >= {"3x3 s1 forward", "stem forward"}
    assert sum(int(k[1]) for k in kinds) == int(re.search(r"(\d+) runner steps", lines[0])[1])
    tops = [re.match(r" *-?[\d.]+ core-ms +[\d.]+ ms  CPU/wall [\d.]+  #\d+ ", line) for line in lines[-2:]]
    assert all(tops), lines[-2:]


def test_an_inference_step_is_profiled_too():
    """An inference workload's step returns logits, not a loss: profiled all the same."""
    args = ["--workload", "W3-infer-b1", "--backend", "numpy+jit", "--batch", "1", "--steps", "2", "--top", "0"]
    lines = _run("benchmarks.step_profile", *args, "--layers")
    assert re.match(r"W3-infer-b1 on numpy\+jit, batch 1: best step", lines[0]), lines[0]
    groups = _groups(lines[2:])
    assert groups["3x3 s1 forward"][2] == 13 and "3x3 s1 input gradient" not in groups  # ResNet-18's, forward only


def test_a_backend_without_the_jit_is_one_clear_error():
    proc = run_module("benchmarks.step_profile", "--backend", "numpy")
    assert proc.returncode == 2 and "name a +jit target" in proc.stderr.splitlines()[-1], proc.stderr


def test_torch_ops_groups_pytorchs_ops_the_same_way():
    pytest.importorskip("torch")
    lines = _run("benchmarks.torch_ops", "--workload", "W2-train", "--batch", "4", "--threads", "1")
    assert re.match(r"W2-train on torch eager, 1 threads, batch 4: steps .* ms a step$", lines[0])
    groups = _groups([line for line in lines[1:] if not line.startswith("USDT")])
    assert groups["3x3 s1 forward"][2] == 1
    assert groups["3x3 s1 input + weight gradients"][2] == 1
    assert groups["stem forward"][2] == 1


def test_layers_vs_torch_times_both_on_the_same_layers():
    pytest.importorskip("torch")
    pytest.importorskip("ember_numba")
    lines = _run("benchmarks.layers_vs_torch", "--batch", "2", "--calls", "3", "--kinds", "1x1,bn")
    assert re.match(r"ember numba / PyTorch .*, 1 threads each, batch 2, medians of 3 calls$", lines[0])
    rows = [line for line in lines[1:] if not line.startswith("USDT")]
    assert len(rows) == 3 + 4
    row = r" +forward ember +[\d.]+ torch +[\d.]+ ms \([\d.]+x\); {} ember +[\d.]+ torch +[\d.]+ ms \([\d.]+x\)$"
    assert all(re.match(r"1x1 s2 \d+->\d+ \d+x\d+" + row.format(r"dX\+dW"), r) for r in rows[:3]), rows
    assert all(re.match(r"batch norm \d+x\d+x\d+" + row.format("backward"), r) for r in rows[3:]), rows

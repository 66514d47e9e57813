"""Resume is exact from any kill point: real `ember train` processes, killed with SIGKILL at
named moments (EMBER_KILL_AT, see ember.io.faults), resumed, and compared bit for bit with an
uninterrupted run: parameters, optimizer state, epoch records and the logged evaluations."""

import json
import os
import signal
import subprocess
import sys

import pytest

from ember.io.checkpoint import read_checkpoint

try:
    from ember.data import MNIST

    MNIST(train=False)
except Exception as exc:  # noqa: BLE001
    pytest.skip(f"real MNIST not available here: {exc}", allow_module_level=True)

# 512 samples at batch 64: 8 batches an epoch, two epochs, an evaluation after each.
QUICK = [
    "mnist",
    "--model",
    "mlp",
    "--limit-train",
    "512",
    "--limit-test",
    "200",
    "--epochs",
    "2",
    "--no-progress",
    "--batch-size",
    "64",
]


def ember(*args, kill_at=None, timeout=300):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    env.pop("EMBER_KILL_AT", None)
    if kill_at:
        env["EMBER_KILL_AT"] = kill_at
    return subprocess.run(
        [sys.executable, "-m", "ember.cli", "train", *QUICK, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def state(run_dir):
    """Every tensor of the newest checkpoint as bytes, and its sidecar meta."""
    tensors, meta = read_checkpoint(run_dir)
    return {k: bytes(v.data) for k, v in tensors.items()}, meta


def evals(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: r[k] for k in ("step", "epoch", "loss", "accuracy")} for r in rows if r["split"] == "eval"]


def assert_same_run(a, b):
    ta, ma = state(a)
    tb, mb = state(b)
    assert ma["step"] == mb["step"]
    assert ta.keys() == tb.keys()
    differ = [k for k in ta if ta[k] != tb[k]]
    assert not differ, f"not bit-identical after resume: {differ[:5]}"
    assert ma["extra"]["history"] == mb["extra"]["history"]  # epoch metrics count every batch
    assert evals(a) == evals(b)


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The uninterrupted run every resumed one must equal (checkpoint cadence does not matter)."""
    out = tmp_path_factory.mktemp("straight") / "run"
    run = ember("--out", out)
    assert run.returncode == 0, run.stderr
    return out


def test_max_steps_is_a_pause_not_an_end(tmp_path, straight):
    out = tmp_path / "run"
    first = ember("--out", out, "--max-steps", 11)  # inside epoch 2
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout.splitlines()[-1]) == {"step": 11, "epoch": 1, "paused": True}
    _, meta = state(out)
    assert (meta["step"], meta["extra"]["epoch"], meta["extra"]["batch"]) == (11, 1, 3)
    assert len(meta["extra"]["history"]) == 1  # epoch 2 is not finished
    rest = ember("--out", out, "--resume")
    assert rest.returncode == 0, rest.stderr
    assert json.loads(rest.stdout.splitlines()[-1])["step"] == 16
    assert_same_run(straight, out)


def test_max_steps_inside_the_last_epoch_then_resume(tmp_path, straight):
    out = tmp_path / "run"
    assert ember("--out", out, "--max-steps", 3).returncode == 0
    assert ember("--out", out, "--max-steps", 13, "--resume").returncode == 0
    assert state(out)[1]["extra"]["history"][0]["epoch"] == 1
    assert ember("--out", out, "--resume").returncode == 0
    assert_same_run(straight, out)


@pytest.mark.parametrize("setup", [[], ["--no-jit"]])
def test_resume_needs_a_run(tmp_path, setup):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("not a run")
    for target, word in ((empty, "no complete checkpoint"), (tmp_path / "missing", "does not exist")):
        run = ember("--out", target, "--resume", *setup)
        assert run.returncode == 2, run.stderr
        assert word in run.stderr and "Traceback" not in run.stderr
        assert run.stderr.count("\n") == 1


# (EMBER_KILL_AT, --checkpoint-every): the checkpoints with every=4 are #1 step 4, #2 step 8,
# evaluation of epoch 1, #3 step 8 (epoch end), #4 step 12, #5 step 16, evaluation, #6 step 16.
KILLS = [
    ("eval@1", 4),  # during epoch 1's evaluation; newest checkpoint: the epoch's last step
    ("eval@1", 3),  # ... newest checkpoint two batches before the epoch's end
    ("epoch-end@1", 4),  # evaluated and logged, epoch-end checkpoint not yet written
    ("eval@2", 4),  # during the last evaluation
    ("checkpoint-data@3", 4),  # half-way through writing the epoch-end checkpoint's tensors
    ("checkpoint-commit@4", 4),  # step 12's tensors in place, its sidecar (the commit) not
    ("checkpoint-data@6", 4),  # inside the very last write
]


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL (POSIX)")
@pytest.mark.parametrize("kill_at, every", KILLS)
def test_sigkill_at_a_named_point_then_resume_is_bit_identical(tmp_path, straight, kill_at, every):
    out = tmp_path / "run"
    killed = ember("--out", out, "--checkpoint-every", every, kill_at=kill_at)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    if kill_at.startswith("checkpoint-data"):
        assert any(p.name.endswith(".tmp") for p in out.iterdir()), "the kill left no half-written file"
    resumed = ember("--out", out, "--checkpoint-every", every, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]  # swept on start
    assert json.loads(resumed.stdout.splitlines()[-1])["step"] == 16  # no extra epoch
    assert_same_run(straight, out)

"""`ember train / eval / checkpoints` end to end, in subprocesses, on a real MNIST subset."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from ember.io.checkpoint import latest_checkpoint, list_checkpoints, read_checkpoint

pytest.importorskip("ember.data")
try:
    from ember.data import MNIST

    MNIST(train=False)
except Exception as exc:  # noqa: BLE001
    pytest.skip(f"real MNIST not available here: {exc}", allow_module_level=True)

QUICK = [
    "--model",
    "mlp",
    "--limit-train",
    "1536",
    "--limit-test",
    "500",
    "--epochs",
    "2",
    "--checkpoint-every",
    "8",
    "--no-progress",
    "--batch-size",
    "64",
]


def ember(*args, timeout=300, **kw):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "ember.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        **kw,
    )


def params(run_dir):
    tensors, meta = read_checkpoint(run_dir)
    return {k: np.frombuffer(bytes(v.data), dtype=v.ember_dtype).copy() for k, v in tensors.items()}, meta


def test_train_writes_log_checkpoints_and_evaluates(tmp_path):
    out = tmp_path / "run"
    run = ember("train", "mnist", *QUICK, "--out", out)
    assert run.returncode == 0, run.stderr
    final = json.loads(run.stdout.strip().splitlines()[-1])
    assert final["epoch"] == 2 and final["step"] == 48
    assert final["eval_accuracy"] > 0.8  # 1.5k images, 2 epochs: ~90%
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records if r["split"] == "eval"] == [1, 2]
    assert len(list_checkpoints(out)) == 3  # keep-last-3
    ev = ember("eval", out, "--json")
    assert ev.returncode == 0, ev.stderr
    assert abs(json.loads(ev.stdout)["accuracy"] - final["eval_accuracy"]) < 1e-9
    inspect = ember("checkpoints", "inspect", out, "--verify")
    assert "ckpt-00000048.safetensors" in inspect.stdout and "ok" in inspect.stdout


def test_sigkill_then_resume_matches_an_uninterrupted_run(tmp_path):
    straight = tmp_path / "straight"
    assert ember("train", "mnist", *QUICK, "--out", straight).returncode == 0
    killed = tmp_path / "killed"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ember.cli", "train", "mnist", *QUICK, "--out", str(killed)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # kill once a mid-run checkpoint exists
        path = latest_checkpoint(killed) if killed.exists() else None
        if path is not None and 8 <= read_checkpoint(path)[1]["step"] < 40:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    stopped_at = read_checkpoint(killed)[1]["step"]
    assert stopped_at < 48, "the run finished before it could be killed"
    resumed = ember("train", "mnist", *QUICK, "--out", killed, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    a, meta_a = params(straight)
    b, meta_b = params(killed)
    assert meta_a["step"] == meta_b["step"] == 48
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(a[k], b[k]), f"{k} differs after resume from step {stopped_at}"


def test_refuses_to_overwrite_a_run_without_resume(tmp_path):
    out = tmp_path / "run"
    assert ember("train", "mnist", *QUICK, "--max-steps", "8", "--out", out).returncode == 0
    before = sorted(p.name for p in out.iterdir())
    again = ember("train", "mnist", *QUICK, "--out", out)
    assert again.returncode == 2 and "--resume" in again.stderr
    assert sorted(p.name for p in out.iterdir()) == before


def test_resume_with_other_settings_is_refused(tmp_path):
    out = tmp_path / "run"
    assert ember("train", "mnist", *QUICK, "--max-steps", "8", "--out", out).returncode == 0
    again = ember("train", "mnist", *QUICK, "--lr", "0.5", "--out", out, "--resume")
    assert again.returncode == 2 and "lr" in again.stderr


def test_truncated_checkpoint_is_a_clear_error(tmp_path):
    out = tmp_path / "run"
    assert ember("train", "mnist", *QUICK, "--max-steps", "8", "--out", out).returncode == 0
    path = latest_checkpoint(out)
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])
    ev = ember("eval", path)
    assert ev.returncode == 2
    assert "truncated" in ev.stderr or "bytes" in ev.stderr
    assert "Traceback" not in ev.stderr


def test_checkpoint_of_another_model_lists_the_mismatch(tmp_path):
    import ember as em
    from ember.train.state import load_training_state

    out = tmp_path / "run"
    assert ember("train", "mnist", *QUICK, "--max-steps", "8", "--out", out).returncode == 0
    other = em.models.get("mlp", in_features=784, hidden=(64,), num_classes=10)
    before = {k: v.numpy().copy() for k, v in other.state_dict().items()}
    with pytest.raises(em.EmberError) as err:
        load_training_state(latest_checkpoint(out), other)
    msg = str(err.value)
    assert "(64, 784)" in msg or "64" in msg
    for k, v in other.state_dict().items():  # nothing was loaded half-way
        assert np.array_equal(v.numpy(), before[k])


@pytest.mark.parametrize(
    "args, word", [(["train", "imagenet"], "invalid choice"), (["train", "mnist", "--model", "vgg"], "invalid choice")]
)
def test_unknown_names_are_clear(args, word):
    run = ember(*args)
    assert run.returncode == 2 and word in run.stderr and "mnist" in run.stderr + " mnist"

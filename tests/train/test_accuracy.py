"""The accuracy bars of `ember train mnist` with its default recipes (slow: full MNIST)."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def train(tmp_path, *args):
    out = tmp_path / "run"
    run = subprocess.run(
        [sys.executable, "-m", "ember.cli", "train", "mnist", *args, "--out", str(out), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=1800,
        env=dict(os.environ),
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_mlp_one_epoch_reaches_97_5(tmp_path):
    result = train(tmp_path)  # the README's main job, as is
    assert result["epoch"] == 1
    assert result["eval_accuracy"] >= 0.975, result


def test_cnn_two_epochs_reaches_98_8(tmp_path):
    result = train(tmp_path, "--model", "cnn", "--epochs", "2")
    assert result["epoch"] == 2
    assert result["eval_accuracy"] >= 0.988, result

"""Runs never collide: runs/NAME, runs/NAME-2, ...; --resume takes the newest; ember eval without a
path evaluates the newest run and prints a table (--json: one object); the callback flags."""

import json
import os
import shutil
import subprocess

import pytest
from test_cli_errors import RUN, assert_clean_error, ember

from ember.io.checkpoint import list_checkpoints, read_checkpoint
from ember.train import runs


def test_versions_are_numbered_like_copies(tmp_path):
    base = tmp_path / "mnist-mlp"
    assert runs.next_run_dir(base) == str(base)
    base.mkdir()
    assert runs.next_run_dir(base) == str(base)  # a directory without checkpoints is reused
    (base / "ckpt-00000001.json").write_text("{}")
    assert runs.next_run_dir(base) == f"{base}-2"
    for name in ("mnist-mlp-2", "mnist-mlp-10", "mnist-mlp-x", "mnist-mlp-02", "mnist-mlp-cnn"):
        (tmp_path / name).mkdir()
    assert [n for n, _ in runs.versions(base)] == [1, 2, 10]
    assert runs.next_run_dir(base) == f"{base}-10"  # the newest holds no run yet
    assert runs.newest_version(base) == str(base)


def test_new_runs_never_collide_and_resume_takes_the_newest(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        code, _, err = ember("train", *RUN, "--max-steps", 1)
        assert code == 0, err
    first, second = os.path.join("runs", "synthetic-cifar10-mlp"), os.path.join("runs", "synthetic-cifar10-mlp-2")
    assert sorted(os.listdir("runs")) == ["synthetic-cifar10-mlp", "synthetic-cifar10-mlp-2"]
    assert f"-> {second}" in err
    code, _, err = ember("train", *RUN, "--resume")
    assert code == 0, err
    assert f"resumed {second}" in err
    assert [c.step for c in list_checkpoints(first)] == [1]  # the first run is untouched
    code, _, err = ember("train", *RUN, "--out", first)  # a named run still refuses
    assert_clean_error(code, err, "pass --resume")


def test_eval_without_a_path_prints_a_table_of_the_newest_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = ember("eval")
    assert_clean_error(code, err, "no run to evaluate")
    for _ in range(2):
        code, _, err = ember("train", *RUN, "--max-steps", 1)
        assert code == 0, err  # the CLI's one-line error says why
    code, out, err = ember("eval")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(os.path.join("runs", "synthetic-cifar10-mlp-2") + ":")
    assert lines[1].split() == ["metric", "value"] and lines[2].split()[0] == "loss"
    assert lines[3].split()[0] == "accuracy" and lines[3].endswith("%")
    assert lines[5].split() == ["class", "accuracy"] and lines[6].split()[0] == "airplane" and len(lines) == 16
    code, out, err = ember("eval", "--json")
    result = json.loads(out)
    assert result["checkpoint"] == os.path.join("runs", "synthetic-cifar10-mlp-2")
    assert set(result) == {"checkpoint", "step", "dataset", "model", "loss", "accuracy", "per_class"}
    assert len(result["per_class"]) == 10
    tested = 32  # RUN's --limit-test: the per-class accuracies average back to the accuracy
    counts = _class_counts(tested)
    assert abs(sum(result["per_class"][c] * n for c, n in counts.items()) / tested - result["accuracy"]) < 1e-9


def _class_counts(n):
    from ember.data import SyntheticCIFAR10

    labels = SyntheticCIFAR10(n=n, seed=1).targets[:n]
    names = SyntheticCIFAR10.classes
    return {names[k]: int((labels == k).sum()) for k in set(labels.tolist())}


def test_eval_of_a_run_that_does_not_exist(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert ember("train", *RUN, "--max-steps", 1)[0] == 0
    code, _, err = ember("eval", os.path.join("runs", "nope"))
    assert_clean_error(
        code, err, "runs/nope does not exist", "no run directory or checkpoint file", "synthetic-cifar10-mlp"
    )
    assert "sidecar" not in err


def test_callback_flags(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = ember(
        "train",
        *RUN,
        "--epochs",
        3,
        "--keep-best",
        1,
        "--early-stop",
        1,
        "--monitor",
        "eval_accuracy",
        "--lr-plateau",
        1,
    )
    assert code == 0, err
    run = os.path.join("runs", "synthetic-cifar10-mlp")
    cfg = read_checkpoint(run)[1]["config"]
    assert (cfg["keep_best"], cfg["early_stop"], cfg["lr_plateau"], cfg["monitor"], cfg["schedule"]) == (
        1,
        1,
        1,
        "eval_accuracy",
        "none",
    )
    assert len(list_checkpoints(os.path.join(run, "best"))) == 1
    assert "best eval_accuracy" in err
    assert_clean_error(
        *ember("train", *RUN, "--epochs", 3, "--resume", "--monitor", "eval_accuracy", "--lr-plateau", 1)[::2],
        "different settings",
        "keep_best: 1 then, None now",
    )
    assert_clean_error(
        *ember("train", *RUN, "--lr-plateau", 2, "--schedule", "cosine")[::2], "--lr-plateau", "--schedule cosine"
    )
    assert_clean_error(*ember("train", *RUN, "--monitor", "eval_loss")[::2], "--monitor needs")
    assert_clean_error(*ember("train", *RUN, "--early-stop", 0)[::2], "--early-stop", ">= 1")
    code, out, _ = ember("train", "-h")
    for flag in ("--early-stop PATIENCE", "--keep-best K", "--lr-plateau PATIENCE", "--monitor"):
        assert flag in out


def test_the_console_script_prints_one_line_without_a_launcher_frame(tmp_path):
    """Through the installed ``ember`` script (whose frame calls main()): the error line ends
    with what went wrong, not with ``(at ember:8: sys.exit(main()))``."""
    script = shutil.which("ember")
    if script is None:
        pytest.skip("the ember console script is not installed")
    proc = subprocess.run(
        [script, "eval", os.path.join("runs", "nope")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == "ember: error: runs/nope does not exist: no run directory or checkpoint file of that name\n"

"""`ember train text FILE`: the zoo's transformer as a character model on a small text file, a
sample printed at the end, `ember eval` of the run; bad files and mismatched models are one line."""

import json
import os

import pytest
from test_cli_errors import assert_clean_error, ember

from ember.io.checkpoint import read_checkpoint

RHYME = "the cat sat on the mat. the dog sat on the log. " * 40  # 1,960 characters


def test_one_step_writes_a_sample_and_evaluates(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rhyme.txt").write_text(RHYME)
    code, out, err = ember(
        "train",
        "text",
        "rhyme.txt",
        "--seq-len",
        8,
        "--batch-size",
        16,
        "--limit-train",
        16,
        "--limit-test",
        16,
        "--no-progress",
    )
    assert code == 0, err
    lines = out.splitlines()
    assert json.loads(lines[-1])["step"] == 1
    assert lines[-3] == "sample (200 characters after 'the '):" and len(lines[-2]) <= 200
    code, out, err = ember("eval")
    assert code == 0, err
    assert "transformer on text, step 1, 16 test samples" in out.splitlines()[0]


@pytest.mark.slow
def test_a_character_model_learns_a_small_text_and_writes_a_sample(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rhyme.txt").write_text(RHYME)
    code, out, err = ember(
        "train", "text", "rhyme.txt", "--seq-len", 16, "--batch-size", 16, "--epochs", 3, "--no-progress"
    )
    assert code == 0, err
    run = os.path.join("runs", "text-transformer")
    assert f"-> {run}" in err
    lines = out.splitlines()
    final = json.loads(lines[-1])
    assert final["epoch"] == 3 and final["eval_accuracy"] > 0.6, final  # a repetitive text is learnt
    header = next(i for i, line in enumerate(lines) if line.startswith("sample (200 characters after "))
    sample = "\n".join(lines[header + 1 : -1])
    assert len(sample) == 200 and set(sample) <= set(RHYME)
    words = sample.split()
    real = sum(w.strip(".") in {"the", "cat", "sat", "on", "mat", "dog", "log"} for w in words)
    assert real >= len(words) / 5, sample  # measured 8 of 32 words after 3 epochs; random ids give ~0
    cfg = read_checkpoint(run)[1]["config"]
    assert cfg["vocab"] == "".join(sorted(set(RHYME))) and cfg["seq_len"] == 16
    code, out, err = ember("eval", run, "--json")
    assert code == 0, err
    assert abs(json.loads(out)["accuracy"] - final["eval_accuracy"]) < 1e-9


def test_text_errors_are_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "short.txt").write_text("abcabc")
    (tmp_path / "one.txt").write_text("aaaaaaaaaaaaaaaaaaaa")
    (tmp_path / "binary.txt").write_bytes(b"\xff\xfe\x00abc" * 100)
    (tmp_path / "ok.txt").write_text(RHYME)
    cases = [
        (["text"], ["needs a FILE"]),
        (["text", "missing.txt"], ["missing.txt", "no such file"]),
        (["text", "binary.txt"], ["not UTF-8"]),
        (["text", "one.txt"], ["1 distinct character"]),
        (["text", "short.txt", "--epochs", 1], ["too short"]),
        (["text", "ok.txt", "--model", "mlp"], ["--model mlp does not train on text"]),
        (["synthetic-cifar10", "--model", "transformer"], ["--model transformer does not train on synthetic-cifar10"]),
        (["synthetic-cifar10", "ok.txt"], ["only ember train text takes a file"]),
        (["synthetic-cifar10", "--seq-len", 8], ["--seq-len is for text"]),
        (["text", "ok.txt", "--seq-len", 0], ["--seq-len", ">= 1"]),
    ]
    for argv, words in cases:
        assert_clean_error(*ember("train", *argv, "--no-progress")[::2], *words)
    assert not os.path.exists("runs")

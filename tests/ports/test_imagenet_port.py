"""The ImageNet training loop of pytorch/examples (imagenet/main.py: model.train()/model.eval(),
AverageMeter and ProgressMeter, a StepLR stepped per epoch, torch.save of a checkpoint dict with
the state dicts, --resume and --evaluate loading it back), ported to ember by changing only its
import lines (imagenet_main.py; imagenet_main_torch.py is the PyTorch version). It runs on
torchvision-style FakeData of CIFAR's shape with a narrow ember.models.ResNet."""

import contextlib
import difflib
import functools
import importlib.util
import io
import pathlib
import re
import sys

import pytest

import ember
import ember.models

HERE = pathlib.Path(__file__).parent
SMALL = [
    "--dummy",
    "-a",
    "resnet_narrow",
    "-b",
    "16",
    "--image-size",
    "32",
    "--num-classes",
    "10",
    "-p",
    "1",
    "--seed",
    "0",
    "--lr",
    "0.05",
]


def test_only_the_import_lines_differ_from_the_pytorch_version():
    ours = (HERE / "imagenet_main.py").read_text().splitlines()
    theirs = (HERE / "imagenet_main_torch.py").read_text().splitlines()
    changed = [
        line
        for line in difflib.unified_diff(theirs, ours, lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert len(changed) == 16, changed
    for line in changed:
        assert re.match(r"[+-](import |from \S+ import )", line), f"not an import line: {line!r}"


@pytest.fixture
def port(tmp_path, monkeypatch):
    """imagenet_main.py loaded fresh (its best_acc1 is a module global), in an empty working
    directory, with a narrow ResNet where the script looks models up (models.__dict__)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(
        ember.models, "resnet_narrow", functools.partial(ember.models.ResNet, (1, 1, 1, 1), width=8), raising=False
    )
    spec = importlib.util.spec_from_file_location("imagenet_main", HERE / "imagenet_main.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def run(*argv):
        module.best_acc1 = 0
        monkeypatch.setattr(sys, "argv", ["main.py", *SMALL, *map(str, argv)])
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            module.main()
        return out.getvalue()

    return run


def _summaries(text):
    return [float(v) for v in re.findall(r" \*\s+Acc@1 ([0-9.]+)", text)]


def test_train_save_resume_and_evaluate(port):
    first = port("--epochs", 1, "--train-size", 32, "--val-size", 16)
    assert "=> Dummy data is used!" in first and "Epoch: [0][2/2]" in first and "Test: [1/1]" in first
    ckpt = ember.load("checkpoint.pth.tar")
    assert sorted(ckpt) == ["arch", "best_acc1", "epoch", "optimizer", "scheduler", "state_dict"]
    assert ckpt["epoch"] == 1 and ckpt["arch"] == "resnet_narrow" and ckpt["scheduler"]["last_epoch"] == 1
    assert pathlib.Path("model_best.pth.tar").exists() == (_summaries(first)[0] > 0)

    resumed = port("--epochs", 2, "--train-size", 32, "--val-size", 16, "--resume", "checkpoint.pth.tar")
    assert "=> loaded checkpoint 'checkpoint.pth.tar' (epoch 1)" in resumed
    assert "Epoch: [0]" not in resumed and "Epoch: [1][2/2]" in resumed
    ckpt = ember.load("checkpoint.pth.tar")
    assert ckpt["epoch"] == 2 and ckpt["scheduler"]["last_epoch"] == 2  # stepped once per epoch
    params = len(list(ember.models.resnet_narrow().parameters()))
    assert len(ckpt["optimizer"]["state"]) == params  # a momentum buffer each

    # --evaluate loads the saved weights into a new model: the accuracy the run measured last
    evaluated = port("--train-size", 32, "--val-size", 16, "--resume", "checkpoint.pth.tar", "--evaluate")
    assert "Epoch:" not in evaluated and _summaries(evaluated) == _summaries(resumed)[-1:]


@pytest.mark.slow
def test_the_port_fits_its_training_images(port):
    text = port("--epochs", 4, "--train-size", 64, "--val-size", 16)
    losses = [float(v) for v in re.findall(r"Epoch: \[\d\]\[4/4\].*?Loss \S+ \(([0-9.e+-]+)\)", text)]
    assert len(losses) == 4 and losses[-1] < losses[0] * 0.8, losses  # random labels, memorised
    assert ember.load("checkpoint.pth.tar")["scheduler"]["last_epoch"] == 4

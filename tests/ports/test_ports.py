"""The canonical PyTorch MNIST example (pytorch/examples mnist/main.py), ported to ember by
changing only its import lines (mnist_main.py; mnist_main_torch.py is the PyTorch original it
is checked against), run as a PyTorch user would run it."""
import contextlib
import difflib
import importlib.util
import io
import pathlib
import re
import sys
import types

import pytest

import ember

HERE = pathlib.Path(__file__).parent


def _load_port():
    spec = importlib.util.spec_from_file_location("mnist_main", HERE / "mnist_main.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def mnist_ready(tmp_path, monkeypatch):
    """A working directory whose ../data is fresh, as the example expects; skip without MNIST."""
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    try:
        ember.data.MNIST("../data", train=False)
    except ember.data.DataError as e:
        pytest.skip(f"MNIST not available offline: {e}")


def test_only_the_import_lines_differ_from_the_pytorch_version():
    ours = (HERE / "mnist_main.py").read_text().splitlines()
    theirs = (HERE / "mnist_main_torch.py").read_text().splitlines()
    changed = [line for line in difflib.unified_diff(theirs, ours, lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert changed, "the port is the PyTorch file itself"
    for line in changed:
        assert re.match(r"[+-](import |from \S+ import )", line), f"not an import line: {line!r}"


def _run(port, n_train, n_test, steps_between_logs=10):
    from ember.data import MNIST, Subset, transforms
    tf = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    train_set = Subset(MNIST("../data", train=True, transform=tf), range(n_train))
    test_set = Subset(MNIST("../data", train=False, transform=tf), range(n_test))
    ember.manual_seed(1)
    model = port.Net().to(ember.device("cpu"))
    optimizer = ember.optim.Adadelta(model.parameters(), lr=1.0)
    args = types.SimpleNamespace(log_interval=steps_between_logs, dry_run=False)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        port.train(args, model, ember.device("cpu"), ember.utils.data.DataLoader(train_set, batch_size=64),
                   optimizer, 1)
        port.test(model, ember.device("cpu"), ember.utils.data.DataLoader(test_set, batch_size=1000))
    text = out.getvalue()
    losses = [float(x) for x in re.findall(r"Loss: ([0-9.]+)", text)]
    correct = int(re.search(r"Accuracy: (\d+)/", text).group(1))
    return losses, correct / n_test, model


def test_the_port_trains_a_few_steps(mnist_ready):
    port = _load_port()
    losses, _, _ = _run(port, n_train=192, n_test=100, steps_between_logs=1)
    assert len(losses) == 3 and all(0 < v < 5 for v in losses)


@pytest.mark.slow
def test_the_port_learns_in_100_steps(mnist_ready):
    port = _load_port()
    losses, accuracy, _ = _run(port, n_train=6400, n_test=1000)
    assert len(losses) == 10 and losses[-1] < losses[0] / 3
    assert accuracy > 0.9, f"test accuracy after 100 steps: {accuracy:.3f}"


@pytest.mark.slow
def test_the_ports_main_runs_as_written(mnist_ready, monkeypatch):
    port = _load_port()
    monkeypatch.setattr(sys, "argv", ["main.py", "--epochs", "1", "--dry-run", "--save-model"])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        port.main()
    assert "Test set: Average loss" in out.getvalue()
    state = ember.load("mnist_cnn.pt")
    assert sorted(state) == sorted(port.Net().state_dict())

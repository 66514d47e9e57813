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

import numpy as np
import pytest
from references import known

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
    changed = [
        line
        for line in difflib.unified_diff(theirs, ours, lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert changed, "the port is the PyTorch file itself"
    for line in changed:
        assert re.match(r"[+-](import |from \S+ import )", line), f"not an import line: {line!r}"


def _load_original(torch):
    """mnist_main_torch.py as a module (torchvision, which it imports only for the data, stubbed)."""
    stub = types.ModuleType("torchvision")
    stub.datasets, stub.transforms = types.ModuleType("datasets"), types.ModuleType("transforms")
    saved = sys.modules.get("torchvision")
    sys.modules["torchvision"] = stub
    try:
        spec = importlib.util.spec_from_file_location("mnist_main_torch", HERE / "mnist_main_torch.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        if saved is None:
            del sys.modules["torchvision"]
        else:
            sys.modules["torchvision"] = saved
    return module


def test_the_ports_net_computes_what_the_pytorch_nets_does(torch, rng):
    """The same weights (drawn here) in the port's Net and in the PyTorch original's: the same
    log-probabilities, loss and gradients (torch's stored; fc1's 1.2M-entry gradient by its norm)."""
    port = _load_port()
    model = port.Net()
    weights = {k: (rng.standard_normal(v.shape) * 0.05).astype(np.float32) for k, v in model.state_dict().items()}
    x = rng.standard_normal((4, 1, 28, 28)).astype(np.float32)
    target = rng.integers(0, 10, 4)

    def run(program, net):
        lib = program.torch  # the port's "torch" is ember
        net.load_state_dict({k: lib.tensor(v) for k, v in weights.items()})
        net.eval()  # dropout off: the same function in both
        out = net(lib.tensor(x))
        loss = program.F.nll_loss(out, lib.tensor(target))
        loss.backward()
        return out, loss, {n: p.grad for n, p in net.named_parameters()}

    def torch_answers():
        original = _load_original(torch)
        out, loss, grads = run(original, original.Net())
        small = {n: g for n, g in grads.items() if g.numel() <= 10_000}
        return out, loss, small, float(grads["fc1.weight"].norm())

    out, loss, grads = run(port, model)
    t_out, t_loss, t_small, t_fc1_norm = known(torch_answers)
    assert sorted(t_small) == ["conv1.bias", "conv1.weight", "conv2.bias", "fc1.bias", "fc2.bias", "fc2.weight"]
    np.testing.assert_allclose(out.numpy(), t_out, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(loss.item(), t_loss, rtol=1e-5)
    for name, g in t_small.items():
        np.testing.assert_allclose(grads[name].numpy(), g, rtol=1e-3, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(np.linalg.norm(grads["fc1.weight"].numpy()), t_fc1_norm, rtol=1e-4)


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
        port.train(
            args, model, ember.device("cpu"), ember.utils.data.DataLoader(train_set, batch_size=64), optimizer, 1
        )
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

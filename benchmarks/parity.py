"""Parity: the same MLP, the same initial weights, the same batches, in PyTorch and in ember.

    python -m benchmarks.parity [--epochs 1] [--lr 0.05] [--momentum 0.9] [--batch 128] [--backend numpy]

Builds W1's MLP (784-512-512-10) with torch.nn and ember.nn from benchmarks.workloads.mlp,
copies torch's initial weights into ember through numpy (so the initialization is identical,
not just alike), trains both with SGD (momentum) on MNIST (ember.data.MNIST, shuffled by one shared
NumPy permutation), and prints both test accuracies, their difference, and one JSON line.
The two runs differ only in the arithmetic's rounding, so the accuracies should agree to a few
tenths of a percent.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from . import recording
from .child import pin_threads


def copy_weights(torch_model, ember_model):
    """ember parameters := torch parameters, in registration order (same names, same shapes)."""
    import ember

    pt = dict(torch_model.named_parameters())
    pe = dict(ember_model.named_parameters())
    if list(pt) != list(pe):
        raise SystemExit(f"parameter names differ: torch {list(pt)} vs ember {list(pe)}")
    for name, p in pt.items():
        value = p.detach().numpy()
        if tuple(pe[name].shape) != value.shape:
            raise SystemExit(f"{name}: torch shape {value.shape} vs ember {tuple(pe[name].shape)}")
        pe[name].copy_(ember.tensor(value))


def train_and_test(fw, model, data, epochs, lr, momentum, batch, seed):
    """SGD over shuffled batches (the same permutation for both frameworks); returns
    (test accuracy, mean loss of the last epoch, seconds)."""
    import numpy as np

    from .workloads import sgd_step

    (x_train, y_train), (x_test, y_test) = data
    opt = fw.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    rng = np.random.RandomState(seed)
    t0 = time.perf_counter()
    model.train()
    for _ in range(epochs):
        order = rng.permutation(len(x_train))
        losses = []
        for i in range(0, len(order), batch):
            idx = order[i : i + batch]
            loss = sgd_step(fw, model, opt, fw.tensor(x_train[idx]), fw.tensor(y_train[idx]))
            losses.append(loss.item())
    seconds = time.perf_counter() - t0
    model.eval()
    correct = 0
    with fw.no_grad():
        for i in range(0, len(x_test), 1000):
            logits = np.asarray(model(fw.tensor(x_test[i : i + 1000])).numpy())
            correct += int((logits.argmax(1) == y_test[i : i + 1000]).sum())
    return correct / len(x_test), sum(losses) / len(losses), seconds


def mnist():
    """MNIST as flat float32 [N, 784] in [0, 1] and int64 labels."""
    import numpy as np

    from ember.data import MNIST

    out = []
    for train in (True, False):
        ds = MNIST(train=train)
        out.append(
            (
                np.ascontiguousarray(ds.data.reshape(len(ds.data), -1), dtype=np.float32),
                np.asarray(ds.targets, dtype=np.int64),
            )
        )
    return out


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.parity", description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--backend", default="numpy", help="the ember backend")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    recording.warn_blas_overrides("python -m benchmarks.parity")
    pin_threads(args.threads)
    from .workloads import Ember, Torch, mlp

    data = mnist()
    torch_fw, ember_fw = Torch("eager", args.threads), Ember(args.backend, args.threads)
    torch_fw.lib.manual_seed(args.seed)
    torch_model, ember_model = mlp(torch_fw.nn), mlp(ember_fw.nn)
    copy_weights(torch_model, ember_model)
    result = {
        "epochs": args.epochs,
        "lr": args.lr,
        "momentum": args.momentum,
        "batch": args.batch,
        "backend": args.backend,
        "train_samples": len(data[0][0]),
        "test_samples": len(data[1][0]),
    }
    for name, fw, model in (("torch", torch_fw, torch_model), ("ember", ember_fw, ember_model)):
        acc, loss, seconds = train_and_test(fw, model, data, args.epochs, args.lr, args.momentum, args.batch, args.seed)
        result[name] = {"test_accuracy": acc, "last_epoch_mean_loss": loss, "train_seconds": round(seconds, 2)}
        print(f"{name:>5}: test accuracy {acc:.2%}, mean training loss {loss:.4f}, {seconds:.1f} s", file=sys.stderr)
    result["accuracy_difference"] = result["ember"]["test_accuracy"] - result["torch"]["test_accuracy"]
    result["OPENBLAS_CORETYPE"] = os.environ.get("OPENBLAS_CORETYPE")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

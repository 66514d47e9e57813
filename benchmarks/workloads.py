"""The workloads, written once for both frameworks.

ember.nn and torch.nn share PyTorch's names, so each model and each step below is one function
that takes a framework adapter ``fw`` (:class:`Torch` or :class:`Ember`, side by side at the end)
and runs unchanged on either: the two frameworks get the same shapes, the same layer order, the
same loss and the same update, by construction. The adapters hold the only lines that differ.

>>> from benchmarks.workloads import WORKLOADS, flops_per_sample
>>> list(WORKLOADS)
['W1-train', 'W1-infer', 'W2-train', 'W3-train', 'W3-infer', 'W3-infer-b1', 'W4-overhead', 'W5-first-step', 'W5-cold']
>>> round(flops_per_sample("W1-train") / 1e6, 2)      # MFLOP per image, forward + backward
4.01
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass

CLASSES = 10


# ---------------------------------------------------------------------------------- the models
def mlp(nn):
    """W1: the MNIST multilayer perceptron 784-512-512-10."""
    return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, CLASSES))


def lenet(nn):
    """W2: a LeNet-style CNN for 1x28x28 images."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),  # 32x13x13
        nn.Conv2d(32, 64, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),  # 64x5x5
        nn.Flatten(),
        nn.Linear(64 * 5 * 5, 128),
        nn.ReLU(),
        nn.Linear(128, CLASSES),
    )


# ResNet-18 for 32x32 inputs (He et al. 2016, the CIFAR variant: 3x3 stem, no max pool).
RESNET18_STAGES = ((64, 1), (128, 2), (256, 2), (512, 2))  # (channels, stride of first block)


def resnet18(nn):
    """W3: ResNet-18, CIFAR variant, batch norm in training mode."""

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.shortcut = None
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            out = self.bn1(self.conv1(x)).relu()
            out = self.bn2(self.conv2(out))
            return (out + (x if self.shortcut is None else self.shortcut(x))).relu()

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
            blocks, cin = [], 64
            for cout, stride in RESNET18_STAGES:
                blocks += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
                cin = cout
            self.blocks = nn.Sequential(*blocks)
            self.fc = nn.Linear(512, CLASSES)

        def forward(self, x):
            return self.fc(self.blocks(self.stem(x)).mean((2, 3)))  # global average pool

    return ResNet18()


# ---------------------------------------------------------------------------------- the steps
def sgd_step(fw, model, opt, x, y):
    """One training step: forward, cross-entropy, backward, update."""
    loss = fw.F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


def synthetic_batch(fw, batch, shape, seed=0):
    """Random float32 images of ``shape`` and int64 labels, the same numbers for every framework."""
    import numpy as np

    rng = np.random.RandomState(seed)
    x = rng.standard_normal((batch, *shape)).astype(np.float32)
    y = rng.randint(0, CLASSES, size=batch).astype(np.int64)
    return fw.tensor(x), fw.tensor(y)


def training(build, shape):
    """A train workload: returns ``setup(fw, batch) -> step``, where ``step()`` returns the loss."""

    def setup(fw, batch):
        model = build(fw.nn)
        model.train()
        opt = fw.optim.SGD(model.parameters(), lr=0.01)
        run = fw.compiled(model)
        x, y = synthetic_batch(fw, batch, shape)
        whole = fw.compiled_step(lambda m, o, a, b: sgd_step(fw, m, o, a, b))
        return lambda: whole(run, opt, x, y)

    return setup


def inference(build, shape):
    """An inference workload: forward only, no gradient recording, eval mode."""

    def setup(fw, batch):
        model = build(fw.nn)
        model.eval()
        run = fw.compiled(model)
        x, _ = synthetic_batch(fw, batch, shape)

        def forward(a):
            with fw.no_grad():
                return run(a)

        whole = fw.compiled_step(forward)
        return lambda: whole(x)

    return setup


def eager_overhead(fw, chain=10_000):
    """W4: ``chain`` dependent 1x1 adds recorded for autograd, then one backward through them.

    Returns (forward µs per op, backward µs per op): the framework's fixed cost per operation,
    since a 1x1 add does no arithmetic to speak of."""
    x = fw.ones((1, 1), requires_grad=True)
    b = fw.ones((1, 1))
    t0 = time.perf_counter()
    y = x
    for _ in range(chain):
        y = y + b
    loss = y.sum()
    fw.sync()
    t1 = time.perf_counter()
    loss.backward()
    fw.sync()
    t2 = time.perf_counter()
    if float(x.grad.sum()) != 1.0:  # d(x + b + b ...)/dx = 1: the backward really ran
        raise AssertionError(f"W4 gradient is {float(x.grad.sum())}, expected 1.0")
    return (t1 - t0) / chain * 1e6, (t2 - t1) / chain * 1e6


def gemm(lib, n, reps):
    """float32 n x n matrix product with ``lib`` ("numpy" or "torch"): GFLOP/s of each repetition."""
    import numpy as np

    a, b = (np.random.RandomState(i).standard_normal((n, n)).astype(np.float32) for i in (1, 2))
    if lib == "torch":
        import torch

        a, b = torch.from_numpy(a), torch.from_numpy(b)
    a @ b  # warm-up: first call allocates and spins up threads
    rates = []
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        rates.append(2 * n**3 / (time.perf_counter() - t0) / 1e9)
    return rates


# ---------------------------------------------------------------------------------- the table
@dataclass(frozen=True)
class Workload:
    kind: str  # "throughput" (samples/s), "overhead" (W4), "first-step" (W5)
    setup: object  # (fw, batch) -> step, for throughput and first-step workloads
    steps: int  # measured steps per process (W4: repetitions of the chain)
    warmup: int  # steps run first and reported apart, not in the statistics
    description: str
    batch: int | None = None  # a batch of its own (W3-infer-b1); None: the run's (128 by default)
    cold: bool = False  # runs with empty compile caches (ember's, numba's, torch inductor's)


#: The steps W5 times in its process: ember.jit traces the first two calls and runs its
#: compiled program from the third, ember-numba compiles an eager kernel at the third call
#: with the same shapes, torch.compile compiles in the first. The end of step 3 is where every
#: target has run its first compiled step.
FIRST_STEPS = 3

W1_STEP = training(mlp, (784,))
W3_INFER = inference(resnet18, (3, 32, 32))

WORKLOADS = {
    "W1-train": Workload("throughput", W1_STEP, 300, 10, "MLP 784-512-512-10, SGD step"),
    "W1-infer": Workload("throughput", inference(mlp, (784,)), 1000, 20, "MLP 784-512-512-10, forward"),
    "W2-train": Workload("throughput", training(lenet, (1, 28, 28)), 60, 3, "LeNet-style CNN, SGD step"),
    "W3-train": Workload("throughput", training(resnet18, (3, 32, 32)), 3, 1, "ResNet-18 (CIFAR), SGD step"),
    "W3-infer": Workload("throughput", W3_INFER, 5, 1, "ResNet-18 (CIFAR), eval-mode forward"),
    "W3-infer-b1": Workload("throughput", W3_INFER, 50, 3, "ResNet-18 (CIFAR), eval-mode forward, batch 1", batch=1),
    "W4-overhead": Workload("overhead", None, 5, 1, "10,000 chained 1x1 adds, forward and backward"),
    "W5-first-step": Workload("first-step", W1_STEP, FIRST_STEPS, 0, "new process to end of W1 SGD steps 1 and 3"),
    "W5-cold": Workload("first-step", W1_STEP, FIRST_STEPS, 0, "the same with empty compile caches", cold=True),
}


# ---------------------------------------------------------------------------------- FLOP counts
def _conv(cin, cout, k, out_hw):
    return cin * cout * k * k * out_hw * out_hw


def _forward_macs(workload):
    """Multiply-adds of one sample's forward pass, from the shapes of the models above."""
    if workload.startswith("W1"):
        return 784 * 512 + 512 * 512 + 512 * CLASSES
    if workload.startswith("W2"):
        return _conv(1, 32, 3, 26) + _conv(32, 64, 3, 11) + 64 * 5 * 5 * 128 + 128 * CLASSES
    if workload.startswith("W3"):
        macs, cin, hw = _conv(3, 64, 3, 32), 64, 32
        for cout, stride in RESNET18_STAGES:
            hw //= stride
            macs += _conv(cin, cout, 3, hw) + 3 * _conv(cout, cout, 3, hw)
            macs += _conv(cin, cout, 1, hw) if stride != 1 or cin != cout else 0
            cin = cout
        return macs + 512 * CLASSES
    return None


def flops_per_sample(workload):
    """FLOPs per sample of the matrix products and convolutions (2 per multiply-add).

    Training counts 3x the forward pass (forward, gradient of the inputs, of the weights), the
    usual convention; element-wise work is left out. None where it means nothing (W4, W5)."""
    macs = _forward_macs(workload)
    if macs is None or WORKLOADS[workload].kind != "throughput":
        return None
    return 2 * macs * (3 if workload.endswith("train") else 1)


# ---------------------------------------------------------------------------------- the adapters
class Torch:
    """PyTorch, eager or through torch.compile (``backend`` "eager" or "compile")."""

    def __init__(self, backend, threads):
        import torch

        if backend not in ("eager", "compile"):
            raise ValueError(f"torch backend must be 'eager' or 'compile', not {backend!r}")
        torch.set_num_threads(threads)
        torch.manual_seed(0)
        self.lib, self.nn, self.F, self.optim = torch, torch.nn, torch.nn.functional, torch.optim
        self.version = torch.__version__
        self.backend = backend

    def compiled(self, model):
        return self.lib.compile(model) if self.backend == "compile" else model

    def compiled_step(self, fn):
        return fn  # torch.compile compiles the model (above), as users do

    def tensor(self, array):
        return self.lib.from_numpy(array)

    def ones(self, shape, requires_grad=False):
        return self.lib.ones(shape, requires_grad=requires_grad)

    def no_grad(self):
        return self.lib.no_grad()

    def sync(self):
        pass  # CPU tensors: every op has finished when it returns


class Ember:
    """ember on one of its backends, chosen by name (numpy, python, numba, cupy, ...), eager;
    with ``+jit`` after the name ("numba+jit") each whole step runs through ``ember.jit``, as
    the Trainer runs it (forward, loss, backward and update in one compiled graph)."""

    def __init__(self, backend, threads):
        import ember

        name, _, mode = backend.partition("+")
        if mode not in ("", "jit"):
            raise ValueError(f"ember backend {backend!r}: the only mode after '+' is 'jit'")
        ember.use(name)  # BackendError names the plugin to install when it is missing
        ember.manual_seed(0)
        self.lib, self.version, self.backend, self.jit = ember, ember.__version__, backend, mode == "jit"

    # Imported on first use, so W4 (core only) runs even where ember.nn is not there yet.
    nn = property(lambda self: importlib.import_module("ember.nn"))
    F = property(lambda self: importlib.import_module("ember.nn.functional"))
    optim = property(lambda self: importlib.import_module("ember.optim"))

    def compiled(self, model):
        return model

    def compiled_step(self, fn):
        return self.lib.jit(fn) if self.jit else fn

    def tensor(self, array):
        return self.lib.tensor(array)

    def ones(self, shape, requires_grad=False):
        return self.lib.ones(shape, requires_grad=requires_grad)

    def no_grad(self):
        return self.lib.no_grad()

    def sync(self):
        self.lib.get_backend().synchronize()  # asynchronous devices (cupy) queue their work


FRAMEWORKS = {"torch": Torch, "ember": Ember}

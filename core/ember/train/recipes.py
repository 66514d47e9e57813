"""Defaults per dataset and model: what ``ember train mnist`` does when told nothing else.

Each recipe is a row: hyperparameters that reach the accuracy bars in docs/training.md on the
NumPy backend. Command-line flags override any of them.
"""

from __future__ import annotations

from typing import Any

from ..errors import EmberError

# an aligned table: the columns are the point
# fmt: off
DATASETS: dict[str, tuple[Any, ...]] = {
    #  name            class name       (C, H, W)     mean                       std
    "mnist":         ("MNIST",         (1, 28, 28), (0.1307,),                 (0.3081,)),
    "fashion-mnist": ("FashionMNIST",  (1, 28, 28), (0.2860,),                 (0.3530,)),
    "cifar10":       ("CIFAR10",       (3, 32, 32), (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "synthetic-cifar10": ("SyntheticCIFAR10", (3, 32, 32), (0.5, 0.5, 0.5), (0.29, 0.29, 0.29)),
    "text":          ("TextFile",      None,         None,                     None),     # ember train text FILE
}
# fmt: on
# Which models train on which kind of data: images, or characters of a text.
TEXT_MODELS = ("transformer",)

BASE: dict[str, Any] = dict(
    epochs=1, batch_size=64, lr=1e-3, optimizer="adam", momentum=0.9, weight_decay=0.0, schedule="cosine", augment=False
)

# Measured: the MLP with Adam 1e-3 at batch 64 and a constant rate ends epoch 1 at ~96.7% on
# MNIST (PyTorch too); batch 32 with the rate annealed to zero over the run (cosine, per step)
# reaches ~97.7%.
RECIPES: dict[str, dict[str, Any]] = {
    "mlp": dict(batch_size=32),
    "cnn": dict(epochs=2),
    "resnet18": dict(
        epochs=30, batch_size=128, lr=0.1, optimizer="sgd", weight_decay=5e-4, schedule="cosine", augment=True
    ),
    "transformer": dict(batch_size=32, lr=3e-3),
}
SEQ_LEN = 64  # characters per training sequence of a text run (--seq-len)


def default_help(key: str) -> str:
    """How a recipe setting defaults, for ``--help``: one value, or the value per model.

    >>> default_help("epochs")
    'default: from the recipe: mlp 1, cnn 2, resnet18 30, transformer 1'
    >>> default_help("momentum")
    'default: 0.9'
    """
    values = {model: {**BASE, **row}[key] for model, row in RECIPES.items()}
    if len(set(map(repr, values.values()))) == 1:
        return f"default: {next(iter(values.values()))}"
    return "default: from the recipe: " + ", ".join(f"{m} {v}" for m, v in values.items())


def recipe(dataset: str, model: str) -> dict:
    if dataset not in DATASETS:
        raise EmberError(f"unknown dataset {dataset!r}; ember knows {', '.join(DATASETS)}")
    if model not in RECIPES:
        raise EmberError(f"unknown model {model!r}; ember train knows {', '.join(RECIPES)}")
    if (dataset == "text") != (model in TEXT_MODELS):
        raise EmberError(
            f"--model {model} does not train on {dataset}: text trains "
            f"{', '.join(TEXT_MODELS)} (ember train text FILE), images the other models"
        )
    return {**BASE, **RECIPES[model]}


def class_names(dataset: str) -> list[str]:
    """The dataset's class names, for ``ember eval``'s per-class table.

    >>> class_names("cifar10")[:3]
    ['airplane', 'automobile', 'bird']
    """
    from .. import data

    return list(getattr(getattr(data, DATASETS[dataset][0], None), "classes", []))


def build_datasets(name: str, root=None, limit_train=None, limit_test=None, text=None):
    """(train, test) datasets, optionally the first N samples of each (quick runs and tests);
    ``text`` is the config's ``(file, seq_len, vocab)`` of a text run."""
    from .. import data

    cls_name, shape, _, _ = DATASETS[name]
    cls: Any = getattr(data, cls_name, None)
    train: Any
    test: Any
    if name == "text":
        from ..data.text import TextFile

        path, seq_len, vocab = text
        train, test = TextFile(path, seq_len, True, vocab), TextFile(path, seq_len, False, vocab)
    elif cls_name == "SyntheticCIFAR10":
        train, test = cls(n=limit_train or 10000, seed=0), cls(n=limit_test or 2000, seed=1)
    else:
        train, test = cls(root=root, train=True), cls(root=root, train=False)
    if limit_train:
        train = data.Subset(train, range(min(limit_train, len(train))))
    if limit_test:
        test = data.Subset(test, range(min(limit_test, len(test))))
    return train, test


def transforms(name: str, augment: bool):
    from ..data import transforms as T

    if name == "text":
        return None
    _, (c, h, w), mean, std = DATASETS[name]
    steps = []
    if augment:
        steps += [T.RandomCrop(h, padding=4), T.RandomHorizontalFlip()]
    steps.append(T.Normalize(mean, std))
    return T.Compose(steps)


def build_model(model: str, dataset: str, cfg=None):
    from .. import models

    if dataset == "text":
        return models.get(model, vocab_size=len(cfg["vocab"]), max_len=cfg["seq_len"])
    _, (c, h, w), _, _ = DATASETS[dataset]
    shape_args = {
        "mlp": dict(in_features=c * h * w),
        "cnn": dict(in_channels=c, image_size=h),
        "resnet18": dict(in_channels=c),
    }
    return models.get(model, num_classes=10, **shape_args[model])


def loss_fn(dataset: str):
    """The training loss: cross-entropy over classes, or over every position of a sequence."""
    from ..nn import functional as F

    if dataset == "text":
        from .text import sequence_cross_entropy

        return sequence_cross_entropy
    return F.cross_entropy


def build_optimizer(params, name: str, lr: float, momentum: float, weight_decay: float):
    from .. import optim

    table = {
        "sgd": lambda: optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay),
        "adam": lambda: optim.Adam(params, lr=lr, weight_decay=weight_decay),
        "adamw": lambda: optim.AdamW(params, lr=lr, weight_decay=weight_decay or 1e-2),
        "rmsprop": lambda: optim.RMSprop(params, lr=lr, weight_decay=weight_decay),
    }
    if name not in table:
        raise EmberError(f"unknown optimizer {name!r}; ember knows {', '.join(table)}")
    return table[name]()


def build_scheduler(optimizer, schedule: str, total_steps: int):
    """The LR schedule, stepped once per optimizer step (the Trainer's ``scheduler_interval="step"``)."""
    from ..optim import lr_scheduler as S

    table = {
        "none": lambda: None,
        "cosine": lambda: S.CosineAnnealingLR(optimizer, T_max=total_steps),
        "step": lambda: S.StepLR(optimizer, step_size=max(1, total_steps // 3), gamma=0.1),
    }
    if schedule not in table:
        raise EmberError(f"unknown schedule {schedule!r}; ember knows {', '.join(table)}")
    return table[schedule]()

"""What ``ember train`` and ``ember eval`` accept, checked before any work starts.

One table says what each number must be; it checks the command line and, on ``eval`` and
``--resume``, the config a checkpoint carries (a config edited into nonsense is a bad file,
not a crash). Paths are checked for what the run will do with them: the run directory must
be creatable and writable, and hold a run exactly when ``--resume`` says it does.
"""

from __future__ import annotations

import math
import os
import tempfile

from ..errors import EmberError
from ..io.errors import CheckpointError
from . import recipes
from .callbacks import MONITORS


def _int(least, most=2**63 - 1):
    return (lambda v: type(v) is int and least <= v <= most), f"an integer >= {least}"


def _number(least, strict):
    def ok(v):
        return type(v) in (int, float) and math.isfinite(v) and (v > least if strict else v >= least)

    return ok, f"a finite number {'>' if strict else '>='} {least}"


def _one_of(names):
    return (lambda v: v in names), "one of " + ", ".join(sorted(names))


# an aligned table: the columns are the point
# fmt: off
NUMBERS = {
    #  name               (test, what it must be)
    "epochs":           _int(1),
    "batch_size":       _int(1),
    "lr":               _number(0, strict=True),
    "momentum":         _number(0, strict=False),
    "weight_decay":     _number(0, strict=False),
    "clip_grad_norm":   _number(0, strict=True),
    "seed":             _int(0, 2**32 - 1),
    "checkpoint_every": _int(1),
    "keep_last":        _int(1),
    "max_steps":        _int(1),
    "limit_train":      _int(1),
    "limit_test":       _int(1),
    "dist_timeout":     _number(0, strict=True),
    "seq_len":          _int(1),
    "early_stop":       _int(1),
    "keep_best":        _int(1),
    "lr_plateau":       _int(1),
}
# fmt: on

# A saved config holds these too; names must be ones this ember knows.
# an aligned table: the columns are the point
# fmt: off
CONFIG = {
    **NUMBERS,
    "dataset":   _one_of(recipes.DATASETS),
    "model":     _one_of(recipes.RECIPES),
    "optimizer": _one_of({"sgd", "adam", "adamw", "rmsprop"}),
    "schedule":  _one_of({"none", "cosine", "step"}),
    "augment":   ((lambda v: type(v) is bool), "true or false"),
    "monitor":   _one_of(MONITORS),
    "text_file": ((lambda v: isinstance(v, str) and v != ""), "a file path"),
    "vocab":     ((lambda v: isinstance(v, str) and len(set(v)) == len(v) > 1), "a string of distinct characters"),
}
# fmt: on
CONFIG_REQUIRED = (
    "dataset",
    "model",
    "epochs",
    "batch_size",
    "lr",
    "optimizer",
    "momentum",
    "weight_decay",
    "schedule",
    "augment",
    "seed",
)
TEXT_REQUIRED = ("text_file", "seq_len", "vocab")


def check_arguments(args) -> None:
    """Raise ``EmberError`` naming the first flag out of range (None means "not given").

    >>> import argparse
    >>> check_arguments(argparse.Namespace(batch_size=0))
    Traceback (most recent call last):
    ...
    ember.errors.EmberError: --batch-size must be an integer >= 1, got 0
    """
    for name, (ok, what) in NUMBERS.items():
        value = getattr(args, name, None)
        if value is not None and not ok(value):
            raise EmberError(f"--{name.replace('_', '-')} must be {what}, got {value!r}")


def check_config(path, cfg) -> dict:
    """The training config saved in checkpoint ``path``, checked; a ``CheckpointError`` if not
    a config ``ember train`` could have written.

    >>> check_config("ckpt", {"model": "vgg"})
    Traceback (most recent call last):
    ...
    ember.io.errors.CheckpointError: ckpt: config.model must be one of cnn, mlp, resnet18, transformer, got 'vgg'
    """
    if not isinstance(cfg, dict) or "model" not in cfg:
        raise CheckpointError(path, "no training config in this checkpoint (not written by ember train)")
    for name, (ok, what) in CONFIG.items():
        value = cfg.get(name)
        if value is not None and not ok(value):
            raise CheckpointError(path, f"config.{name} must be {what}, got {value!r:.60}")
    missing = [
        k for k in CONFIG_REQUIRED + (TEXT_REQUIRED if cfg.get("dataset") == "text" else ()) if cfg.get(k) is None
    ]
    if missing:
        raise CheckpointError(path, f"config lacks {', '.join(missing)} (not written by ember train?)")
    return cfg


def check_run_dir(out: str, resume: bool) -> None:
    """The run directory can be written, and ``--resume`` matches what is in it."""
    from ..io.checkpoint import latest_checkpoint, list_checkpoints

    if os.path.exists(out) and not os.path.isdir(out):
        raise EmberError(f"--out {out} is a file, not a directory")
    writable_dir(out, "--out")
    if resume:
        if not os.path.isdir(out):
            raise EmberError(f"--resume: {out} does not exist (no run to resume); drop --resume to start one")
        if latest_checkpoint(out) is None:
            bad = [f"{os.path.basename(c.path)}: {c.status}" for c in list_checkpoints(out) if c.status != "ok"]
            raise EmberError(
                f"--resume: {out} holds no complete checkpoint of a run"
                + (f" ({'; '.join(bad[:3])})" if bad else "")
                + "; drop --resume to start a new run"
            )
    elif os.path.isdir(out) and list_checkpoints(out):
        raise EmberError(
            f"{out} already holds checkpoints of a run; pass --resume to continue it or "
            f"--out to start a new one (nothing was changed)"
        )


def writable_dir(path: str, flag: str) -> None:
    """Raise unless ``path`` is, or can be made as, a writable directory (probed, not guessed:
    permission bits do not tell about read-only mounts or root)."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise EmberError(f"{flag} {path}: {probe} is a file, so no directory can be made there")
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as e:
        raise EmberError(f"{flag} {path}: cannot write in {probe} ({e.strerror or e})") from None

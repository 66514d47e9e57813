"""Callbacks: code the Trainer calls at fixed points of a run, in Keras's and Lightning's shape.

A callback overrides the hooks it needs (all do nothing by default)::

    setup(trainer)                  once, when the Trainer is built
    on_fit_start(trainer)           at the start of every ``fit`` (also after a resume)
    on_epoch_end(trainer, record)   after each epoch's evaluation, before its checkpoint
    on_fit_end(trainer)             when ``fit`` returns

and keeps what it has learnt in ``state_dict()``: the Trainer writes it into every checkpoint
and gives it back with ``load_state_dict`` on ``resume``, so a resumed run stops, keeps the
best files and lowers the rate exactly as an uninterrupted one would. A callback stops the run
by setting ``trainer.should_stop``; the run ends after the current epoch.

The numbers a callback can watch are the epoch record's: ``eval_loss``, ``eval_accuracy``
(with an eval loader), ``train_loss``, ``train_accuracy``. ``mode="auto"`` means "max" for an
accuracy and "min" for anything else, as in Keras.
"""

from __future__ import annotations

import math
import os

from ..errors import EmberError

# The numbers of an epoch's record a callback can watch (``ember train --monitor``).
MONITORS = ("eval_loss", "eval_accuracy", "train_loss", "train_accuracy")


class Callback:
    """The protocol: every hook does nothing; override the ones you need.

    >>> class Printer(Callback):
    ...     def on_epoch_end(self, trainer, record):
    ...         print("epoch", record["epoch"])
    >>> Printer().state_dict()
    {}
    """

    def setup(self, trainer) -> None:
        """Called once, when the Trainer that runs this callback is built."""

    def on_fit_start(self, trainer) -> None:
        """Called at the start of every ``fit``."""

    def on_epoch_end(self, trainer, record: dict) -> None:
        """Called after each epoch's evaluation with the epoch's record, before its checkpoint."""

    def on_fit_end(self, trainer) -> None:
        """Called when ``fit`` returns (finished, paused or stopped)."""

    def state_dict(self) -> dict:
        """What a resumed run needs: plain JSON data."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`."""


class Monitor:
    """Which record number to watch, and which way is better.

    >>> m = Monitor("eval_accuracy"); m.mode, m.better(0.9, 0.8, 0.0), m.better(0.8, 0.8, 0.0)
    ('max', True, False)
    >>> Monitor("eval_loss", min_delta=0.1).better(0.95, 1.0)
    False
    """

    def __init__(self, monitor: str = "eval_loss", mode: str = "auto", min_delta: float = 0.0):
        if mode not in ("auto", "min", "max"):
            raise EmberError(f"mode must be 'auto', 'min' or 'max', got {mode!r}")
        if not isinstance(min_delta, (int, float)) or not math.isfinite(min_delta) or min_delta < 0:
            raise EmberError(f"min_delta must be a finite number >= 0, got {min_delta!r}")
        self.monitor, self.min_delta = monitor, float(min_delta)
        self.mode = mode if mode != "auto" else ("max" if "acc" in monitor else "min")

    def value(self, record: dict) -> float:
        """The watched number in ``record``; an error naming the numbers there are if absent."""
        value = record.get(self.monitor)
        if value is None:
            if self.monitor in record:  # the epoch measured nothing (NaN is stored as None)
                return math.nan
            have = ", ".join(k for k, v in record.items() if isinstance(v, float))
            raise EmberError(
                f"{type(self).__name__}: monitor {self.monitor!r} is not in the epoch's record "
                f"(it has {have}); an eval_* metric needs an eval_loader"
            )
        return float(value)

    def better(self, value: float, best: float | None, min_delta: float | None = None) -> bool:
        """True if ``value`` improves on ``best`` by more than ``min_delta``."""
        delta = self.min_delta if min_delta is None else min_delta
        if math.isnan(value):
            return False
        if best is None:
            return True
        return value < best - delta if self.mode == "min" else value > best + delta


class EarlyStopping(Callback):
    """Stop when ``monitor`` has not improved by more than ``min_delta`` for ``patience`` epochs.

    >>> stop = EarlyStopping("eval_loss", patience=2)
    >>> class Run: should_stop = False
    >>> run = Run()
    >>> for loss in [1.0, 0.8, 0.9, 0.85]:
    ...     stop.on_epoch_end(run, {"epoch": 0, "eval_loss": loss})
    >>> run.should_stop, stop.best, stop.wait
    (True, 0.8, 2)
    """

    def __init__(self, monitor: str = "eval_loss", mode: str = "auto", patience: int = 3, min_delta: float = 0.0):
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
            raise EmberError(f"EarlyStopping: patience must be an int >= 1, got {patience!r}")
        self.watch = Monitor(monitor, mode, min_delta)
        self.patience = patience
        self.best, self.wait, self.stopped_epoch = None, 0, None

    def on_fit_start(self, trainer):
        if self.stopped_epoch is not None:  # a resumed run that had already stopped stays stopped
            trainer.should_stop = True

    def on_epoch_end(self, trainer, record):
        value = self.watch.value(record)
        if self.watch.better(value, self.best):
            self.best, self.wait = value, 0
            return
        self.wait += 1
        if self.wait >= self.patience:
            self.stopped_epoch = record["epoch"]
            trainer.should_stop = True

    def reason(self) -> str:
        """Why the run stopped, for the user."""
        return (
            f"stopped early after epoch {self.stopped_epoch}: {self.watch.monitor} did not improve on "
            f"{self.best:.4g} for {self.patience} epoch{'s' if self.patience > 1 else ''}"
        )

    def state_dict(self):
        return {"best": self.best, "wait": self.wait, "stopped_epoch": self.stopped_epoch}

    def load_state_dict(self, state):
        self.best, self.wait, self.stopped_epoch = state["best"], int(state["wait"]), state["stopped_epoch"]


class ModelCheckpoint(Callback):
    """Keep the ``save_top_k`` best checkpoints by ``monitor`` in ``dirpath`` (default
    ``OUT_DIR/best``); the rest are deleted. Each is a whole run checkpoint, so ``ember eval``
    and ``Trainer.resume`` take it. ``best_model_path`` and ``best_model_score`` name the best;
    ``best_k_models`` maps each kept path to its score (Lightning's names). Every file kept is
    also a ``split: "best"`` record of the run's ``metrics.jsonl``, with its rank.
    """

    def __init__(self, monitor: str = "eval_loss", mode: str = "auto", save_top_k: int = 1, dirpath=None):
        if isinstance(save_top_k, bool) or not isinstance(save_top_k, int) or save_top_k < 1:
            raise EmberError(f"ModelCheckpoint: save_top_k must be an int >= 1, got {save_top_k!r}")
        self.watch = Monitor(monitor, mode)
        self.save_top_k, self.dirpath = save_top_k, dirpath
        self.kept: list[tuple[float, int]] = []  # (score, step), best first

    def setup(self, trainer):
        if self.dirpath is None and trainer.out_dir is not None:
            self.dirpath = os.path.join(trainer.out_dir, "best")

    def on_fit_start(self, trainer):
        if self.dirpath is None and trainer.is_main:
            raise EmberError("ModelCheckpoint needs a dirpath or a Trainer with out_dir")

    def on_epoch_end(self, trainer, record):
        if not trainer.is_main:
            return
        from ..io.checkpoint import checkpoint_path, remove_checkpoint

        value = self.watch.value(record)
        if math.isnan(value):
            return
        ranked = sorted(self.kept + [(value, trainer.step)], key=self._order)
        if (value, trainer.step) not in ranked[: self.save_top_k]:
            return
        path = trainer.save(self.dirpath, keep_last=None, extra={"monitor": self.watch.monitor, "score": value})
        for _, step in ranked[self.save_top_k :]:
            remove_checkpoint(checkpoint_path(self.dirpath, step))
        self.kept = ranked[: self.save_top_k]
        if trainer._log is not None:
            rank = self.kept.index((value, trainer.step)) + 1
            trainer._log.write(
                split="best",
                step=trainer.step,
                epoch=record["epoch"],
                monitor=self.watch.monitor,
                score=value,
                rank=rank,
                path=path,
                best_path=self.best_model_path,
            )

    def _order(self, entry):
        score, step = entry
        return (score if self.watch.mode == "min" else -score, step)

    @property
    def best_k_models(self) -> dict:
        from ..io.checkpoint import checkpoint_path

        return {checkpoint_path(self.dirpath, step): score for score, step in self.kept}

    @property
    def best_model_path(self) -> str | None:
        from ..io.checkpoint import checkpoint_path

        return checkpoint_path(self.dirpath, self.kept[0][1]) if self.kept else None

    @property
    def best_model_score(self) -> float | None:
        return self.kept[0][0] if self.kept else None

    def state_dict(self):
        return {"kept": [[score, step] for score, step in self.kept]}

    def load_state_dict(self, state):
        self.kept = [(float(score), int(step)) for score, step in state["kept"]]


class ReduceLROnPlateau(Callback):
    """Lower the learning rate when ``monitor`` stops improving: an
    ``ember.optim.lr_scheduler.ReduceLROnPlateau`` on the Trainer's optimizer, stepped with the
    watched number after every epoch (Keras's callback of the same name; the keyword arguments
    are the scheduler's: ``factor``, ``patience``, ``threshold``, ``cooldown``, ``min_lr``).
    """

    def __init__(self, monitor: str = "eval_loss", mode: str = "auto", **scheduler_kwargs):
        self.watch = Monitor(monitor, mode)
        self.kwargs = scheduler_kwargs
        self.scheduler = None

    def setup(self, trainer):
        from ..optim.lr_scheduler import ReduceLROnPlateau as Scheduler

        self.scheduler = Scheduler(trainer.optimizer, mode=self.watch.mode, **self.kwargs)

    def on_epoch_end(self, trainer, record):
        value = self.watch.value(record)
        if not math.isnan(value):
            self.scheduler.step(value)

    def state_dict(self):
        state = self.scheduler.state_dict()
        if not math.isfinite(state["best"]):  # nothing seen yet: +-inf, which JSON cannot hold
            state["best"] = None
        return state

    def load_state_dict(self, state):
        state = dict(state)
        if state["best"] is None:
            state["best"] = math.inf if self.watch.mode == "min" else -math.inf
        self.scheduler.load_state_dict(state)


def callback_keys(callbacks) -> list[str]:
    """The names callbacks' states are stored under in a checkpoint: the class name, numbered
    from the second of a kind.

    >>> callback_keys([EarlyStopping(), EarlyStopping("eval_accuracy"), Callback()])
    ['EarlyStopping', 'EarlyStopping-2', 'Callback']
    """
    keys: list[str] = []
    seen: dict[str, int] = {}
    for cb in callbacks:
        name = type(cb).__name__
        seen[name] = seen.get(name, 0) + 1
        keys.append(name if seen[name] == 1 else f"{name}-{seen[name]}")
    return keys

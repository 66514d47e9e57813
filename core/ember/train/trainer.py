"""The training loop.

A Trainer owns nothing clever: for each batch it runs forward, loss, backward, a finiteness
check of the loss and the gradient norm, (clipping), optimizer step; every ``log_every`` steps
it writes a record; every ``checkpoint_every`` steps and at each epoch's end it saves the run;
hooks run at the steps and epoch ends they asked for.

Where the run is (step, finished epochs, batches of the current epoch, that epoch's metric
accumulators) goes into every checkpoint with the rest of the state, so ``resume`` continues
exactly, whether the run was killed, paused by ``max_steps``, or stopped during evaluation.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any, cast

from ..autodiff import no_grad
from ..errors import EmberError
from ..io.checkpoint import sweep
from ..io.errors import CheckpointError
from ..io.faults import kill_point
from .callbacks import callback_keys
from .logbook import Logbook, plot_curves
from .metrics import Accuracy, ClassAccuracy, Mean, RunningMean, load_meter_state, meter_state
from .progress import Progress
from .state import TRAINER_SCHEMA, check_fields, load_training_state, save_training_state


class Trainer:
    """Train ``model`` with ``optimizer`` on ``train_loader``.

    >>> import ember
    >>> from ember import nn, optim
    >>> from ember.data import ArrayDataset, DataLoader
    >>> _ = ember.manual_seed(0)
    >>> x = ember.randn(64, 4); y = (x.sum(1) > 0).long()
    >>> loader = DataLoader(ArrayDataset(x.numpy(), y.numpy()), batch_size=16, shuffle=True)
    >>> model = nn.Linear(4, 2)
    >>> trainer = Trainer(model, optim.SGD(model.parameters(), lr=0.5), loader, progress=False)
    >>> history = trainer.fit(epochs=3)
    >>> history[-1]["train_loss"] < history[0]["train_loss"]
    True
    """

    def __init__(
        self,
        model,
        optimizer,
        train_loader,
        *,
        loss_fn=None,
        eval_loader=None,
        scheduler=None,
        scheduler_interval="epoch",
        out_dir=None,
        checkpoint_every=None,
        keep_last=3,
        log_every=50,
        progress=True,
        clip_grad_norm=None,
        config=None,
        is_main=True,
        jit=True,
        on_nonfinite="stop",
        callbacks=None,
    ):
        if loss_fn is None:
            from ..nn import functional as F

            loss_fn = F.cross_entropy
        if scheduler_interval not in ("epoch", "step"):
            raise EmberError(f"scheduler_interval must be 'epoch' or 'step', got {scheduler_interval!r}")
        if on_nonfinite not in ("stop", "skip"):
            raise EmberError(f"on_nonfinite must be 'stop' or 'skip', got {on_nonfinite!r}")
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn
        self.train_loader, self.eval_loader = train_loader, eval_loader
        self.scheduler, self.scheduler_interval = scheduler, scheduler_interval
        # Under data parallelism only the main rank writes logs and checkpoints and shows progress.
        self.is_main = is_main
        self.out_dir = None if out_dir is None or not is_main else os.fspath(out_dir)
        progress = progress and is_main
        self.checkpoint_every, self.keep_last, self.log_every = checkpoint_every, keep_last, log_every
        self.progress, self.clip_grad_norm = progress, clip_grad_norm
        self.config = dict(config or {})
        # Where the run is: optimizer steps taken, epochs finished, batches of the current epoch
        # done, and that epoch's metric accumulators. All of it goes into every checkpoint.
        self.step, self.epoch, self._batch = 0, 0, 0
        self._meters = _new_meters()
        # A NaN/inf loss or gradient norm stops the run (default) or skips that update ("skip").
        self.on_nonfinite, self.skipped_steps = on_nonfinite, 0
        self.paused = False
        self._saved_step = None
        self.history: list[dict] = []
        self._step_hooks: list[tuple[int, Callable[[Trainer], object]]] = []
        self._epoch_hooks: list = []
        self._log = None
        self._resumed_step = None
        # ember.jit compiles forward + backward + update into one graph (docs/jit.md); off with
        # jit=False (``ember train --no-jit``) or EMBER_JIT=0. Data-parallel training all-reduces
        # gradients between backward and step, in Python: it stays eager.
        self.jit = jit
        self._compiled_step = None
        # Callbacks (callbacks.py) see every epoch's record; one may end the run after an epoch.
        self.callbacks, self.should_stop = list(callbacks or []), False
        for cb in self.callbacks:
            cb.setup(self)

    # ------------------------------------------------------------------------------- hooks
    def every(self, n_steps: int):
        """Decorator: call ``fn(trainer)`` after every ``n_steps`` optimizer steps."""

        def register(fn):
            self._step_hooks.append((n_steps, fn))
            return fn

        return register

    def at_epoch_end(self, fn):
        """Decorator: call ``fn(trainer, record)`` after each epoch (after evaluation)."""
        self._epoch_hooks.append(fn)
        return fn

    # ------------------------------------------------------------------------------- one step
    def train_step(self, x, y):
        """Forward, backward, check, update. Returns ``(loss tensor, logits)``, or ``None``
        when ``on_nonfinite="skip"`` skipped the update (the loss or a gradient was NaN/inf)."""
        if self.jit and getattr(self.model, "sync_gradients", None) is None:
            from ..jit import jit

            if self.on_nonfinite == "stop":
                # One graph for the whole step; it cannot stop half-way, so a non-finite step
                # is reported after its update (and no checkpoint is written after it).
                if self._compiled_step is None:
                    self._compiled_step = jit(self._update)
                loss, logits, norm = self._compiled_step(x, y)
                self._check_finite(loss, norm, applied=True)
            else:
                # Skipping needs the decision before the update: two graphs, gradients then update.
                if self._compiled_step is None:
                    self._compiled_step = (jit(self._gradients), jit(self._apply))
                loss, logits, norm = self._compiled_step[0](x, y)
                if not self._check_finite(loss, norm, applied=False):
                    return self._skipped()
                self._compiled_step[1]()
            if self.scheduler is not None and self.scheduler_interval == "step":
                self.scheduler.step()
            return loss, logits
        logits = self.model(x)
        loss = self.loss_fn(logits, y)
        self.optimizer.zero_grad()
        sync = getattr(self.model, "sync_gradients", None)  # data-parallel: average over ranks
        if sync is not None:
            shard = getattr(self.train_loader, "global_size", 0)
            self.model.set_weight(y.shape[0] * self.model.size / shard if shard else 1.0)
        loss.backward()
        if sync is not None:
            sync()
        if not self._check_finite(loss, self._grad_norm(), applied=False):
            return self._skipped()
        self._apply()
        if self.scheduler is not None and self.scheduler_interval == "step":
            self.scheduler.step()
        return loss, logits

    def _gradients(self, x, y):
        """Forward, loss, backward; returns the loss, the logits and the global gradient norm."""
        logits = self.model(x)
        loss = self.loss_fn(logits, y)
        self.optimizer.zero_grad()
        loss.backward()
        return loss, logits, self._grad_norm()

    def _apply(self):
        """Clipping and the optimizer's update."""
        if self.clip_grad_norm:
            from ..optim import clip_grad_norm_

            clip_grad_norm_(self.model.parameters(), self.clip_grad_norm)
        self.optimizer.step()

    def _update(self, x, y):
        """The step ember.jit compiles: forward, loss, backward, gradient norm, clipping, update."""
        loss, logits, norm = self._gradients(x, y)
        self._apply()
        return loss, logits, norm

    def _grad_norm(self):
        """The global 2-norm of the gradients, one scalar: NaN/inf in any gradient shows in it."""
        from ..tensor import stack

        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        if not grads:
            return None
        return stack([(g * g).sum() for g in grads]).sum().sqrt()

    def _check_finite(self, loss, norm, *, applied) -> bool:
        """True if the step is finite; else stop with an error naming step and batch, or (skip)
        return False so the update is not applied."""
        value = loss.item()
        grad = math.nan if norm is None else norm.item()
        if math.isfinite(value) and (norm is None or math.isfinite(grad)):
            return True
        what = f"loss became {value}" if not math.isfinite(value) else f"the gradient norm became {grad} (loss {value})"
        where = f"at step {self.step + 1} (epoch {self.epoch + 1}, batch {self._batch + 1} of the epoch)"
        if self.on_nonfinite == "skip" and not applied:
            self.skipped_steps += 1
            if self.progress:
                print(f"ember: {what} {where}; update skipped (--on-nonfinite skip)", file=sys.stderr, flush=True)
            return False
        after = "The parameters hold that step's update; " if applied else "The update was not applied; "
        raise NonFiniteError(
            f"{what} {where}. {after}no checkpoint was written after it; the last good one "
            f"is in {self.out_dir or '(no out_dir)'}. Check that batch's data, lower the "
            f"learning rate, set --clip-grad-norm, or pass --on-nonfinite skip"
        )

    def _skipped(self):
        self.optimizer.zero_grad()
        if self.scheduler is not None and self.scheduler_interval == "step":
            self.scheduler.step()  # the step is counted, as a skipped AMP step is

    # ------------------------------------------------------------------------------- the loop
    def fit(self, epochs: int, max_steps: int | None = None) -> list[dict]:
        """Train until ``epochs`` epochs are done; returns per-epoch records.

        ``max_steps`` pauses the run after that many steps in total: it saves a checkpoint
        (given ``out_dir``) and returns, with ``paused`` set; ``resume`` and a later ``fit``
        continue exactly where it stopped. A pause inside an epoch does not finish the epoch.
        """
        if self.out_dir is not None:
            sweep(self.out_dir)  # what a killed writer left behind
            if self._log is None:
                self._log = Logbook(self.out_dir, resume_step=self._resumed_step, resume_epoch=self.epoch)
        start = time.monotonic()
        self.paused = self.should_stop = False
        for cb in self.callbacks:
            cb.on_fit_start(self)  # (an EarlyStopping that has stopped the run sets it again)
        while self.epoch < epochs and not self.should_stop:
            if self._batch < len(self.train_loader):
                if max_steps is not None and self.step >= max_steps:
                    self._pause()
                    break
                if self._batch == 0:
                    self._start_epoch()
                if not self._train_epoch(epochs, max_steps, start):
                    self._pause()
                    break
            self._finish_epoch()
            if max_steps is not None and self.step >= max_steps and self.epoch < epochs:
                self.paused = True
                break
        if self.out_dir is not None and self._log is not None:
            try:
                plot_curves(self.out_dir)
            except EmberError:
                pass  # matplotlib is optional; the JSONL log has everything
        for cb in self.callbacks:
            cb.on_fit_end(self)
        return self.history

    def _start_epoch(self):
        self._meters = _new_meters()
        set_epoch = getattr(self.train_loader, "set_epoch", None)
        if set_epoch is not None:
            set_epoch(self.epoch)  # the loader's epoch is the trainer's, also after a resume

    def _train_epoch(self, epochs, max_steps, start) -> bool:
        """The rest of the current epoch's batches; False if ``max_steps`` paused it."""
        self.model.train()
        m = self._meters
        bar = Progress(
            len(self.train_loader),
            f"epoch {self.epoch + 1}/{epochs}",
            self.progress,
            batch_size=getattr(self.train_loader, "batch_size", None),
        )
        bar.update(self._batch)
        for x, y in self.train_loader:
            out = self.train_step(x, y)
            self.step += 1
            self._batch += 1
            if out is not None:
                loss, logits = out
                value = loss.item()
                m["loss_avg"].add(value)
                m["loss"].add(value, y.shape[0])
                correct = m["acc"].add(logits.detach(), y) if _is_classification(logits, y) else None
                if correct is not None:
                    m["acc_avg"].add(correct / y.numel())
            bar.update(1, loss=m["loss_avg"].value, acc=m["acc_avg"].value)
            if self._log and self.step % self.log_every == 0:
                self._log.write(
                    split="train",
                    step=self.step,
                    epoch=self.epoch,
                    loss=m["loss_avg"].value,
                    accuracy=m["acc_avg"].value,
                    lr=self._lr(),
                    time=time.monotonic() - start,
                )
            for n, hook in self._step_hooks:
                if self.step % n == 0:
                    hook(self)
            if self.checkpoint_every and self.step % self.checkpoint_every == 0 and self.out_dir is not None:
                self.save()
            if max_steps is not None and self.step >= max_steps and self._batch < len(self.train_loader):
                bar.close()
                return False
        bar.close()
        return True

    def _finish_epoch(self):
        """Evaluate, record, advance the epoch, and checkpoint: the epoch's end."""
        m = self._meters
        record = {
            "epoch": self.epoch + 1,
            "step": self.step,
            "train_loss": _number(m["loss"].value),
            "train_accuracy": _number(m["acc"].value),
        }
        if self.skipped_steps:
            record["skipped_steps"] = self.skipped_steps
        if self.eval_loader is not None:
            ev = self.evaluate(_kill_point=True)
            record.update(eval_loss=_number(ev["loss"]), eval_accuracy=_number(ev["accuracy"]))
            if self._log:
                self._log.write(split="eval", step=self.step, epoch=self.epoch + 1, **ev)
        kill_point("epoch-end")
        self.epoch += 1
        self._batch, self._meters = 0, _new_meters()
        if self.scheduler is not None and self.scheduler_interval == "epoch":
            self.scheduler.step()
        self.history.append(record)
        for hook in self._epoch_hooks:
            hook(self, record)
        for cb in self.callbacks:
            cb.on_epoch_end(self, record)
        if self.out_dir is not None:
            self.save()
        if self.progress:
            print(
                " ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in record.items()), flush=True
            )

    def _pause(self):
        self.paused = True
        if self.out_dir is not None and self._saved_step != self.step:
            self.save()  # a paused run can be resumed

    def evaluate(self, loader=None, *, per_class: int | None = None, _kill_point=False) -> dict:
        """Mean loss and accuracy over ``loader`` (default: the eval loader), in eval mode;
        with ``per_class=N`` (the number of classes) also ``"per_class"``, each class's accuracy."""
        loader = loader or self.eval_loader
        was_training = self.model.training
        self.model.eval()
        loss, acc = Mean(), Accuracy()
        classes = ClassAccuracy(per_class) if per_class else None
        with no_grad():
            for x, y in loader:
                logits = self.model(x)
                loss.add(self.loss_fn(logits, y).item(), y.shape[0])
                if _is_classification(logits, y):
                    acc.add(logits, y)
                    if classes is not None:
                        classes.add(logits, y)
                if _kill_point:
                    kill_point("eval")
        self.model.train(was_training)
        if getattr(self.model, "sync_gradients", None) is not None:  # data-parallel: sum over ranks
            from ..distributed.comm import allreduce_scalars

            loss.total, loss.count, acc.correct, acc.count = allreduce_scalars(
                [loss.total, loss.count, acc.correct, acc.count]
            )
        result: dict[str, Any] = {"loss": loss.value, "accuracy": acc.value}
        if classes is not None:
            result["per_class"] = classes.value
        return result

    # ------------------------------------------------------------------------------- state
    def save(self, directory=None, *, keep_last="default", extra=None) -> str | None:
        """Checkpoint the run now into ``directory`` (default out_dir; atomically; keeps the
        newest ``keep_last``, default the Trainer's, None keeps all), with ``extra`` fields in
        its sidecar. Only the main rank writes; on the others this does nothing. Refuses
        parameters that are not finite."""
        if not self.is_main:
            return None
        if self.out_dir is None and directory is None:
            raise EmberError("Trainer.save() needs out_dir")
        bad = [
            name for name, p in self.model.state_dict().items() if p.dtype.kind == "f" and not bool(p.isfinite().all())
        ]
        if bad:
            raise NonFiniteError(
                f"not saving step {self.step}: {', '.join(bad[:5])} hold NaN/inf values; "
                f"the last good checkpoint is in {self.out_dir}"
            )
        fields = {
            **(extra or {}),
            "epoch": self.epoch,
            "batch": self._batch,
            "meters": meter_state(self._meters),
            "skipped_steps": self.skipped_steps,
            "history": self.history,
            "callbacks": dict(zip(callback_keys(self.callbacks), (cb.state_dict() for cb in self.callbacks))),
        }
        path = save_training_state(
            directory or self.out_dir,
            self.step,
            self.model,
            self.optimizer,
            self.scheduler,
            self.train_loader,
            config=self.config,
            extra=fields,
            keep_last=self.keep_last if keep_last == "default" else keep_last,
        )
        if directory is None:
            self._saved_step = self.step
        return path

    def resume(self, path=None) -> bool:
        """Continue from the newest checkpoint in ``path`` (default out_dir); False if none."""
        from ..io.checkpoint import latest_checkpoint

        path = os.fspath(path or self.out_dir)
        if os.path.isdir(path):
            path = latest_checkpoint(path)
            if path is None:
                return False
        meta = load_training_state(path, self.model, self.optimizer, self.scheduler, self.train_loader)
        extra = meta.get("extra")
        check_fields(path, "extra", extra, TRAINER_SCHEMA)
        extra = cast(dict[str, Any], extra)  # check_fields raised unless it is a dict of the schema's fields
        if extra["batch"] > len(self.train_loader):
            raise CheckpointError(
                path,
                f"sidecar field extra.batch is {extra['batch']}, but an epoch has {len(self.train_loader)} batches",
            )
        self.step, self.epoch, self._batch = meta["step"], extra["epoch"], extra["batch"]
        self.history, self.skipped_steps = extra["history"], extra["skipped_steps"]
        self._meters = _new_meters()
        try:
            load_meter_state(self._meters, extra["meters"])
        except ValueError as e:
            raise CheckpointError(path, f"sidecar extra.meters: {e}") from None
        self._load_callbacks(path, extra.get("callbacks", {}))
        self._resumed_step = self._saved_step = self.step
        return True

    def _load_callbacks(self, path, states) -> None:
        """Give each callback its saved state; one that had state but finds none is an error
        (it would restart silently), and so is a state that does not fit."""
        if not isinstance(states, dict):
            raise CheckpointError(path, f"sidecar field extra.callbacks must be an object, got {states!r:.60}")
        for key, cb in zip(callback_keys(self.callbacks), self.callbacks):
            if key not in states:
                if cb.state_dict():
                    raise CheckpointError(
                        path,
                        f"sidecar holds no state for callback {key} (saved by a run "
                        f"without it); start a new run to use it",
                    )
                continue
            try:
                cb.load_state_dict(states[key])
            except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
                raise CheckpointError(path, f"sidecar extra.callbacks.{key} does not fit {key}: {e}") from None

    def _lr(self):
        return self.optimizer.param_groups[0]["lr"]


class NonFiniteError(EmberError):
    """A loss, gradient or parameter became NaN or infinite."""


def _new_meters() -> dict:
    return {"loss": Mean(), "acc": Accuracy(), "loss_avg": RunningMean(), "acc_avg": RunningMean()}


def _number(value):
    """A metric for the history: None where there was nothing to measure (NaN is not JSON)."""
    return value if math.isfinite(value) else None


def _is_classification(logits, y) -> bool:
    return logits.ndim == y.ndim + 1 and y.dtype.kind in "iu"

"""The training loop.

A Trainer owns nothing clever: for each batch it runs forward, loss, backward, (clipping),
optimizer step; every ``log_every`` steps it writes a record; every ``checkpoint_every`` steps
and at each epoch's end it saves the run; hooks run at the steps and epoch ends they asked for.
"""
from __future__ import annotations

import math
import os
import time

from ..autodiff import no_grad
from ..errors import EmberError
from .logbook import Logbook, plot_curves
from .metrics import Accuracy, Mean, RunningMean
from .progress import Progress
from .state import load_training_state, save_training_state


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

    def __init__(self, model, optimizer, train_loader, *, loss_fn=None, eval_loader=None,
                 scheduler=None, scheduler_interval="epoch", out_dir=None, checkpoint_every=None,
                 keep_last=3, log_every=50, progress=True, clip_grad_norm=None, config=None, is_main=True,
                 jit=True):
        if loss_fn is None:
            from ..nn import functional as F
            loss_fn = F.cross_entropy
        if scheduler_interval not in ("epoch", "step"):
            raise EmberError(f"scheduler_interval must be 'epoch' or 'step', got {scheduler_interval!r}")
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
        self.step, self.epoch = 0, 0
        self.history: list[dict] = []
        self._step_hooks: list[tuple[int, object]] = []
        self._epoch_hooks: list = []
        self._log = None
        self._resumed_step = None
        # ember.jit compiles forward + backward + update into one graph (docs/jit.md); off with
        # jit=False (``ember train --no-jit``) or EMBER_JIT=0. Data-parallel training all-reduces
        # gradients between backward and step, in Python: it stays eager.
        self.jit = jit
        self._compiled_step = None

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
        """Forward, backward, update. Returns ``(loss tensor, logits)``."""
        if self.jit and getattr(self.model, "sync_gradients", None) is None:
            if self._compiled_step is None:
                from ..jit import jit
                self._compiled_step = jit(self._update)
            loss, logits = self._compiled_step(x, y)
            # A compiled step cannot stop half-way: the loss is checked after the update.
            self._check_loss(loss)
            if self.scheduler is not None and self.scheduler_interval == "step":
                self.scheduler.step()
            return loss, logits
        logits = self.model(x)
        loss = self.loss_fn(logits, y)
        if not math.isfinite(loss.item()):
            raise EmberError(f"loss became {loss.item()} at step {self.step} (epoch {self.epoch}); "
                             f"lower the learning rate or enable --clip-grad-norm. The last good "
                             f"checkpoint is in {self.out_dir or '(no out_dir)'}")
        self.optimizer.zero_grad()
        sync = getattr(self.model, "sync_gradients", None)     # data-parallel: average over ranks
        if sync is not None:
            shard = getattr(self.train_loader, "global_size", 0)
            self.model.set_weight(y.shape[0] * self.model.size / shard if shard else 1.0)
        loss.backward()
        if sync is not None:
            sync()
        if self.clip_grad_norm:
            from ..optim import clip_grad_norm_
            clip_grad_norm_(self.model.parameters(), self.clip_grad_norm)
        self.optimizer.step()
        if self.scheduler is not None and self.scheduler_interval == "step":
            self.scheduler.step()
        return loss, logits

    def _update(self, x, y):
        """The step ember.jit compiles: forward, loss, backward, clipping, update."""
        logits = self.model(x)
        loss = self.loss_fn(logits, y)
        self.optimizer.zero_grad()
        loss.backward()
        if self.clip_grad_norm:
            from ..optim import clip_grad_norm_
            clip_grad_norm_(self.model.parameters(), self.clip_grad_norm)
        self.optimizer.step()
        return loss, logits

    def _check_loss(self, loss):
        if not math.isfinite(loss.item()):
            raise EmberError(f"loss became {loss.item()} at step {self.step} (epoch {self.epoch}); "
                             f"lower the learning rate or enable --clip-grad-norm. The parameters hold "
                             f"that step's update; the last good checkpoint is in {self.out_dir or '(no out_dir)'}")

    # ------------------------------------------------------------------------------- the loop
    def fit(self, epochs: int, max_steps: int | None = None) -> list[dict]:
        """Train until ``epochs`` epochs (or ``max_steps`` steps) are done; returns per-epoch records."""
        if self.out_dir is not None and self._log is None:
            self._log = Logbook(self.out_dir, resume_step=self._resumed_step)
        start = time.monotonic()
        while self.epoch < epochs and (max_steps is None or self.step < max_steps):
            self.model.train()
            loss_avg, acc_avg = RunningMean(), RunningMean()
            epoch_loss, epoch_acc = Mean(), Accuracy()
            bar = Progress(len(self.train_loader), f"epoch {self.epoch + 1}/{epochs}", self.progress)
            stopped = False
            for x, y in self.train_loader:
                loss, logits = self.train_step(x, y)
                self.step += 1
                value = loss.item()
                loss_avg.add(value)
                epoch_loss.add(value, y.shape[0])
                correct = epoch_acc.add(logits.detach(), y) if _is_classification(logits, y) else None
                if correct is not None:
                    acc_avg.add(correct / y.shape[0])
                bar.update(1, loss=loss_avg.value, acc=acc_avg.value)
                if self._log and self.step % self.log_every == 0:
                    self._log.write(split="train", step=self.step, epoch=self.epoch, loss=loss_avg.value,
                                    accuracy=acc_avg.value, lr=self._lr(), time=time.monotonic() - start)
                for n, hook in self._step_hooks:
                    if self.step % n == 0:
                        hook(self)
                if self.checkpoint_every and self.step % self.checkpoint_every == 0:
                    self.save()
                if max_steps is not None and self.step >= max_steps:
                    stopped = True
                    break
            bar.close()
            if stopped and self.epoch + 1 < epochs:
                if self.out_dir is not None and not (self.checkpoint_every and self.step % self.checkpoint_every == 0):
                    self.save()                    # a run stopped by max_steps can be resumed
                break
            record = {"epoch": self.epoch + 1, "step": self.step, "train_loss": epoch_loss.value,
                      "train_accuracy": epoch_acc.value}
            if self.eval_loader is not None:
                ev = self.evaluate()
                record.update(eval_loss=ev["loss"], eval_accuracy=ev["accuracy"])
                if self._log:
                    self._log.write(split="eval", step=self.step, epoch=self.epoch + 1, **ev)
            self.epoch += 1
            if self.scheduler is not None and self.scheduler_interval == "epoch":
                self.scheduler.step()
            self.history.append(record)
            for hook in self._epoch_hooks:
                hook(self, record)
            if self.out_dir is not None:
                self.save()
            if self.progress:
                print(" ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
                               for k, v in record.items()), flush=True)
        if self.out_dir is not None and self._log is not None:
            try:
                plot_curves(self.out_dir)
            except EmberError:
                pass      # matplotlib is optional; the JSONL log has everything
        return self.history

    def evaluate(self, loader=None) -> dict:
        """Mean loss and accuracy over ``loader`` (default: the eval loader), in eval mode."""
        loader = loader or self.eval_loader
        was_training = self.model.training
        self.model.eval()
        loss, acc = Mean(), Accuracy()
        with no_grad():
            for x, y in loader:
                logits = self.model(x)
                loss.add(self.loss_fn(logits, y).item(), y.shape[0])
                if _is_classification(logits, y):
                    acc.add(logits, y)
        self.model.train(was_training)
        if getattr(self.model, "sync_gradients", None) is not None:   # data-parallel: sum over ranks
            from ..distributed.comm import allreduce_scalars
            loss.total, loss.count, acc.correct, acc.count = allreduce_scalars(
                [loss.total, loss.count, acc.correct, acc.count])
        return {"loss": loss.value, "accuracy": acc.value}

    # ------------------------------------------------------------------------------- state
    def save(self) -> str | None:
        """Checkpoint the run now (atomically; keeps the newest ``keep_last``). Only the main
        rank writes; on the others this does nothing."""
        if not self.is_main:
            return None
        if self.out_dir is None:
            raise EmberError("Trainer.save() needs out_dir")
        return save_training_state(self.out_dir, self.step, self.model, self.optimizer, self.scheduler,
                                   self.train_loader, config=self.config,
                                   extra={"epoch": self.epoch, "history": self.history},
                                   keep_last=self.keep_last)

    def resume(self, path=None) -> bool:
        """Continue from the newest checkpoint in ``path`` (default out_dir); False if none."""
        from ..io.checkpoint import latest_checkpoint
        path = os.fspath(path or self.out_dir)
        if os.path.isdir(path):
            path = latest_checkpoint(path)
            if path is None:
                return False
        meta = load_training_state(path, self.model, self.optimizer, self.scheduler, self.train_loader)
        self.step = meta["step"]
        self.epoch = meta["extra"]["epoch"]
        self.history = meta["extra"]["history"]
        self._resumed_step = self.step
        return True

    def _lr(self):
        return self.optimizer.param_groups[0]["lr"]


def _is_classification(logits, y) -> bool:
    return logits.ndim == y.ndim + 1 and y.dtype.kind in "iu"

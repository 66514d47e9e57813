"""Learning-rate schedules, with ``torch.optim.lr_scheduler``'s names and calling convention.

Call ``scheduler.step()`` once after each ``optimizer.step()``; it writes the next lr into
every param group. Each schedule here is a closed form, ``lr = f(base_lr, epoch)``, where
``base_lr`` is the group's ``initial_lr`` (recorded by the first scheduler) and ``epoch`` the
number of ``step()`` calls. torch computes most schedules recursively from the current lr
instead; the two agree to rounding unless something else edits the lr between steps (two
schedulers on one optimizer: chain them with :class:`SequentialLR` instead).

A scheduler's ``state_dict()`` is plain JSON data (numbers and lists).

>>> import ember
>>> w = ember.zeros(1, requires_grad=True)
>>> opt = ember.optim.SGD([w], lr=1.0)
>>> sched = StepLR(opt, step_size=2, gamma=0.5)
>>> lrs = []
>>> for _ in range(5):
...     opt.step(); sched.step(); lrs.append(sched.get_last_lr()[0])
>>> lrs
[1.0, 0.5, 0.5, 0.25, 0.25]
"""
from __future__ import annotations

import math
from bisect import bisect_right

from ..errors import located
from .optimizer import Optimizer, OptimizerError, _real


def _fail(cls, message):
    return located(OptimizerError, f"{cls}: {message}")


def _positive_int(cls, name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise _fail(cls, f"{name} must be a positive int, got {value!r}")
    return value


def _finite(cls, name, value):
    if not _real(value):
        raise _fail(cls, f"{name} must be a finite number, got {value!r}")
    return float(value)


class LRScheduler:
    """Base class: subclasses define ``get_lr()``, the lrs at epoch ``self.last_epoch``.

    ``last_epoch=-1`` starts a schedule (and sets the lrs for epoch 0); another value resumes
    one, which needs ``initial_lr`` in the groups (restore the optimizer's state_dict first).
    """

    def __init__(self, optimizer, last_epoch: int = -1):
        name = type(self).__name__
        if not isinstance(optimizer, Optimizer):
            raise _fail(name, f"needs an ember.optim optimizer, got {type(optimizer).__name__}")
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise _fail(name, f"resuming at last_epoch={last_epoch}, but param group {i} has no "
                                      f"'initial_lr'; load the optimizer's state_dict first, or start "
                                      f"with last_epoch=-1")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._step_count = 0
        self.step()

    def get_lr(self) -> list:
        raise NotImplementedError(f"{type(self).__name__} must implement get_lr")

    def step(self, epoch: int | None = None) -> None:
        """Advance one epoch (or jump to ``epoch``) and write the new lrs into the optimizer."""
        self._step_count += 1
        self.last_epoch = self.last_epoch + 1 if epoch is None else int(epoch)
        self._set(self.get_lr())

    def _set(self, lrs) -> None:
        for group, lr in zip(self.optimizer.param_groups, lrs):
            group["lr"] = lr
        self._last_lr = list(lrs)

    def get_last_lr(self) -> list:
        """The lrs the last ``step()`` set, one per param group."""
        return list(self._last_lr)

    def state_dict(self) -> dict:
        """Everything but the optimizer (and functions, which cannot be saved)."""
        return {k: list(v) if isinstance(v, list) else v for k, v in self.__dict__.items()
                if k not in self._not_saved}

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update({k: list(v) if isinstance(v, list) else v for k, v in state_dict.items()
                              if k not in self._not_saved})

    _not_saved = ("optimizer",)


class LambdaLR(LRScheduler):
    """``lr = base_lr * lr_lambda(epoch)``; one function, or one per param group.

    >>> import ember
    >>> opt = ember.optim.SGD([ember.zeros(1, requires_grad=True)], lr=0.1)
    >>> sched = LambdaLR(opt, lambda epoch: 0.5 ** epoch)
    >>> sched.step(); sched.step(); sched.get_last_lr()
    [0.025]
    """

    _not_saved = ("optimizer", "lr_lambdas")

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        groups = len(optimizer.param_groups) if isinstance(optimizer, Optimizer) else 0
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != groups:
                raise _fail("LambdaLR", f"got {len(lr_lambda)} lr_lambdas for {groups} param groups")
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * groups
        for f in self.lr_lambdas:
            if not callable(f):
                raise _fail("LambdaLR", f"lr_lambda must be a function of the epoch, got {type(f).__name__}")
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [base * f(self.last_epoch) for f, base in zip(self.lr_lambdas, self.base_lrs)]


class StepLR(LRScheduler):
    """``lr = base_lr * gamma ** (epoch // step_size)``: decay by ``gamma`` every ``step_size``."""

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size = _positive_int("StepLR", "step_size", step_size)
        self.gamma = _finite("StepLR", "gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [base * self.gamma ** (self.last_epoch // self.step_size) for base in self.base_lrs]


class MultiStepLR(LRScheduler):
    """``lr = base_lr * gamma ** (number of milestones <= epoch)``.

    >>> import ember
    >>> opt = ember.optim.SGD([ember.zeros(1, requires_grad=True)], lr=1.0)
    >>> sched = MultiStepLR(opt, milestones=[2, 4], gamma=0.5)
    >>> [(sched.step(), sched.get_last_lr()[0])[1] for _ in range(5)]
    [1.0, 0.5, 0.5, 0.25, 0.25]
    """

    def __init__(self, optimizer, milestones, gamma: float = 0.1, last_epoch: int = -1):
        milestones = list(milestones)
        for m in milestones:
            if isinstance(m, bool) or not isinstance(m, int):
                raise _fail("MultiStepLR", f"milestones must be ints, got {m!r}")
        self.milestones = sorted(milestones)
        self.gamma = _finite("MultiStepLR", "gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [base * self.gamma ** bisect_right(self.milestones, self.last_epoch) for base in self.base_lrs]


class ExponentialLR(LRScheduler):
    """``lr = base_lr * gamma ** epoch``."""

    def __init__(self, optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = _finite("ExponentialLR", "gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [base * self.gamma ** self.last_epoch for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """Half a cosine from ``base_lr`` down to ``eta_min`` over ``T_max`` epochs (SGDR without
    restarts): ``lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2``.

    >>> import ember
    >>> opt = ember.optim.SGD([ember.zeros(1, requires_grad=True)], lr=1.0)
    >>> sched = CosineAnnealingLR(opt, T_max=4)
    >>> [round((sched.step(), sched.get_last_lr()[0])[1], 4) for _ in range(4)]
    [0.8536, 0.5, 0.1464, 0.0]
    """

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):  # noqa: N803
        self.T_max = _positive_int("CosineAnnealingLR", "T_max", T_max)
        self.eta_min = _finite("CosineAnnealingLR", "eta_min", eta_min)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        wave = (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
        return [self.eta_min + (base - self.eta_min) * wave for base in self.base_lrs]


class LinearLR(LRScheduler):
    """Scale ``base_lr`` by a factor going linearly from ``start_factor`` to ``end_factor``
    over ``total_iters`` epochs, then holding (the usual warmup when ``end_factor=1``)."""

    def __init__(self, optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1):
        if not _real(start_factor) or not 0 < start_factor <= 1:
            raise _fail("LinearLR", f"start_factor must be in (0, 1], got {start_factor!r}")
        if not _real(end_factor) or not 0 <= end_factor <= 1:
            raise _fail("LinearLR", f"end_factor must be in [0, 1], got {end_factor!r}")
        self.start_factor, self.end_factor = float(start_factor), float(end_factor)
        self.total_iters = _positive_int("LinearLR", "total_iters", total_iters)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        progress = min(self.total_iters, self.last_epoch) / self.total_iters
        factor = self.start_factor + (self.end_factor - self.start_factor) * progress
        return [base * factor for base in self.base_lrs]


class SequentialLR(LRScheduler):
    """Run ``schedulers[0]`` until ``milestones[0]``, then ``schedulers[1]`` from its own epoch 0,
    and so on (all on the same optimizer).

    >>> import ember
    >>> opt = ember.optim.SGD([ember.zeros(1, requires_grad=True)], lr=1.0)
    >>> sched = SequentialLR(opt, [LinearLR(opt, 0.25, 1.0, total_iters=2),
    ...                            ExponentialLR(opt, gamma=0.5)], milestones=[2])
    >>> [sched.get_last_lr()[0]] + [(sched.step(), sched.get_last_lr()[0])[1] for _ in range(4)]
    [0.25, 0.625, 1.0, 0.5, 0.25]
    """

    _not_saved = ("optimizer", "_schedulers")

    def __init__(self, optimizer, schedulers, milestones, last_epoch: int = -1):
        schedulers, milestones = list(schedulers), list(milestones)
        if not schedulers:
            raise _fail("SequentialLR", "needs at least one scheduler")
        for i, s in enumerate(schedulers):
            if not isinstance(s, LRScheduler) or s.optimizer is not optimizer:
                raise _fail("SequentialLR", f"scheduler {i} ({type(s).__name__}) does not belong to this optimizer")
        if len(milestones) != len(schedulers) - 1:
            raise _fail("SequentialLR", f"{len(schedulers)} schedulers need {len(schedulers) - 1} milestones, "
                                        f"got {len(milestones)}")
        if milestones != sorted(milestones) or any(not isinstance(m, int) or m <= 0 for m in milestones):
            raise _fail("SequentialLR", f"milestones must be increasing positive ints, got {milestones}")
        self._schedulers, self._milestones = schedulers, milestones
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        i = bisect_right(self._milestones, self.last_epoch)
        inner = self._schedulers[i]
        inner.last_epoch = self.last_epoch - (self._milestones[i - 1] if i else 0)
        lrs = inner.get_lr()
        inner._last_lr = list(lrs)
        return lrs

    def state_dict(self):
        out = super().state_dict()
        out["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return out

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        for s, sd in zip(self._schedulers, state_dict["_schedulers"]):
            s.load_state_dict(sd)


def warmup_cosine(optimizer, warmup_steps: int, total_steps: int, *, start_factor: float | None = None,
                  eta_min: float = 0.0) -> LRScheduler:
    """Linear warmup for ``warmup_steps``, then cosine decay to ``eta_min`` at ``total_steps``:
    ``SequentialLR([LinearLR, CosineAnnealingLR])``. The warmup starts at
    ``base_lr * start_factor`` (default ``1 / (warmup_steps + 1)``, so the lr climbs in equal
    steps of ``base_lr / (warmup_steps + 1)``).

    >>> import ember
    >>> opt = ember.optim.SGD([ember.zeros(1, requires_grad=True)], lr=1.0)
    >>> sched = warmup_cosine(opt, warmup_steps=3, total_steps=5)
    >>> lrs = [sched.get_last_lr()[0]] + [(sched.step(), sched.get_last_lr()[0])[1] for _ in range(5)]
    >>> [round(lr, 4) for lr in lrs]
    [0.25, 0.5, 0.75, 1.0, 0.5, 0.0]
    """
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
        raise _fail("warmup_cosine", f"warmup_steps must be an int >= 0, got {warmup_steps!r}")
    if isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps <= warmup_steps:
        raise _fail("warmup_cosine", f"total_steps must be an int > warmup_steps ({warmup_steps}), "
                                     f"got {total_steps!r}")
    if warmup_steps == 0:
        return CosineAnnealingLR(optimizer, total_steps, eta_min)
    start = 1.0 / (warmup_steps + 1) if start_factor is None else start_factor
    warmup = LinearLR(optimizer, start, 1.0, total_iters=warmup_steps)
    decay = CosineAnnealingLR(optimizer, T_max=total_steps - warmup_steps, eta_min=eta_min)
    return SequentialLR(optimizer, [warmup, decay], milestones=[warmup_steps])

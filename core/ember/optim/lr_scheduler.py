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
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import located
from .optimizer import Optimizer, OptimizerError, _real


def _fail(cls: str, message: str) -> OptimizerError:
    return located(OptimizerError, f"{cls}: {message}")


def _positive_int(cls: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise _fail(cls, f"{name} must be a positive int, got {value!r}")
    return value


def _finite(cls: str, name: str, value: Any) -> float:
    if not _real(value):
        raise _fail(cls, f"{name} must be a finite number, got {value!r}")
    return float(value)


class LRScheduler:
    """Base class: subclasses define ``get_lr()``, the lrs at epoch ``self.last_epoch``.

    ``last_epoch=-1`` starts a schedule (and sets the lrs for epoch 0); another value resumes
    one, which needs ``initial_lr`` in the groups (restore the optimizer's state_dict first).
    """

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
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
                    raise _fail(
                        name,
                        f"resuming at last_epoch={last_epoch}, but param group {i} has no "
                        f"'initial_lr'; load the optimizer's state_dict first, or start "
                        f"with last_epoch=-1",
                    )
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._step_count = 0
        self.step()

    def get_lr(self) -> list[float]:
        raise NotImplementedError(f"{type(self).__name__} must implement get_lr")

    def step(self, epoch: int | None = None) -> None:
        """Advance one epoch (or jump to ``epoch``) and write the new lrs into the optimizer."""
        self._step_count += 1
        self.last_epoch = self.last_epoch + 1 if epoch is None else int(epoch)
        self._set(self.get_lr())

    def _set(self, lrs: Sequence[float]) -> None:
        for group, lr in zip(self.optimizer.param_groups, lrs):
            group["lr"] = lr
        self._last_lr = list(lrs)

    def get_last_lr(self) -> list[float]:
        """The lrs the last ``step()`` set, one per param group."""
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        """Everything but the optimizer (and functions, which cannot be saved)."""
        return {k: list(v) if isinstance(v, list) else v for k, v in self.__dict__.items() if k not in self._not_saved}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.__dict__.update(
            {k: list(v) if isinstance(v, list) else v for k, v in state_dict.items() if k not in self._not_saved}
        )

    _not_saved: tuple[str, ...] = ("optimizer",)


class LambdaLR(LRScheduler):
    """``lr = base_lr * lr_lambda(epoch)``; one function, or one per param group.

    >>> import ember
    >>> opt = ember.optim.SGD([ember.zeros(1, requires_grad=True)], lr=0.1)
    >>> sched = LambdaLR(opt, lambda epoch: 0.5 ** epoch)
    >>> sched.step(); sched.step(); sched.get_last_lr()
    [0.025]
    """

    _not_saved = ("optimizer", "lr_lambdas")

    def __init__(
        self,
        optimizer: Optimizer,
        lr_lambda: Callable[[int], float] | Sequence[Callable[[int], float]],
        last_epoch: int = -1,
    ) -> None:
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

    def get_lr(self) -> list[float]:
        return [base * f(self.last_epoch) for f, base in zip(self.lr_lambdas, self.base_lrs)]


class StepLR(LRScheduler):
    """``lr = base_lr * gamma ** (epoch // step_size)``: decay by ``gamma`` every ``step_size``."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1) -> None:
        self.step_size = _positive_int("StepLR", "step_size", step_size)
        self.gamma = _finite("StepLR", "gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [base * self.gamma ** (self.last_epoch // self.step_size) for base in self.base_lrs]


class MultiStepLR(LRScheduler):
    """``lr = base_lr * gamma ** (number of milestones <= epoch)``.

    >>> import ember
    >>> opt = ember.optim.SGD([ember.zeros(1, requires_grad=True)], lr=1.0)
    >>> sched = MultiStepLR(opt, milestones=[2, 4], gamma=0.5)
    >>> [(sched.step(), sched.get_last_lr()[0])[1] for _ in range(5)]
    [1.0, 0.5, 0.5, 0.25, 0.25]
    """

    def __init__(
        self, optimizer: Optimizer, milestones: Sequence[int], gamma: float = 0.1, last_epoch: int = -1
    ) -> None:
        milestones = list(milestones)
        for m in milestones:
            if isinstance(m, bool) or not isinstance(m, int):
                raise _fail("MultiStepLR", f"milestones must be ints, got {m!r}")
        self.milestones = sorted(milestones)
        self.gamma = _finite("MultiStepLR", "gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [base * self.gamma ** bisect_right(self.milestones, self.last_epoch) for base in self.base_lrs]


class ExponentialLR(LRScheduler):
    """``lr = base_lr * gamma ** epoch``."""

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = _finite("ExponentialLR", "gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [base * self.gamma**self.last_epoch for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """Half a cosine from ``base_lr`` down to ``eta_min`` over ``T_max`` epochs (SGDR without
    restarts): ``lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2``.

    >>> import ember
    >>> opt = ember.optim.SGD([ember.zeros(1, requires_grad=True)], lr=1.0)
    >>> sched = CosineAnnealingLR(opt, T_max=4)
    >>> [round((sched.step(), sched.get_last_lr()[0])[1], 4) for _ in range(4)]
    [0.8536, 0.5, 0.1464, 0.0]
    """

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1) -> None:  # noqa: N803
        self.T_max = _positive_int("CosineAnnealingLR", "T_max", T_max)
        self.eta_min = _finite("CosineAnnealingLR", "eta_min", eta_min)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        wave = (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
        return [self.eta_min + (base - self.eta_min) * wave for base in self.base_lrs]


class LinearLR(LRScheduler):
    """Scale ``base_lr`` by a factor going linearly from ``start_factor`` to ``end_factor``
    over ``total_iters`` epochs, then holding (the usual warmup when ``end_factor=1``)."""

    def __init__(
        self,
        optimizer: Optimizer,
        start_factor: float = 1.0 / 3,
        end_factor: float = 1.0,
        total_iters: int = 5,
        last_epoch: int = -1,
    ) -> None:
        if not _real(start_factor) or not 0 < start_factor <= 1:
            raise _fail("LinearLR", f"start_factor must be in (0, 1], got {start_factor!r}")
        if not _real(end_factor) or not 0 <= end_factor <= 1:
            raise _fail("LinearLR", f"end_factor must be in [0, 1], got {end_factor!r}")
        self.start_factor, self.end_factor = float(start_factor), float(end_factor)
        self.total_iters = _positive_int("LinearLR", "total_iters", total_iters)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
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

    def __init__(
        self, optimizer: Optimizer, schedulers: Sequence[LRScheduler], milestones: Sequence[int], last_epoch: int = -1
    ) -> None:
        schedulers, milestones = list(schedulers), list(milestones)
        if not schedulers:
            raise _fail("SequentialLR", "needs at least one scheduler")
        for i, s in enumerate(schedulers):
            if not isinstance(s, LRScheduler) or s.optimizer is not optimizer:
                raise _fail("SequentialLR", f"scheduler {i} ({type(s).__name__}) does not belong to this optimizer")
        if len(milestones) != len(schedulers) - 1:
            raise _fail(
                "SequentialLR",
                f"{len(schedulers)} schedulers need {len(schedulers) - 1} milestones, got {len(milestones)}",
            )
        if milestones != sorted(milestones) or any(not isinstance(m, int) or m <= 0 for m in milestones):
            raise _fail("SequentialLR", f"milestones must be increasing positive ints, got {milestones}")
        self._schedulers, self._milestones = schedulers, milestones
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        i = bisect_right(self._milestones, self.last_epoch)
        inner = self._schedulers[i]
        inner.last_epoch = self.last_epoch - (self._milestones[i - 1] if i else 0)
        lrs = inner.get_lr()
        inner._last_lr = list(lrs)
        return lrs

    def state_dict(self) -> dict[str, Any]:
        out = super().state_dict()
        out["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        for s, sd in zip(self._schedulers, state_dict["_schedulers"]):
            s.load_state_dict(sd)


def _anneal_cos(start: float, end: float, pct: float) -> float:
    return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)


def _anneal_linear(start: float, end: float, pct: float) -> float:
    return (end - start) * pct + start


class OneCycleLR(LRScheduler):
    """The 1cycle policy (Smith & Topin, 2017), as ``torch.optim.lr_scheduler.OneCycleLR``:
    the lr climbs from ``max_lr / div_factor`` to ``max_lr`` over the first ``pct_start`` of
    ``total_steps``, then anneals to ``initial_lr / final_div_factor``; momentum (or Adam's
    beta1) moves the opposite way between ``max_momentum`` and ``base_momentum``. Step it
    once per batch. ``three_phase`` returns to the initial lr before the final annealing.

    >>> import ember
    >>> opt = ember.optim.SGD([ember.zeros(1, requires_grad=True)], lr=0.1, momentum=0.9)
    >>> sched = OneCycleLR(opt, max_lr=1.0, total_steps=4, pct_start=0.5, anneal_strategy="linear")
    >>> [round(sched.get_last_lr()[0], 4)] + [round((sched.step(), sched.get_last_lr()[0])[1], 4) for _ in range(3)]
    [0.04, 1.0, 0.5, 0.0]
    """

    def __init__(
        self,
        optimizer: Optimizer,
        max_lr: float | Sequence[float],
        total_steps: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        pct_start: float = 0.3,
        anneal_strategy: str = "cos",
        cycle_momentum: bool = True,
        base_momentum: float | Sequence[float] = 0.85,
        max_momentum: float | Sequence[float] = 0.95,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
        last_epoch: int = -1,
    ) -> None:
        name = "OneCycleLR"
        if not isinstance(optimizer, Optimizer):
            raise _fail(name, f"needs an ember.optim optimizer, got {type(optimizer).__name__}")
        groups = optimizer.param_groups
        if total_steps is not None:
            self.total_steps = _positive_int(name, "total_steps", total_steps)
        elif epochs is not None and steps_per_epoch is not None:
            self.total_steps = _positive_int(name, "epochs", epochs) * _positive_int(
                name, "steps_per_epoch", steps_per_epoch
            )
        else:
            raise _fail(name, "give total_steps, or epochs and steps_per_epoch")
        if not _real(pct_start) or not 0 <= pct_start <= 1:
            raise _fail(name, f"pct_start must be a number in [0, 1], got {pct_start!r}")
        if anneal_strategy not in ("cos", "linear"):
            raise _fail(name, f"anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
        self._anneal = _anneal_cos if anneal_strategy == "cos" else _anneal_linear
        steps = float(pct_start * self.total_steps)
        # (end step, lr from, lr to, momentum from, momentum to), keys of each param group
        self._phases: list[tuple[Any, ...]] = (
            [
                (steps - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                (2 * steps - 2, "max_lr", "initial_lr", "base_momentum", "max_momentum"),
                (self.total_steps - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum"),
            ]
            if three_phase
            else [
                (steps - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                (self.total_steps - 1, "max_lr", "min_lr", "base_momentum", "max_momentum"),
            ]
        )
        max_lrs = _per_group(name, "max_lr", max_lr, len(groups))
        self.cycle_momentum = bool(cycle_momentum)
        if self.cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise _fail(
                    name,
                    f"cycle_momentum needs an optimizer with momentum or betas; "
                    f"{type(optimizer).__name__} has neither (pass cycle_momentum=False)",
                )
            self._beta1 = "betas" in optimizer.defaults
        base_ms = _per_group(name, "base_momentum", base_momentum, len(groups))
        max_ms = _per_group(name, "max_momentum", max_momentum, len(groups))
        if last_epoch == -1:
            for group, top, low, high in zip(groups, max_lrs, base_ms, max_ms):
                group["initial_lr"] = top / div_factor
                group["max_lr"] = top
                group["min_lr"] = group["initial_lr"] / final_div_factor
                if self.cycle_momentum:
                    self._set_momentum(group, high)
                    group["max_momentum"], group["base_momentum"] = high, low
        super().__init__(optimizer, last_epoch)

    def _set_momentum(self, group: dict[str, Any], value: float) -> None:
        if self._beta1:
            group["betas"] = (value, *group["betas"][1:])
        else:
            group["momentum"] = value

    def get_lr(self) -> list[float]:
        step = self.last_epoch
        if step > self.total_steps:
            raise _fail("OneCycleLR", f"stepped {step} times, past total_steps={self.total_steps}")
        lrs = []
        for group in self.optimizer.param_groups:
            start = 0.0
            for i, (end, lr0, lr1, m0, m1) in enumerate(self._phases):
                if step <= end or i == len(self._phases) - 1:
                    pct = (step - start) / (end - start)
                    lrs.append(self._anneal(group[lr0], group[lr1], pct))
                    if self.cycle_momentum:
                        self._set_momentum(group, self._anneal(group[m0], group[m1], pct))
                    break
                start = end
        return lrs

    _not_saved = ("optimizer", "_anneal")

    def state_dict(self) -> dict[str, Any]:
        out = super().state_dict()
        out["_anneal"] = "cos" if self._anneal is _anneal_cos else "linear"
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._anneal = _anneal_cos if state_dict.get("_anneal", "cos") == "cos" else _anneal_linear
        self._phases = [tuple(p) for p in self._phases]


def _per_group(cls: str, name: str, value: Any, groups: int) -> list[float]:
    values = list(value) if isinstance(value, (list, tuple)) else [value] * groups
    if len(values) != groups:
        raise _fail(cls, f"got {len(values)} values of {name} for {groups} param groups")
    return [_finite(cls, name, v) for v in values]


class ReduceLROnPlateau(LRScheduler):
    """Multiply the lr by ``factor`` when a metric has stopped improving for ``patience``
    epochs, as ``torch.optim.lr_scheduler.ReduceLROnPlateau``: call ``step(metric)`` after
    each evaluation. ``mode`` "min" (a loss) or "max" (an accuracy); an improvement must beat
    the best so far by ``threshold`` (relative, or absolute with ``threshold_mode="abs"``);
    after a reduction, ``cooldown`` epochs pass before counting again; the lr never goes below
    ``min_lr``, and changes smaller than ``eps`` are skipped.

    >>> import ember
    >>> opt = ember.optim.SGD([ember.zeros(1, requires_grad=True)], lr=1.0)
    >>> sched = ReduceLROnPlateau(opt, factor=0.5, patience=1)
    >>> [(sched.step(loss), sched.get_last_lr()[0])[1] for loss in [3, 2, 2, 2, 2, 1]]
    [1.0, 1.0, 1.0, 0.5, 0.5, 0.5]
    """

    def __init__(
        self,
        optimizer: Optimizer,
        mode: str = "min",
        factor: float = 0.1,
        patience: int = 10,
        threshold: float = 1e-4,
        threshold_mode: str = "rel",
        cooldown: int = 0,
        min_lr: float | Sequence[float] = 0.0,
        eps: float = 1e-8,
    ) -> None:
        name = "ReduceLROnPlateau"
        if not isinstance(optimizer, Optimizer):
            raise _fail(name, f"needs an ember.optim optimizer, got {type(optimizer).__name__}")
        if mode not in ("min", "max"):
            raise _fail(name, f"mode must be 'min' or 'max', got {mode!r}")
        if threshold_mode not in ("rel", "abs"):
            raise _fail(name, f"threshold_mode must be 'rel' or 'abs', got {threshold_mode!r}")
        if not _real(factor) or not 0 <= factor < 1:
            raise _fail(name, f"factor must be a number in [0, 1), got {factor!r}")
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 0:
            raise _fail(name, f"patience must be an int >= 0, got {patience!r}")
        if isinstance(cooldown, bool) or not isinstance(cooldown, int) or cooldown < 0:
            raise _fail(name, f"cooldown must be an int >= 0, got {cooldown!r}")
        self.optimizer = optimizer
        self.mode, self.factor, self.patience = mode, float(factor), patience
        self.threshold, self.threshold_mode = _finite(name, "threshold", threshold), threshold_mode
        self.cooldown, self.eps = cooldown, _finite(name, "eps", eps)
        self.min_lrs = _per_group(name, "min_lr", min_lr, len(optimizer.param_groups))
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs, self.cooldown_counter, self.last_epoch = 0, 0, 0
        self._last_lr = [group["lr"] for group in optimizer.param_groups]

    def step(self, metrics: Any, epoch: int | None = None) -> None:  # type: ignore[override]  # noqa: D401 - torch's signature
        """Record one evaluation's ``metrics`` (a number or a 0-d tensor)."""
        current = float(metrics.item() if hasattr(metrics, "item") else metrics)
        self.last_epoch = self.last_epoch + 1 if epoch is None else int(epoch)
        if self._better(current):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for group, floor in zip(self.optimizer.param_groups, self.min_lrs):
                new = max(float(group["lr"]) * self.factor, floor)
                if float(group["lr"]) - new > self.eps:
                    group["lr"] = new
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def _better(self, a: float) -> bool:
        best, t = self.best, self.threshold
        if self.mode == "min":
            return a < (best * (1 - t) if self.threshold_mode == "rel" else best - t)
        return a > (best * (1 + t) if self.threshold_mode == "rel" else best + t)


def warmup_cosine(
    optimizer: Optimizer,
    warmup_steps: int,
    total_steps: int,
    *,
    start_factor: float | None = None,
    eta_min: float = 0.0,
) -> LRScheduler:
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
        raise _fail("warmup_cosine", f"total_steps must be an int > warmup_steps ({warmup_steps}), got {total_steps!r}")
    if warmup_steps == 0:
        return CosineAnnealingLR(optimizer, total_steps, eta_min)
    start = 1.0 / (warmup_steps + 1) if start_factor is None else start_factor
    warmup = LinearLR(optimizer, start, 1.0, total_iters=warmup_steps)
    decay = CosineAnnealingLR(optimizer, T_max=total_steps - warmup_steps, eta_min=eta_min)
    return SequentialLR(optimizer, [warmup, decay], milestones=[warmup_steps])

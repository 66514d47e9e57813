"""Numbers a training run keeps: exact means over an epoch and smoothed ones for the bar.

Each meter's state is its instance dict of numbers, so a checkpoint can carry the epoch's
accumulators and a resumed epoch reports the same means as an uninterrupted one.
"""

from __future__ import annotations


def meter_state(meters: dict) -> dict:
    """``{name: {field: number}}`` of a dict of meters, for a checkpoint.

    >>> meter_state({"loss": Mean()})
    {'loss': {'total': 0.0, 'count': 0}}
    """
    return {name: dict(vars(m)) for name, m in meters.items()}


def load_meter_state(meters: dict, state) -> None:
    """Restore :func:`meter_state`; raises ``ValueError`` naming the first field that does not fit.

    >>> m = {"loss": Mean()}; load_meter_state(m, {"loss": {"total": 3.0, "count": 2}}); m["loss"].value
    1.5
    """
    if not isinstance(state, dict) or set(state) != set(meters):
        raise ValueError(f"meters must be a dict with keys {sorted(meters)}, got {state!r:.80}")
    for name, m in meters.items():
        saved = state[name]
        fields = vars(m)
        if not isinstance(saved, dict) or set(saved) != set(fields):
            raise ValueError(f"meter {name!r} must have fields {sorted(fields)}, got {saved!r:.80}")
        for key, value in saved.items():
            if type(value) is not type(fields[key]) and not (isinstance(fields[key], float) and type(value) is int):
                raise ValueError(f"meter {name!r} field {key!r} must be a {type(fields[key]).__name__}, got {value!r}")
            if isinstance(value, int) and value < 0:
                raise ValueError(f"meter {name!r} field {key!r} must be >= 0, got {value!r}")
        fields.update({k: type(fields[k])(v) for k, v in saved.items()})


class Mean:
    """The exact mean of everything added, weighted by counts.

    >>> m = Mean(); m.add(1.0, 2); m.add(4.0); m.value
    2.0
    """

    def __init__(self):
        self.total, self.count = 0.0, 0

    def add(self, value: float, count: int = 1) -> None:
        self.total += float(value) * count
        self.count += count

    @property
    def value(self) -> float:
        return self.total / self.count if self.count else float("nan")


class RunningMean:
    """An exponential moving average with bias correction (it is exact for the first values).

    >>> r = RunningMean(0.9); r.add(2.0); r.value
    2.0
    """

    def __init__(self, decay: float = 0.98):
        self.decay, self.avg, self.weight = decay, 0.0, 0.0

    def add(self, value: float) -> None:
        self.avg = self.decay * self.avg + (1 - self.decay) * float(value)
        self.weight = self.decay * self.weight + (1 - self.decay)

    @property
    def value(self) -> float:
        return self.avg / self.weight if self.weight else float("nan")


class Accuracy:
    """Fraction of argmax predictions equal to the labels.

    >>> import ember
    >>> a = Accuracy(); _ = a.add(ember.tensor([[0.1, 0.9], [0.8, 0.2]]), ember.tensor([1, 1])); a.value
    0.5
    """

    def __init__(self):
        self.correct, self.count = 0, 0

    def add(self, logits, labels) -> int:
        correct = int((logits.argmax(-1) == labels).sum().item())
        self.correct += correct
        self.count += labels.numel()  # every position of a sequence counts
        return correct

    @property
    def value(self) -> float:
        return self.correct / self.count if self.count else float("nan")


class ClassAccuracy:
    """Accuracy per class: ``correct[c] / count[c]`` over the samples labelled ``c``.

    >>> import ember
    >>> a = ClassAccuracy(3); a.add(ember.tensor([[0.9, 0.1, 0.0], [0.8, 0.2, 0.0]]), ember.tensor([0, 1])); a.value
    [1.0, 0.0, nan]
    """

    def __init__(self, num_classes: int):
        self.correct, self.count = [0] * num_classes, [0] * num_classes

    def add(self, logits, labels) -> None:
        import numpy as np

        n = len(self.count)
        pred, true = logits.argmax(-1).numpy().reshape(-1), labels.numpy().reshape(-1)
        hits = np.bincount(true[pred == true], minlength=n)[:n]
        seen = np.bincount(true, minlength=n)[:n]
        self.correct = [a + int(b) for a, b in zip(self.correct, hits)]
        self.count = [a + int(b) for a, b in zip(self.count, seen)]

    @property
    def value(self) -> list[float]:
        return [c / n if n else float("nan") for c, n in zip(self.correct, self.count)]

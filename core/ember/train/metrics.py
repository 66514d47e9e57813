"""Numbers a training run keeps: exact means over an epoch and smoothed ones for the bar."""
from __future__ import annotations


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
        self.count += labels.shape[0]
        return correct

    @property
    def value(self) -> float:
        return self.correct / self.count if self.count else float("nan")

"""The progress line: where the epoch is, how fast it goes, and when it will be done.

On a terminal it is one line rewritten in place (a carriage return, no scrolling, at most ten
times a second); in a log file (CI, batch jobs) it is a plain line every ``every_s`` seconds and
one at the end, so logs stay short and readable. No tqdm: with a terminal of unknown width
(a pty without a size, as ``script`` or some CI runners give) tqdm 4.70 draws nothing at all.

    epoch 1/3: 640/1875 (34%) 2,150 samples/s, ETA 0:00:18  loss=0.3012 acc=0.9137
"""

from __future__ import annotations

import sys
import time

TTY_EVERY_S = 0.1  # a terminal's line is redrawn at most this often


class Progress:
    """Progress of ``total`` steps of ``batch_size`` samples each, written to ``stream``
    (default stderr).

    >>> import io
    >>> out = io.StringIO()
    >>> clock = iter([0.0, 0.0, 2.0, 4.0]).__next__
    >>> bar = Progress(4, "epoch 1/1", batch_size=32, stream=out, clock=clock, every_s=1.0)
    >>> bar.update(0); bar.update(2, loss=0.5); bar.update(2, loss=0.25); bar.close()
    >>> print(out.getvalue(), end="")
    epoch 1/1: 2/4 (50%) 32 samples/s, ETA 0:00:02  loss=0.5
    epoch 1/1: 4/4 (100%) 32 samples/s, 0:00:04  loss=0.25
    """

    def __init__(
        self,
        total: int,
        desc: str,
        enabled: bool = True,
        every_s: float = 5.0,
        *,
        batch_size: int | None = None,
        stream=None,
        clock=time.monotonic,
    ):
        self.total, self.desc, self.enabled, self.every_s = total, desc, enabled, every_s
        self.batch_size, self.stream, self.clock = batch_size, stream or sys.stderr, clock
        self.n, self.width = 0, 0
        self.tty = enabled and _isatty(self.stream)
        self.start = self.last = clock() if enabled else 0.0
        self.first: int | None = None  # steps already done when counting began (a resumed epoch)

    def update(self, n: int = 1, **fields) -> None:
        self.n += n
        if not self.enabled:
            return
        now = self.clock()
        if self.first is None:  # the first update places the bar (a resumed epoch's offset)
            self.first, self.start, self.last = self.n, now, now
            if self.n < self.total:
                return
        if now - self.last >= (TTY_EVERY_S if self.tty else self.every_s) or self.n >= self.total:
            self.last = now
            self._write(self.line(now, fields))

    def line(self, now: float, fields: dict) -> str:
        """The text of the progress line at time ``now``."""
        done, elapsed = self.n - (self.first or 0), now - self.start
        rate = done / elapsed if elapsed > 0 and done > 0 else None
        pct = f" ({100 * self.n // self.total}%)" if self.total else ""
        speed = ""
        if rate is not None:
            speed = f" {rate * self.batch_size:,.0f} samples/s" if self.batch_size else f" {rate:,.1f} steps/s"
            speed += f", ETA {_clock(self.total - self.n, rate)}" if self.n < self.total else f", {_clock(elapsed)}"
        text = "  ".join(f"{k}={_fmt(v)}" for k, v in fields.items())
        return f"{self.desc}: {self.n}/{self.total}{pct}{speed}" + (f"  {text}" if text else "")

    def _write(self, text: str) -> None:
        if self.tty:  # rewrite the line in place; pad over a longer previous one
            self.stream.write("\r" + text.ljust(self.width))
            self.width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty and self.width:
            self.stream.write("\n")
            self.stream.flush()


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _clock(steps_or_seconds: float, rate: float | None = None) -> str:
    """``H:MM:SS`` of seconds, or of ``steps`` at ``rate`` steps a second.

    >>> _clock(3725.0), _clock(10, 2.0)
    ('1:02:05', '0:00:05')
    """
    seconds = steps_or_seconds / rate if rate else steps_or_seconds
    s = round(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def _fmt(v):
    return f"{v:.4g}" if isinstance(v, float) else v

"""A progress bar: tqdm when installed and writing to a terminal, else a line every few seconds
(logs of CI and batch jobs stay readable)."""
from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, desc: str, enabled: bool = True, every_s: float = 5.0):
        self.total, self.desc, self.enabled, self.every_s = total, desc, enabled, every_s
        self.n, self.bar, self.last = 0, None, time.monotonic()
        if enabled and sys.stderr.isatty():
            try:
                from tqdm.auto import tqdm
                self.bar = tqdm(total=total, desc=desc, leave=True, dynamic_ncols=True)
            except ImportError:
                pass

    def update(self, n: int = 1, **fields) -> None:
        self.n += n
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(n)
            self.bar.set_postfix({k: _fmt(v) for k, v in fields.items()}, refresh=False)
        elif time.monotonic() - self.last >= self.every_s or self.n == self.total:
            self.last = time.monotonic()
            text = " ".join(f"{k}={_fmt(v)}" for k, v in fields.items())
            print(f"{self.desc}: {self.n}/{self.total} {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _fmt(v):
    return f"{v:.4g}" if isinstance(v, float) else v

"""Named kill points, so that crash tests can stop a real process at an exact moment.

``EMBER_KILL_AT=NAME`` (or ``NAME@N`` for the N-th time, counting from 1) makes the process
SIGKILL itself when it reaches ``kill_point(NAME)``. Nothing else changes: without the variable
a kill point is one dictionary lookup. The points ember has are listed in ``POINTS``.
"""

from __future__ import annotations

import os
import signal

POINTS = {
    "checkpoint-data": "inside a checkpoint write: the tensors file is half written (a .tmp file)",
    "checkpoint-commit": "the tensors file is in place, its sidecar (the commit point) is not",
    "eval": "inside the epoch-end evaluation, after its first batch",
    "epoch-end": "after the epoch-end evaluation, before the epoch-end checkpoint",
}

_seen: dict[str, int] = {}


def kill_point(name: str) -> None:
    """SIGKILL this process if ``EMBER_KILL_AT`` names ``name`` (and this is the N-th visit)."""
    spec = os.environ.get("EMBER_KILL_AT")
    if not spec:
        return
    target, _, nth = spec.partition("@")
    if target != name:
        return
    _seen[name] = _seen.get(name, 0) + 1
    if _seen[name] == int(nth or 1):
        os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))

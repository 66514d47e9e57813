"""Run directories that never collide: ``runs/mnist-mlp``, then ``runs/mnist-mlp-2``, ...

``ember train`` without ``--out`` starts each new run in the next free version of
``runs/DATASET-MODEL`` (Lightning's ``version_N``, numbered as people number copies);
``--resume`` without ``--out`` continues the newest; ``ember eval`` without a path evaluates
the run whose checkpoint was written last. A directory counts as a run once it holds a
checkpoint: one that a run left before its first checkpoint is used again.

>>> import tempfile, os
>>> base = os.path.join(tempfile.mkdtemp(), "mnist-mlp")
>>> next_run_dir(base) == base, newest_version(base)
(True, None)
"""

from __future__ import annotations

import os
import re

ROOT = "runs"


def holds_run(path) -> bool:
    """True if ``path`` is a directory with at least one checkpoint file (complete or not)."""
    from ..io.checkpoint import list_checkpoints

    return os.path.isdir(path) and bool(list_checkpoints(path))


def versions(base) -> list[tuple[int, str]]:
    """``[(n, path)]`` of the existing versions of ``base`` (``base`` is version 1), in order."""
    base = os.fspath(base)
    parent, name = os.path.split(base)
    pattern = re.compile(re.escape(name) + r"-([2-9]|[1-9]\d+)")
    found = [(1, base)] if os.path.isdir(base) else []
    if os.path.isdir(parent or "."):
        for entry in os.listdir(parent or "."):
            m = pattern.fullmatch(entry)
            if m and os.path.isdir(os.path.join(parent, entry)):
                found.append((int(m.group(1)), os.path.join(parent, entry)))
    return sorted(found)


def next_run_dir(base) -> str:
    """Where a new run of ``base`` goes: the newest version if it holds no run yet, else the
    version after it."""
    found = versions(base)
    if not found:
        return os.fspath(base)
    n, path = found[-1]
    return path if not holds_run(path) else f"{os.fspath(base)}-{n + 1}"


def newest_version(base) -> str | None:
    """The newest version of ``base`` that holds a run, or None."""
    return next((path for _, path in reversed(versions(base)) if holds_run(path)), None)


def newest_run(root=ROOT) -> str | None:
    """The run directory under ``root`` whose newest checkpoint was committed last, or None."""
    from ..io.checkpoint import list_checkpoints

    best, when = None, None
    if not os.path.isdir(root):
        return None
    for entry in sorted(os.listdir(root)):
        path = os.path.join(root, entry)
        if not os.path.isdir(path):
            continue
        times = [c.time for c in list_checkpoints(path) if c.time is not None]
        if times and (when is None or max(times) > when):
            best, when = path, max(times)
    return best


def run_names(root=ROOT) -> list[str]:
    """The names of the run directories under ``root``, for messages."""
    if not os.path.isdir(root):
        return []
    return sorted(e for e in os.listdir(root) if holds_run(os.path.join(root, e)))

"""The errors a user can cause, and where in the user's own code they were caused.

Every ember error message ends with the user's file and line ("at train.py:12"), found by
walking the stack out of ember's own files, so that a shape mismatch deep inside a layer points
at the line of the model code that asked for it.
"""

from __future__ import annotations

import os
import sys
from types import FrameType
from typing import TypeVar

# Frames in these directories are ember's own; plugins append theirs (see internal_root).
_INTERNAL_ROOTS: list[str] = [os.path.dirname(os.path.abspath(__file__))]
# ...except the conformance suite's tests: they are the backend's user, and an error they
# provoke must point at the test's line (the case that ran), not at pytest's frame above it.
_USER_FILES = os.path.join(_INTERNAL_ROOTS[0], "conformance", "test_")


def internal_root(path: str) -> None:
    """Mark a directory (a backend plugin's package) as ember-internal for error locations."""
    root = os.path.dirname(os.path.abspath(path)) if os.path.isfile(path) else os.path.abspath(path)
    if root not in _INTERNAL_ROOTS:
        _INTERNAL_ROOTS.append(root)


def _internal(filename: str) -> bool:
    if filename.startswith(_USER_FILES):
        return False
    return filename.startswith("<frozen") or any(filename.startswith(r) for r in _INTERNAL_ROOTS)


def user_frame(skip: int = 1) -> tuple[str, int, str] | None:
    """The innermost stack frame outside ember, as ``(filename, lineno, source line)``."""
    f: FrameType | None = sys._getframe(skip)
    while f is not None and _internal(os.path.abspath(f.f_code.co_filename)):
        f = f.f_back
    if f is None:
        return None
    import linecache

    return f.f_code.co_filename, f.f_lineno, linecache.getline(f.f_code.co_filename, f.f_lineno).strip()


def where(frame: tuple[str, int, str] | None = None) -> str:
    """``" (at file.py:12: y = a @ b)"`` for the user's frame, or ``""`` if there is none."""
    frame = frame or user_frame(2)
    if frame is None:
        return ""
    filename, lineno, line = frame
    return f" (at {os.path.basename(filename)}:{lineno}" + (f": {line})" if line else ")")


class EmberError(Exception):
    """Base class of every error ember raises on purpose."""


class ShapeError(EmberError, ValueError):
    """Shapes that do not fit the operation (matmul inner sizes, broadcasting, reshape sizes)."""


class DTypeError(EmberError, TypeError):
    """A dtype the operation does not accept, or an unknown dtype name."""


class BackendError(EmberError, RuntimeError):
    """An unknown, unavailable or broken backend."""


class NotImplementedByBackend(BackendError, NotImplementedError):
    """The active backend does not implement a primitive it was asked to run."""

    def __init__(self, backend: str, primitive: str, detail: str = ""):
        self.backend, self.primitive = backend, primitive
        super().__init__(
            f"backend {backend!r} does not implement primitive {primitive!r}"
            + (f": {detail}" if detail else "")
            + "; use ember.use('numpy') or implement it (see plugins/template)"
        )


class GradError(EmberError, RuntimeError):
    """backward() or grad() asked for something that has no gradient."""


E = TypeVar("E", bound=BaseException)


def located(cls: type[E], message: str) -> E:
    """An error of class ``cls`` whose message ends with the user's source location."""
    return cls(message + where(user_frame(2)))

"""Write a file so that a crash leaves either the old file or the new one, never half of one.

The protocol: write a temporary file in the same directory (a rename is only atomic within
one file system), flush and fsync it (so the data is on disk before the name points at it),
``os.replace`` it over the target, then fsync the directory (so the rename itself survives a
power cut). Temporary names start with ``.`` and end with ``.tmp``; a crash can leave one
behind, and the checkpoint layer sweeps them up on its next write.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import IO, Any

TMP_SUFFIX = ".tmp"


def temp_name(path: str) -> str:
    """A fresh temporary name next to ``path``: ``dir/.NAME.<random hex>.tmp``."""
    directory, base = os.path.split(path)
    return os.path.join(directory, f".{base}.{os.urandom(6).hex()}{TMP_SUFFIX}")


def atomic_write(path: str | os.PathLike[str], write: Callable[[IO[bytes]], Any]) -> Any:
    """Call ``write(file)`` on a temporary binary file, then move it onto ``path`` atomically.

    Returns what ``write`` returns. If anything fails (``write`` raises, the disk is full, the
    rename is refused) the temporary file is removed and ``path`` is untouched.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "hello.txt")
    >>> atomic_write(path, lambda f: f.write(b"hello"))
    5
    >>> open(path, "rb").read()
    b'hello'
    """
    path = os.fspath(path)
    tmp = temp_name(path)
    # O_EXCL: never write through someone else's file; 0o666 lets the umask decide, as open() does.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            result = write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_directory(os.path.dirname(path) or ".")
    return result


def fsync_directory(directory: str) -> None:
    """Make renames and deletions in ``directory`` durable, where the platform allows it."""
    # Windows cannot open a directory, and some file systems refuse fsync on one; the rename
    # has happened either way, only its durability across a power cut is then best-effort.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

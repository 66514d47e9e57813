"""Errors raised by ``ember.data``.

Every message names the file (or URL), the cause and the fix, so a user can act on it
without reading our source.
"""

from __future__ import annotations

try:
    from ..errors import EmberError
except ImportError:  # pragma: no cover - a core without the shared error base
    EmberError = Exception  # type: ignore[misc,assignment]  # the fallback base of the same name


class DataError(EmberError, RuntimeError):
    """A dataset file is missing, malformed or could not be fetched."""


class ChecksumError(DataError):
    """A file's bytes do not match the checksum pinned for it."""


class DownloadError(DataError):
    """Every mirror failed to deliver a file."""

"""The one error (and one warning) that reading or writing a checkpoint can raise.

Every message names the file and the cause, so that ``ember checkpoints inspect`` and a
training script's traceback both say which file is bad and why.
"""

from __future__ import annotations

from ..errors import EmberError


# An EmberError like every error a user can cause; a ValueError because a bad file is bad input.
class CheckpointError(EmberError, ValueError):
    """A checkpoint or safetensors file that cannot be read (or written), and why.

    >>> err = CheckpointError("run/ckpt-00000010.safetensors", "file is truncated")
    >>> str(err)
    'run/ckpt-00000010.safetensors: file is truncated'
    >>> err.path, err.cause
    ('run/ckpt-00000010.safetensors', 'file is truncated')
    """

    def __init__(self, path: object, cause: object) -> None:
        self.path, self.cause = str(path), str(cause)
        # Both go into args so the error survives pickling (multiprocessing, pytest-xdist).
        super().__init__(self.path, self.cause)

    def __str__(self) -> str:
        return f"{self.path}: {self.cause}"


class CheckpointWarning(UserWarning):
    """A checkpoint was skipped (corrupt, half-deleted) while looking for the latest one."""

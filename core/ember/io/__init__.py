"""ember.io: safetensors files and checkpoint directories, in pure Python.

Two layers, in the order data flows to disk:

- ``safetensors``: the file format. ``save_file`` / ``load_file`` (and ``save_bytes`` /
  ``load_bytes``) turn ``{name: TensorBytes}`` into bytes and back, never trusting a file.
- ``checkpoint``: a directory of numbered checkpoints, each a safetensors file plus a JSON
  sidecar (meta and sha256), written atomically; ``latest_checkpoint`` finds the newest
  intact one after a crash.

Nothing here imports numpy; ``to_numpy`` / ``from_numpy`` import it when called.
The on-disk format is described in docs/checkpoints.md.
"""

from .checkpoint import (
    CheckpointInfo,
    checkpoint_path,
    latest_checkpoint,
    list_checkpoints,
    read_checkpoint,
    sweep,
    write_checkpoint,
)
from .errors import CheckpointError, CheckpointWarning
from .numpy_io import as_tensor_bytes, from_numpy, to_numpy
from .safetensors import dump, load_bytes, load_file, save_bytes, save_file
from .tensorbytes import DTYPES, TensorBytes, dtype_info

__all__ = [
    "CheckpointError",
    "CheckpointWarning",
    "TensorBytes",
    "DTYPES",
    "dtype_info",
    "save_file",
    "load_file",
    "save_bytes",
    "load_bytes",
    "dump",
    "write_checkpoint",
    "read_checkpoint",
    "latest_checkpoint",
    "list_checkpoints",
    "checkpoint_path",
    "CheckpointInfo",
    "sweep",
    "to_numpy",
    "from_numpy",
    "as_tensor_bytes",
]

"""Checkpoint directories: numbered safetensors files, each committed by a JSON sidecar.

One checkpoint is two files in the checkpoint directory::

    ckpt-00001200.safetensors   the tensors (weights, optimizer state)
    ckpt-00001200.json          the sidecar: step, user meta, size and sha256 of the tensors,
                                and a sha256 of the sidecar's own content

The sidecar is written last and is the commit point: a ``.safetensors`` file without its
sidecar is an interrupted write, ignored by readers and deleted by the next writer. Both files
are written atomically (``atomic.atomic_write``), so after a crash at any moment the newest
complete checkpoint is intact. One writer per directory; see docs/checkpoints.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import time
import warnings
from collections.abc import Mapping
from typing import IO, Any, NamedTuple, cast

from .atomic import TMP_SUFFIX, atomic_write, fsync_directory
from .errors import CheckpointError, CheckpointWarning
from .faults import kill_point
from .numpy_io import as_tensor_bytes
from .safetensors import MAX_HEADER_SIZE, _layout, dump, load_bytes

FORMAT = "ember.checkpoint"
FORMAT_VERSION = 2  # 2: the sidecar carries "sidecar_sha256", a checksum of its own content
_NAME = re.compile(r"ckpt-(\d{8,})\.(safetensors|json)")
_CHUNK = 1 << 20


class CheckpointInfo(NamedTuple):
    """One row of ``list_checkpoints``: what ``ember checkpoints inspect`` prints."""

    step: int
    path: str  # the .safetensors file
    time: float | None  # commit time, seconds since the epoch (None if never committed)
    size: int | None  # bytes of the .safetensors file
    num_tensors: int | None
    status: str  # "ok", "incomplete", or what is wrong with it


def checkpoint_path(directory: str | os.PathLike[str], step: int) -> str:
    """The ``.safetensors`` path of ``step`` in ``directory``.

    >>> checkpoint_path("run", 1200)
    'run/ckpt-00001200.safetensors'
    """
    return os.path.join(os.fspath(directory), f"ckpt-{step:08d}.safetensors")


def _sidecar(data_path: str) -> str:
    return os.path.splitext(data_path)[0] + ".json"


# ---------------------------------------------------------------------------------------------
# Writing


def write_checkpoint(
    directory: str | os.PathLike[str],
    step: int,
    tensors: Mapping[str, Any],
    meta: Mapping[str, Any] | None = None,
    *,
    keep_last: int | None = 3,
) -> str:
    """Atomically write checkpoint ``step``; keep the newest ``keep_last`` (None: keep all).

    ``tensors`` maps names to ``TensorBytes`` (or NumPy arrays). ``meta`` is a JSON-serializable
    dict (optimizer hyperparameters, RNG state, data position, config); it is stored with
    ``"step"`` added and comes back from ``read_checkpoint`` as JSON returns it (tuples
    become lists, dict keys strings). Returns the path of the new ``.safetensors`` file.

    >>> import tempfile
    >>> from ember.io import TensorBytes
    >>> run = tempfile.mkdtemp()
    >>> path = write_checkpoint(run, 10, {"w": TensorBytes("U8", (2,), b"hi")}, {"lr": 0.1})
    >>> tensors, meta = read_checkpoint(run)
    >>> bytes(tensors["w"].data), meta
    (b'hi', {'lr': 0.1, 'step': 10})
    """
    if type(step) is not int or step < 0:
        raise ValueError(f"step must be a non-negative int, got {step!r}")
    if keep_last is not None and (type(keep_last) is not int or keep_last < 1):
        raise ValueError(f"keep_last must be a positive int or None, got {keep_last!r}")
    meta = dict(meta or {})
    if meta.setdefault("step", step) != step:
        raise ValueError(f"meta['step'] is {meta['step']!r} but step is {step}")
    tensors = {name: as_tensor_bytes(t) for name, t in tensors.items()}
    # Validate everything before the disk is touched, so a bad argument changes nothing.
    _layout(tensors, None)
    json.dumps(meta, allow_nan=False)  # strict JSON (no NaN), since other tools must read it too

    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    data_path = checkpoint_path(directory, step)
    sidecar_path = _sidecar(data_path)
    if os.path.exists(sidecar_path):
        # Rewriting a committed step: un-commit it first, so that no sidecar ever describes
        # a file it did not hash. (A crash now loses this step; the previous one remains.)
        os.unlink(sidecar_path)
        fsync_directory(directory)

    size, digest = atomic_write(data_path, lambda f: _dump_hashed(tensors, f))
    kill_point("checkpoint-commit")
    sidecar = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "step": step,
        "time": time.time(),
        "tensors_file": os.path.basename(data_path),
        "size": size,
        "sha256": digest,
        "num_tensors": len(tensors),
        "meta": meta,
    }
    sidecar["sidecar_sha256"] = _content_hash(sidecar)
    text = json.dumps(sidecar, indent=1, allow_nan=False) + "\n"
    try:
        atomic_write(sidecar_path, lambda f: f.write(text.encode("utf-8")))  # the commit point
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(data_path)
        raise
    try:
        _clean(directory, keep_last, step)
    except OSError as e:  # the checkpoint is committed; failing to tidy up must not hide that
        warnings.warn(
            f"checkpoint {data_path} written, but cleaning up old files failed: {e}", CheckpointWarning, stacklevel=2
        )
    return data_path


def _dump_hashed(tensors: Mapping[str, Any], f: IO[bytes]) -> tuple[int, str]:
    class HashingFile:  # hash on the way out: one pass over the data, not a re-read
        def __init__(self) -> None:
            self.sha, self.size, self.writes = hashlib.sha256(), 0, 0

        def write(self, b: bytes | memoryview) -> int:
            self.sha.update(b)
            self.size += memoryview(b).nbytes
            written = f.write(b)
            self.writes += 1
            if self.writes == 2:  # the header and one tensor are out: half a file
                kill_point("checkpoint-data")
            return written

    out = HashingFile()
    dump(tensors, cast(IO[bytes], out))  # dump calls write() only
    return out.size, out.sha.hexdigest()


def _content_hash(sidecar: dict[str, Any]) -> str:
    """sha256 of the sidecar's content without its own checksum, in canonical JSON (sorted keys,
    no spaces), so that a value edited by hand or by a bad disk is caught on load."""
    body = {k: v for k, v in sidecar.items() if k != "sidecar_sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sweep(directory: str | os.PathLike[str]) -> list[str]:
    """Remove what crashed writes left in ``directory``: temporary files and tensors files
    without a sidecar. Call it when a writer starts (one writer per directory); returns the
    names removed.

    >>> import os, tempfile
    >>> run = tempfile.mkdtemp()
    >>> open(os.path.join(run, ".ckpt-00000010.safetensors.1a2b.tmp"), "wb").close()
    >>> sweep(run)
    ['.ckpt-00000010.safetensors.1a2b.tmp']
    """
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        return []
    removed = []
    for step, kinds in _scan(directory).items():
        if kinds == {"safetensors"}:
            removed.append(os.path.basename(checkpoint_path(directory, step)))
            _remove(checkpoint_path(directory, step))
    for name in sorted(os.listdir(directory)):
        if name.startswith(".ckpt-") and name.endswith(TMP_SUFFIX):
            removed.append(name)
            _remove(os.path.join(directory, name))
    return removed


def _clean(directory: str | os.PathLike[str], keep_last: int | None, current: int) -> None:
    """After a commit: drop old complete checkpoints, interrupted writes and stray temp files."""
    files = _scan(directory)
    complete = sorted((s for s, kinds in files.items() if kinds == {"safetensors", "json"}), reverse=True)
    keep = set(complete[:keep_last] if keep_last else complete) | {current}
    for step, kinds in files.items():
        if step in keep and kinds == {"safetensors", "json"}:
            continue
        remove_checkpoint(checkpoint_path(directory, step))
    for name in os.listdir(directory):
        if name.startswith(".ckpt-") and name.endswith(TMP_SUFFIX):
            _remove(os.path.join(directory, name))


def remove_checkpoint(path: str | os.PathLike[str]) -> None:
    """Delete checkpoint ``path`` (its ``.safetensors`` file), if there.

    The sidecar goes first: that un-commits the checkpoint, so a crash between the two
    deletions leaves an ignorable interrupted write, never a sidecar without its tensors.

    >>> import tempfile
    >>> from ember.io import TensorBytes
    >>> run = tempfile.mkdtemp()
    >>> remove_checkpoint(write_checkpoint(run, 1, {"w": TensorBytes("U8", (1,), b"x")}))
    >>> latest_checkpoint(run) is None
    True
    """
    path = os.fspath(path)
    _remove(_sidecar(path))
    _remove(path)


def _remove(path: str | os.PathLike[str]) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _scan(directory: str | os.PathLike[str]) -> dict[int, set[str]]:
    """{step: {"safetensors", "json"} or a subset} for the checkpoint files in ``directory``."""
    found: dict[int, set[str]] = {}
    with os.scandir(directory) as entries:
        for entry in entries:
            m = _NAME.fullmatch(entry.name)
            if m and entry.is_file():  # a directory named like a checkpoint is not one
                found.setdefault(int(m.group(1)), set()).add(m.group(2))
    return found


# ---------------------------------------------------------------------------------------------
# Reading


def latest_checkpoint(directory: str | os.PathLike[str]) -> str | None:
    """The ``.safetensors`` path of the newest complete, checksum-valid checkpoint, or None.

    A corrupt newer checkpoint is skipped with a ``CheckpointWarning``; an interrupted write
    (no sidecar) is skipped silently. A missing directory has no checkpoints.

    >>> import tempfile
    >>> latest_checkpoint(tempfile.mkdtemp()) is None
    True
    """
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        return None
    for step, kinds in sorted(_scan(directory).items(), reverse=True):
        if "json" not in kinds:
            continue
        path = checkpoint_path(directory, step)
        try:
            _verify(path, _read_sidecar(path))
            return path
        except (CheckpointError, OSError) as e:
            warnings.warn(f"skipping checkpoint: {e}", CheckpointWarning, stacklevel=2)
    return None


def read_checkpoint(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Load a checkpoint, verifying its checksum: ``({name: TensorBytes}, meta)``.

    ``path`` is a checkpoint directory (its latest checkpoint), a ``.safetensors`` file or its
    ``.json`` sidecar. Tensor data are read-only memoryviews; ``ember.io.to_numpy`` views
    one as an array. Anything missing, truncated or altered raises ``CheckpointError``.

    >>> import tempfile
    >>> read_checkpoint(tempfile.mkdtemp())
    Traceback (most recent call last):
    ...
    ember.io.errors.CheckpointError: ...: no complete checkpoint in this directory
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        latest = latest_checkpoint(path)
        if latest is None:
            raise CheckpointError(path, "no complete checkpoint in this directory")
        path = latest
    elif path.endswith(".json"):
        path = os.path.splitext(path)[0] + ".safetensors"
    sidecar = _read_sidecar(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size != sidecar["size"]:
                raise CheckpointError(
                    path, f"file is {size} bytes, sidecar says {sidecar['size']} (truncated or replaced)"
                )
            data = f.read(size)
    except FileNotFoundError:
        raise CheckpointError(path, "tensors file is missing (its sidecar exists)") from None
    # Hash the very bytes we parse, so nothing can change between the check and the use.
    if hashlib.sha256(data).hexdigest() != sidecar["sha256"]:
        raise CheckpointError(path, "sha256 checksum mismatch: the file is corrupt or was modified")
    tensors, _ = load_bytes(data, source=path)
    return tensors, sidecar["meta"]


def list_checkpoints(directory: str | os.PathLike[str], *, verify: bool = False) -> list[CheckpointInfo]:
    """Every checkpoint in ``directory``, oldest first, with its status; reads only sidecars
    unless ``verify=True``, which also loads every file as ``read_checkpoint`` (and so
    ``ember eval``) does: checksums, then a full parse of the safetensors header.

    >>> import tempfile
    >>> from ember.io import TensorBytes
    >>> run = tempfile.mkdtemp()
    >>> _ = write_checkpoint(run, 3, {"w": TensorBytes("U8", (2,), b"hi")})
    >>> [(c.step, c.size, c.num_tensors, c.status) for c in list_checkpoints(run, verify=True)]
    [(3, 66, 1, 'ok')]
    """
    directory = os.fspath(directory)
    infos = []
    for step, kinds in sorted(_scan(directory).items()):
        path = checkpoint_path(directory, step)
        if "json" not in kinds:
            infos.append(CheckpointInfo(step, path, None, _size(path), None, "incomplete"))
            continue
        try:
            sidecar = _read_sidecar(path)
        except CheckpointError as e:
            infos.append(CheckpointInfo(step, path, None, None, None, e.cause))
            continue
        status = "ok"
        try:
            if verify:
                read_checkpoint(path)  # what eval loads with: checksums, then a full parse
            elif _size(path) is None:
                status = "tensors file is missing (its sidecar exists)"
            elif _size(path) != sidecar["size"]:
                status = f"file is {_size(path)} bytes, sidecar says {sidecar['size']}"
        except CheckpointError as e:
            status = e.cause
        infos.append(CheckpointInfo(step, path, sidecar["time"], sidecar["size"], sidecar["num_tensors"], status))
    return infos


def _size(path: str | os.PathLike[str]) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None


_SIDECAR_FIELDS: dict[str, type | tuple[type, ...]] = {
    "format": str,
    "format_version": int,
    "step": int,
    "time": (int, float),
    "size": int,
    "sha256": str,
    "num_tensors": int,
    "meta": dict,
}


def _read_sidecar(data_path: str) -> dict[str, Any]:
    """Read and validate the sidecar of ``data_path``."""
    path = _sidecar(data_path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_HEADER_SIZE + 1)
    except FileNotFoundError:
        raise CheckpointError(
            data_path, f"sidecar {os.path.basename(path)} is missing: the checkpoint is incomplete (interrupted write?)"
        ) from None
    if len(raw) > MAX_HEADER_SIZE:
        raise CheckpointError(path, f"sidecar is over the {MAX_HEADER_SIZE}-byte limit")
    try:
        sidecar = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError too
        raise CheckpointError(path, f"sidecar is not valid JSON ({str(e)[:120]})") from None
    if not isinstance(sidecar, dict) or sidecar.get("format") != FORMAT:
        raise CheckpointError(path, f'not an ember checkpoint sidecar (no "format": "{FORMAT}")')
    for key, kind in _SIDECAR_FIELDS.items():
        if not isinstance(sidecar.get(key), kind) or isinstance(sidecar.get(key), bool):
            expected = getattr(kind, "__name__", "number")
            raise CheckpointError(path, f"sidecar field {key!r} is missing or is not of type {expected}")
    if sidecar["format_version"] > FORMAT_VERSION:
        raise CheckpointError(
            path,
            f"written by a newer ember (format version {sidecar['format_version']}); "
            f"this one reads up to version {FORMAT_VERSION}",
        )
    # Format 1 sidecars predate the content checksum; from format 2 on it is required.
    if sidecar["format_version"] >= 2 and sidecar.get("sidecar_sha256") != _content_hash(sidecar):
        raise CheckpointError(
            path,
            "sidecar checksum mismatch: the sidecar was edited or is corrupt "
            '(its "sidecar_sha256" does not match its content)',
        )
    if sidecar["step"] < 0 or sidecar["meta"].get("step", sidecar["step"]) != sidecar["step"]:
        raise CheckpointError(
            path, f"sidecar step {sidecar['step']!r} disagrees with meta step {sidecar['meta'].get('step')!r}"
        )
    return sidecar


def _verify(data_path: str, sidecar: dict[str, Any]) -> None:
    """Check size and sha256 of ``data_path`` against its sidecar, reading in chunks."""
    sha, size = hashlib.sha256(), 0
    try:
        with open(data_path, "rb") as f:
            while chunk := f.read(_CHUNK):
                sha.update(chunk)
                size += len(chunk)
    except FileNotFoundError:
        raise CheckpointError(data_path, "tensors file is missing (its sidecar exists)") from None
    if size != sidecar["size"]:
        raise CheckpointError(
            data_path, f"file is {size} bytes, sidecar says {sidecar['size']} (truncated or replaced)"
        )
    if sha.hexdigest() != sidecar["sha256"]:
        raise CheckpointError(data_path, "sha256 checksum mismatch: the file is corrupt or was modified")

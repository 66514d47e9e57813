"""Where datasets live on disk, and fetching them: checksums, resumable downloads.

A download streams into ``<name>.part`` next to its destination, resumes that file with an
HTTP ``Range`` request when a previous attempt was cut off, is checked against its pinned
checksum, and only then is renamed into place. So the cache holds either nothing or a
verified file, never a half-written one under the real name.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import urllib.error
import urllib.request
from pathlib import Path

from .errors import ChecksumError, DataError, DownloadError

CHUNK = 1 << 20


def cache_dir() -> Path:
    """The folder ember keeps datasets in.

    ``$EMBER_DATA`` if set, else ``$XDG_CACHE_HOME/ember/datasets``, else
    ``~/.cache/ember/datasets``. Nothing is created until a dataset is stored.

    >>> import os; saved = os.environ.get("EMBER_DATA")
    >>> os.environ["EMBER_DATA"] = "my-datasets"
    >>> str(cache_dir())
    'my-datasets'
    >>> _ = os.environ.pop("EMBER_DATA") if saved is None else os.environ.update(EMBER_DATA=saved)
    """
    if os.environ.get("EMBER_DATA"):
        return Path(os.environ["EMBER_DATA"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "ember" / "datasets"


def parse_checksum(spec: str) -> tuple[str, str]:
    """Split ``"sha256:ab12..."`` into ``("sha256", "ab12...")``; the algorithm is always explicit.

    >>> parse_checksum("md5:C58F30108F718F92721AF3B95E74349A")
    ('md5', 'c58f30108f718f92721af3b95e74349a')
    """
    algo, sep, digest = spec.partition(":")
    if not sep or algo not in ("sha256", "md5") or not re.fullmatch(r"[0-9a-fA-F]+", digest):
        raise ValueError(f"checksum must look like 'sha256:<hex>' or 'md5:<hex>', got {spec!r}")
    return algo, digest.lower()


def file_digest(path, algo: str = "sha256") -> str:
    """Hex digest of a file, read in 1 MiB chunks."""
    h = hashlib.new(algo)
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def bytes_digest(data: bytes, algo: str = "sha256") -> str:
    return hashlib.new(algo, data).hexdigest()


def check_file(path, checksum: str, *, delete: bool = False) -> None:
    """Raise :class:`ChecksumError` naming the file and both digests if ``path`` does not match.

    With ``delete=True`` a mismatching file is removed first, so a bad file never stays cached.
    """
    algo, expected = parse_checksum(checksum)
    actual = file_digest(path, algo)
    if actual != expected:
        if delete:
            Path(path).unlink(missing_ok=True)
        raise ChecksumError(
            f"{path}: {algo} mismatch: expected {expected}, got {actual}. "
            + ("The file was deleted; " if delete else "Delete it; ")
            + "fetching it again usually fixes a corrupted transfer. If it keeps happening the "
            "mirror serves a different file: choose another with EMBER_DATA_MIRROR."
        )


class _Interrupted(Exception):
    """The server closed the connection before sending every byte it announced (resumable)."""


class _BadResponse(Exception):
    """The server's answer cannot be part of the genuine file (not resumable)."""


def download(urls, dest, checksum: str, size: int | None = None, timeout: float = 30.0, quiet: bool = False) -> Path:
    """Fetch ``dest`` from the first of ``urls`` that delivers bytes matching ``checksum``.

    Each URL is tried once. A transfer cut off midway keeps ``dest.part``; the next URL (or the
    next call) resumes it with an HTTP Range request. ``size``, when known, caps how much a
    server may send. Raises :class:`ChecksumError` if every mirror served wrong bytes, else
    :class:`DownloadError` listing what went wrong where.
    """
    dest = Path(dest)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DataError(
            f"{dest.parent}: cannot create the download folder ({e.strerror or e}). "
            f"Set EMBER_DATA (or pass root=) to a writable folder."
        ) from e
    part = dest.with_name(dest.name + ".part")
    algo, expected = parse_checksum(checksum)
    failures, bad_hash = [], 0
    for url in urls:
        if not quiet:
            print(f"ember.data: downloading {url}", file=sys.stderr)
        try:
            _fetch(url, part, size, timeout)
        except _BadResponse as e:
            part.unlink(missing_ok=True)
            failures.append(f"{url}: {e} (the download was deleted)")
            continue
        except (_Interrupted, OSError) as e:  # URLError and HTTPError are OSErrors too
            failures.append(f"{url}: {_describe(e)}")
            continue
        actual = file_digest(part, algo)
        if actual != expected:
            part.unlink()
            bad_hash += 1
            failures.append(f"{url}: {algo} mismatch: expected {expected}, got {actual} (the download was deleted)")
            continue
        os.replace(part, dest)
        return dest
    lines = "\n  ".join(failures) or "no mirror to try"
    if failures and bad_hash == len(failures):
        raise ChecksumError(
            f"{dest.name}: every mirror served bytes that do not match the pinned checksum:\n  {lines}\n"
            f"Nothing was cached. Retry later, or point EMBER_DATA_MIRROR at a mirror with the genuine file."
        )
    resume = ""
    if part.exists() and part.stat().st_size:
        resume = f"\nA partial download ({part.stat().st_size} bytes) is kept at {part}; run again to resume it."
    raise DownloadError(
        f"{dest.name}: could not download it:\n  {lines}{resume}\n"
        f"Check the network, set EMBER_DATA_MIRROR to a reachable mirror, or place the file in {dest.parent} yourself."
    )


def _fetch(url: str, part: Path, size: int | None, timeout: float) -> None:
    have = part.stat().st_size if part.exists() else 0
    if size is not None and have > size:  # stale partial of some other file: start over
        part.unlink()
        have = 0
    if size is not None and have == size:
        return  # an earlier attempt got every byte but was stopped before the rename
    headers = {"User-Agent": "ember-data"}
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        resp = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:
            return  # nothing left to send: our partial is complete (the checksum will tell)
        raise
    with resp:
        mode, start = "wb", 0
        if have and resp.status == 206:
            m = re.match(r"bytes (\d+)-", resp.headers.get("Content-Range", ""))
            if not m or int(m.group(1)) != have:
                raise _BadResponse(
                    f"asked for bytes from {have}, server sent Content-Range {resp.headers.get('Content-Range')!r}"
                )
            mode, start = "ab", have
        length = resp.headers.get("Content-Length")
        total = start + int(length) if length and length.isdigit() else None
        if size is not None and total is not None and total > size:
            raise _BadResponse(f"server offers {total} bytes, the genuine file has {size}")
        got = start
        with open(part, mode) as f:
            try:
                while chunk := resp.read(CHUNK):
                    got += len(chunk)
                    if size is not None and got > size:
                        raise _BadResponse(f"server sent more than the genuine file's {size} bytes")
                    f.write(chunk)
            except (TimeoutError, OSError) as e:  # connection reset mid-body: keep what we have
                raise _Interrupted(f"connection lost after {got} bytes ({e})") from e
    if total is not None and got < total:
        raise _Interrupted(f"connection closed after {got} of {total} bytes")


def _describe(e: Exception) -> str:
    if isinstance(e, urllib.error.HTTPError):
        return f"HTTP {e.code} {e.reason}"
    if isinstance(e, urllib.error.URLError):
        return f"cannot connect ({e.reason})"
    return str(e) or type(e).__name__


__all__ = ["cache_dir", "check_file", "download", "file_digest", "parse_checksum", "DataError"]

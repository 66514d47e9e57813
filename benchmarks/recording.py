"""What every benchmark records about how it ran, and what it must leave out.

- **BLAS overrides.** ``OPENBLAS_CORETYPE`` and ``OPENBLAS_L2_SIZE`` make OpenBLAS use the
  kernels and block sizes they name instead of the CPU's own; on the development machine the
  environment sets ``Haswell`` (AVX2) on an AVX-512 CPU, which costs NumPy's GEMM up to 1.6x
  (docs/performance.md, "How it measures"). OpenBLAS reads them when it loads, so a benchmark
  cannot undo them from inside: it warns (:func:`warn_blas_overrides`) and records them.
- **No machine paths.** A command recorded for the docs names no file outside the repository:
  :func:`portable_command` drops a path option pointing outside and makes one inside relative.

>>> blas_overrides({"OPENBLAS_CORETYPE": "Haswell", "LANG": "C"})
{'OPENBLAS_CORETYPE': 'Haswell'}
>>> import tempfile
>>> elsewhere = os.path.join(tempfile.gettempdir(), "r.json")
>>> portable_command("python -m benchmarks", ["run", "--json", elsewhere, "--rounds", "2"], ["--json"])
'python -m benchmarks run --rounds 2'
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLAS_OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
UNSET = "env " + " ".join(f"-u {v}" for v in BLAS_OVERRIDES)


def blas_overrides(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The BLAS-overriding variables set in ``environ``, with their values."""
    return {v: environ[v] for v in BLAS_OVERRIDES if v in environ}


def blas_warning(prog: str, environ: Mapping[str, str] = os.environ) -> str | None:
    """One line naming the overrides set and the command that runs without them, or None."""
    found = blas_overrides(environ)
    if not found:
        return None
    names = " ".join(f"{k}={v}" for k, v in found.items())
    return (
        f"warning: {names} set: OpenBLAS runs the kernels they name, not this CPU's own (GEMM 1.6-1.8x "
        f"slower on the development machine); measure with `{UNSET} {prog} ...`"
    )


def warn_blas_overrides(prog: str, environ: Mapping[str, str] = os.environ) -> None:
    """Print :func:`blas_warning` to stderr when there is one."""
    line = blas_warning(prog, environ)
    if line:
        print(line, file=sys.stderr, flush=True)


def portable_command(prog: str, argv: Sequence[str], path_options: Sequence[str], cwd: Path | None = None) -> str:
    """``prog argv`` as a shell line, each of ``path_options`` given relative to the repository
    when its path lies inside it, and left out (with its value) when it does not."""
    cwd = Path.cwd() if cwd is None else cwd
    out, rest = [], list(argv)
    while rest:
        arg = rest.pop(0)
        name, eq, value = arg.partition("=")
        # argparse takes a unique prefix of an option (--js for --json): so do we
        full = next((o for o in path_options if o.startswith(name)), None) if len(name) > 2 else None
        if not name.startswith("--") or full is None:
            out.append(arg)
            continue
        if not eq:
            if not rest:  # an option without its value: argparse has said so already
                out.append(arg)
                continue
            value = rest.pop(0)
        path = (cwd / value).resolve()
        if path.is_relative_to(ROOT):
            out += [full, path.relative_to(ROOT).as_posix()]
    return shlex.join([*shlex.split(prog), *out])

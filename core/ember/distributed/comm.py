"""The communicator: MPI's world seen through ember tensors.

Tensors travel as host buffers, reduced in place (``MPI.IN_PLACE``), whatever their backend:
the numpy backend hands MPI its arrays directly; other backends copy to the host and back.
(A CUDA-aware MPI could take CuPy arrays directly through ``__cuda_array_interface__``; that
path is used when the backend is cupy and ``MPI.Query_cuda_support()`` says yes.)

Every collective is started non-blocking and waited for with a deadline (:func:`wait`): a rank
that never arrives (stopped, hung, its node gone) would otherwise leave the others waiting
forever. While they wait, ranks answer each other's roll calls, so the rank that times out
can name the ranks that are silent; then it aborts the whole job.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from ..errors import EmberError

DEFAULT_TIMEOUT = 300.0  # seconds a collective may wait: generous, still not forever
TIMEOUT_ENV = "EMBER_DIST_TIMEOUT"
ROLL_CALL, HERE = 0x3E1, 0x3E2  # message tags: "are you there?" and "here, at collective #n"
_STATE: dict[str, Any] = {"comm": None, "timeout": None, "count": 0}
INSTALL_HINT = (
    "pip install 'ember[mpi-local]' (mpi4py + a pip MPI runtime, for laptops and CI) "
    "or 'ember[mpi]' (mpi4py, using your cluster's MPI)"
)


class MPIUnavailable(EmberError, ImportError):
    """mpi4py is not installed: distributed training cannot start."""


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise MPIUnavailable(
            f"distributed training needs MPI through mpi4py, which is not installed ({exc}); {INSTALL_HINT}"
        ) from None
    return MPI


def init(timeout: float | None = None):
    """Join the MPI world (idempotent) and return the communicator. ``timeout``: seconds any
    collective may wait for the other ranks (default ``$EMBER_DIST_TIMEOUT``, else 300)."""
    if timeout is not None:
        set_timeout(timeout)
    if _STATE["comm"] is None:
        MPI = _mpi()
        _STATE["comm"] = MPI.COMM_WORLD
    return _STATE["comm"]


def set_timeout(seconds: float) -> None:
    """How long a collective waits for the other ranks before the job is aborted."""
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not 0 < seconds < float("inf"):
        raise EmberError(f"distributed timeout must be a finite number of seconds > 0, got {seconds!r}")
    _STATE["timeout"] = float(seconds)


def get_timeout() -> float:
    """The collective timeout in seconds: :func:`set_timeout`, else ``$EMBER_DIST_TIMEOUT``, else 300.

    >>> get_timeout() > 0
    True
    """
    if _STATE["timeout"] is not None:
        return _STATE["timeout"]
    raw = os.environ.get(TIMEOUT_ENV)
    if raw:
        try:
            value = float(raw)
        except ValueError:
            value = float("nan")
        if not 0 < value < float("inf"):
            raise EmberError(f"{TIMEOUT_ENV}={raw!r}: must be a number of seconds > 0")
        return value
    return DEFAULT_TIMEOUT


def wait(request, what: str) -> None:
    """Wait for a non-blocking collective; past the timeout, name the silent ranks and abort."""
    comm = init()
    _STATE["count"] += 1
    number, limit = _STATE["count"], get_timeout()
    deadline = time.monotonic() + limit
    pause = 0.0
    while not request.Test():
        _answer_roll_calls(comm, number)
        if time.monotonic() > deadline:
            _timed_out(comm, what, number, limit)
        time.sleep(pause)
        pause = min(1e-3, pause * 2 or 1e-6)  # spin first (a collective is often microseconds)


def _answer_roll_calls(comm, number):
    MPI = _mpi()
    status = MPI.Status()
    while comm.Iprobe(source=MPI.ANY_SOURCE, tag=ROLL_CALL, status=status):
        source = status.Get_source()
        comm.recv(source=source, tag=ROLL_CALL)
        comm.send(number, dest=source, tag=HERE)


def _timed_out(comm, what, number, limit):
    """Ask every rank whether it is there, give them a moment, report who is not, abort."""
    MPI = _mpi()
    me, size = comm.Get_rank(), comm.Get_size()
    for r in range(size):
        if r != me:
            comm.send(number, dest=r, tag=ROLL_CALL)  # tiny: sent eagerly, even to a stopped rank
    where = {me: number}
    status, end = MPI.Status(), time.monotonic() + min(5.0, limit)
    while time.monotonic() < end and len(where) < size:
        while comm.Iprobe(source=MPI.ANY_SOURCE, tag=HERE, status=status):
            where[status.Get_source()] = comm.recv(source=status.Get_source(), tag=HERE)
        _answer_roll_calls(comm, number)
        time.sleep(0.01)
    silent = [r for r in range(size) if r not in where]
    elsewhere = [f"rank {r} waits at collective #{n}" for r, n in sorted(where.items()) if n != number]
    names = ", ".join(map(str, silent)) or "none (every rank answered)"
    print(
        f"ember: error: rank {me}: {what} (collective #{number}) waited {limit:g} s for the other ranks; "
        f"silent rank(s): {names}"
        + (f"; {', '.join(elsewhere)}" if elsewhere else "")
        + f". Aborting all {size} ranks (set {TIMEOUT_ENV} or --dist-timeout to wait longer)",
        file=sys.stderr,
        flush=True,
    )
    abort(3)


def is_initialized() -> bool:
    return _STATE["comm"] is not None


def _launched_by_mpi() -> bool:
    return any(k in os.environ for k in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MPI_LOCALRANKID"))


def world_size() -> int:
    """Number of processes (1 when not initialized and not launched under MPI)."""
    if _STATE["comm"] is None and not _launched_by_mpi():
        return 1
    return init().Get_size()


def rank() -> int:
    if _STATE["comm"] is None and not _launched_by_mpi():
        return 0
    return init().Get_rank()


def barrier() -> None:
    wait(init().Ibarrier(), "barrier")


def abort(code: int = 1) -> None:
    """End every rank of the job now (what a failing rank must do, or the others hang)."""
    comm = _STATE["comm"]
    sys.stdout.flush()
    sys.stderr.flush()
    if comm is not None and comm.Get_size() > 1:
        # The launcher forwards each rank's output through its own pipes, and Abort tears the job
        # down at once: without a moment's grace the error line just printed (naming the silent
        # or failing rank) was lost now and then on a busy machine, leaving the user nothing.
        time.sleep(0.5)
        comm.Abort(code)
    raise SystemExit(code)


def _host(t):
    """A contiguous host array holding t's values, and whether it is t's own buffer."""
    import numpy as np

    if t.backend.name == "numpy" and t._data.flags.c_contiguous and t._data.flags.writeable:
        return t._data, True
    return np.ascontiguousarray(t.numpy()), False


def broadcast(t, root: int = 0):
    """Overwrite ``t`` in place with rank ``root``'s values; returns ``t``."""
    comm = init()
    buf, own = _host(t)
    wait(comm.Ibcast(buf, root=root), f"broadcast from rank {root}")
    if not own:
        t.copy_(_from_host(t, buf))
    return t


def all_reduce(t, op: str = "sum"):
    """Reduce ``t`` across ranks in place (``op``: sum, mean, max, min); returns ``t``."""
    MPI = _mpi()
    comm = init()
    ops = {"sum": MPI.SUM, "mean": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}
    if op not in ops:
        raise EmberError(f"all_reduce: unknown op {op!r}; use one of {', '.join(ops)}")
    buf, own = _host(t)
    wait(comm.Iallreduce(MPI.IN_PLACE, buf, op=ops[op]), "all-reduce")
    if op == "mean":
        buf /= comm.Get_size()
    if not own:
        t.copy_(_from_host(t, buf))
    return t


def _from_host(t, array):
    from ..creation import as_tensor

    return as_tensor(array, backend=t.backend)


def allreduce_scalars(values, op: str = "sum"):
    """Reduce a list of Python floats across ranks (metrics); returns a list."""
    import numpy as np

    MPI = _mpi()
    comm = init()
    buf = np.asarray(values, dtype=np.float64)
    wait(
        comm.Iallreduce(MPI.IN_PLACE, buf, op={"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[op]),
        "all-reduce of metrics",
    )
    return buf.tolist()

"""The communicator: MPI's world seen through ember tensors.

Tensors travel as host buffers, reduced in place (``MPI.IN_PLACE``), whatever their backend:
the numpy backend hands MPI its arrays directly; other backends copy to the host and back.
(A CUDA-aware MPI could take CuPy arrays directly through ``__cuda_array_interface__``; that
path is used when the backend is cupy and ``MPI.Query_cuda_support()`` says yes.)
"""
from __future__ import annotations

import os
import sys

from ..errors import EmberError

_STATE = {"comm": None}
INSTALL_HINT = ("pip install 'ember[mpi-local]' (mpi4py + a pip MPI runtime, for laptops and CI) "
                "or 'ember[mpi]' (mpi4py, using your cluster's MPI)")


class MPIUnavailable(EmberError, ImportError):
    """mpi4py is not installed: distributed training cannot start."""


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise MPIUnavailable(f"distributed training needs MPI through mpi4py, which is not installed "
                             f"({exc}); {INSTALL_HINT}") from None
    return MPI


def init():
    """Join the MPI world (idempotent) and return the communicator."""
    if _STATE["comm"] is None:
        MPI = _mpi()
        _STATE["comm"] = MPI.COMM_WORLD
    return _STATE["comm"]


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
    init().Barrier()


def abort(code: int = 1) -> None:
    """End every rank of the job now (what a failing rank must do, or the others hang)."""
    comm = _STATE["comm"]
    sys.stdout.flush()
    sys.stderr.flush()
    if comm is not None and comm.Get_size() > 1:
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
    comm.Bcast(buf, root=root)
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
    comm.Allreduce(MPI.IN_PLACE, buf, op=ops[op])
    if op == "mean":
        buf /= comm.Get_size()
    if not own:
        t.copy_(_from_host(t, buf))
    return t


def _from_host(t, array):
    from ..tensor import as_tensor
    return as_tensor(array, backend=t.backend)


def allreduce_scalars(values, op: str = "sum"):
    """Reduce a list of Python floats across ranks (metrics); returns a list."""
    import numpy as np
    MPI = _mpi()
    comm = init()
    buf = np.asarray(values, dtype=np.float64)
    comm.Allreduce(MPI.IN_PLACE, buf, op={"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[op])
    return buf.tolist()

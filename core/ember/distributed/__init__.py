"""Data-parallel training over MPI (mpi4py): the engine every cluster already has.

>>> import ember.distributed as dist
>>> dist.world_size() >= 1          # 1 when not launched under mpiexec
True

Launch with the MPI of your cluster or the pip one (``pip install 'ember[mpi-local]'``)::

    mpiexec -n 4 ember train mnist --distributed
    mpiexec -n 4 python -m mpi4py my_training_script.py

Every collective waits at most ``get_timeout()`` seconds (``$EMBER_DIST_TIMEOUT``, default 300)
for the other ranks; then the rank that waited names the silent ones and aborts the job.

Modules: comm.py (world, rank, broadcast, all-reduce of tensors on any backend, timeouts),
ddp.py (gradient averaging with bucketed all-reduce overlapped with backward).
"""

from .comm import (
    MPIUnavailable,
    abort,
    all_reduce,
    barrier,
    broadcast,
    get_timeout,
    init,
    is_initialized,
    rank,
    set_timeout,
    world_size,
)
from .ddp import DistributedDataParallel, broadcast_parameters

__all__ = [
    "init",
    "is_initialized",
    "rank",
    "world_size",
    "barrier",
    "broadcast",
    "all_reduce",
    "abort",
    "set_timeout",
    "get_timeout",
    "DistributedDataParallel",
    "broadcast_parameters",
    "MPIUnavailable",
]

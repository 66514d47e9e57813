"""Data parallelism: every rank holds the whole model, sees its shard of each batch, and the
gradients are averaged across ranks before the optimizer step.

The average is a bucketed all-reduce: parameters are grouped (in reverse order, the order their
gradients become final during backward) into buckets of about ``bucket_mb``; the moment the
last gradient of a bucket is final (autodiff's grad-ready hook), the bucket is packed into one
flat buffer and a non-blocking ``Iallreduce`` starts, so communication overlaps the rest of
backward. Buckets start strictly in order, so every rank issues the same collectives in the
same sequence. ``sync_gradients()`` waits for them and writes the averages back.
"""

from __future__ import annotations

from typing import Any

from .. import autodiff
from .comm import _host, _mpi, broadcast, init, wait


def broadcast_parameters(model, root: int = 0) -> None:
    """Make every rank's parameters and buffers equal to rank ``root``'s."""
    for _, p in model.named_parameters():
        broadcast(p, root)
    for _, b in getattr(model, "named_buffers", list)():
        if b.dtype.is_floating_point or b.dtype.kind in "iu":
            broadcast(b, root)


class _Bucket:
    def __init__(self, params):
        import numpy as np

        self.params = params
        self.sizes = [p.numel() for p in params]
        self.dtype = params[0].dtype
        self.flat = np.empty(sum(self.sizes), dtype=self.dtype.name)
        self.ready = set()
        self.request = None


class DistributedDataParallel:
    """Wrap ``model`` for data-parallel training.

    Call ``loss.backward()`` as usual, then ``ddp.sync_gradients()`` (the Trainer does it) before
    ``optimizer.step()``. BatchNorm statistics stay local to each rank, as in PyTorch's default.
    """

    def __init__(self, model, bucket_mb: float = 4.0, root: int = 0):
        self.module = model
        self.comm = init()
        self.size = self.comm.Get_size()
        broadcast_parameters(model, root)
        params = [p for _, p in model.named_parameters() if p.requires_grad]
        current: list[Any] = []
        self.buckets, nbytes = [], 0
        for p in reversed(params):
            if current and (
                nbytes + p.numel() * p.dtype.itemsize > bucket_mb * 2**20 or p.dtype is not current[0].dtype
            ):
                self.buckets.append(_Bucket(current))
                current, nbytes = [], 0
            current.append(p)
            nbytes += p.numel() * p.dtype.itemsize
        if current:
            self.buckets.append(_Bucket(current))
        self._where = {}
        for i, b in enumerate(self.buckets):
            for p in b.params:
                self._where[id(p)] = i
                autodiff.GRAD_READY_HOOKS[id(p)] = self._grad_ready
        self._next = 0  # the next bucket to launch: buckets launch in order on every rank
        self._weight = 1.0

    # -- the wrapped model ----------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def __getattr__(self, name):
        module = self.__dict__.get("module")
        if module is None:
            raise AttributeError(name)
        return getattr(module, name)

    # -- gradient averaging ---------------------------------------------------------------------
    def _grad_ready(self, p):
        bucket = self.buckets[self._where[id(p)]]
        bucket.ready.add(id(p))
        while self._next < len(self.buckets) and len(self.buckets[self._next].ready) == len(
            self.buckets[self._next].params
        ):
            self._launch(self.buckets[self._next])
            self._next += 1

    def _launch(self, bucket):
        MPI = _mpi()
        offset = 0
        for p, n in zip(bucket.params, bucket.sizes):
            if p.grad is None:
                bucket.flat[offset : offset + n] = 0
            else:
                bucket.flat[offset : offset + n] = _host(p.grad)[0].reshape(-1)
            offset += n
        if self._weight != 1.0:
            bucket.flat *= self._weight
        bucket.request = self.comm.Iallreduce(MPI.IN_PLACE, bucket.flat, op=MPI.SUM)

    def sync_gradients(self) -> None:
        """Wait for every bucket's all-reduce and set each ``p.grad`` to the average over ranks."""
        from ..creation import as_tensor

        while self._next < len(self.buckets):  # unused parameters: their buckets go now
            self._launch(self.buckets[self._next])
            self._next += 1
        for bucket in self.buckets:
            wait(bucket.request, "gradient all-reduce")
            bucket.flat /= self.size
            offset = 0
            for p, n in zip(bucket.params, bucket.sizes):
                avg = as_tensor(bucket.flat[offset : offset + n].reshape(p.shape).copy(), backend=p.backend)
                p.grad = avg
                offset += n
            bucket.ready.clear()
            bucket.request = None
        self._next = 0
        self._weight = 1.0

    def set_weight(self, weight: float) -> None:
        """Scale this rank's gradients in the coming average; call before backward. With uneven
        shards of a batch, ``local_batch * world_size / global_batch`` makes the average the
        gradient of the mean loss over the whole batch."""
        self._weight = weight

    def close(self) -> None:
        """Unregister the grad-ready hooks (also done when the wrapper is garbage-collected)."""
        for b in self.__dict__.get("buckets", []):
            for p in b.params:
                autodiff.GRAD_READY_HOOKS.pop(id(p), None)

    __del__ = close

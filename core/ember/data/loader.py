"""DataLoader: batches from a dataset, shuffled reproducibly, prepared ahead in the background.

The order of epoch ``e`` is ``np.random.default_rng(seed + e).permutation(len(dataset))``,
and random transforms of batch ``b`` draw from ``np.random.default_rng([seed, e, b])``; so
a run is a pure function of ``seed``, and :meth:`DataLoader.state_dict` (epoch + batches
done) is all it takes to resume mid-epoch with exactly the batches that were left.

>>> import numpy as np
>>> from ember.data import ArrayDataset
>>> ds = ArrayDataset(np.arange(10), np.arange(10) % 2)
>>> loader = DataLoader(ds, batch_size=4, shuffle=True, seed=0, to_tensor=False)
>>> [x.tolist() for x, y in loader]
[[4, 6, 2, 7], [3, 5, 9, 0], [8, 1]]
"""

from __future__ import annotations

import math
import multiprocessing
import queue
import threading
import traceback
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any

import numpy as np

from .dataset import apply_transforms, array_view, base_transforms


def default_collate(samples: list[Any]) -> Any:
    """Stack a list of samples into a batch, field by field (tuples, lists and dicts recurse).

    >>> default_collate([(np.zeros(2), 1), (np.ones(2), 0)])
    (array([[0., 0.],
           [1., 1.]]), array([1, 0]))
    """
    first = samples[0]
    if isinstance(first, (tuple, list)):
        return tuple(default_collate([s[i] for s in samples]) for i in range(len(first)))
    if isinstance(first, dict):
        return {k: default_collate([s[k] for s in samples]) for k in first}
    return np.stack([np.asarray(s) for s in samples])


class DataLoader:
    """Iterate over ``dataset`` in batches.

    Args:
        dataset: a map-style dataset (``__len__`` + ``__getitem__``). An
            :class:`~ember.data.ArrayDataset` (or a ``Subset`` of one) is batched by fancy
            indexing its arrays, with no per-sample Python loop.
        batch_size: samples per batch.
        shuffle: a new seeded permutation each epoch; otherwise dataset order.
        drop_last: drop the last batch if it is smaller than ``batch_size``.
        seed: the one number the order and the augmentations derive from (>= 0).
        transform: applied to the first field of each batch (the inputs). A transform with
            ``batched = True`` (all of :mod:`ember.data.transforms`) is called once per batch
            as ``transform(x, rng)``; any other callable is called per sample as ``transform(x)``.
        prefetch: batches prepared ahead (per worker with ``num_workers``); 0 with no workers
            prepares them inline.
        collate: turns a list of samples into a batch (default: :func:`default_collate`).
        to_tensor: convert every array of a batch with ``ember.as_tensor`` (zero-copy on the
            numpy backend); ``False`` yields numpy arrays.
        num_workers: batches made in parallel by this many workers (0: one background thread).
            Batches come out in order and are the same for any number of workers.
        worker_mode: ``"thread"``, ``"process"`` or ``"auto"`` (the table in :data:`WORKER_MODES`).
        pin_memory: accepted for torch's sake and unused: batches are host arrays, and
            ``.to(device)`` copies them to an accelerator backend in one transfer.

    Each ``iter(loader)`` starts the next epoch; :meth:`set_epoch` chooses it explicitly.
    Batches never share memory with the dataset, so modifying one cannot corrupt the data.
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        shuffle: bool = False,
        drop_last: bool = False,
        seed: int = 0,
        transform: Callable[..., Any] | None = None,
        prefetch: int = 2,
        collate: Callable[[list[Any]], Any] | None = None,
        to_tensor: bool = True,
        num_workers: int = 0,
        worker_mode: str = "auto",
        pin_memory: bool = False,
    ) -> None:
        if int(batch_size) != batch_size or batch_size < 1:
            raise ValueError(f"DataLoader: batch_size must be a positive integer, got {batch_size!r}")
        if int(seed) != seed or seed < 0:
            raise ValueError(f"DataLoader: seed must be a non-negative integer, got {seed!r}")
        if int(prefetch) != prefetch or prefetch < 0:
            raise ValueError(f"DataLoader: prefetch must be a non-negative integer, got {prefetch!r}")
        if int(num_workers) != num_workers or num_workers < 0:
            raise ValueError(f"DataLoader: num_workers must be a non-negative integer, got {num_workers!r}")
        if worker_mode not in WORKER_MODES:
            raise ValueError(f"DataLoader: worker_mode must be one of {', '.join(WORKER_MODES)}, got {worker_mode!r}")
        self.num_workers, self.worker_mode = int(num_workers), worker_mode
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.seed = int(seed)
        self.transform = transform
        self.prefetch = int(prefetch)
        self.collate = collate if collate is not None else default_collate
        self.to_tensor = to_tensor
        self._next_epoch, self._next_batch = 0, 0  # where the next iter() starts
        self._live: list[int] | None = None  # [epoch, batches handed out] of the most recent iterator

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __repr__(self) -> str:
        return (
            f"DataLoader({type(self.dataset).__name__}, batch_size={self.batch_size}, shuffle={self.shuffle}, "
            f"drop_last={self.drop_last}, seed={self.seed}, prefetch={self.prefetch})"
        )

    # -- position -----------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Make the next ``iter()`` run epoch ``epoch`` from its first batch."""
        self._next_epoch, self._next_batch, self._live = int(epoch), 0, None

    def state_dict(self) -> dict[str, Any]:
        """Where the loader is: ``epoch`` and ``batch`` (batches of it already handed out).

        Taken while iterating, it counts the batch just received as done; taken between
        epochs it points at the start of the next one.
        """
        epoch, batch = self._live if self._live is not None else (self._next_epoch, self._next_batch)
        if batch >= len(self):
            epoch, batch = epoch + 1, 0
        return {
            "epoch": epoch,
            "batch": batch,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
            "num_samples": len(self.dataset),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the next ``iter()`` yields the remaining batches of the saved epoch.

        >>> import numpy as np; from ember.data import ArrayDataset
        >>> a = DataLoader(ArrayDataset(np.arange(6)), batch_size=2, shuffle=True, to_tensor=False)
        >>> it = iter(a); first = next(it)
        >>> b = DataLoader(ArrayDataset(np.arange(6)), batch_size=2, shuffle=True, to_tensor=False)
        >>> b.load_state_dict(a.state_dict())
        >>> [x.tolist() for (x,) in b] == [x.tolist() for (x,) in it]
        True
        """
        mine = self.state_dict()
        changed = [
            k
            for k in ("seed", "shuffle", "batch_size", "drop_last", "num_samples")
            if k in state and state[k] != mine[k]
        ]
        if changed:
            diffs = ", ".join(f"{k}: saved {state[k]!r}, now {mine[k]!r}" for k in changed)
            raise ValueError(
                f"DataLoader.load_state_dict: the loader differs from the saved one ({diffs}); "
                f"resuming would not reproduce the remaining batches. Build it with the saved settings."
            )
        self._next_epoch, self._next_batch, self._live = int(state["epoch"]), int(state["batch"]), None

    # -- iteration ----------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        epoch, start = self._next_epoch, self._next_batch
        self._next_epoch, self._next_batch = epoch + 1, 0
        convert = self._converter()  # fail now, not at the first batch, if conversion is impossible
        pos = self._live = [epoch, start]
        return self._run(epoch, start, pos, convert)

    def _run(self, epoch: int, start: int, pos: list[int], convert: Callable[[Any], Any]) -> Generator[Any, None, None]:
        order = np.random.default_rng(self.seed + epoch).permutation(len(self.dataset)) if self.shuffle else None
        view = array_view(self.dataset) if self.collate is default_collate else None
        numbers = range(start, len(self))
        if self.num_workers:
            mode = self.worker_mode if self.worker_mode != "auto" else ("thread" if view is not None else "process")
            job = _Job(self, order, view, epoch)
            source = _in_workers(job, numbers, self.num_workers, max(self.prefetch, 1) * self.num_workers, mode)
        else:
            batches = (self._make_batch(order, view, epoch, b) for b in numbers)
            source = _prefetched(batches, self.prefetch) if self.prefetch else batches
        try:
            for batch in source:
                pos[1] += 1  # counted before the caller sees it: a checkpoint taken now skips it
                yield convert(batch)
        finally:
            source.close()  # stops the prefetch thread when the caller breaks out early
            if self._live is pos and pos[1] >= len(self):
                self._live = None

    def _make_batch(self, order: Any, view: Any, epoch: int, b: int) -> Any:
        lo, hi = b * self.batch_size, min((b + 1) * self.batch_size, len(self.dataset))
        idx = order[lo:hi] if order is not None else np.arange(lo, hi)
        t = self.transform
        batched = t is not None and getattr(t, "batched", False)
        rng = None
        if view is not None and (t is None or batched):
            arrays, index = view
            rows = idx if index is None else index[idx]
            batch = tuple(a[rows] for a in arrays)  # fancy indexing copies: no aliasing of the dataset
            own = base_transforms(self.dataset)  # the dataset's transform=, on the whole batch
            if own != (None, None):
                rng = np.random.default_rng([self.seed, epoch, b])
                batch = apply_transforms(batch, *own, rng=rng)
        else:
            samples = [self.dataset[int(i)] for i in idx]
            if t is not None and not batched:
                samples = [(t(s[0]),) + tuple(s[1:]) if isinstance(s, tuple) else t(s) for s in samples]
            batch = self.collate(samples)
        if batched:
            rng = rng or np.random.default_rng([self.seed, epoch, b])
            batch = (t(batch[0], rng),) + tuple(batch[1:]) if isinstance(batch, tuple) else t(batch, rng)  # type: ignore[misc]  # batched: t is set
        return batch

    def _converter(self) -> Callable[[Any], Any]:
        if not self.to_tensor:
            return lambda batch: batch
        try:
            from ember import as_tensor
        except ImportError:
            raise RuntimeError(
                "DataLoader(to_tensor=True) needs ember.as_tensor, which this ember build does not "
                "provide; pass to_tensor=False to get numpy arrays."
            ) from None

        def convert(batch: Any) -> Any:
            if isinstance(batch, tuple):
                return tuple(convert(x) for x in batch)
            if isinstance(batch, dict):
                return {k: convert(v) for k, v in batch.items()}
            return as_tensor(batch) if isinstance(batch, np.ndarray) else batch

        return convert


#: How ``worker_mode="auto"`` chooses, by how the dataset is read.
WORKER_MODES = {
    "auto": "threads when batches are gathered from arrays (NumPy releases the GIL in fancy "
    "indexing and in the batched transforms); processes when samples come from a Python "
    "__getitem__ or a per-sample transform, where the GIL would serialise threads",
    "thread": "a thread pool in this process",
    "process": "worker processes (forked where the platform can, so the dataset is not copied)",
}


class _Job:
    """Batch ``b`` of one epoch: what a worker computes (picklable for spawned processes)."""

    def __init__(self, loader: DataLoader, order: Any, view: Any, epoch: int) -> None:
        self.loader, self.order, self.view, self.epoch = loader, order, view, epoch

    def __call__(self, b: int) -> Any:
        return self.loader._make_batch(self.order, self.view, self.epoch, b)


_FORKED_JOB: Any = None  # a forked worker inherits the job instead of unpickling the dataset


def _run_forked(b: int) -> Any:
    return _FORKED_JOB(b)


def _in_workers(
    job: Callable[[int], Any], numbers: Iterable[int], workers: int, depth: int, mode: str
) -> Generator[Any, None, None]:
    """Run ``job`` on every batch number in a pool, at most ``depth`` ahead; yield results in order."""
    global _FORKED_JOB
    if mode == "process":
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork" if "fork" in methods else None)
        pool: Executor = ProcessPoolExecutor(workers, mp_context=context)
        call: Callable[[int], Any]
        if context.get_start_method() == "fork":
            _FORKED_JOB, call = job, _run_forked  # read by the children when they fork, at the first submit
        else:
            call = job
    else:
        pool, call = ThreadPoolExecutor(workers, thread_name_prefix="ember-data-worker"), job
    pending, numbers = [], iter(numbers)
    try:
        for b in numbers:
            pending.append(pool.submit(call, b))
            if len(pending) >= depth:
                break
        while pending:
            batch = pending.pop(0).result()
            for b in numbers:
                pending.append(pool.submit(call, b))
                break
            yield batch
    except BaseException as e:
        if not isinstance(e, GeneratorExit):
            e.add_note(f"(raised in a DataLoader {mode} worker)")
        raise
    finally:
        for f in pending:
            f.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
        _FORKED_JOB = None


_DONE = object()


class _Failure:
    def __init__(self, error: BaseException, text: str) -> None:
        self.error, self.text = error, text


def _prefetched(items: Iterable[Any], depth: int) -> Generator[Any, None, None]:
    """Iterate ``items`` in a daemon thread, at most ``depth`` ahead; re-raise its errors here.

    The thread is stopped and joined when this generator is closed, including when the
    consumer stops early, so abandoned iterators do not leak threads.
    """
    q: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.05)
                return True
            except queue.Full:
                pass
        return False

    def work() -> None:
        try:
            for item in items:
                if not put(item):
                    return
            put(_DONE)
        except BaseException as e:  # noqa: BLE001 - everything must reach the consumer
            put(_Failure(e, traceback.format_exc()))

    thread = threading.Thread(target=work, name="ember-data-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is _DONE:
                return
            if isinstance(item, _Failure):
                item.error.add_note(
                    "(raised in the DataLoader's prefetch thread; its traceback was:)\n" + item.text.rstrip()
                )
                raise item.error
            yield item
    finally:
        stop.set()
        while True:  # free a worker blocked on a full queue
            try:
                q.get_nowait()
            except queue.Empty:
                break
        thread.join(timeout=10)

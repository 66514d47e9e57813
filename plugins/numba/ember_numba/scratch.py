"""Per-thread buffers: scratch reused from call to call, and partial sums (:class:`ThreadSums`).

A convolution's chunk buffers (im2col columns, Winograd's transformed tiles) are a few MB,
made once per chunk. Fresh arrays of that size come from the operating system each time
(glibc hands large blocks back when they are freed) and fault their pages in on first write;
a buffer kept per thread is already mapped and, often, still in that core's cache.
"""

from __future__ import annotations

import threading

import numpy as np

_SCRATCH = threading.local()


def scratch(name, size, dtype):
    """A flat buffer of at least ``size`` elements, kept per thread and reused across calls
    (grown when too small). Callers use a prefix and never keep it past their own call.

    >>> a = scratch("doc", 4, np.float32)
    >>> b = scratch("doc", 3, np.float32)  # the same memory, a shorter prefix
    >>> bool(np.shares_memory(a, b)), b.shape
    (True, (3,))
    """
    bufs = _SCRATCH.__dict__.setdefault("bufs", {})
    key = (name, np.dtype(dtype).char)
    buf = bufs.get(key)
    if buf is None or buf.size < size:
        buf = bufs[key] = np.empty(size, dtype)
    return buf[:size]


class ThreadSums:
    """A sum of parts that threads compute on demand (a weight gradient over chunks of the
    batch): each thread adds its parts into a partial of its own, no lock, and :meth:`total`
    adds the partials at the end.

    >>> sums = ThreadSums()
    >>> for i in range(3):
    ...     sums.add(np.matmul(np.full((2, 2), i, np.float32), np.eye(2, dtype=np.float32), out=sums.spare((2, 2), np.float32)))
    >>> sums.total().tolist()
    [[3.0, 3.0], [3.0, 3.0]]
    """

    def __init__(self, keep=None):
        self._mine: dict = {}  # thread id -> [its partial sum, a buffer for its next part]
        self._keep = keep

    def spare(self, shape, dtype):
        """A buffer of this thread's to compute its next part into. Before its first part (which
        becomes the partial itself) that is None, or with ``keep`` (a name) that thread's
        scratch buffer of that name. Other spares are made once per thread and sum."""
        mine = self._mine.get(threading.get_ident())
        if mine is None:
            if self._keep is None:
                return None
            return scratch(self._keep, int(np.prod(shape)), dtype).reshape(shape)
        if mine[1] is None:
            mine[1] = np.empty(shape, dtype)
        return mine[1]

    def add(self, part):
        """Add ``part`` into this thread's partial (the partial is ``part`` itself at first)."""
        mine = self._mine.get(threading.get_ident())
        if mine is None:
            self._mine[threading.get_ident()] = [part, None]
        else:
            mine[0] += part

    def partials(self):
        """The threads' partial sums, unadded (for a caller that adds them block by block)."""
        return [p for p, _ in self._mine.values()]

    def total(self):
        """The partials added up (into the first)."""
        parts = self.partials()
        total = parts[0]
        for p in parts[1:]:
            total += p
        return total

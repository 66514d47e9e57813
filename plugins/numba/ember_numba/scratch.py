"""Per-thread scratch buffers, reused from call to call.

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

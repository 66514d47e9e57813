"""Host memory: how glibc's malloc serves the large arrays of NumPy-array backends.

glibc serves a block above its mmap threshold with a fresh ``mmap`` and unmaps it on
``free``; the next array of that size faults every page in again, zeroed by the kernel. The
threshold starts at 128 KiB and rises, up to 32 MiB, each time a mapped block is freed, so
which arrays are mapped depends on the order of earlier frees: an eager training step, which
allocates and frees the same activations and gradients every step, can pay for all of them
or for none, and a harmless change to the order of ops moves it from one to the other
(measured on the 2-core development machine: an eager W1 step on the NumPy backend took
6.3 ms by default and 2.9 ms with the settings below; W2 on numba 20.5 ms and 15.8 ms).

:func:`tune` fixes the mmap threshold at 32 MiB (glibc's maximum) and the trim threshold at
256 MiB, once per process, when the first NumPy-array backend is made: arrays up to 32 MiB
come from the heap and their pages stay mapped from step to step. The price: up to 256 MiB
of freed memory stays with the process instead of going back to the OS (peak RSS of the
benchmarks did not change: ResNet-18 2.19 vs 2.20 GB). Nothing is done where the C library
is not glibc, where the environment tunes malloc already (``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_TOP_PAD_``, ``MALLOC_MMAP_MAX_`` or a ``glibc.malloc``
tunable in ``GLIBC_TUNABLES``), or with ``EMBER_MALLOPT=0``.
"""

from __future__ import annotations

import ctypes
import os
import platform

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 256 << 20
USER_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")
#: What :func:`tune` did (None until it ran), for ``capabilities().notes``.
STATE = {"malloc": None}


def tune() -> str:
    """Set glibc's thresholds (see the module doc) unless told not to; once per process.
    Returns what was done.

    >>> tune() == tune()
    True
    """
    if STATE["malloc"] is None:
        STATE["malloc"] = _tune()
    return STATE["malloc"]


def _tune() -> str:
    if os.environ.get("EMBER_MALLOPT", "").strip() == "0":
        return "unchanged (EMBER_MALLOPT=0)"
    if any(v in os.environ for v in USER_VARIABLES) or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return "unchanged (tuned in the environment)"
    if platform.libc_ver()[0] != "glibc":
        return "unchanged (the C library is not glibc)"
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return "unchanged (no mallopt)"
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if not (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        return "unchanged (mallopt refused)"
    return f"glibc: mmap threshold {MMAP_THRESHOLD >> 20} MiB, trim threshold {TRIM_THRESHOLD >> 20} MiB"

"""Checks that wait for the host: a data error found on a device is raised at the next read.

Some errors depend on a tensor's values ("target 7 is out of range for 5 classes"). On the
CPU ember reads the values and raises at once. On a backend whose buffers live on an
accelerator (``Capabilities.on_device``) reading a value makes the host wait for all queued
work, once per call — in a training loop, once per step. There the check is *deferred*: the
values it needs are computed on the device (a few 0-d tensors, queued like any other work)
and :func:`defer` files them with the error's message and the user's source line; the next
time the host reads a value from that backend (``item``, ``tolist``, ``numpy``, ``.to``
another backend, or :func:`flush`) — a wait that is happening anyway — :func:`raise_pending`
reads them and raises the same error, naming the line that made the bad call.

Checks from one call site fold together on the device (``fold``), so a loop that never reads
keeps one pending entry per site, however many steps it runs.

>>> import ember
>>> x = ember.tensor([1.0, 2.0])
>>> on_device(x.backend)          # the numpy backend checks at once
False
"""

from __future__ import annotations

import os
import sys
import weakref

from .errors import _internal

#: backend -> {(key, file, line): Check}. Non-empty only while a device backend has checks
#: waiting; Tensor's host reads test it first, so CPU backends pay one truth test.
PENDING: dict = {}
_ON_DEVICE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_INTERNAL_FILES: dict = {}  # code filename -> is it ember's own (errors._internal)?


class Check:
    """One pending check: device values, how to fold the next call's into them, and how to
    turn their host values into an error message (or None when they pass)."""

    __slots__ = ("values", "fold", "message", "cls", "where")

    def __init__(self, values, fold, message, cls, where):
        self.values, self.fold, self.message, self.cls, self.where = values, fold, message, cls, where


def on_device(backend) -> bool:
    """Whether ``backend`` declares that its buffers live on a device (cached per backend).

    >>> import ember
    >>> on_device(ember.get_backend("numpy"))
    False
    """
    known = _ON_DEVICE.get(backend)
    if known is None:
        known = _ON_DEVICE[backend] = bool(getattr(backend.capabilities(), "on_device", False))
    return known


def _site():
    """(file, line, source) of the innermost frame outside ember: errors.user_frame, with the
    per-file answer remembered (it runs once per deferred check, in the training loop)."""
    f = sys._getframe(2)
    while f is not None:
        name = f.f_code.co_filename
        internal = _INTERNAL_FILES.get(name)
        if internal is None:
            internal = _INTERNAL_FILES[name] = _internal(os.path.abspath(name))
        if not internal:
            return name, f.f_lineno
        f = f.f_back
    return None


def defer(key, values: tuple, fold: tuple, message, cls=ValueError) -> None:
    """File a check of ``values`` (0-d tensors of one device backend, not read now).

    ``message(*host_values)`` returns the error text, or None when the values pass; ``fold``
    holds one binary function per value that combines an earlier call's value with this
    one's (on the device: e.g. ``Tensor.minimum``). The error ends with the user's line, as
    :func:`ember.errors.located` would have put it."""
    site = _site()
    backend = values[0]._backend
    checks = PENDING.setdefault(backend, {})
    slot = (key,) + (site or ("", 0))
    old = checks.get(slot)
    if old is None:
        from .errors import where

        text = where((site[0], site[1], _line(*site))) if site else ""
        checks[slot] = Check(tuple(values), tuple(fold), message, cls, text)
    else:
        old.values = tuple(f(a, b) for f, a, b in zip(old.fold, old.values, values))


def _line(filename, lineno):
    import linecache

    return linecache.getline(filename, lineno).strip()


def raise_pending(backend) -> None:
    """Read the checks ``backend`` has waiting (the host is about to wait for the device
    anyway) and raise the first that fails; all of them are done with afterwards."""
    checks = PENDING.pop(backend, None)
    if not checks:
        return
    for check in checks.values():
        text = check.message(*(v.item() for v in check.values))
        if text is not None:
            raise check.cls(text + check.where)


def flush(backend=None) -> None:
    """Run every pending check now (of ``backend``, or of all backends): a host
    synchronisation. For a loop that reads nothing back and wants its errors at a chosen
    point, e.g. the end of an epoch.

    >>> flush()        # nothing pending: nothing to do
    """
    for b in [backend] if backend is not None else list(PENDING):
        raise_pending(b)

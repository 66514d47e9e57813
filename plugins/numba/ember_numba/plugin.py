"""The ``ember`` entry point of ember-numba: offers the "numba" backend without importing numba.

Listing plugins (``ember backends``) calls :func:`ember_backends`, which costs nothing; the
backend, and with it numba, loads on first use, through :func:`load`.
"""

import contextlib
import sys

from ember.backend import BackendInfo
from ember.hooks import hookimpl


@contextlib.contextmanager
def coverage_hidden():
    """Hide an installed but unused ``coverage`` from numba's import.

    numba imports ``coverage`` when it is installed (to report the lines it compiles to a
    running coverage session), ~50 ms of its ~0.2 s import. A session that is running has
    imported ``coverage`` already, and then nothing is hidden; otherwise numba finds it
    missing, and ``import coverage`` works again afterwards. (A coverage session started
    later in the process then does not see the lines numba compiled.)

    >>> with coverage_hidden():
    ...     import numba
    >>> sys.modules.get("coverage", "absent") is not None
    True
    """
    if "coverage" in sys.modules or "numba" in sys.modules:
        yield
        return
    sys.modules["coverage"] = None  # type: ignore[assignment]  # import fails with ImportError
    try:
        yield
    finally:
        if "coverage" in sys.modules and sys.modules["coverage"] is None:
            del sys.modules["coverage"]


def load():
    """Set the threading environment, then import numba and build the backend."""
    from . import threads

    with coverage_hidden():
        threads.configure()  # imports numba
    from . import cache
    from .backend import NumbaBackend

    cache.install_light_loads()

    return NumbaBackend()


@hookimpl
def ember_backends():
    return [
        BackendInfo(
            "numba",
            load,
            priority=20,
            description="Numba CPU JIT: parallel kernels, BLAS GEMM, fused ops, ember.jit groups",
        )
    ]

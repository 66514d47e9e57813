"""The ``ember`` entry point of ember-numba: offers the "numba" backend without importing numba.

Listing plugins (``ember backends``) calls :func:`ember_backends`, which costs nothing; the
backend, and with it numba, loads on first use, through :func:`load`.
"""

from ember.backend import BackendInfo
from ember.hooks import hookimpl


def load():
    """Set the threading environment, then import numba and build the backend."""
    from . import threads

    threads.configure()
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

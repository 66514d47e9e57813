"""Fixtures of the ember-numba tests.

``backend``: the plugin's backend. ``compile_at_once`` (a file opts in with
``pytestmark = pytest.mark.usefixtures("compile_at_once")``) and ``kernels_always`` lower the
plugin's thresholds so that small shapes take the paths of large ones. ``launches``: the
kernels launched, in order.

The plugin is imported only inside the fixtures: each test file skips itself with
``pytest.importorskip`` when numba or the plugin is missing. A skip here, at import, would
skip the folder when pytest reaches it from ``tests/``, but stop pytest with a traceback when
the folder or one of its files is named on the command line (its conftest then loads before
collection, where a skip is not caught).
"""

import pytest

import ember


@pytest.fixture(scope="module")
def backend():
    return ember.get_backend("numba")


@pytest.fixture
def compile_at_once(monkeypatch):
    """Kernels from the first call (the backend otherwise waits for a shape to repeat), for
    ember.jit's groups however small, on all threads however small the work (so the parallel
    loops run parallel)."""
    from ember_numba import jit, launch

    monkeypatch.setattr(launch, "HOT", 1)
    monkeypatch.setattr(launch, "PAR_MIN", 0)
    monkeypatch.setattr(jit, "MIN_WORK", 0)


@pytest.fixture
def kernels_always(monkeypatch, backend):
    """Send everything the kernels cover to them, however small."""
    from ember_numba import backend as numba_backend, kernels

    monkeypatch.setattr(numba_backend, "MIN_SIZE", 0)
    monkeypatch.setattr(numba_backend, "MIN_SIZE_WHERE", 0)
    monkeypatch.setattr(kernels, "MIN_SIZE", 0)


@pytest.fixture
def launches(monkeypatch):
    """The kernels ``launch.run`` is given from here on, in order."""
    from ember_numba import launch

    ran = []
    real = launch.run

    def counting(fn, work, *args):
        ran.append(fn)
        return real(fn, work, *args)

    monkeypatch.setattr(launch, "run", counting)
    return ran

"""Fixtures of the ember-cupy tests.

``host``: the plugin's backend on the host harness (NumPy arrays, kernels built for the CPU by
nvcc), registered as ``cupy-host`` for the session and removed after it. ``gpu``: the real
``cupy`` backend, or a skip that quotes the driver's reason (on machines without a GPU).
"""

import pytest

pytest.importorskip("ember_cupy", reason="ember-cupy is not installed: pip install -e plugins/cupy")

import ember  # noqa: E402
from ember.registry import REGISTRY  # noqa: E402
from ember_cupy import (  # noqa: E402
    catalog,
    device,
    host as host_module,  # noqa: E402
)


@pytest.fixture(scope="session")
def host():
    if host_module.nvcc() is None:
        pytest.skip("nvcc not found on PATH: the host harness builds kernels with the CUDA toolkit")
    added = "cupy-host" not in REGISTRY.infos
    if added:
        ember.register_backend(host_module.ember_backends()[0])
    backend = ember.get_backend("cupy-host")
    backend.rt.prebuild(catalog.library_kernels())  # one nvcc run for every library kernel
    yield backend
    if added:
        REGISTRY.infos.pop("cupy-host", None)
        REGISTRY.loaded.pop("cupy-host", None)
        REGISTRY.origin.pop("cupy-host", None)


@pytest.fixture(scope="session")
def gpu():
    ok, why = device.probe()
    if not ok:
        pytest.skip(f"no GPU: {why}")
    return ember.get_backend("cupy")


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng(0)

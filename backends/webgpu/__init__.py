"""The ``webgpu`` backend: ember's primitives as WGSL compute shaders in the browser.

backend.py (the primitive table and ``WebGPUBackend``) · device.py (the WebGPU device,
strided GPU buffers, launching shaders) · wgsl.py (the shader sources).

It is offered only inside Pyodide in a browser that has ``navigator.gpu``; the device is
requested asynchronously, so the entry's ``setup`` (``await ember.registry.prepare("webgpu")``)
must run before the first use where Python cannot wait on the browser itself.

>>> ember_backends()          # outside a browser: nothing to offer
[]
"""

from __future__ import annotations

from ember.backend import BackendInfo
from ember.hooks import hookimpl

from .device import has_navigator_gpu, init, unavailable_reason


def _load():
    from .backend import WebGPUBackend

    return WebGPUBackend()


async def _setup() -> str:
    """Request the adapter and device once: "" when the backend can run, else why not."""
    return "" if await init() else unavailable_reason()


@hookimpl
def ember_backends():
    """Offer ``webgpu`` only inside Pyodide in a browser with ``navigator.gpu``."""
    if not has_navigator_gpu():
        return []
    return [
        BackendInfo(
            "webgpu",
            _load,
            priority=5,
            setup=_setup,
            description="WGSL compute shaders through the browser's WebGPU (Pyodide only)",
        )
    ]

"""ember-cupy: ember's CUDA backend on CuPy, with kernels generated for ember.jit's fusion groups.

This module is what the ``ember`` entry point names. ember imports it when it first looks for
backends, so it imports neither CuPy nor NumPy: the backend is built in ``_load``, and says
whether it can run through ``available()`` (a machine without a GPU gets the driver's reason).

    pip install './plugins/cupy[cuda12]'      # from ember's repository
    EMBER_BACKEND=cupy ember train cifar10 --model resnet18

Helpers for users of the backend: :func:`from_dlpack` / :func:`to_dlpack` (zero-copy exchange
with torch and other CUDA libraries), :func:`transfers` (host/device copies counted so far).
``Optimizer.step()`` updates every parameter of a group in one launch by itself (the
``*_foreach`` fused ops, multi_tensor.py).
"""

from ember import BackendInfo, hookimpl

__version__ = "0.1.0"


def _load():
    from .backend import CupyBackend

    return CupyBackend()


@hookimpl
def ember_backends():
    """The backends this plugin offers: ``cupy``, preferred over numpy where a GPU is present."""
    return [
        BackendInfo(
            "cupy",
            _load,
            priority=20,
            description="CUDA on CuPy: cuBLAS matmul/conv, fused kernels, ember.jit groups as CUDA C",
        )
    ]


def _backend(name="cupy"):
    import ember

    return ember.get_backend(name)


def from_dlpack(obj, backend="cupy"):
    """An ember tensor sharing memory with a DLPack producer on the GPU (e.g. a torch CUDA
    tensor). No copy is made and nothing is counted as a transfer.

    >>> # t = ember_cupy.from_dlpack(torch.ones(3, device="cuda"))
    """
    from ember import dispatch

    b = _backend(backend)
    return dispatch.wrap(b.from_dlpack(obj), b)


def to_dlpack(tensor):
    """The CuPy array behind ``tensor`` (a DLPack producer): ``torch.from_dlpack(to_dlpack(t))``
    shares its memory."""
    return tensor._backend.to_dlpack(tensor._data)


def multi_tensor_step(optimizer, closure=None):
    """``optimizer.step(closure)``, which now runs the multi-tensor kernels by itself (kept for
    scripts written before it did)."""
    from .multi_tensor import step

    return step(optimizer, closure)


def transfers(backend="cupy") -> dict:
    """Host/device copies made by the backend so far: counts and bytes each way."""
    return dict(_backend(backend).transfers)

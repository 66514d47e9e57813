"""ember: a small deep-learning framework with a pure-Python core and pluggable backends.

>>> import ember
>>> x = ember.tensor([1.0, 2.0, 3.0], requires_grad=True)
>>> (x * x).sum().backward()
>>> x.grad.tolist()
[2.0, 4.0, 6.0]

The pipeline, top to bottom (docs/architecture.md): tensor.py (the user's arrays) →
dispatch.py (one door for every primitive) → autodiff.py (the VJP table) → backend.py (the
contract) → backends/ (numpy reference, pure Python) and plugins (numba, cupy).
"""

from importlib import import_module as _import_module
from typing import Any

from . import autograd, dtypes
from .autodiff import enable_grad, grad, is_grad_enabled, no_grad, value_and_grad
from .autograd import inference_mode
from .backend import API_VERSION, Backend, BackendInfo, Capabilities
from .creation import (
    as_tensor,
    empty,
    eye,
    from_numpy,
    full,
    full_like,
    linspace,
    ones,
    ones_like,
    zeros,
    zeros_like,
)
from .devices import cuda, device
from .dtypes import (
    DType,
    bfloat16,
    bool_,
    float4_e2m1fn,
    float8_e4m3fn,
    float8_e4m3fnuz,
    float8_e5m2,
    float8_e5m2fnuz,
    float8_e8m0fnu,
    float16,
    float32,
    float64,
    int2,
    int4,
    int8,
    int16,
    int32,
    int64,
    promote as promote_types,
    string,
    uint2,
    uint4,
    uint8,
    uint16,
    uint32,
    uint64,
)
from .errors import BackendError, DTypeError, EmberError, GradError, NotImplementedByBackend, ShapeError
from .hooks import hookimpl
from .random import Generator, manual_seed, rand, randint, randn, randperm
from .registry import (
    backend,
    backends as list_backends,  # `ember.backends` is the subpackage of built-in backends
    get_backend,
    register_backend,
    use,
)
from .tensor import (
    FUNCTIONS as _FUNCTIONS,
    Tensor,
    arange,
    broadcast_tensors,
    cat,
    concatenate,
    matmul,
    stack,
    tensor,
    where,
)

globals().update(_FUNCTIONS)  # ember.exp(x), ember.sum(x, dim), ... (see tensor.FUNCTIONS)
__version__ = "0.1.0"
bool = bool_  # noqa: A001 - ember.bool like torch.bool

# The names imported above are the public API (type checkers read a py.typed package's
# re-exports from here); tensor.FUNCTIONS' names join them at import.
# fmt: off
__all__ = [
    "API_VERSION", "Backend", "BackendError", "BackendInfo", "Capabilities", "DType", "DTypeError", "bfloat16",
    "EmberError", "Generator", "GradError", "NotImplementedByBackend", "ShapeError", "Tensor", "arange",
    "as_tensor", "autograd", "backend", "bool", "bool_", "broadcast_tensors", "cat", "concatenate", "cuda",
    "device", "dtypes", "empty", "enable_grad", "eye", "float16", "float32", "float64", "float8_e4m3fn",
    "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float4_e2m1fn", "float8_e8m0fnu", "from_numpy", "full",
    "full_like", "get_backend", "grad", "hookimpl", "inference_mode", "int2", "int4", "int8", "int16", "int32",
    "int64", "is_grad_enabled", "linspace", "list_backends", "manual_seed", "matmul", "no_grad", "ones",
    "ones_like", "promote_types", "rand", "randint", "randn", "randperm", "register_backend", "stack", "string", "tensor",
    "uint2", "uint4", "uint8", "uint16", "uint32", "uint64", "use", "value_and_grad", "where", "zeros",
    "zeros_like",
]
# fmt: on
__all__ += sorted(set(_FUNCTIONS) - set(__all__))


# torch's names for functions that live deeper: ember.save / ember.load, ember.checkpoint
_LAZY = {"save": "io.save", "load": "io.save", "checkpoint": "recompute", "from_dlpack": "dlpack"}
_SUBMODULES = {
    "nn",
    "optim",
    "data",
    "io",
    "train",
    "models",
    "conformance",
    "wasm",
    "cli",
    "jit",
    "fused",
    "distributed",
    "functional",
    "utils",
}


def __getattr__(name: str) -> Any:
    # Subpackages load on first use, so `import ember` stays light (no numpy until a
    # backend needs it) and never imports numba, cupy or torch.
    if name in _SUBMODULES:
        return _import_module(f"{__name__}.{name}")
    if name in _LAZY:
        return getattr(_import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'ember' has no attribute {name!r}")

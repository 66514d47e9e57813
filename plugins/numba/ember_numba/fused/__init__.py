"""Fused ops (ember.fused): one kernel where the reference decomposition makes several passes.

| module | ops |
|---|---|
| ``rows`` | ``softmax``, ``log_softmax``, ``cross_entropy``, ``layer_norm`` and their backward ops: one task per row |
| ``pooling`` | ``max_pool2d`` and its backward op: one task per (N*C) plane, kernel 2 stride 2 on explicit vectors |
| ``channels`` | ``batch_norm`` (training) and its backward op: one task per channel or group of channels |
| ``activations`` | ``gelu`` and its backward op: elementwise programs (render.py) |
| ``optimizers`` | ``sgd_step``, ``adam_step``, ``rmsprop_step``: elementwise programs, also run by foreach.py |
| ``common`` | what they share: dtypes, numba options, the reference fallback, the program builder |

Each function takes the reference's arguments with buffers for tensors and falls back to the
reference (run on this backend through ember's Tensor ops) for what its kernel does not
cover: float16 and integer inputs, unusual shapes. The elementwise programs are built from the
same arithmetic as the references, operation for operation and rounded to the tensor's dtype at
each step, so they agree with them to the last bit or so.

Each forward op is declared with its backward op, so ember.fused runs both in eager training
(one autodiff node per op); inference, evaluation and optimizer updates use the rest.
"""

from __future__ import annotations

from .activations import gelu, gelu_backward
from .channels import batch_norm, batch_norm_backward
from .optimizers import adam_step, rmsprop_step, sgd_step
from .pooling import max_pool2d, max_pool2d_backward
from .rows import (
    _softmax_backward_like,
    _softmax_like,
    cross_entropy,
    cross_entropy_backward,
    layer_norm,
    layer_norm_backward,
)

#: fused op name -> kernel: what the backend declares (backend.py)
IMPLS = {
    "softmax": _softmax_like("softmax", False),
    "log_softmax": _softmax_like("log_softmax", True),
    "cross_entropy": cross_entropy,
    "layer_norm": layer_norm,
    "gelu": gelu,
    "softmax_backward": _softmax_backward_like("softmax_backward", False),
    "log_softmax_backward": _softmax_backward_like("log_softmax_backward", True),
    "cross_entropy_backward": cross_entropy_backward,
    "layer_norm_backward": layer_norm_backward,
    "gelu_backward": gelu_backward,
    "max_pool2d": max_pool2d,
    "max_pool2d_backward": max_pool2d_backward,
    "batch_norm": batch_norm,
    "batch_norm_backward": batch_norm_backward,
    "sgd_step": sgd_step,
    "adam_step": adam_step,
    "rmsprop_step": rmsprop_step,
}

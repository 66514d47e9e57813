"""The hand-written kernels, as CUDA C sources made by small Python functions.

A :class:`Kernel` is a whole translation unit plus how to launch it. Every kernel follows one
of two shapes, so the same source runs on a GPU and, built for the host with
``-DEMBER_HOST_HARNESS``, on the CPU (tests/plugins/cupy use that to check kernels against
NumPy on machines without a GPU):

* ``threads``: the source defines ``__host__ __device__ NAME_thread(long long t, ARGS)``, the
  work of logical thread ``t``; :func:`threads_kernel` adds the ``__global__ NAME(n, ARGS)``
  grid-stride loop and the host loop ``NAME_host(n, ARGS)``.
* ``blocks``: one block of ``BLOCK`` threads per row (softmax, cross-entropy, layer norm, a
  fused reduction); the rows' arithmetic is in ``__host__ __device__`` functions shared by the
  device kernel (block-cooperative, a shared-memory tree) and the serial host loop.

The kernels, by module: ``elementwise`` (random bits, unary ops, remainder, GELU), ``rows`` (softmax,
cross-entropy, layer norm), ``windows`` (max-pool, col2im), ``channels`` (batch norm),
``optimizers`` (SGD/Adam/RMSprop steps, one tensor or many); ``source`` holds the
:class:`Kernel` record and the two shapes. This package's names are the catalogue the rest of
the plugin uses (``kernels.softmax_kernel``).

Sources are keyed by their SHA-256 (runtime.py compiles each once).

>>> k = random_bits_kernel()
>>> k.name, k.launch, k.params
('ember_random_bits', 'threads', ('ptr', 'long long', 'unsigned long long', 'unsigned long long'))
"""

from __future__ import annotations

from .channels import batch_norm_backward_kernel, batch_norm_kernel
from .elementwise import (
    PHILOX,
    gelu_backward_body,
    gelu_backward_kernel,
    gelu_body,
    gelu_kernel,
    random_bits_kernel,
    random_bits_threads,
    remainder_kernel,
    unary_kernel,
)
from .optimizers import (
    BODIES,
    adam_body,
    multi_step_kernel,
    rmsprop_body,
    sgd_body,
    step_kernel,
)
from .rows import (
    cross_entropy_backward_kernel,
    cross_entropy_kernel,
    layer_norm_backward_kernel,
    layer_norm_kernel,
    layer_norm_params_kernel,
    softmax_backward_kernel,
    softmax_kernel,
)
from .source import (
    BLOCK,
    BLOCK_REDUCE_DEF,
    SCALARS,
    Kernel,
    blocks_kernel,
    guarded,
    threads_kernel,
    unit,
)
from .windows import (
    POOL_PARAMS,
    col2im_kernel,
    max_pool_backward_kernel,
    max_pool_kernel,
)

__all__ = [
    "BLOCK",
    "BLOCK_REDUCE_DEF",
    "BODIES",
    "PHILOX",
    "POOL_PARAMS",
    "SCALARS",
    "Kernel",
    "adam_body",
    "batch_norm_backward_kernel",
    "batch_norm_kernel",
    "blocks_kernel",
    "col2im_kernel",
    "cross_entropy_backward_kernel",
    "cross_entropy_kernel",
    "gelu_backward_body",
    "gelu_backward_kernel",
    "gelu_body",
    "gelu_kernel",
    "guarded",
    "layer_norm_backward_kernel",
    "layer_norm_kernel",
    "layer_norm_params_kernel",
    "max_pool_backward_kernel",
    "max_pool_kernel",
    "multi_step_kernel",
    "random_bits_kernel",
    "random_bits_threads",
    "remainder_kernel",
    "rmsprop_body",
    "sgd_body",
    "softmax_backward_kernel",
    "softmax_kernel",
    "step_kernel",
    "threads_kernel",
    "unary_kernel",
    "unit",
]

"""The NumPy runner's graph rewrites (ember.backends.numpy.rewrites) with this backend's kernels.

The runner rewrites a few node patterns of convolutional training steps as one kernel each,
where the backend computes the pattern's values with it. Here the pattern's
``where``/``gt``/``add`` are NumPy's bits (the elementwise kernels), the pooling kernels are
exact and the convolution is this backend's own, so each kernel below gives what the nodes
it replaces give on this backend, to the bit, but the three that make a first layer's
gradients or a bias's from the pooled gradient (to float32 rounding, below);
NumbaBackend.rewrite_kernels names them.

| kernel | pattern | saves (LeNet, W2) |
|---|---|---|
| :func:`conv2d_bias_relu` | ``where(gt(p, 0), p, 0)``, ``p = conv2d(x, w) + bias`` | a pass over the activation: the bias and ReLU go on each chunk of the convolution's output as the chunk finishes, in cache |
| :func:`conv2d_bias` | ``conv2d(x, w) + bias`` | a pass over the activation: the bias goes on each chunk as it finishes (ResNet's downsample layers) |
| :func:`pointwise_bias_relu` | ``where(gt(p, 0), p, 0)``, ``p = reshape(matmul(w, x)) + bias`` (+ a residual) | ONNX's 1x1 convolutions: the sums and ReLU go on each block of the product as it is made, on its thread |
| :func:`pointwise_bias` | ``reshape(matmul(w, x)) + bias`` | the same, without the ReLU |
| :func:`relu_max_pool2d_backward` | ``where(c, max_pool2d_backward(g, r), 0)``, ``r`` ReLU's output under mask ``c`` | the full-size ``where`` and the forward pass's mask: ReLU's gradient is taken on the pooled gradient |
| :func:`relu_max_pool2d_conv_grads` | a first layer's ``conv2d_grad_weight(x, dr)`` and ``sum(dr)`` of that ReLU + pool backward ``dr`` | ``dr`` going out to memory and being read back twice: each chunk of the batch makes its share in the thread's scratch, where its weight product (a row of ones more: the bias) reads it |
| :func:`conv2d_bias_relu_max_pool2d`, :func:`pooled_conv_grads` | the same, where nothing else reads the first layer's output ``r`` than its 2x2 pool and the kernel above | ``r`` itself: the pool is taken on each chunk of the convolution's output in cache, with each window's first maximum's position (int8), from which the backward makes ``dr`` |
| ``relu_pool_bias_grad`` (NumPy's) | ``sum(dr)`` of a ReLU + pool backward ``dr`` given the pooled output | a read of ``dr``: the gated pooled gradient's sum |
| :func:`batch_norm_relu` (fused/channels.py) | ``where(gt(a, 0), a, 0)``, ``a`` batch norm's output (+ a residual) | ResNet's: two passes over the activation and the mask; the sum and ReLU go on each value as batch norm makes it |
| :func:`relu_backward` | ``where(c, g, 0)``, ``c`` the mask of a ReLU on batch norm's output (:data:`WHEN`), ``g`` perhaps ``add(g1, g2)`` | the mask, which the forward no longer makes: ``r > 0`` is read instead; a residual block's gradient sum goes in the same pass |

ResNet-18 training at batch 128 (W3, AVX-512 machine, two threads, 10 pairs of alternating
steps in one process): the last two rules took 0.971x the step's time (1308 -> 1263 ms).
LeNet training at batch 128 (W2, the same machine, processes of the two trees alternating,
``benchmarks.numpy_ab``): the first layer's gradients 0.953-0.963x the step's time, the bias
sum from the pooled gradient 0.973x, the pool with positions 0.956x. The three give the
nodes' values to float32 rounding (the sums in another order), not their bits.
"""

from __future__ import annotations

import math
import time

import numba
import numpy as np
from numba import prange, uint64

from ember.backends.numpy import rewrites as numpy_rewrites

from . import kernels, launch, skinny
from .blas import MIN_FLOPS, awake, matmul, on_demand, one_thread, shared_matmul
from .epilogue import Epilogue
from .fused.channels import batch_norm_relu
from .fused.common import FLOATS, JIT
from .fused.pooling import max_pool2d, max_pool2d_backward, pool_2x2_positions, relu_max_pool_2x2_backward, unpool_2x2
from .scratch import ThreadSums, scratch


@numba.njit(parallel=True, **JIT)
def _relu_gate(g, best, out):
    """out = g where best > 0, else +0.0 (g's bits kept)."""
    zero = out.dtype.type(0)
    for i in prange(uint64(g.size)):
        out[i] = g[i] if best[i] > 0 else zero


def relu_max_pool2d_backward(grad, r, best=None, **pool):
    """``where(r > 0, max_pool2d_backward(grad, r), 0)`` for a ReLU output ``r`` and disjoint
    windows: ReLU's gradient taken on the pooled gradient, then the pool's backward kernel.
    A window's first maximum is above zero exactly when ``best`` (its pooled output, computed
    from ``r`` when not given) is; there the backward writes ``0 + grad`` as before,
    elsewhere ``0 + 0``: the pattern's bits. 2x2 pools do it in one pass, in the vector
    kernel's registers (fused/pooling.py); others gate the pooled gradient first."""
    dx = relu_max_pool_2x2_backward(grad, r, **pool)
    if dx is not None:
        return dx
    if best is None:
        best = max_pool2d(r, **pool)
    if grad.dtype not in FLOATS or best.dtype != grad.dtype or best.shape != grad.shape:
        return max_pool2d_backward(np.where(best > 0, grad, 0).astype(grad.dtype), r, **pool)
    gated = np.empty(grad.shape, grad.dtype)
    flat = [np.ascontiguousarray(a).reshape(-1) for a in (grad, best)]
    launch.run(launch.for_work(_relu_gate, grad.size), grad.size, *flat, gated.reshape(-1))
    return max_pool2d_backward(gated, r, **pool)


def _chunked_conv_grads(x, w_shape, conv_params, bias, shape, fill):
    """A first layer's weight (and bias) gradient a chunk of the batch at a time, where its
    full-size gradient dr, of ``shape`` (N, O, OH, OW), is made by ``fill(dr, n0, m)``
    (samples n0 .. n0+m-1, into the thread's scratch) and read from cache by the chunk's
    weight-gradient product (conv.weight_part, the convolution's own, with a row of ones more
    in its columns: the bias's gradient). ``(dw,)`` or ``(dw, db)``; None where the
    convolution does not go by such chunks (channels last, a batch of one)."""
    from . import channels_last, conv

    cs, cp, cd = (conv_params[k] for k in ("stride", "padding", "dilation"))
    ch = conv.Chunks(x.shape, w_shape, cs, cp, cd, x.dtype)
    if channels_last.takes(ch) or ch.wide or ch.geo[-2:] != tuple(shape[2:]):
        return None
    x, o = np.ascontiguousarray(x), w_shape[0]
    sums = ThreadSums()

    def part(n0, m):
        dr = scratch("relu_pool_grad", m * math.prod(shape[1:]), x.dtype)
        fill(dr, n0, m)
        cols = scratch("relu_pool_cols", (ch.ckk + bias) * m * ch.p, x.dtype).reshape(-1, m * ch.p)
        ch._fill(x[n0 : n0 + m], cols[: ch.ckk])
        cols[ch.ckk :] = 1  # the bias's gradient: the weight's last column, the sum of dr
        sums.add(conv.weight_part(ch, cols, dr.reshape(m, *shape[1:])))

    ch.run(part)
    total = sums.total()
    dw = np.ascontiguousarray(total[:, : ch.ckk]).reshape(w_shape)
    return (dw, np.ascontiguousarray(total[:, -1]).reshape(1, o, 1, 1)) if bias else (dw,)


def _nodes_conv_grads(x, dr, w_shape, geo, bias):
    """The replaced nodes' own kernels on the full-size gradient ``dr``: the convolution's
    weight gradient and the bias's sum."""
    from . import conv

    dw = conv._conv2d_grad_weight(x, dr, w_shape, *geo)
    return (dw, dr.sum((0, 2, 3), keepdims=True)) if bias else (dw,)


def _first_layer_fits(x, full_shape, grad, w_shape, pool):
    """The plane arguments of a 2x2 pool over a layer's output of ``full_shape`` (N, O, H, W)
    whose pooled gradient is ``grad``, where the chunked gradient can take the layer (float
    dtypes, hot shapes); else None."""
    from . import conv
    from .fused.pooling import _is_2x2, _pool_args

    full = np.broadcast_to(np.zeros((), grad.dtype), full_shape)  # its shape and dtype only
    args = _pool_args(
        full, pool["kernel_size"], pool.get("stride"), pool.get("padding", 0), pool.get("dilation", 1), False
    )
    if args is None or not _is_2x2(args) or grad.dtype not in FLOATS or x.dtype != grad.dtype:
        return None
    if grad.shape != full.shape[:2] + args[3:5]:
        return None
    macs = math.prod(w_shape) * math.prod(full.shape) // max(full.shape[1], 1)
    return args if conv._conv_ok("conv2d_grad_weight", x, full, 1, macs) else None


def relu_max_pool2d_conv_grads(x, grad, r, best=None, *, pool, conv_params, bias):
    """A first layer's weight (and bias) gradient from the pooled gradient of the ReLU and
    2x2 max pool after it (ember.backends.numpy.rewrites' kernel of the same name), a chunk
    of the batch at a time (:func:`_chunked_conv_grads`): the pool's backward kernel writes the
    chunk's full-size gradient into the thread's scratch, instead of the whole batch's gradient
    going out to memory and being read back twice. Equal to float32 rounding: the bias
    gradient's terms go in another order than the ``sum`` node's, and the product has one
    column more. Other pools and convolutions take the nodes' kernels one after another."""
    from .fused.pooling import relu_pool_2x2_backward_planes

    w_shape, geo = conv_params["weight_shape"], [conv_params[k] for k in ("stride", "padding", "dilation")]
    args = _first_layer_fits(x, r.shape, grad, w_shape, pool) if r.dtype == grad.dtype else None
    if args is not None:
        r, grad = np.ascontiguousarray(r), np.ascontiguousarray(grad)
        o, (_, h, w, oh, ow) = r.shape[1], args[:5]

        def fill(dr, n0, m):
            at = slice(n0, n0 + m)
            relu_pool_2x2_backward_planes(r[at].reshape(-1), grad[at].reshape(-1), m * o, h, w, oh, ow, dr)

        done = _chunked_conv_grads(x, w_shape, conv_params, bias, r.shape, fill)
        if done is not None:
            return done
    return _nodes_conv_grads(x, relu_max_pool2d_backward(grad, r, best, **pool), w_shape, geo, bias)


class _PoolPositions:
    """An epilogue (epilogue.Epilogue ``e``, then the 2x2 pool): each chunk of the convolution's
    output, once ``e`` has run on it, pooled into ``out`` with its maxima's positions into
    ``pos``, while the chunk is in cache."""

    def __init__(self, e, out, pos):
        self.e, self.out, self.pos = e, out, pos

    def __call__(self, y, n0, n1, o0, o1, p0, p1):
        self.e(y, n0, n1, o0, o1, p0, p1)
        _, o, h, w = y.shape
        _, _, oh, ow = self.out.shape
        args = (y[n0:n1].reshape(-1), (n1 - n0) * o, h, w, oh, ow)
        pool_2x2_positions(*args, self.out[n0:n1].reshape(-1), self.pos[n0:n1].reshape(-1))


def conv2d_bias_relu_max_pool2d(x, w, bias, *, pool, **params):
    """``(max_pool2d(r), positions)`` of a first layer ``r = relu(conv2d(x, w) + bias)`` whose
    backward pass needs only the pooled output and where each window's first maximum is
    (:func:`pooled_conv_grads`): the 2x2 pool is taken on each chunk of the convolution's
    output right after its bias and ReLU, while it is in cache, so ``r`` is never read back
    (nor kept for the backward pass). The pooled values are the pool's; ``positions`` (int8,
    0-3) is each window's first maximum, row by row."""
    from . import conv

    geo = [params[k] for k in ("stride", "padding", "dilation")]
    r_shape = (x.shape[0], w.shape[0], *conv._geometry(x.shape, w.shape, *geo)[-2:])
    oh, ow = r_shape[2] // 2, r_shape[3] // 2
    out = np.empty((*r_shape[:2], oh, ow), np.result_type(x, w))
    pos = np.empty(out.shape, np.int8)
    if conv._conv_ok("conv2d", x, w, 1, x.shape[0] * w.size * math.prod(r_shape[2:])):
        from . import channels_last, winograd

        ch = conv.Chunks(x.shape, w.shape, *geo, x.dtype)
        if not (ch.wide or channels_last.takes(ch) or winograd.plan(x.shape, w.shape, *geo, 1, x.dtype)):
            conv.conv2d_cols(x, w, *geo, _PoolPositions(Epilogue(bias, relu=True), out, pos))
            return out, pos
    r = np.ascontiguousarray(conv2d_bias_relu(x, w, bias, **params))  # the whole output, then its pool
    pool_2x2_positions(r.reshape(-1), r.shape[0] * r.shape[1], *r.shape[2:], oh, ow, out.reshape(-1), pos.reshape(-1))
    return out, pos


def pooled_conv_grads(x, grad, pos, best, *, pool, conv_params, bias):
    """:func:`relu_max_pool2d_conv_grads` from the positions of the windows' first maxima that
    :func:`conv2d_bias_relu_max_pool2d` kept, not from the layer's full-size output: each
    chunk's full-size gradient is made from the pooled arrays alone (fused/pooling.py's
    :func:`unpool_2x2`)."""
    from . import conv

    w_shape, geo = conv_params["weight_shape"], [conv_params[k] for k in ("stride", "padding", "dilation")]
    n, o, oh, ow = grad.shape
    shape = (n, o, *conv._geometry(x.shape, w_shape, *geo)[-2:])
    grad, best, pos = (np.ascontiguousarray(a) for a in (grad, best, pos))
    h, w = shape[2:]

    def fill(dr, n0, m):
        at = slice(n0, n0 + m)
        unpool_2x2(grad[at].reshape(-1), best[at].reshape(-1), pos[at].reshape(-1), m * o, h, w, oh, ow, dr)

    if _first_layer_fits(x, shape, grad, w_shape, pool) is not None:
        done = _chunked_conv_grads(x, w_shape, conv_params, bias, shape, fill)
        if done is not None:
            return done
    dr = np.empty(shape, grad.dtype)
    fill(dr.reshape(-1), 0, n)
    return _nodes_conv_grads(x, dr, w_shape, geo, bias)


@numba.njit(parallel=True, **JIT)
def _relu_gate_sum(g, h, best, out):
    """out = g + h (rounded to their dtype) where best > 0, else +0.0."""
    zero = out.dtype.type(0)
    for i in prange(uint64(g.size)):
        s = g[i] + h[i]
        out[i] = s if best[i] > 0 else zero


@numba.njit(parallel=True, **JIT)
def _relu_gate_strided(g, st, h, r, out, N, C, H, W, with_h):
    """:func:`_relu_gate` (``with_h``: :func:`_relu_gate_sum`) for a ``g`` of any layout: its
    elements at ``n*st[0] + c*st[1] + y*st[2] + x*st[3]`` of the flat ``g`` (a broadcast
    has stride 0), the others C-contiguous (N, C, H, W); a task per (n, c) plane."""
    zero = out.dtype.type(0)
    for nc in prange(N * C):
        base = (nc // C) * st[0] + (nc % C) * st[1]
        o = nc * H * W
        for y in range(H):
            row = base + y * st[2]
            for x in range(W):
                i = o + y * W + x
                v = g[row + x * st[3]]
                if with_h:
                    v = v + h[i]
                out[i] = v if r[i] > 0 else zero


def _strided_flat(a):
    """(the memory of ``a`` from its first element as a flat view, its element strides as four,
    its shape as four), or None where its strides are not whole non-negative elements."""
    if a.ndim > 4 or any(st < 0 or st % a.itemsize for st in a.strides):
        return None
    shape = (1,) * (4 - a.ndim) + a.shape
    steps = (0,) * (4 - a.ndim) + tuple(st // a.itemsize for st in a.strides)
    extent = 1 + sum((n - 1) * st for n, st in zip(shape, steps))
    flat = np.lib.stride_tricks.as_strided(a, shape=(extent,), strides=(a.itemsize,))
    return flat, np.array(steps, np.int64), shape


def relu_backward(grad, r, other=None, out=None):
    """``where(r > 0, grad, 0)`` for ReLU's output ``r``: its gradient in one parallel pass,
    without the forward pass's mask (``r > 0`` exactly where the mask was true); with
    ``other``, of ``grad + other`` (a residual block's two gradients) in the same pass. A
    ``grad`` of another layout (a pooling-by-mean gradient broadcast over the map, a
    convolution's gradient channels first) is read where it lies."""
    out = np.empty(grad.shape, grad.dtype) if out is None else out
    rest = [a for a in (other, r, out) if a is not None]
    if (
        grad.dtype not in FLOATS
        or grad.size < kernels.MIN_SIZE
        or any(a.shape != grad.shape or a.dtype != grad.dtype or not a.flags.c_contiguous for a in rest)
    ):  # the NumPy runner's kernel, a chunk at a time in any layout
        return numpy_rewrites.relu_backward(grad, r, other, out)
    if not grad.flags.c_contiguous:
        strided = _strided_flat(grad)
        if strided is None:
            return numpy_rewrites.relu_backward(grad, r, other, out)
        flat, steps, shape = strided
        h = r.reshape(-1) if other is None else other.reshape(-1)
        kernel = launch.for_work(_relu_gate_strided, grad.size)
        launch.run(kernel, grad.size, flat, steps, h, r.reshape(-1), out.reshape(-1), *shape, other is not None)
        return out
    kernel = _relu_gate if other is None else _relu_gate_sum
    launch.run(launch.for_work(kernel, grad.size), grad.size, *(a.reshape(-1) for a in [grad, *rest]))
    return out


def conv2d_bias(x, w, bias, **params):
    """``conv2d(x, w) + bias``: the convolution, with the bias added to each block of its
    output as it is made (epilogue.py)."""
    from . import conv  # loaded at the first convolution (backend.LAZY): an MLP never needs it

    return conv._conv2d(x, w, epilogue=Epilogue(bias), **params)


def conv2d_bias_relu(x, w, bias, **params):
    """``where(gt(p, 0), p, 0)`` with ``p = conv2d(x, w) + bias``: the convolution, with the
    bias and ReLU applied to each block of its output as it is made (epilogue.py)."""
    from . import conv

    return conv._conv2d(x, w, epilogue=Epilogue(bias, relu=True), **params)


#: One thread or all for a 1x1 convolution's product at batch 1, by measurement (a busy machine takes one).
POINTWISE_THREADS = launch.ThreadChoice()


def pointwise_bias_relu(w, x, bias, residual=None, *, shape, relu=True):
    """``relu(reshape(w @ x, shape) + bias (+ residual))`` for ``w`` (O, C), ``x`` (N, C, P):
    a 1x1 convolution as ember.onnx lowers it. At batch 1 the product goes as one-thread BLAS
    blocks on the plugin's threads and each block gets the sums and ReLU as it is made (a
    BLAS block has the product's bits); larger batches take the product on BLAS's threads
    (blas.matmul, the matmul node's own call), then the epilogue a sample per thread."""
    epilogue = Epilogue(bias, residual, relu)
    n, o, p = shape[0], shape[1], x.shape[-1]
    y = np.empty(shape, np.result_type(w, x))
    nt = launch.threads()
    if n != 1 or nt == 1 or w.dtype not in FLOATS or 2 * o * p * w.shape[1] < MIN_FLOPS:
        y3 = matmul(w, x, out=y.reshape(n, o, p))
        on_demand(n, nt if y3.size * y3.itemsize >= 1 << 20 else 1, lambda i: epilogue(y, i, i + 1, 0, o, 0, p))
        return y
    one, explore, st = POINTWISE_THREADS.choose((w.shape, x.shape, w.dtype.num), watch=True)
    t0 = time.perf_counter()
    with one_thread(), awake():
        if skinny.takes(w, x[0]):  # as blas.matmul's: the matmul node's bits
            then = lambda r0, r1, c0, c1: epilogue(y, 0, 1, r0, r1, c0, c1)  # noqa: E731
            skinny.matmul(w, x[0], y[0].reshape(o, p), 1 if one else nt, then)
        elif one:
            np.matmul(w, x[0], out=y[0].reshape(o, p))
            epilogue.whole(y)
        else:
            shared_matmul(w, x[0], nt, y[0].reshape(o, p), epilogue.on(y, 0))
    POINTWISE_THREADS.record(st, one, explore, time.perf_counter() - t0)
    return y


def pointwise_bias(w, x, bias, *, shape):
    """``reshape(w @ x, shape) + bias``: :func:`pointwise_bias_relu` without the ReLU."""
    return pointwise_bias_relu(w, x, bias, shape=shape, relu=False)


#: kernel name -> function, as ember.backends.numpy.rewrites.KERNELS names them.
KERNELS = {
    "conv2d_bias_relu": conv2d_bias_relu,
    "conv2d_bias": conv2d_bias,
    "pointwise_bias_relu": pointwise_bias_relu,
    "pointwise_bias": pointwise_bias,
    "relu_max_pool2d_backward": relu_max_pool2d_backward,
    "relu_max_pool2d_conv_grads": relu_max_pool2d_conv_grads,
    "conv2d_bias_relu_max_pool2d": conv2d_bias_relu_max_pool2d,
    "pooled_conv_grads": pooled_conv_grads,
    "relu_pool_bias_grad": numpy_rewrites.relu_pool_bias_grad,  # NumPy's passes: 0.8 MB for LeNet
    "relu_backward": relu_backward,
    "batch_norm_relu": batch_norm_relu,
}
#: kernel name -> the guard that keeps its rule's matches (ember.backends.numpy.rewrites.rewrite):
#: ReLU's gradient by :func:`relu_backward` only where that lets batch norm take its ReLU
#: (:func:`batch_norm_relu`). Elsewhere this backend's compiled groups fuse the ``where`` with
#: its neighbours, a Linear layer's bias and ReLU, the gradient's gate and the bias gradient's
#: sum, in one pass each (W1 ran 1.03x slower with the rewrite everywhere).
WHEN = {"relu_backward": numpy_rewrites.gates_batch_norm}

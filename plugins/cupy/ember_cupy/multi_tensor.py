"""Multi-tensor optimizer steps: a param group's parameters updated in one launch.

ember.fused's ``sgd_step_foreach``, ``adam_step_foreach`` and ``rmsprop_step_foreach`` take
lists (one entry per parameter) and ``Optimizer.step()`` calls them once per param group
(ember.optim), so a model with 62 parameter tensors costs one kernel launch per step, not 62.
The kernel (kernels.multi_step_kernel) gets every tensor's pointers as kernel arguments and
has their sizes compiled in (a balanced tree of comparisons finds a thread's tensor): nothing
is copied to the device, nothing waits for it, and the parameter and its state are updated
in their own buffers, which come back as the results (the optimizer copies nothing).

One launch covers up to :data:`PER_LAUNCH` tensors of one dtype; SGD's first momentum step
(no buffer yet) is a second kernel. An entry the kernel does not cover — not float32/float64,
a state buffer that is not contiguous or overlaps another, an empty tensor — takes the
per-parameter op (fused_ops.py).

>>> from ember_cupy import kernels
>>> k = kernels.multi_step_kernel("sgd_step", "float32", [3, 5], maximize=False, weight_decay=0.0,
...                               momentum=0.0, dampening=0.0, nesterov=False, first=False)
>>> k.meta["total"], k.params[:4]
(8, ('ptr', 'ptr', 'ptr', 'ptr'))
"""

from __future__ import annotations

from . import kernels
from .fused_ops import KERNEL_DTYPES, _overlap, adam_constants, rmsprop_constants, sgd_constants
from .runtime import contiguous

#: Tensors per launch: 64 x 5 pointers stays far below CUDA's 4 KiB of kernel parameters.
PER_LAUNCH = 64
_KERNELS: dict = {}


def _kernel(rule, dtype, sizes, flags):
    """multi_step_kernel, remembered: rendering 64 tensors' source costs more than a launch."""
    key = (rule, dtype, sizes, tuple(sorted(flags.items())))
    k = _KERNELS.get(key)
    if k is None:
        if len(_KERNELS) > 512:
            _KERNELS.clear()
        k = _KERNELS[key] = kernels.multi_step_kernel(rule, dtype, list(sizes), **flags)
    return k


def make_foreach(rt, single: dict) -> dict:
    """The ``_foreach`` fused ops on runtime ``rt``; ``single`` is the per-parameter table
    (fused_ops.make_fused) for the entries the kernel does not cover."""
    xp = rt.xp

    def launch(rule, flags, scalars, members):
        """``members``: one list of buffers per tensor, in the kernel's pointer order."""
        dtype = members[0][0].dtype.name
        for i in range(0, len(members), PER_LAUNCH):
            chunk = members[i : i + PER_LAUNCH]
            kernel = _kernel(rule, dtype, tuple(m[0].size for m in chunk), flags)
            rt.launch(
                kernel,
                kernel.meta["total"],
                *[b for m in chunk for b in m],
                *[scalars[s] for s in kernel.meta["scalars"]],
            )

    def split(params, grads, states):
        """(entries by dtype, the other entries): an entry goes to the kernel when its param
        and state (``states[k]``, the buffers written) are contiguous and of the param's
        float dtype and shape, and nothing written overlaps anything else written."""
        groups, rest, written = {}, [], []
        for k, (p, g) in enumerate(zip(params, grads)):
            ok = (
                p.dtype.name in KERNEL_DTYPES
                and p.size > 0
                and g.dtype == p.dtype
                and g.shape == p.shape
                and all(s.dtype == p.dtype and s.shape == p.shape and s.flags.c_contiguous for s in [p] + states[k])
            )
            if ok:
                groups.setdefault(p.dtype.name, []).append(k)
                written += [p] + states[k]
            else:
                rest.append(k)
        if len({id(b) for b in written}) != len(written) or _overlap(xp, written):
            return {}, list(range(len(params)))
        return groups, rest

    def per_parameter(rule, results, rest, args, hyper):
        for k in rest:
            for column, value in zip(results, single[rule](*(a[k] for a in args), **hyper)):
                column[k] = value

    def sgd_step_foreach(params, grads, momentum_buffers, **hyper):
        momentum = hyper.get("momentum", 0.0) != 0
        bufs = list(momentum_buffers)
        states = [[b] if momentum and b is not None else [] for b in bufs]
        groups, rest = split(params, grads, states)
        for ks in groups.values():
            for first in (False, True):
                sel = [k for k in ks if (momentum and bufs[k] is None) == first]
                if not sel:
                    continue
                for k in sel:
                    if first:
                        bufs[k] = xp.empty_like(params[k], order="C")
                flags, scalars = sgd_constants(first=first, **_defaults(SGD, hyper))
                launch(
                    "sgd_step",
                    flags,
                    scalars,
                    [[params[k], contiguous(grads[k])] + ([bufs[k]] if momentum else []) for k in sel],
                )
        results = (list(params), bufs)
        per_parameter("sgd_step", results, rest, (params, grads, momentum_buffers), hyper)
        return results

    def adam_step_foreach(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, **hyper):
        amsgrad = bool(hyper.get("amsgrad", False))
        states = [[m, v] + ([x] if amsgrad else []) for m, v, x in zip(exp_avgs, exp_avg_sqs, max_exp_avg_sqs)]
        if amsgrad and any(x is None for x in max_exp_avg_sqs):
            groups, rest = {}, list(range(len(params)))
        else:
            groups, rest = split(params, grads, states)
        flags, scalars = adam_constants(**_defaults(ADAM, hyper))
        for ks in groups.values():
            launch("adam_step", flags, scalars, [[params[k], contiguous(grads[k])] + states[k] for k in ks])
        results = (list(params), list(exp_avgs), list(exp_avg_sqs), list(max_exp_avg_sqs))
        per_parameter("adam_step", results, rest, (params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs), hyper)
        return results

    def rmsprop_step_foreach(params, grads, square_avgs, grad_avgs, momentum_buffers, **hyper):
        centered = bool(hyper.get("centered", False))
        momentum = hyper.get("momentum", 0.0) > 0
        states = [
            [s] + ([a] if centered else []) + ([b] if momentum else [])
            for s, a, b in zip(square_avgs, grad_avgs, momentum_buffers)
        ]
        if any(x is None for st in states for x in st):
            groups, rest = {}, list(range(len(params)))
        else:
            groups, rest = split(params, grads, states)
        flags, scalars = rmsprop_constants(**_defaults(RMSPROP, hyper))
        for ks in groups.values():
            launch("rmsprop_step", flags, scalars, [[params[k], contiguous(grads[k])] + states[k] for k in ks])
        results = (list(params), list(square_avgs), list(grad_avgs), list(momentum_buffers))
        per_parameter("rmsprop_step", results, rest, (params, grads, square_avgs, grad_avgs, momentum_buffers), hyper)
        return results

    return {
        "sgd_step_foreach": sgd_step_foreach,
        "adam_step_foreach": adam_step_foreach,
        "rmsprop_step_foreach": rmsprop_step_foreach,
    }


#: The rules' keyword defaults (ember.optim.functional), for the *_constants helpers.
SGD = dict(momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0, maximize=False)
ADAM = dict(
    beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, amsgrad=False, maximize=False, decoupled_weight_decay=False
)
RMSPROP = dict(alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False, maximize=False)


def _defaults(defaults, hyper):
    return {**defaults, **hyper}


def step(optimizer, closure=None):
    """``optimizer.step(closure)``. Kept for scripts written before ``Optimizer.step()`` used
    the multi-tensor ops by itself; it now does, on this backend, with nothing to ask."""
    return optimizer.step(closure)

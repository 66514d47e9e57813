"""Multi-tensor optimizer steps: every parameter of an optimizer updated in one launch.

``ember.optim`` steps one parameter at a time (one fused kernel each through
``fused_impls``); for a model with 62 parameter tensors that is 62 launches. :func:`step`
does what ``optimizer.step()`` does for SGD, Adam, AdamW and RMSprop, but groups the
parameters by dtype and hyperparameters and updates each group — up to :data:`PER_LAUNCH`
tensors — with one kernel (kernels.multi_step_kernel): the tensors' pointers are kernel
arguments and their sizes are compiled in, so nothing is copied to the device and nothing
waits for it. A parameter whose buffers are not contiguous float32/float64 takes the
optimizer's own path.

    loss.backward()
    ember_cupy.multi_tensor_step(opt)        # instead of opt.step()

It runs eagerly (not inside ``ember.jit``), on tensors of a CupyBackend.
"""
from __future__ import annotations

from . import kernels
from .runtime import contiguous
from .fused_ops import adam_constants, rmsprop_constants, sgd_constants

#: Tensors per launch: 64 x 5 pointers stays far below CUDA's 4 KiB of kernel parameters.
PER_LAUNCH = 64


def _freeze(d: dict) -> tuple:
    return tuple(sorted(d.items()))


def _prepare_adam(opt, p, grad, state, group):
    from ember.tensor import zeros_like
    if not state:
        state["step"] = 0
        state["exp_avg"] = zeros_like(p)
        state["exp_avg_sq"] = zeros_like(p)
    amsgrad = group["amsgrad"]
    if amsgrad and state.get("max_exp_avg_sq") is None:
        state["max_exp_avg_sq"] = zeros_like(p)
    state["step"] += 1
    beta1, beta2 = group["betas"]
    flags, scalars = adam_constants(step=state["step"], lr=group["lr"], beta1=beta1, beta2=beta2,
                                    eps=group["eps"], weight_decay=group["weight_decay"], amsgrad=amsgrad,
                                    maximize=group["maximize"],
                                    decoupled_weight_decay=group["decoupled_weight_decay"])
    tensors = [p, grad, state["exp_avg"], state["exp_avg_sq"]] + ([state["max_exp_avg_sq"]] if amsgrad else [])
    return "adam_step", flags, scalars, tensors


def _prepare_sgd(opt, p, grad, state, group):
    from ember.tensor import zeros_like
    momentum = group["momentum"]
    first = momentum != 0 and state.get("momentum_buffer") is None
    if first:
        state["momentum_buffer"] = zeros_like(p)
    flags, scalars = sgd_constants(lr=group["lr"], momentum=momentum, dampening=group["dampening"],
                                   nesterov=group["nesterov"], weight_decay=group["weight_decay"],
                                   maximize=group["maximize"], first=first)
    tensors = [p, grad] + ([state["momentum_buffer"]] if momentum != 0 else [])
    return "sgd_step", flags, scalars, tensors


def _prepare_rmsprop(opt, p, grad, state, group):
    from ember.tensor import zeros_like
    if not state:
        state["step"] = 0
        state["square_avg"] = zeros_like(p)
    if group["momentum"] > 0 and state.get("momentum_buffer") is None:
        state["momentum_buffer"] = zeros_like(p)
    if group["centered"] and state.get("grad_avg") is None:
        state["grad_avg"] = zeros_like(p)
    state["step"] += 1
    flags, scalars = rmsprop_constants(lr=group["lr"], alpha=group["alpha"], eps=group["eps"],
                                       weight_decay=group["weight_decay"], momentum=group["momentum"],
                                       centered=group["centered"], maximize=group["maximize"])
    tensors = [p, grad, state["square_avg"]] + ([state["grad_avg"]] if group["centered"] else []) + \
        ([state["momentum_buffer"]] if group["momentum"] > 0 else [])
    return "rmsprop_step", flags, scalars, tensors


def _rules():
    from ember.optim import SGD, Adam
    rules = [(Adam, _prepare_adam), (SGD, _prepare_sgd)]
    try:
        from ember.optim import RMSprop
        rules.append((RMSprop, _prepare_rmsprop))
    except ImportError:      # pragma: no cover - older ember
        pass
    return rules


def _eligible(xp, tensors) -> bool:
    first = tensors[0]._data
    if first.dtype.name not in ("float32", "float64"):
        return False
    return all(t._data.dtype == first.dtype and t._data.shape == first.shape and
               (i == 1 or t._data.flags.c_contiguous) for i, t in enumerate(tensors))


def step(optimizer, closure=None):
    """``optimizer.step(closure)`` with all parameters in as few launches as possible; returns
    the closure's loss. Falls back to ``optimizer.step`` for optimizers it does not know."""
    from ember.autodiff import enable_grad, no_grad
    prepare = next((f for cls, f in _rules() if isinstance(optimizer, cls)), None)
    params = [p for g in optimizer.param_groups for p in g["params"]]
    backend = params[0]._backend if params else None
    rt = getattr(backend, "rt", None)
    if prepare is None or rt is None:
        return optimizer.step(closure)
    loss = None
    if closure is not None:
        with enable_grad():
            loss = closure()
    buckets: dict = {}
    with no_grad():
        for group in optimizer.param_groups:
            for p in group["params"]:
                grad = p.grad
                if grad is None:
                    continue
                if grad.shape != p.shape or p._backend is not backend or grad._backend is not backend:
                    optimizer._update(p, grad, optimizer.state[p], group)   # its own checks and messages
                    continue
                state = optimizer.state[p]
                before = {k: v for k, v in state.items()}
                rule, flags, scalars, tensors = prepare(optimizer, p, grad, state, group)
                if not _eligible(rt.xp, tensors):
                    state.clear()
                    state.update(before)
                    optimizer._update(p, grad, state, group)
                    continue
                key = (rule, p._data.dtype.name, _freeze(flags), _freeze(scalars))
                buckets.setdefault(key, []).append([t._data for t in tensors])
    for (rule, dtype, flags, scalars), members in buckets.items():
        flags, scalars = dict(flags), dict(scalars)
        for i in range(0, len(members), PER_LAUNCH):
            chunk = members[i:i + PER_LAUNCH]
            chunk = [[b if j != 1 else contiguous(b) for j, b in enumerate(bufs)] for bufs in chunk]
            kernel = kernels.multi_step_kernel(rule, dtype, [bufs[0].size for bufs in chunk], **flags)
            args = [b for bufs in chunk for b in bufs] + [scalars[s] for s in kernel.meta["scalars"]]
            rt.launch(kernel, kernel.meta["total"], *args)
    return loss

"""The optimizer steps ``sgd_step``, ``adam_step``, ``rmsprop_step``: elementwise programs
(render.py) built from the same arithmetic as ember.optim.functional's references, so they
agree with them to the last bit or so. The kernels write the new parameter and state into the
buffers they were given (when those are writable and contiguous), which saves the optimizer's
copy-back; hyperparameters are kernel arguments, so a learning-rate schedule compiles nothing
new. foreach.py runs the same programs over a whole parameter group."""

from __future__ import annotations

import numpy as np

from .. import launch
from .common import FLOATS, Builder, _kernel, _reference


def _writable(*bufs):
    return all(b.flags.writeable and b.flags.c_contiguous for b in bufs)


def _run_step(key, build, arrays, scalars, outputs):
    """Run an optimizer program: arrays then scalars in, results into ``outputs`` (the state
    buffers themselves where possible) or into new arrays."""
    k = _kernel(key, build)
    args = [np.ascontiguousarray(a) for a in arrays] + [float(s) for s in scalars]
    return k(*args, out=outputs, force=True)


def _step_ok(name, *bufs):
    first = bufs[0]
    return (
        first.dtype in FLOATS
        and first.size > 0
        and all(b is None or (b.dtype == first.dtype and b.shape == first.shape) for b in bufs)
        and launch.hot((name, first.shape, first.dtype.num))
    )


# The optimizer programs, one per option set: what sgd_step / adam_step / rmsprop_step run on
# one tensor, and foreach.py on many. Inputs: the arrays (param, grad, state), then the
# scalars; outputs: the new param, then the new state, in the rule's order.
def sgd_program(dtype, *, momentum, first, dampening, nesterov, weight_decay, maximize):
    """SGD as ember.optim.functional.sgd_step; flags say which branches exist. ``first``:
    there is no momentum buffer yet (it starts as the gradient). Scalars: :func:`sgd_scalars`."""
    b = Builder(dtype)
    p, g = b.array(), b.array()
    buf = b.array() if momentum and not first else None
    s_lr, s_m, s_damp, s_wd = b.scalar(), b.scalar(), b.scalar(), b.scalar()
    d = b.op("neg", g) if maximize else g
    if weight_decay:
        d = b.op("add", d, b.op("mul", p, s_wd))
    outs = []
    if momentum:
        if first:
            buf = d
        else:
            buf = b.op("add", b.op("mul", buf, s_m), d if not dampening else b.op("mul", d, s_damp))
        d = b.op("add", d, b.op("mul", buf, s_m)) if nesterov else buf
        outs = [buf]
    return b.program([b.op("add", p, b.op("mul", d, s_lr))] + outs)


def sgd_scalars(*, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, **_):
    return [-lr, momentum, 1 - dampening, weight_decay]


def adam_program(dtype, *, weight_decay, decoupled, amsgrad, maximize, small_weight):
    """Adam/AdamW as ember.optim.functional.adam_step (``small_weight``: which of _lerp's two
    forms the reference takes). Scalars: :func:`adam_scalars`."""
    b = Builder(dtype)
    p, g, m, v = b.array(), b.array(), b.array(), b.array()
    vmax = b.array() if amsgrad else None
    s_decay, s_wd, s_w, s_1mw, s_b2, s_1mb2, s_bc2, s_eps, s_step = (b.scalar() for _ in range(9))
    if maximize:
        g = b.op("neg", g)
    if weight_decay:
        if decoupled:
            p = b.op("mul", p, s_decay)
        else:
            g = b.op("add", g, b.op("mul", p, s_wd))
    diff = b.op("sub", g, m)
    m = b.op("add", m, b.op("mul", diff, s_w)) if small_weight else b.op("sub", g, b.op("mul", diff, s_1mw))
    v = b.op("add", b.op("mul", v, s_b2), b.op("mul", b.op("mul", g, s_1mb2), g))
    outs = [m, v]
    second = v
    if amsgrad:
        vmax = second = b.op("maximum", vmax, v)
        outs.append(vmax)
    denom = b.op("add", b.op("div", b.op("sqrt", second), s_bc2), s_eps)
    new_p = b.op("add", p, b.op("div", b.op("mul", m, s_step), denom))
    return b.program([new_p] + outs)


def adam_scalars(*, step, lr, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, **_):
    bc1 = 1 - beta1**step
    return [
        1 - lr * weight_decay,
        weight_decay,
        1 - beta1,
        1 - (1 - beta1),
        beta2,
        1 - beta2,
        (1 - beta2**step) ** 0.5,
        eps,
        -(lr / bc1),
    ]


def rmsprop_program(dtype, *, weight_decay, momentum, centered, maximize, small_weight):
    """RMSprop as ember.optim.functional.rmsprop_step. Scalars: :func:`rmsprop_scalars`."""
    b = Builder(dtype)
    p, g, sq = b.array(), b.array(), b.array()
    ga = b.array() if centered else None
    mb = b.array() if momentum else None
    s_wd, s_alpha, s_1ma, s_w, s_1mw, s_eps, s_m, s_lr = (b.scalar() for _ in range(8))
    if maximize:
        g = b.op("neg", g)
    if weight_decay:
        g = b.op("add", g, b.op("mul", p, s_wd))
    sq = b.op("add", b.op("mul", sq, s_alpha), b.op("mul", b.op("mul", g, s_1ma), g))
    outs = [sq]
    if centered:
        diff = b.op("sub", g, ga)
        ga = b.op("add", ga, b.op("mul", diff, s_w)) if small_weight else b.op("sub", g, b.op("mul", diff, s_1mw))
        avg = b.op("add", b.op("sqrt", b.op("sub", sq, b.op("mul", ga, ga))), s_eps)
        outs.append(ga)
    else:
        avg = b.op("add", b.op("sqrt", sq), s_eps)
    if momentum:
        mb = b.op("add", b.op("mul", mb, s_m), b.op("div", g, avg))
        new_p = b.op("add", p, b.op("mul", mb, s_lr))
        outs.append(mb)
    else:
        new_p = b.op("add", p, b.op("div", b.op("mul", g, s_lr), avg))
    return b.program([new_p] + outs)


def rmsprop_scalars(*, lr, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, **_):
    return [weight_decay, alpha, 1 - alpha, 1 - alpha, 1 - (1 - alpha), eps, momentum, -lr]


def sgd_flags(first, *, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0, maximize=False, **_) -> dict:
    """sgd_program's flags for these hyperparameters; ``first``: no momentum buffer yet."""
    return dict(
        momentum=momentum != 0,
        first=momentum != 0 and first,
        dampening=dampening != 0,
        nesterov=bool(nesterov),
        weight_decay=weight_decay != 0,
        maximize=bool(maximize),
    )


def adam_flags(
    *, beta1=0.9, weight_decay=0.0, amsgrad=False, maximize=False, decoupled_weight_decay=False, **_
) -> dict:
    return dict(
        weight_decay=weight_decay != 0,
        decoupled=bool(decoupled_weight_decay),
        amsgrad=bool(amsgrad),
        maximize=bool(maximize),
        small_weight=abs(1 - beta1) < 0.5,
    )


def rmsprop_flags(*, alpha=0.99, weight_decay=0.0, momentum=0.0, centered=False, maximize=False, **_) -> dict:
    return dict(
        weight_decay=weight_decay != 0,
        momentum=momentum > 0,
        centered=bool(centered),
        maximize=bool(maximize),
        small_weight=abs(1 - alpha) < 0.5,
    )


def _flag_key(rule, flags, dtype):
    return (rule,) + tuple(sorted(flags.items())) + (dtype,)


def sgd_step(
    param, grad, momentum_buffer, *, lr, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0, maximize=False
):
    hyper = dict(
        lr=lr, momentum=momentum, dampening=dampening, nesterov=nesterov, weight_decay=weight_decay, maximize=maximize
    )
    if not _step_ok("sgd_step", param, grad, momentum_buffer):
        return _reference("sgd_step", param, grad, momentum_buffer, **hyper)
    flags = sgd_flags(momentum_buffer is None, **hyper)
    first = flags["first"]
    arrays = [param, grad] + ([momentum_buffer] if momentum != 0 and not first else [])
    if momentum == 0:
        outputs = [param] if _writable(param) else None
    elif first:
        outputs = [param, np.empty_like(param)] if _writable(param) else None
    else:
        outputs = [param, momentum_buffer] if _writable(param, momentum_buffer) else None
    dt = param.dtype.name
    out = _run_step(
        _flag_key("sgd", flags, dt), lambda: sgd_program(dt, **flags), arrays, sgd_scalars(**hyper), outputs
    )
    return out[0], (out[1] if momentum != 0 else None)


def adam_step(
    param,
    grad,
    exp_avg,
    exp_avg_sq,
    max_exp_avg_sq,
    *,
    step,
    lr,
    beta1=0.9,
    beta2=0.999,
    eps=1e-8,
    weight_decay=0.0,
    amsgrad=False,
    maximize=False,
    decoupled_weight_decay=False,
):
    hyper = dict(
        step=step,
        lr=lr,
        beta1=beta1,
        beta2=beta2,
        eps=eps,
        weight_decay=weight_decay,
        amsgrad=amsgrad,
        maximize=maximize,
        decoupled_weight_decay=decoupled_weight_decay,
    )
    if not _step_ok("adam_step", param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq if amsgrad else None) or (
        amsgrad and max_exp_avg_sq is None
    ):
        return _reference("adam_step", param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, **hyper)
    flags = adam_flags(**hyper)
    arrays = [param, grad, exp_avg, exp_avg_sq] + ([max_exp_avg_sq] if amsgrad else [])
    state = [param, exp_avg, exp_avg_sq] + ([max_exp_avg_sq] if amsgrad else [])
    outputs = state if _writable(*state) else None
    dt = param.dtype.name
    out = _run_step(
        _flag_key("adam", flags, dt), lambda: adam_program(dt, **flags), arrays, adam_scalars(**hyper), outputs
    )
    return out[0], out[1], out[2], (out[3] if amsgrad else max_exp_avg_sq)


def rmsprop_step(
    param,
    grad,
    square_avg,
    grad_avg,
    momentum_buffer,
    *,
    lr,
    alpha=0.99,
    eps=1e-8,
    weight_decay=0.0,
    momentum=0.0,
    centered=False,
    maximize=False,
):
    hyper = dict(
        lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum, centered=centered, maximize=maximize
    )
    needs = [param, grad, square_avg] + ([grad_avg] if centered else []) + ([momentum_buffer] if momentum > 0 else [])
    if any(x is None for x in needs) or not _step_ok("rmsprop_step", *needs):
        return _reference("rmsprop_step", param, grad, square_avg, grad_avg, momentum_buffer, **hyper)
    flags = rmsprop_flags(**hyper)
    state = [param, square_avg] + ([grad_avg] if centered else []) + ([momentum_buffer] if momentum > 0 else [])
    outputs = state if _writable(*state) else None
    dt = param.dtype.name
    out = list(
        _run_step(
            _flag_key("rmsprop", flags, dt),
            lambda: rmsprop_program(dt, **flags),
            needs,
            rmsprop_scalars(**hyper),
            outputs,
        )
    )
    new_p, new_sq = out[0], out[1]
    new_ga = out[2] if centered else grad_avg
    new_mb = out[-1] if momentum > 0 else momentum_buffer
    return new_p, new_sq, new_ga, new_mb

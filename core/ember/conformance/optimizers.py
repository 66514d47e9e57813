"""The fused optimizer ops' conformance harness: a backend's kernels against the reference rules.

:func:`fused_mismatches` runs each optimizer op a backend declares (``sgd_step``,
``adam_step``, ``rmsprop_step`` and their ``_foreach`` forms) on every option set in
:data:`CASES`, float32 and float64, and compares the results with ember.optim.functional's
rules. Tier 4 of the suite and the plugins' own tests call it.
"""

from __future__ import annotations

from .. import dispatch, dtypes as D, fused
from ..optim.functional import FOREACH, REFERENCE
from ..random import Generator, rand, randn

#: Option sets covering every branch of each rule (what the conformance suite runs).
CASES = {
    "sgd_step": [
        dict(lr=0.1),
        dict(lr=0.1, momentum=0.9),
        dict(lr=0.1, momentum=0.9, dampening=0.3),
        dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
        dict(lr=0.1, weight_decay=0.1, maximize=True),
    ],
    "adam_step": [
        dict(lr=0.01),
        dict(lr=0.01, amsgrad=True),
        dict(lr=0.01, weight_decay=0.1),
        dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True, maximize=True),
        dict(lr=0.01, beta1=0.3, beta2=0.5, eps=1e-3, amsgrad=True),
    ],
    "rmsprop_step": [
        dict(lr=0.01),
        dict(lr=0.01, centered=True),
        dict(lr=0.01, momentum=0.9),
        dict(lr=0.01, momentum=0.9, centered=True, weight_decay=0.1, maximize=True),
    ],
}


def _case_inputs(name, hyper, shape, dtype, backend, seed):
    """Random inputs for one option set: a list of ``(tensors, extra keywords)`` variants.
    State the options do not use is None; SGD with momentum is tried on its first step too
    (no buffer yet)."""
    gen = Generator(seed)

    def r():
        return randn(*shape, dtype=dtype, backend=backend, generator=gen)

    def pos():  # second-moment state must be positive, and above the squared mean
        return rand(*shape, dtype=dtype, backend=backend, generator=gen) + 1.0

    if name == "sgd_step":
        if not hyper.get("momentum", 0):
            return [((r(), r(), None), {})]
        p, g = r(), r()
        return [((p, g, r()), {}), ((p, g, None), {})]
    if name == "adam_step":
        return [((r(), r(), r(), pos(), pos() + 0.5 if hyper.get("amsgrad") else None), {"step": 3})]
    return [
        ((r(), r(), pos(), r() * 0.1 if hyper.get("centered") else None, r() if hyper.get("momentum", 0) else None), {})
    ]


def fused_mismatches(
    backend, names=None, shape=(3, 17), dtypes=("float32", "float64"), rtol=1e-5, atol=1e-6, seed=0
) -> list:
    """Run each fused optimizer kernel ``backend`` declares (per-parameter and ``_foreach``)
    against its reference rule, on every option set in :data:`CASES`; return one line per
    mismatch (empty: all agree).

    >>> import ember
    >>> fused_mismatches(ember.get_backend("numpy"))     # numpy declares none: nothing to compare
    []
    """
    problems = []
    known = set(REFERENCE) | set(FOREACH)
    names = sorted(fused.declared(backend) & known) if names is None else names
    for name in names:
        single = name[: -len("_foreach")] if name in FOREACH else name
        for hyper in CASES[single]:
            for dtype in map(D.get, dtypes):
                variants = (
                    _case_inputs(single, hyper, shape, dtype, backend, seed)
                    if name == single
                    else [_foreach_inputs(single, hyper, shape, dtype, backend, seed)]
                )
                for inputs, extra in variants:
                    problems += _mismatches(backend, name, inputs, {**hyper, **extra}, dtype, rtol, atol)
    return problems


def _foreach_inputs(name, hyper, shape, dtype, backend, seed):
    """Lists for a ``_foreach`` op: three parameters of different sizes, the second on its
    first SGD step (no momentum buffer yet) when the others have one."""
    sizes = [shape, (5,), (2, 3, 4)]
    per = [_case_inputs(name, hyper, s, dtype, backend, seed + k) for k, s in enumerate(sizes)]
    picked = [variants[-1] if k == 1 else variants[0] for k, variants in enumerate(per)]
    return tuple(list(column) for column in zip(*(inputs for inputs, _ in picked))), picked[0][1]


def _mismatches(backend, name, inputs, params, dtype, rtol, atol):
    many = name in FOREACH
    want = (FOREACH if many else REFERENCE)[name](*inputs, **params)

    def buffers(t):  # copies: a kernel may update its inputs in place
        return None if t is None else t.clone()._data

    bufs = [[buffers(t) for t in x] if many else buffers(x) for x in inputs]
    got = backend.fused_impls[name](*bufs, **params)
    nones = [i for i, t in enumerate(inputs) if (any(e is None for e in t) if many else t is None)]
    label = f"{name}({', '.join(f'{k}={v}' for k, v in params.items())}) {dtype}" + (
        f" with inputs {nones} None" if nones else ""
    )
    if not isinstance(got, tuple) or len(got) != len(want):
        return [f"{label}: expected a tuple of {len(want)} {'lists' if many else 'buffers'}, got {type(got).__name__}"]
    problems = []
    for i, (w, b) in enumerate(zip(want, got)):
        if not many:
            w, b = [w], [b]
        elif not isinstance(b, (list, tuple)) or len(b) != len(w):
            problems.append(f"{label} output {i}: expected a list of {len(w)} buffers")
            continue
        for k, (wk, bk) in enumerate(zip(w, b)):
            where = f"{label} output {i}" + (f" entry {k}" if many else "")
            problems += _compare(where, wk, None if bk is None else dispatch.wrap(bk, backend), rtol, atol)
    return problems


def _compare(label, want, got, rtol, atol):
    if want is None or got is None:
        if want is None and got is None:
            return []
        return [
            f"{label}: expected {'None' if want is None else 'a buffer'}, got {'None' if got is None else 'a buffer'}"
        ]
    if got.shape != want.shape or got.dtype is not want.dtype:
        return [f"{label}: expected shape {want.shape} {want.dtype}, got {got.shape} {got.dtype}"]
    excess = ((got - want).abs() - (want.abs() * rtol + atol)).amax().item() if want.numel() else 0.0
    if excess > 0 or excess != excess:  # the second catches NaN
        return [f"{label}: differs from the reference by {excess:.3g} beyond rtol={rtol}, atol={atol}"]
    return []

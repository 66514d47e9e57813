"""Tier 3 — gradients. For each differentiable primitive, ``ember.grad`` of
``sum(op(inputs) * w)`` on the backend must match the same on the NumPy reference and central
finite differences of the backend's own forward pass (along random directions, so each check
is two evaluations, not one per element). Representative primitives are checked to second
order: the gradient of ``<grad f, u>``, which runs the VJP rules' own VJPs.

Gradients run in float64 where the backend declares it, else float32 with looser tolerances
(tolerances.GRAD_TOLERANCES). Backends write no backward code: a failure here means a primitive
the VJP rules use computes something else than the reference, or the forward pass disagrees
with its own derivative.
"""

import numpy as np
import pytest

import ember
from ember import dispatch
from ember.conformance.gradcases import grad_cases
from ember.conformance.tolerances import GRAD_TOLERANCES, mismatch
from ember.primitives import PRIMITIVES

EMBER_TIER = 3
DIFFERENTIABLE = [op for op, p in PRIMITIVES.items() if p.differentiable]
CASES = [(op, 1) for op in DIFFERENTIABLE] + [(op, 2) for op, p in PRIMITIVES.items() if p.second_order]


class Problem:
    """One primitive's gradient, set up identically on any backend."""

    def __init__(self, op, case, dtype, seed):
        self.op, self.case, self.dtype = op, case, dtype
        rng = np.random.default_rng(seed)
        with np.errstate(all="ignore"):
            out = np.asarray(ember.get_backend("numpy").impls[op](*case.args, **case.params))
        self.w = rng.standard_normal(out.shape).astype(out.dtype)  # the output cotangent
        # finite differences are only as good as the coarser of the input and output dtypes
        self.fd_dtype = "float32" if "float32" in (dtype, out.dtype.name) else dtype
        self.x = [np.asarray(case.args[i]) for i in case.diff]
        self.u = [rng.standard_normal(x.shape).astype(dtype) for x in self.x]  # for second order
        self.v = [rng.standard_normal(x.shape) for x in self.x]  # directions

    def functions(self, backend):
        """(f, s): the loss and, for second order, ``<grad f, u>``; both take the diff inputs."""
        case = self.case
        fixed = [ember.tensor(a, backend=backend) if isinstance(a, np.ndarray) else a for a in case.args]
        w = ember.tensor(self.w, backend=backend)
        u = [ember.tensor(a, backend=backend) for a in self.u]
        argnums = tuple(range(len(case.diff)))

        def f(*xs):
            args = list(fixed)
            for i, x in zip(case.diff, xs):
                args[i] = x
            return (dispatch.apply(self.op, *args, **case.params) * w).sum()

        def s(*xs):
            gs = ember.grad(f, argnums=argnums)(*xs)
            return sum(((g * ui).sum() for g, ui in zip(gs, u)), start=w.sum() * 0)

        return f, s, argnums

    def tensors(self, backend, xs=None):
        return [ember.tensor(np.asarray(x, dtype=self.dtype), backend=backend) for x in (xs or self.x)]


def _run(problem, backend, order):
    f, s, argnums = problem.functions(backend)
    target = f if order == 1 else s
    grads = ember.grad(target, argnums=argnums)(*problem.tensors(backend))
    return target, [np.asarray(g.numpy(), dtype=np.float64) for g in grads]


def _check(problem, ctx, order, label):
    rtol_ref = GRAD_TOLERANCES[problem.dtype][0]
    _, rtol_fd, h = GRAD_TOLERANCES[problem.fd_dtype]
    where = f"{problem.op} ({label}, order {order}, {problem.dtype})"
    try:
        target, got = _run(problem, ctx.name, order)
    except Exception as exc:  # noqa: BLE001 - a backend failure is the finding
        raise AssertionError(f"{where}: computing the gradient raised {type(exc).__name__}: {exc}") from exc
    _, want = _run(problem, "numpy", order)
    for i, (g, r) in enumerate(zip(got, want)):
        atol = rtol_ref * (float(np.abs(r).max()) if r.size else 0.0) + 1e-30
        text = mismatch(g, r, rtol_ref, atol)
        assert text is None, f"{where}: gradient of input {problem.case.diff[i]} differs from the reference: {text}"
    # central differences of the backend's own function, along the directions v
    plus = [(x + h * v).astype(problem.dtype) for x, v in zip(problem.x, problem.v)]
    minus = [(x - h * v).astype(problem.dtype) for x, v in zip(problem.x, problem.v)]
    with ember.no_grad() if order == 1 else ember.enable_grad():
        fd = target(*problem.tensors(ctx.name, plus)).item() - target(*problem.tensors(ctx.name, minus)).item()
    step = [p.astype(np.float64) - m.astype(np.float64) for p, m in zip(plus, minus)]
    directional = sum(float((g * d).sum()) for g, d in zip(got, step))
    scale = sum(float(np.abs(g * d).sum()) for g, d in zip(got, step)) + abs(fd)
    assert abs(fd - directional) <= rtol_fd * scale + 1e-300, (
        f"{where}: gradient disagrees with finite differences of the backend's forward pass: "
        f"<grad, dx> = {directional:.6g} but f(x+dx/2) - f(x-dx/2) = {fd:.6g} (step {h}, rtol {rtol_fd})"
    )


@pytest.mark.parametrize("op,order", CASES, ids=[f"{op}-order{o}" for op, o in CASES])
def test_gradient(op, order, conformance):
    conformance.require_op(op)
    dtype = conformance.grad_dtype
    conformance.require_dtype(dtype)
    checked = 0
    seed = sum(map(ord, op)) + conformance.seed  # fixed per primitive, independent of the run order
    for k, case in enumerate(grad_cases(op, seed, dtype)):
        if op == "cast" and case.params["dtype"].name not in conformance.dtype_names:
            continue
        _check(Problem(op, case, dtype, seed=seed + k), conformance, order, case.label or f"case {k}")
        checked += 1
    assert checked, f"no gradient case of {op} fits the declared dtypes"

"""Tier 2 — every primitive against the NumPy reference, one test per (primitive, dtype).

Each test runs the primitive's structural cases first (structure.py: every broadcasting
pattern, empty and size-1 dims, 0-d, axes of every spelling, keepdims both ways, Python scalars
of each kind on each side, each in every buffer layout in turn), then hypothesis's examples
(derandomized, ``--ember-max-examples``; cases.py). The record's ``cases`` generator makes both.
Each primitive runs directly on buffers, through ``backend.impls``: what is checked is the
contract in ember.primitives, not the front end. Every case is run twice and its inputs read
back: a second result that differs is *nondeterminism*, a changed input a *write into an input*
(the contract allows an output to alias an input, never a write into one).
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import ember
from ember.conformance.cases import LAYOUTS, Draw, describe, upload
from ember.conformance.structure import structural_cases
from ember.conformance.tolerances import mismatch, tolerance
from ember.primitives import PRIMITIVES

EMBER_TIER = 2
CASES = [(op, dt) for op, p in PRIMITIVES.items() for dt in p.dtypes]


def _call(backend, op, bufs, params):
    """Run ``op`` once; (shape, dtype, a private copy of the values)."""
    out = backend.impls[op](*bufs, **params)
    return tuple(backend.shape(out)), backend.dtype(out), np.array(backend.to_numpy(out), copy=True)


def _same_bits(x, y) -> bool:
    return x.shape == y.shape and x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f")


def _uploads(backend, op, case, layouts):
    """The inputs as backend buffers in their layouts. A view the backend's own permute or
    slice got wrong is that primitive's failure, not the one under test: other primitives get
    a fresh buffer instead (and permute's and slice's own tests fail)."""
    bufs = []
    for i, (a, lay) in enumerate(zip(case.args, layouts)):
        if not isinstance(a, np.ndarray):
            bufs.append(a)
            continue
        buf = upload(backend, a, lay)
        if lay != "contiguous" and not _same_bits(np.asarray(backend.to_numpy(buf)), a):
            maker = "permute" if lay == "permuted" else "slice"
            if op == maker:
                raise AssertionError(
                    f"{op}{describe(case, layouts)}: the {lay} view of input {i} that the "
                    f"backend's own {maker} made reads back wrong"
                )
            layouts[i], buf = "contiguous", upload(backend, a, "contiguous")
        bufs.append(buf)
    return bufs


def run_case(ctx, op, case, layouts):
    """Run one case on the backend (twice) and the reference; raise AssertionError on a
    difference, a write into an input, or a second run that differs from the first."""
    backend = ctx.backend
    with np.errstate(all="ignore"):
        try:
            want = np.asarray(ember.get_backend("numpy").impls[op](*case.args, **case.params))
        except Exception as exc:  # noqa: BLE001
            raise RuntimeError(
                f"the reference itself failed on {op}{describe(case, ['contiguous'] * len(layouts))}: "
                f"{type(exc).__name__}: {exc} (a case the suite should not generate)"
            ) from exc
        try:
            bufs = _uploads(backend, op, case, layouts)
        except AssertionError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise AssertionError(
                f"{op}{describe(case, layouts)}: making the input views raised {type(exc).__name__}: {exc}"
            ) from exc
        where = f"{op}{describe(case, layouts)}"
        try:
            shape, dtype, got = _call(backend, op, bufs, case.params)
        except Exception as exc:  # noqa: BLE001 - any failure of the backend is the finding
            raise AssertionError(f"{where} raised {type(exc).__name__}: {exc}") from exc
        for i, (a, b) in enumerate(zip(case.args, bufs)):
            if isinstance(a, np.ndarray) and not _same_bits(np.asarray(backend.to_numpy(b)), a):
                raise AssertionError(
                    f"{where}: wrote into its input {i} (inputs are read-only; an output may "
                    f"alias an input, but a primitive never writes into one)"
                )
        try:
            again = _call(backend, op, bufs, case.params)
        except Exception as exc:  # noqa: BLE001
            raise AssertionError(
                f"nondeterministic: {where} raised {type(exc).__name__} when run a second time: {exc}"
            ) from exc
    if (again[0], again[1]) != (shape, dtype) or not _same_bits(again[2], got):
        problem = (
            mismatch(again[2], got, 0.0, 0.0)
            if again[0] == shape and again[1] == dtype
            else f"{again[1]}{list(again[0])} after {dtype}{list(shape)}"
        )
        raise AssertionError(
            f"nondeterministic: {where}: a second call with the same inputs gave a different "
            f"result (got: the second call, expected: the first): {problem}"
        )
    assert shape == want.shape, f"{where}: backend.shape() says {shape}, expected {want.shape}"
    assert dtype.name == want.dtype.name, f"{where}: backend.dtype() says {dtype}, expected {want.dtype}"
    problem = mismatch(got, want, *tolerance(want.dtype.name, case.terms, case.scale))
    assert problem is None, f"{where}: {problem}"


def layouts_of(case, turn):
    """Array inputs take the layouts in turn (argument i of case k gets LAYOUTS[k + i])."""
    return [
        LAYOUTS[(turn + i) % len(LAYOUTS)] if isinstance(a, np.ndarray) else "scalar" for i, a in enumerate(case.args)
    ]


@pytest.mark.parametrize("op,dtype", CASES, ids=[f"{op}-{dt}" for op, dt in CASES])
def test_primitive(op, dtype, conformance):
    conformance.require_op(op)
    conformance.require_dtype(dtype)
    generate = PRIMITIVES[op].cases

    # the structure, deterministic: few cases each meet every layout, many take them in turn
    structural = structural_cases(generate, dtype, conformance)
    rounds = max(1, min(len(LAYOUTS), 64 // max(len(structural), 1)))
    for turn in range(rounds):
        for k, case in enumerate(structural):
            run_case(conformance, op, case, layouts_of(case, turn + k))

    @settings(
        max_examples=conformance.max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=False,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def check(data):
        case = generate(Draw(data.draw, conformance), dtype)
        layouts = [data.draw(st.sampled_from(LAYOUTS)) if isinstance(a, np.ndarray) else "scalar" for a in case.args]
        run_case(conformance, op, case, layouts)

    check()  # a failure that passes when hypothesis replays it the plugin reports as flaky

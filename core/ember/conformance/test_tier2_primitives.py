"""Tier 2 — every primitive against the NumPy reference, one test per (primitive, dtype).

Inputs come from hypothesis under a fixed seed (derandomized; ``--ember-max-examples`` per test)
and cover shapes with empty and size-1 dims, broadcasting, scalar operands, NaN/inf, and
non-contiguous buffers (each primitive's record draws its cases with cases.Draw). Each primitive runs directly on buffers, through
``backend.impls``: what is checked is the contract in ember.primitives, not the front end.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ember
from ember.conformance.cases import LAYOUTS, Draw, describe, upload
from ember.conformance.tolerances import mismatch, tolerance
from ember.primitives import PRIMITIVES

EMBER_TIER = 2
CASES = [(op, dt) for op, p in PRIMITIVES.items() for dt in p.dtypes]


def run_case(ctx, op, case, layouts):
    """Run one case on the backend and the reference; raise AssertionError on a difference."""
    backend = ctx.backend
    with np.errstate(all="ignore"):
        try:
            want = np.asarray(ember.get_backend("numpy").impls[op](*case.args, **case.params))
        except Exception as exc:  # noqa: BLE001
            raise RuntimeError(f"the reference itself failed on {op}{describe(case, ['contiguous'] * len(layouts))}: "
                               f"{type(exc).__name__}: {exc} (a case the suite should not generate)") from exc
        try:
            bufs = [upload(backend, a, lay) if isinstance(a, np.ndarray) else a for a, lay in zip(case.args, layouts)]
            out = backend.impls[op](*bufs, **case.params)
            shape, dtype = tuple(backend.shape(out)), backend.dtype(out)
            got = np.asarray(backend.to_numpy(out))
        except Exception as exc:  # noqa: BLE001 - any failure of the backend is the finding
            raise AssertionError(f"{op}{describe(case, layouts)} raised {type(exc).__name__}: {exc}") from exc
    where = f"{op}{describe(case, layouts)}"
    assert shape == want.shape, f"{where}: backend.shape() says {shape}, expected {want.shape}"
    assert dtype.name == want.dtype.name, f"{where}: backend.dtype() says {dtype}, expected {want.dtype}"
    problem = mismatch(got, want, *tolerance(want.dtype.name, case.terms, case.scale))
    assert problem is None, f"{where}: {problem}"


@pytest.mark.parametrize("op,dtype", CASES, ids=[f"{op}-{dt}" for op, dt in CASES])
def test_primitive(op, dtype, conformance):
    conformance.require_op(op)
    conformance.require_dtype(dtype)
    generate = PRIMITIVES[op].cases

    @settings(max_examples=conformance.max_examples, derandomize=True, database=None, deadline=None,
              print_blob=False, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def check(data):
        case = generate(Draw(data.draw, conformance), dtype)
        layouts = [data.draw(st.sampled_from(LAYOUTS)) if isinstance(a, np.ndarray) else "scalar"
                   for a in case.args]
        run_case(conformance, op, case, layouts)

    check()

"""Tier 0 — the API is present: the backend loads, says who it is, declares what it does in
a Capabilities record that matches its tables, and moves data to and from the host."""

import pytest

import ember
from ember import dtypes as D
from ember.backend import Capabilities

EMBER_TIER = 0
HOST_METHODS = (
    "shape",
    "dtype",
    "from_list",
    "to_list",
    "from_bytes",
    "to_bytes",
    "from_numpy",
    "to_numpy",
    "assign",
    "synchronize",
    "available",
    "capabilities",
)


def test_loads(ember_loaded):
    if ember_loaded.load_error:
        pytest.fail(ember_loaded.load_error, pytrace=False)
    b = ember_loaded.backend
    missing = [m for m in HOST_METHODS if not callable(getattr(b, m, None))]
    assert not missing, f"backend {ember_loaded.name!r} lacks methods {missing}"
    assert isinstance(getattr(b, "impls", None), dict), "backend.impls must be a dict {primitive: function}"


def test_available(ember_loaded):
    if ember_loaded.load_error:
        pytest.fail(ember_loaded.load_error, pytrace=False)
    ok, reason = ember_loaded.backend.available()
    assert isinstance(ok, bool) and isinstance(reason, str), (
        f"available() must return (bool, str), got {(ok, reason)!r}"
    )
    assert ok or reason, "available() returned False without a reason (say why and how to fix it)"
    ember_loaded.require_usable()


def test_identity(conformance):
    b = conformance.backend
    assert b.name == conformance.name, f"backend.name is {b.name!r} but it is registered as {conformance.name!r}"
    assert isinstance(b.version, str) and b.version, f"backend.version must be a non-empty str, got {b.version!r}"
    major = str(b.api_version).split(".")[0]
    assert major == ember.API_VERSION.split(".")[0], (
        f"backend.api_version {b.api_version!r} does not match ember's backend API {ember.API_VERSION}"
    )


def test_capabilities_record(conformance):
    from ember.conformance import fused_ops
    from ember.primitives import PRIMITIVES

    FUSED = fused_ops()
    caps = conformance.caps
    assert isinstance(caps, Capabilities), f"capabilities() must return ember.Capabilities, got {type(caps)}"
    unknown = sorted(set(caps.ops) - set(PRIMITIVES))
    assert not unknown, f"declares ops that are not primitives: {unknown} (fused ops go in Capabilities.fused)"
    bad_dtypes = [d for d in caps.dtypes if d not in D.KNOWN]
    assert not bad_dtypes, f"declares dtypes that are not ember dtypes: {bad_dtypes}"
    assert caps.devices and all(isinstance(d, str) for d in caps.devices), (
        f"devices must be a non-empty tuple of str, got {caps.devices!r}"
    )
    unknown_fused = sorted(set(caps.fused) - set(FUSED))
    assert not unknown_fused, f"declares fused ops ember does not know: {unknown_fused}; known: {sorted(FUSED)}"


def test_required_primitives_declared(conformance):
    from ember.primitives import PRIMITIVES  # records a --backend-module defined included

    missing = [name for name, p in PRIMITIVES.items() if p.required and name not in conformance.ops]
    assert not missing, f"does not declare required primitives {missing}"


def test_declared_ops_implemented(conformance):
    impls = conformance.backend.impls
    missing = sorted(op for op in conformance.ops if not callable(impls.get(op)))
    assert not missing, f"declares ops with no callable in backend.impls: {missing}"


def test_declared_fused_implemented(conformance):
    fused_impls = getattr(conformance.backend, "fused_impls", {}) or {}
    missing = sorted(n for n in conformance.fused if not callable(fused_impls.get(n)))
    assert not missing, f"declares fused ops with no callable in backend.fused_impls: {missing}"


SAMPLES = {
    "bool": [True, False, True, True, False, False],
    "uint8": [0, 1, 2, 127, 200, 255],
    "int8": [0, -1, 5, -128, 127, 42],
    "int16": [0, -1, 5, -(2**15), 2**15 - 1, 42],
    "uint16": [0, 1, 7, 256, 2**15, 2**16 - 1],
    "uint64": [0, 1, 7, 2**32, 2**63, 2**64 - 1],
    "uint32": [0, 1, 7, 65536, 2**31, 2**32 - 1],
    "int32": [0, -1, 5, -(2**31), 2**31 - 1, 42],
    "int64": [0, -1, 5, -(2**63), 2**63 - 1, 42],
    "float16": [0.0, -1.5, 0.25, 65504.0, -0.0, 3.0],
    "float32": [0.0, -1.5, 0.1, 3.4e38, float("inf"), float("nan")],
    "float64": [0.0, -1.5, 0.1, 1e308, float("-inf"), float("nan")],
}


def _same(a, b):
    return all((x == y) or (x != x and y != y) for x, y in zip(a, b)) and len(a) == len(b)


@pytest.mark.parametrize("dtype", list(D.ALL + D.OPTIONAL), ids=str)
def test_host_transfer(dtype, conformance):
    import numpy as np

    conformance.require_dtype(dtype.name)
    b = conformance.backend
    values, shape = SAMPLES[dtype.name], (2, 3)
    buf = b.from_list(values, shape, dtype)
    assert tuple(b.shape(buf)) == shape, f"shape() of a buffer made from_list(..., {shape}) is {b.shape(buf)}"
    assert b.dtype(buf) is dtype, f"dtype() of a {dtype} buffer is {b.dtype(buf)!r}"
    expect = np.array(values, dtype=dtype.name).tolist()  # what the dtype can hold
    assert _same(b.to_list(buf), expect), f"to_list(from_list(x)) changed {expect} into {b.to_list(buf)}"
    raw = np.array(values, dtype=np.dtype(dtype.name).newbyteorder("<")).tobytes()
    assert b.to_bytes(buf) == raw, "to_bytes() is not the little-endian row-major bytes of the elements"
    assert _same(b.to_list(b.from_bytes(raw, shape, dtype)), expect), "from_bytes() does not read back"
    arr = np.array(values, dtype=dtype.name).reshape(shape)
    back = np.asarray(b.to_numpy(b.from_numpy(arr)))
    assert back.dtype == arr.dtype and back.shape == shape and _same(back.reshape(-1).tolist(), expect), (
        "to_numpy(from_numpy(a)) differs from a"
    )
    dst = b.from_list([values[0]] * 6, shape, dtype)
    b.assign(dst, buf)
    b.synchronize()
    assert _same(b.to_list(dst), expect), "assign(dst, src) did not copy src into dst in place"


def test_text_transfer(conformance):
    """A backend that lists ``ember.string`` holds one Python str per element: lists and object
    arrays of str go in and come out unchanged, ``assign`` copies them; text has no bytes form."""
    import numpy as np

    if "string" not in conformance.declared_dtype_names:  # (dtype_names leaves text out: no case draws it)
        pytest.skip(f"[undeclared] backend {conformance.name!r} does not declare dtype string")
    b, shape = conformance.backend, (2, 3)
    values = ["", "a", "bé", "的", " x ", "\n"]
    buf = b.from_list(values, shape, D.string)
    assert tuple(b.shape(buf)) == shape and b.dtype(buf) is D.string, "from_list() of str is not a string buffer"
    assert b.to_list(buf) == values, f"to_list(from_list(x)) changed {values} into {b.to_list(buf)}"
    arr = np.array(values, dtype=object).reshape(shape)
    back = np.asarray(b.to_numpy(b.from_numpy(arr)))
    assert back.dtype == object and back.tolist() == arr.tolist(), "to_numpy(from_numpy(a)) differs from a"
    dst = b.from_list(["?"] * 6, shape, D.string)
    b.assign(dst, buf)
    assert b.to_list(dst) == values, "assign(dst, src) did not copy src into dst in place"

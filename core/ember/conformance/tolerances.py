"""How close is close enough: one table per dtype, and the comparison every tier uses.

A result passes when, elementwise, ``|got - want| <= atol + rtol * |want|``, NaN matches NaN
and infinities match exactly. Integer and bool results must be equal.

``atol`` grows with the work an op does: an op that adds up ``terms`` products of size
``scale`` (a sum, a matrix product, a convolution) may differ from the reference by rounding
in each addition, in whatever order the backend adds, so it gets ``ACCUM * eps * terms * scale``
more. The certificate prints this table.
"""

from __future__ import annotations

#: dtype name -> (rtol, atol, eps). Elementwise functions may differ by a few ulp between libms
#: (float16 by a rounding of float32), accumulations by their order of addition.
TOLERANCES = {
    "float16": (5e-3, 1e-3, 2.0**-10),
    "float32": (1e-5, 1e-6, 2.0**-23),
    "float64": (1e-10, 1e-12, 2.0**-52),
}
ACCUM = 4.0  # safety factor on the per-term rounding allowance

#: Tier 3 compares gradients (float64 where declared, else float32) with the reference and
#: with central finite differences, whose truncation and cancellation error is much larger.
GRAD_TOLERANCES = {
    # dtype: (rtol vs reference, rtol vs finite differences, finite-difference step)
    "float64": (1e-8, 1e-6, 1e-6),
    "float32": (1e-4, 3e-2, 1e-2),
}


def tolerance(dtype: str, terms: int = 1, scale: float = 1.0) -> tuple[float, float]:
    """(rtol, atol) for a result of ``dtype`` that accumulated ``terms`` values of size ``scale``.

    >>> tolerance("float32")
    (1e-05, 1e-06)
    >>> tolerance("int64")
    (0.0, 0.0)
    """
    if dtype not in TOLERANCES:
        return 0.0, 0.0
    rtol, atol, eps = TOLERANCES[dtype]
    if terms > 1:
        atol += ACCUM * eps * terms * scale
    return rtol, atol


def mismatch(got, want, rtol: float, atol: float) -> str | None:
    """None if numpy arrays ``got`` and ``want`` agree, else a short description of how not.

    >>> import numpy as np
    >>> mismatch(np.array([1.0, np.nan]), np.array([1.0, np.nan]), 0, 0) is None
    True
    >>> mismatch(np.array([1, 2]), np.array([1, 3]), 0, 0)
    '1 of 2 elements differ; worst at index (1,): got 2, expected 3'
    """
    import numpy as np

    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    if got.size == 0:
        return None
    if want.dtype.kind not in "fc":
        bad = got != want
    else:
        g, w = got.astype(np.float64), want.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            both_nan = np.isnan(g) & np.isnan(w)
            exact = (g == w) | both_nan
            close = np.abs(g - w) <= atol + rtol * np.abs(w)
        bad = ~(exact | (close & np.isfinite(g) & np.isfinite(w)))
    if not bad.any():
        return None
    if want.dtype.kind in "fc":
        with np.errstate(invalid="ignore", over="ignore"):
            err = np.where(bad, np.nan_to_num(np.abs(g - w), nan=np.inf, posinf=np.inf), -1.0)
        worst = np.unravel_index(int(np.argmax(err)), got.shape)
    else:
        worst = np.unravel_index(int(np.argmax(bad)), got.shape)
    return (
        f"{int(bad.sum())} of {got.size} elements differ; worst at index {tuple(int(i) for i in worst)}: "
        f"got {got[worst].item()!r}, expected {want[worst].item()!r}"
        + (f" (rtol={rtol:.3g}, atol={atol:.3g})" if want.dtype.kind == "f" else "")
    )


def table() -> dict:
    """The tolerances as plain data, for the certificate."""
    return {
        "elementwise": {d: {"rtol": r, "atol": a, "eps": e} for d, (r, a, e) in TOLERANCES.items()},
        "accumulation": f"atol += {ACCUM:g} * eps * terms * scale (sum, matmul, conv: terms added, "
        f"scale = largest |term|)",
        "integers_and_bool": "exact",
        "gradients": {
            d: {"rtol_vs_reference": r, "rtol_vs_finite_differences": f, "fd_step": h}
            for d, (r, f, h) in GRAD_TOLERANCES.items()
        },
    }

"""Root cause first: which failures of a certification run explain the others.

A broken primitive fails its own tier-2 cells and, through every model that uses it, tests of
tiers 3, 5 and 6 far from it. The certificate leads with the primitives and lists what failed
because of them as their consequences. What a test depends on is measured, not guessed: while
a test of tiers 1 and 3-6 runs, ember.conformance.watch records every primitive it applied on
the backend (forward, backward, optimizer update), and names a primitive itself when one
broke its shape or dtype rule or computed differently in two runs (the record's ``culprit``).

The rules, as a table of what makes a failure a root cause and what ties a consequence to one:

| a failure ... | is |
|---|---|
| of tier 2 (one primitive, one dtype) | a root cause: that primitive |
| whose watch named a culprit primitive not yet a root cause | a root cause: the culprit, found at that tier |
| whose watch named a culprit that is a root cause | a consequence of it |
| of a test that is about a root-cause primitive (tier 3's ``op``), or that applied one | a consequence of the first such root cause |
| anything else | an independent failure, listed after the root causes |

>>> fails = [dict(tier=2, op="sum", dtype="float32", test="test_primitive", message="sum: wrong"),
...          dict(tier=5, op="Linear", dtype=None, test="test_layer", message="differs", primitives=["add", "sum"]),
...          dict(tier=0, op=None, dtype=None, test="test_identity", message="no version")]
>>> t = triage(fails)
>>> [(r["primitive"], r["cells"], [c["label"] for c in r["consequences"]]) for r in t["root_causes"]]
[('sum', ['sum[float32]'], ['tier 5 Linear (test_layer)'])]
>>> [f["label"] for f in t["independent"]]
['tier 0 test_identity']
"""

from __future__ import annotations


def label(f: dict) -> str:
    """``tier 5 Linear (test_layer)``: how the report names one failing test."""
    what = f"{f['op']}[{f['dtype']}]" if f.get("op") and f.get("dtype") else f.get("op")
    order = f" order {f['order']}" if f.get("order") else ""
    return f"tier {f['tier']} {what}{order} ({f['test']})" if what else f"tier {f['tier']} {f['test']}"


def cell(f: dict) -> str:
    """``sum[float32]``, or the primitive alone when the failure has no dtype."""
    return f"{f['op']}[{f['dtype']}]" if f.get("dtype") else str(f["op"])


def triage(failures: list) -> dict:
    """``{"root_causes": [...], "independent": [...]}``: root causes in the order found (lowest
    tier first), each ``{"primitive", "tier", "cells" (its failing tier-2 cells), "found_in" (the
    test that named it, when not tier 2), "message", "consequences"}``; the
    failures no root cause explains, each with its ``label``."""
    roots: dict = {}
    found = set()  # the failures that revealed a root cause
    order = sorted(failures, key=lambda f: f["tier"])
    for i, f in enumerate(order):  # roots: tier 2's primitives, then culprits by tier
        name = f["op"] if f["tier"] == 2 and f.get("op") else f.get("culprit")
        if not name or (f["tier"] != 2 and name in roots):
            continue
        root = roots.setdefault(
            name,
            {
                "primitive": name,
                "tier": f["tier"],
                "cells": [],
                "found_in": [],
                "message": f["message"],
                "consequences": [],
            },
        )
        root["cells" if f["tier"] == 2 else "found_in"].append(cell(f) if f["tier"] == 2 else label(f))
        found.add(i)
    independent = []
    for i, f in enumerate(order):
        if i in found:
            continue
        entry = {"tier": f["tier"], "label": label(f), "nodeid": f.get("nodeid"), "message": f["message"]}
        cause = _cause(f, roots)
        if cause is None:
            independent.append(entry)
        else:
            roots[cause]["consequences"].append(entry)
    return {"root_causes": list(roots.values()), "independent": independent}


def _cause(f: dict, roots: dict) -> str | None:
    """The root cause a failure is a consequence of: the primitive its watch named, the one the
    test is about, or the first root cause among the primitives it applied."""
    for name in (f.get("culprit"), f.get("op")):
        if name in roots:
            return name
    used = set(f.get("primitives") or ())
    return next((name for name in roots if name in used), None)

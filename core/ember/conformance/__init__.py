"""The conformance suite: one set of tests that certifies any backend, ours or a stranger's.

    ember certify NAME                                   # certificate.json + certificate.md
    pytest --pyargs ember.conformance --ember-backend=NAME

The modules, in the order a run uses them: plugin.py (the pytest plugin: options, the
per-session context, skips, the JSON report) → tolerances.py (how close is close enough) →
cases.py and gradcases.py (the toolkits with which each primitive's record draws its tier-2
and tier-3 inputs, see ember.primitives) → the tiers,
test_tier0_api.py ... test_tier6_training.py → certify.py (runs pytest in a child process and
writes the certificate). docs/conformance.md describes the tiers and the certificate.
"""

TIERS = {0: "API present", 1: "smoke", 2: "primitives vs reference", 3: "gradients", 4: "fused ops",
         5: "layers", 6: "training"}

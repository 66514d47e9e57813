"""The conformance suite: one set of tests that certifies any backend, ours or a stranger's.

    ember certify NAME                                   # certificate.json + certificate.md
    pytest --pyargs ember.conformance --ember-backend=NAME

The modules, in the order a run uses them: plugin.py (the pytest plugin: options, the
per-session context, skips, the JSON report) → tolerances.py (how close is close enough) →
cases.py and gradcases.py (the toolkits with which each primitive's record draws its tier-2
and tier-3 inputs, see ember.primitives), structure.py (the same tier-2 generator with its
structural choices enumerated instead of drawn), optimizers.py (the fused optimizer steps' option sets
and their harness, ``fused_mismatches``) → watch.py (the interpreter tiers 1 and 3-6 run
under: the primitives a case applies, their shapes and dtypes against the rules, their values
for the determinism checks) → the tiers, test_tier0_api.py ... test_tier6_training.py →
triage.py (root causes first: which failures explain the others) → certify.py (runs pytest in
a child process and writes the certificate). docs/conformance.md describes the tiers and the
certificate.
"""

TIERS = {
    0: "API present",
    1: "smoke",
    2: "primitives vs reference",
    3: "gradients",
    4: "fused ops",
    5: "layers",
    6: "training",
}


def fused_ops() -> dict:
    """ember.fused's table of ops with every one ember defines: ember.nn.functional and
    ember.optim.functional register theirs when imported, so this imports them first.

    >>> sorted(fused_ops())[:3]
    ['adam_step', 'adam_step_foreach', 'batch_norm']
    """
    from .. import fused
    from ..nn import functional as _nn_ops  # noqa: F401 - registers softmax, layer_norm, ...
    from ..optim import functional as _optim_ops  # noqa: F401 - registers the optimizer steps

    return fused.FUSED


def run_reference(backend: str, name: str, *args, **params):
    """Run fused op ``name``'s reference decomposition on raw buffers of ``backend`` (a kernel's
    fallback for inputs it does not handle, e.g. integer dtypes); returns buffers, or a tuple of
    buffers (None where the op gives no tensor).

    >>> import numpy as np
    >>> run_reference("numpy", "softmax", np.zeros((1, 2), np.float32), dim=-1).tolist()
    [[0.5, 0.5]]
    """
    import numpy as np

    import ember
    from ember import dispatch

    impl = fused_ops()[name]
    target = ember.get_backend(backend)
    wrapped = [dispatch.wrap(a, target) if isinstance(a, np.ndarray) else a for a in args]
    with ember.no_grad():
        out = impl(*wrapped, **params)
    if isinstance(out, tuple):
        return tuple(None if t is None else t._data for t in out)
    return out._data

"""What the plugins' multi-tensor optimizer tests share: a param group whose second entry takes
its first SGD momentum step (no buffer yet), and the check that a ``*_foreach`` kernel gives
each entry, bit for bit, what the per-parameter kernel gives it, in the entry's own buffers."""

import numpy as np

from ember.optim import functional

FOREACH = tuple(functional.FOREACH)  # the multi-tensor ops, by name


def state(rule, hyper, shape, dtype, rng, first=False):
    """The state arrays ``rule`` takes under ``hyper`` (None where the options use none)."""

    def n():
        return rng.standard_normal(shape).astype(dtype)

    def pos():
        return rng.uniform(1, 2, shape).astype(dtype)

    if rule == "sgd_step":
        return [n() if hyper.get("momentum") and not first else None]
    if rule == "adam_step":
        return [n(), pos(), pos() + 1 if hyper.get("amsgrad") else None]
    return [pos(), n() * 0.1 if hyper.get("centered") else None, n() if hyper.get("momentum") else None]


def group(impls, rule, hyper, shapes, dtype, rng):
    """``(params, grads, states, extra, want)``: a param group of ``shapes``, and ``want``, what
    the per-parameter kernel ``impls[rule]`` computes for each entry (run on copies)."""
    extra = {"step": 5} if rule == "adam_step" else {}
    params = [rng.standard_normal(s).astype(dtype) for s in shapes]
    grads = [rng.standard_normal(s).astype(dtype) for s in shapes]
    states = [state(rule, hyper, s, dtype, rng, first=k == 1) for k, s in enumerate(shapes)]
    want = [
        impls[rule](p.copy(), g, *[None if x is None else x.copy() for x in st], **hyper, **extra)
        for p, g, st in zip(params, grads, states)
    ]
    return params, grads, states, extra, want


def launches_expected(rule, hyper) -> int:
    """Kernel launches of one ``_foreach`` call over :func:`group`: a second one for the entry on
    its first momentum step, which runs another program."""
    return 2 if rule == "sgd_step" and hyper.get("momentum") else 1


def assert_matches(got, want, params, states, label):
    """``got`` (the ``_foreach`` op's columns) equals ``want`` entry by entry, bit for bit, and
    parameters and given state were updated in their own buffers."""
    for k in range(len(params)):
        assert got[0][k] is params[k], "the parameter is updated in its own buffer"
        for column, w in zip(got, want[k]):
            if w is None:
                assert column[k] is None
            else:
                assert column[k].dtype == w.dtype and column[k].shape == w.shape
                np.testing.assert_array_equal(column[k], w, err_msg=f"{label} entry {k}")
    for st, column in zip(zip(*states), got[1:]):
        for given, out in zip(st, column):
            assert given is None or out is given, "state is updated in its own buffer"

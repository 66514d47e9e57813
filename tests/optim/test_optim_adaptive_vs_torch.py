"""Adagrad, Adadelta, OneCycleLR and ReduceLROnPlateau against torch.optim, step by step."""

import copy
import itertools
import json

import numpy as np
import pytest
from optim_helpers import assert_histories_close, assert_state_matches_torch, batch, initial, leaves, train
from references import known, load_torch

import ember

torch = load_torch()  # without torch, a stand-in: its answers come from tests/references

STEPS = 20
TOL = {"float32": dict(rtol=1e-5, atol=1e-6), "float64": dict(rtol=1e-11, atol=1e-13)}


def _cases():
    for lr_decay, wd, init, maximize in itertools.product((0.0, 0.1), (0.0, 0.1), (0.0, 0.5), (False, True)):
        yield (
            "Adagrad",
            dict(lr=0.05, lr_decay=lr_decay, weight_decay=wd, initial_accumulator_value=init, maximize=maximize),
        )
    yield "Adagrad", dict(lr=0.05, eps=1e-3)
    for rho, wd, maximize in itertools.product((0.9, 0.5), (0.0, 0.1), (False, True)):
        yield "Adadelta", dict(lr=1.0, rho=rho, weight_decay=wd, maximize=maximize)
    yield "Adadelta", dict(lr=0.5, eps=1e-4)


CASES = list(_cases())


def _run(name, kw, dtype, steps=STEPS, sched=None, more=0):
    """``[(ember's history, ember's optimizer), (torch's history, torch's state_dict)]`` after
    ``steps`` steps; with ``more``, torch's parameters after that many further steps too."""
    init, (x, y) = initial(dtype=dtype), batch(dtype=dtype)
    sign = -1.0 if kw.get("maximize") else 1.0

    def run(lib):
        params = leaves(lib, init)
        opt = getattr(lib.optim, name)(params, **kw)
        s = sched(lib, opt) if sched else None
        return train(lib, params, opt, steps, x, y, sign, sched=s), opt, params

    def torch_run():
        history, opt, params = run(torch)
        state = copy.deepcopy(opt.state_dict())
        return history, state, (train(torch, params, opt, more, x, y, sign)[-1] if more else None)

    history, e_opt, _ = run(ember)
    t_history, t_state, t_more = known(torch_run)
    out = [(history, e_opt), (t_history, t_state)]
    return out + [t_more] if more else out


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0] + "-" + ",".join(f"{k}={v}" for k, v in c[1].items()))
def test_matches_torch(case, dtype):
    (got, _), (want, _) = _run(*case, dtype)
    assert_histories_close(got, want, **TOL[dtype])
    assert not np.array_equal(got[-1][0], initial(dtype=dtype)[0])


@pytest.mark.parametrize(
    "name, kw", [("Adagrad", dict(lr=0.05, initial_accumulator_value=0.1)), ("Adadelta", dict(rho=0.8))]
)
def test_state_dict_has_torchs_keys_and_values(name, kw):
    (got, e_opt), (want, theirs), want_more = _run(name, kw, "float64", steps=5, more=3)
    assert_histories_close(got, want, **TOL["float64"])
    assert_state_matches_torch(e_opt.state_dict()["state"], theirs["state"], steps=5)
    # torch's state_dict loads into a fresh ember optimizer, and training continues the same
    params = leaves(ember, want[-1])
    fresh = getattr(ember.optim, name)(params)
    fresh.load_state_dict(
        {
            "state": {i: {k: ember.tensor(v) for k, v in e.items()} for i, e in theirs["state"].items()},
            "param_groups": theirs["param_groups"],
        }
    )
    assert fresh.state[params[0]]["step"] == 5 and fresh.param_groups[0]["lr"] == theirs["param_groups"][0]["lr"]
    x, y = batch(dtype="float64")
    for g, w in zip(train(ember, params, fresh, 3, x, y)[-1], want_more):
        np.testing.assert_allclose(g, w, **TOL["float64"])


@pytest.mark.parametrize("opt_name, opt_kw", [("SGD", dict(lr=0.1, momentum=0.9)), ("Adam", dict(lr=0.01))])
@pytest.mark.parametrize(
    "kw",
    [
        dict(max_lr=0.1, total_steps=20),
        dict(max_lr=0.2, epochs=4, steps_per_epoch=5, pct_start=0.25, anneal_strategy="linear"),
        dict(max_lr=0.1, total_steps=20, three_phase=True, div_factor=10, final_div_factor=100),
        dict(max_lr=0.1, total_steps=20, cycle_momentum=False),
    ],
)
def test_one_cycle_lr_and_momentum_match_torch(opt_name, opt_kw, kw):
    def record(lib):
        opt = getattr(lib.optim, opt_name)([lib.zeros(1, requires_grad=True)], **opt_kw)
        sched = lib.optim.lr_scheduler.OneCycleLR(opt, **kw)
        seen = []
        for _ in range(20):
            group = opt.param_groups[0]
            seen.append((group["lr"], group.get("momentum"), tuple(group.get("betas", ()))))
            opt.step()
            sched.step()
        return seen

    records = [record(ember), known(lambda: record(torch))]
    assert len(records[0]) == len(records[1]) == 20
    np.testing.assert_allclose(np.array([r[0] for r in records[0]]), [r[0] for r in records[1]], rtol=1e-12)
    for (_, m0, b0), (_, m1, b1) in zip(*records):
        assert (m0 is None) == (m1 is None) and (m0 is None or abs(m0 - m1) < 1e-12)
        assert np.allclose(b0, b1, rtol=1e-12)


def test_one_cycle_drives_training_like_torch_and_resumes():
    def sched(lib, opt):
        return lib.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=STEPS)

    (got, e_opt), (want, _) = _run("SGD", dict(lr=0.01, momentum=0.9), "float32", sched=sched)
    assert_histories_close(got, want, **TOL["float32"])
    opt = ember.optim.SGD([ember.zeros(1, requires_grad=True)], lr=0.1, momentum=0.9)
    a = ember.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=10)
    for _ in range(4):
        a.step()
    saved = json.loads(json.dumps(a.state_dict()))
    opt2 = ember.optim.SGD([ember.zeros(1, requires_grad=True)], lr=0.1, momentum=0.9)
    opt2.load_state_dict(opt.state_dict())
    b = ember.optim.lr_scheduler.OneCycleLR(opt2, max_lr=0.1, total_steps=10)
    b.load_state_dict(saved)
    a.step(), b.step()
    assert a.get_last_lr() == b.get_last_lr()
    with pytest.raises(ember.optim.OptimizerError, match="past total_steps"):
        for _ in range(10):
            a.step()


def test_one_cycle_refuses_an_optimizer_without_momentum():
    opt = ember.optim.Adagrad([ember.zeros(1, requires_grad=True)])
    with pytest.raises(ember.optim.OptimizerError, match="cycle_momentum"):
        ember.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=5)


METRICS = [1.0, 0.9, 0.9, 0.91, 0.95, 0.9, 0.8999, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.5, 0.5, 0.6, 0.6]


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(patience=1, factor=0.5),
        dict(mode="max", patience=2),
        dict(patience=0, cooldown=2, factor=0.3, min_lr=0.02),
        dict(patience=1, threshold=0.05, threshold_mode="abs"),
        dict(patience=1, threshold=0.2, threshold_mode="rel", mode="max"),
        dict(patience=0, factor=0.9, eps=0.03),
    ],
)
def test_reduce_on_plateau_matches_torch(kw):
    def lrs_of(lib):
        opt = lib.optim.SGD(
            [{"params": [lib.zeros(1, requires_grad=True)]}, {"params": [lib.zeros(1, requires_grad=True)], "lr": 0.5}],
            lr=0.1,
        )
        sched = lib.optim.lr_scheduler.ReduceLROnPlateau(opt, **kw)
        seen = []
        for m in METRICS * 2:
            sched.step(lib.tensor(m) if lib is ember else m)
            seen.append(sched.get_last_lr())
        return seen

    lrs = [lrs_of(ember), known(lambda: lrs_of(torch))]
    assert len(lrs[0]) == len(lrs[1]) == 2 * len(METRICS)
    np.testing.assert_allclose(lrs[0], lrs[1], rtol=1e-12)
    assert lrs[0][0] != lrs[0][-1] or kw.get("mode") == "max"


@pytest.mark.parametrize(
    "kw, cause",
    [
        (dict(mode="up"), "mode"),
        (dict(factor=1.0), "factor"),
        (dict(patience=-1), "patience"),
        (dict(threshold_mode="x"), "threshold_mode"),
        (dict(min_lr=[0.1, 0.2]), "min_lr"),
    ],
)
def test_reduce_on_plateau_refuses_bad_arguments(kw, cause):
    opt = ember.optim.SGD([ember.zeros(1, requires_grad=True)], lr=0.1)
    with pytest.raises(ember.optim.OptimizerError, match=cause):
        ember.optim.lr_scheduler.ReduceLROnPlateau(opt, **kw)

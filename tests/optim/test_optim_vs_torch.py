"""Each optimizer against torch.optim: same objective, same initial values, 20 steps, every
option combination torch supports."""

import itertools

import numpy as np
import pytest
from optim_helpers import assert_histories_close, assert_state_matches_torch, batch, initial, leaves, train
from references import known, load_torch

import ember

torch = load_torch()  # without torch, a stand-in: its answers come from tests/references

STEPS = 20
TOL = {"float32": dict(rtol=1e-5, atol=1e-6), "float64": dict(rtol=1e-11, atol=1e-13)}


def _sgd_cases():
    for momentum, dampening, nesterov, wd, maximize in itertools.product(
        (0.0, 0.9), (0.0, 0.3), (False, True), (0.0, 0.1), (False, True)
    ):
        if nesterov and (momentum == 0 or dampening != 0):
            continue
        yield dict(
            lr=0.05, momentum=momentum, dampening=dampening, nesterov=nesterov, weight_decay=wd, maximize=maximize
        )


def _adam_cases():
    for amsgrad, wd, maximize, decoupled in itertools.product((False, True), (0.0, 0.1), (False, True), (False, True)):
        yield dict(lr=0.01, amsgrad=amsgrad, weight_decay=wd, maximize=maximize, decoupled_weight_decay=decoupled)
    yield dict(lr=0.02, betas=(0.5, 0.9), eps=1e-3)
    yield dict(lr=0.02, betas=(0.0, 0.3), eps=0.0, amsgrad=True)


def _adamw_cases():
    for amsgrad, wd, maximize in itertools.product((False, True), (0.01, 0.5), (False, True)):
        yield dict(lr=0.01, amsgrad=amsgrad, weight_decay=wd, maximize=maximize)


def _rmsprop_cases():
    for centered, momentum, wd, maximize in itertools.product((False, True), (0.0, 0.9), (0.0, 0.1), (False, True)):
        yield dict(lr=0.005, centered=centered, momentum=momentum, weight_decay=wd, maximize=maximize)
    # Small alpha or eps make RMSprop chaotic here (a rounding difference grows 10x a step),
    # which would test float luck, not the rule: keep them moderate.
    yield dict(lr=0.01, alpha=0.9, eps=1e-3, centered=True)
    yield dict(lr=0.01, alpha=0.5, eps=1e-3)


CASES = (
    [("SGD", kw) for kw in _sgd_cases()]
    + [("Adam", kw) for kw in _adam_cases()]
    + [("AdamW", kw) for kw in _adamw_cases()]
    + [("RMSprop", kw) for kw in _rmsprop_cases()]
)


def _ids(case):
    name, kw = case
    return name + "-" + ",".join(f"{k}={v}" for k, v in kw.items() if k != "lr")


def run_both(name, kw, dtype, steps=STEPS, groups=None, **train_kw):
    """Histories of ember and torch for optimizer ``name`` with options ``kw``: ember's with its
    optimizer, torch's with its optimizer's state_dict after the run."""
    init, (x, y) = initial(dtype=dtype), batch(dtype=dtype)
    sign = -1.0 if kw.get("maximize") else 1.0  # maximize the negated loss: same descent

    def run(lib):
        params = leaves(lib, init)
        spec = params if groups is None else groups(params)
        opt = getattr(lib.optim, name)(spec, **kw)
        return train(lib, params, opt, steps, x, y, sign, **train_kw), opt

    def torch_run():
        history, opt = run(torch)
        return history, opt.state_dict()

    return run(ember), known(torch_run)


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_matches_torch_float32(case):
    name, kw = case
    (got, _), (want, _) = run_both(name, kw, "float32")
    assert_histories_close(got, want, **TOL["float32"])
    assert not np.array_equal(got[-1][0], initial()[0]), "the optimizer did not move the parameters"


@pytest.mark.parametrize("case", CASES[::3], ids=_ids)
def test_matches_torch_float64(case):
    name, kw = case
    (got, _), (want, _) = run_both(name, kw, "float64")
    assert got[-1][0].dtype == np.float64
    assert_histories_close(got, want, **TOL["float64"])


@pytest.mark.parametrize(
    "name, kw",
    [
        ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True)),
        ("Adam", dict(lr=0.01, amsgrad=True)),
        ("RMSprop", dict(lr=0.01, centered=True, momentum=0.5)),
    ],
)
def test_state_dict_matches_torch(name, kw):
    """The same state, under the same names and indices, as torch's state_dict."""
    (_, e_opt), (_, theirs) = run_both(name, kw, "float64", steps=5)
    mine = e_opt.state_dict()
    assert sorted(theirs["state"]) == [0, 1, 2, 3]
    assert_state_matches_torch(mine["state"], theirs["state"], steps=5)
    for g_mine, g_theirs in zip(mine["param_groups"], theirs["param_groups"]):
        assert g_mine["params"] == g_theirs["params"]
        for key, value in g_mine.items():
            assert key in g_theirs, f"ember group key {key!r} is not a torch key"
            assert value == g_theirs[key]


def test_param_groups_with_different_hyperparameters():
    def groups(params):
        return [{"params": params[:2], "lr": 0.05, "amsgrad": True}, {"params": params[2:], "weight_decay": 0.2}]

    (got, e_opt), (want, _) = run_both("Adam", dict(lr=0.01), "float32", groups=groups)
    assert_histories_close(got, want, **TOL["float32"])
    assert [g["lr"] for g in e_opt.param_groups] == [0.05, 0.01]
    assert "max_exp_avg_sq" in e_opt.state[e_opt.param_groups[0]["params"][0]]
    assert "max_exp_avg_sq" not in e_opt.state[e_opt.param_groups[1]["params"][0]]


def test_closure_returns_loss_and_matches_torch():
    (got, e_opt), (want, _) = run_both("SGD", dict(lr=0.05, momentum=0.9), "float32", closure=True)
    assert_histories_close(got, want, **TOL["float32"])
    w = ember.tensor([2.0], requires_grad=True)
    opt = ember.optim.SGD([w], lr=0.25)

    def closure():
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        return loss

    assert opt.step(closure).item() == 4.0
    assert w.tolist() == [1.0]


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop"])
def test_scheduled_lr_matches_torch(name):
    """A scheduler changing the lr every step drives both frameworks the same way."""
    init, (x, y) = initial(), batch()

    def run(lib):
        params = leaves(lib, init)
        opt = getattr(lib.optim, name)(params, lr=0.02)
        warm = lib.optim.lr_scheduler.LinearLR(opt, 0.1, 1.0, total_iters=5)
        cos = lib.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=15, eta_min=0.001)
        sched = lib.optim.lr_scheduler.SequentialLR(opt, [warm, cos], milestones=[5])
        return train(lib, params, opt, STEPS, x, y, sched=sched)

    assert_histories_close(run(ember), known(lambda: run(torch)), **TOL["float32"])

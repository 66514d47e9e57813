"""Learning-rate schedulers against torch.optim.lr_scheduler: the lr of every param group at
every step, resuming from a JSON state_dict, and clear errors."""

import json
import math

import pytest
from references import known, load_torch

import ember
from ember.optim import lr_scheduler as L

torch = load_torch()  # without torch, a stand-in: its answers come from tests/references
STEPS = 30


def _two_groups(lib):
    a = lib.zeros(2, requires_grad=True)
    b = lib.zeros(3, requires_grad=True)
    return lib.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.02}], lr=0.1)


def _lambda_per_group(lib, opt):
    return lib.optim.lr_scheduler.LambdaLR(opt, [lambda e: 1 / (1 + e), lambda e: 0.9**e])


def _warmup_cosine_torch(lib, opt):
    if lib is ember:
        return L.warmup_cosine(opt, warmup_steps=5, total_steps=25, eta_min=0.001)
    warm = lib.optim.lr_scheduler.LinearLR(opt, 1 / 6, 1.0, total_iters=5)
    cos = lib.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=20, eta_min=0.001)
    return lib.optim.lr_scheduler.SequentialLR(opt, [warm, cos], milestones=[5])


SCHEDULES = {
    "StepLR": lambda lib, opt: lib.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5),
    "MultiStepLR": lambda lib, opt: lib.optim.lr_scheduler.MultiStepLR(opt, [9, 2, 5, 5], gamma=0.3),
    "ExponentialLR": lambda lib, opt: lib.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9),
    "CosineAnnealingLR": lambda lib, opt: lib.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10, eta_min=0.01),
    "LinearLR": lambda lib, opt: lib.optim.lr_scheduler.LinearLR(
        opt, start_factor=0.25, end_factor=0.75, total_iters=4
    ),
    "LambdaLR": lambda lib, opt: lib.optim.lr_scheduler.LambdaLR(opt, lambda e: 1 / (1 + e)),
    "LambdaLR-per-group": _lambda_per_group,
    "SequentialLR": lambda lib, opt: lib.optim.lr_scheduler.SequentialLR(
        opt,
        [
            lib.optim.lr_scheduler.ExponentialLR(opt, gamma=0.8),
            lib.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5),
            lib.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=8),
        ],
        milestones=[4, 10],
    ),
    "warmup_cosine": _warmup_cosine_torch,
}


def _lrs(lib, make, steps=STEPS):
    opt = _two_groups(lib)
    sched = make(lib, opt)
    out = [sched.get_last_lr()]
    for _ in range(steps):
        opt.step()
        sched.step()
        out.append(sched.get_last_lr())
        assert out[-1] == [g["lr"] for g in opt.param_groups]
    return out


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_matches_torch(name):
    got, want = _lrs(ember, SCHEDULES[name]), known(lambda: _lrs(torch, SCHEDULES[name]))
    assert len(set(map(tuple, got))) > 1, "the schedule never changed the lr"
    for epoch, (g, w) in enumerate(zip(got, want)):
        assert g == pytest.approx(w, rel=1e-12, abs=1e-15), f"epoch {epoch}"


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_resume_from_json_state_dict(name):
    make = SCHEDULES[name]
    straight = _lrs(ember, make)
    opt = _two_groups(ember)
    sched = make(ember, opt)
    for _ in range(12):
        opt.step()
        sched.step()
    opt_meta = json.dumps(ember.optim.split_state_dict(opt.state_dict())[1])
    text = json.dumps(sched.state_dict(), allow_nan=False)

    opt2 = _two_groups(ember)
    sched2 = make(ember, opt2)
    opt2.load_state_dict(ember.optim.join_state_dict({}, json.loads(opt_meta)))
    sched2.load_state_dict(json.loads(text))
    assert sched2.get_last_lr() == straight[12]
    resumed = []
    for _ in range(STEPS - 12):
        opt2.step()
        sched2.step()
        resumed.append(sched2.get_last_lr())
    assert resumed == straight[13:]


def test_closed_form_lrs():
    opt = _two_groups(ember)
    sched = L.CosineAnnealingLR(opt, T_max=4, eta_min=0.0)
    for epoch in range(1, 9):
        sched.step()
        assert sched.get_last_lr()[0] == pytest.approx(0.1 * (1 + math.cos(math.pi * epoch / 4)) / 2, abs=1e-15)


def test_warmup_cosine_shapes_the_lr():
    opt = _two_groups(ember)
    sched = L.warmup_cosine(opt, warmup_steps=4, total_steps=12)
    lrs = [sched.get_last_lr()[0]]
    for _ in range(12):
        sched.step()
        lrs.append(sched.get_last_lr()[0])
    assert lrs[:5] == pytest.approx([0.02, 0.04, 0.06, 0.08, 0.1])  # equal steps up to the base lr
    assert all(a > b for a, b in zip(lrs[4:], lrs[5:]))  # then down
    assert lrs[-1] == pytest.approx(0.0, abs=1e-15)
    no_warmup = L.warmup_cosine(_two_groups(ember), warmup_steps=0, total_steps=10)
    assert isinstance(no_warmup, L.CosineAnnealingLR)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda opt: L.StepLR(opt, step_size=0), "step_size must be a positive int"),
        (lambda opt: L.StepLR(object(), step_size=2), "needs an ember.optim optimizer"),
        (lambda opt: L.CosineAnnealingLR(opt, T_max=2.5), "T_max must be a positive int"),
        (lambda opt: L.LinearLR(opt, start_factor=0.0), r"start_factor must be in \(0, 1\]"),
        (lambda opt: L.MultiStepLR(opt, [1, "2"]), "milestones must be ints"),
        (lambda opt: L.LambdaLR(opt, [lambda e: 1.0]), "got 1 lr_lambdas for 2 param groups"),
        (
            lambda opt: L.SequentialLR(opt, [L.StepLR(opt, 2), L.StepLR(opt, 3)], milestones=[]),
            "2 schedulers need 1 milestones",
        ),
        (
            lambda opt: L.SequentialLR(opt, [L.StepLR(_two_groups(ember), 2)], milestones=[]),
            "does not belong to this optimizer",
        ),
        (lambda opt: L.warmup_cosine(opt, 10, 5), "total_steps must be an int > warmup_steps"),
        (lambda opt: L.StepLR(opt, step_size=2, last_epoch=5), "has no 'initial_lr'"),
    ],
)
def test_bad_arguments_raise_ember_errors(make, message):
    with pytest.raises(ember.optim.OptimizerError, match=message) as info:
        make(_two_groups(ember))
    assert isinstance(info.value, ember.EmberError)
    assert "test_optim_lr_scheduler.py:" in str(info.value)

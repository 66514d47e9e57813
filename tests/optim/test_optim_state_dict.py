"""Checkpointing an optimizer: state_dict snapshots, bit-exact resume (also through
safetensors + JSON), split/join, loading torch's layout, and clear errors for misfits."""

import copy
import json

import numpy as np
import pytest
from optim_helpers import batch, initial, leaves, train
from references import known, load_torch

import ember
from ember.io import from_numpy, load_bytes, save_bytes, to_numpy
from ember.optim import join_state_dict, split_state_dict
from ember.optim.lr_scheduler import warmup_cosine

CONFIGS = [
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.5)),
    ("Adam", dict(lr=0.01, amsgrad=True, weight_decay=0.1)),
    ("AdamW", dict(lr=0.01)),
    ("RMSprop", dict(lr=0.005, centered=True, momentum=0.9)),
]


def _through_disk(opt_sd, sched_sd):
    """What a checkpoint does: tensors to safetensors bytes, the rest to JSON text, and back."""
    tensors, meta = split_state_dict(opt_sd, prefix="optim.")
    blob = save_bytes({k: from_numpy(v.numpy()) for k, v in tensors.items()})
    text = json.dumps({"optim": meta, "sched": sched_sd}, allow_nan=False)
    loaded = {k: ember.tensor(to_numpy(v)) for k, v in load_bytes(blob)[0].items()}
    doc = json.loads(text)
    return join_state_dict(loaded, doc["optim"], prefix="optim."), doc["sched"]


@pytest.mark.parametrize("name, kw", CONFIGS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CONFIGS)])
def test_resume_mid_run_is_bit_exact(name, kw):
    init, (x, y) = initial(), batch()

    def fresh():
        params = leaves(ember, init)
        opt = getattr(ember.optim, name)(params, **kw)
        return params, opt, warmup_cosine(opt, warmup_steps=4, total_steps=20)

    params, opt, straight_sched = fresh()
    straight = train(ember, params, opt, 20, x, y, sched=straight_sched)

    params, opt, sched = fresh()
    train(ember, params, opt, 10, x, y, sched=sched)
    saved_params = [p.numpy().copy() for p in params]
    opt_sd, sched_sd = _through_disk(opt.state_dict(), sched.state_dict())

    params2, opt2, sched2 = fresh()
    for p, a in zip(params2, saved_params):
        p.copy_(ember.tensor(a))
    opt2.load_state_dict(opt_sd)
    sched2.load_state_dict(sched_sd)
    resumed = train(ember, params2, opt2, 10, x, y, sched=sched2)
    for step in range(10):
        for got, want in zip(resumed[step], straight[10 + step]):
            assert np.array_equal(got, want), f"step {11 + step} differs after resuming"
    assert sched2.get_last_lr() == straight_sched.get_last_lr()


def test_state_dict_is_a_snapshot():
    w = ember.tensor([1.0, 2.0], requires_grad=True)
    opt = ember.optim.Adam([w], lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()
    sd = opt.state_dict()
    before = sd["state"][0]["exp_avg"].tolist()
    opt.zero_grad()
    (w * w).sum().backward()
    opt.step()
    assert sd["state"][0]["exp_avg"].tolist() == before
    assert sd["state"][0]["step"] == 2 and opt.state[w]["step"] == 3
    # ... and loading copies: stepping after a load does not write into the caller's dict
    opt.load_state_dict(sd)
    opt.step()
    assert sd["state"][0]["exp_avg"].tolist() == before


def test_split_join_round_trip():
    params = leaves(ember, initial())
    opt = ember.optim.Adam([{"params": params[:2], "amsgrad": True}, {"params": params[2:], "lr": 0.1}])
    train(ember, params, opt, 2, *batch())
    sd = opt.state_dict()
    tensors, meta = split_state_dict(sd)
    assert all(isinstance(t, ember.Tensor) for t in tensors.values())
    assert "state.0.max_exp_avg_sq" in tensors and "state.3.max_exp_avg_sq" not in tensors
    assert sorted(tensors) == sorted(f"state.{i}.{k}" for i, e in sd["state"].items() for k in e if k != "step")
    meta = json.loads(json.dumps(meta, allow_nan=False))  # strictly JSON-able
    back = join_state_dict(tensors, meta)
    assert back["param_groups"] == sd["param_groups"]
    assert back["state"].keys() == sd["state"].keys()
    for i, entries in sd["state"].items():
        assert back["state"][i].keys() == entries.keys()
        for k, v in entries.items():
            assert back["state"][i][k] is v if isinstance(v, ember.Tensor) else back["state"][i][k] == v


def test_join_ignores_other_tensors_and_rejects_malformed_names():
    t = ember.zeros(2)
    meta = {"state": {"0": {"step": 1}}, "param_groups": [{"lr": 0.1, "betas": [0.9, 0.99], "params": [0]}]}
    sd = join_state_dict({"model.weight": t, "opt.state.0.exp_avg": t}, meta, prefix="opt.")
    assert sd["state"] == {0: {"step": 1, "exp_avg": t}}
    assert sd["param_groups"][0]["betas"] == (0.9, 0.99) and sd["param_groups"][0]["params"] == [0]
    with pytest.raises(ember.optim.OptimizerError, match="'opt.state.x.exp_avg' is not of the form"):
        join_state_dict({"opt.state.x.exp_avg": t}, meta, prefix="opt.")


def test_loads_torchs_state_dict_and_continues_like_torch():
    init, (x, y) = initial(dtype="float64"), batch(dtype="float64")
    torch = load_torch()

    def torch_run():
        """torch's state after 5 steps, its parameters then, and where 5 more steps take them."""
        t_params = leaves(torch, init)
        t_opt = torch.optim.Adam(t_params, lr=0.01, amsgrad=True)
        after5 = train(torch, t_params, t_opt, 5, x, y)[-1]
        t_sd = copy.deepcopy(t_opt.state_dict())  # torch's layout: step tensors, foreach/fused keys
        return t_sd, after5, train(torch, t_params, t_opt, 5, x, y)[-1]

    t_sd, after5, want = known(torch_run)
    sd = {
        "state": {i: {k: ember.tensor(v) for k, v in e.items()} for i, e in t_sd["state"].items()},
        "param_groups": t_sd["param_groups"],
    }
    e_params = leaves(ember, after5)
    e_opt = ember.optim.Adam(e_params)
    e_opt.load_state_dict(sd)
    assert e_opt.param_groups[0]["amsgrad"] is True and "foreach" not in e_opt.param_groups[0]
    assert e_opt.state[e_params[0]]["step"] == 5
    got = train(ember, e_params, e_opt, 5, x, y)
    for g, w in zip(got[-1], want):
        np.testing.assert_allclose(g, w, rtol=1e-11, atol=1e-13)


def test_load_casts_state_to_the_parameter_dtype():
    w = ember.zeros(3, dtype=ember.float64, requires_grad=True)
    opt = ember.optim.SGD([w], lr=0.1, momentum=0.9)
    opt.load_state_dict(
        {"state": {0: {"momentum_buffer": ember.ones(3)}}, "param_groups": [{**opt.state_dict()["param_groups"][0]}]}
    )
    assert opt.state[w]["momentum_buffer"].dtype is ember.float64


def _sgd():
    a, b = ember.zeros(2, requires_grad=True), ember.zeros(3, requires_grad=True)
    return ember.optim.SGD([a, b], lr=0.1, momentum=0.9)


def test_load_rejects_group_size_mismatch():
    sd = _sgd().state_dict()
    opt = ember.optim.SGD([ember.zeros(2, requires_grad=True)], lr=0.1)
    with pytest.raises(ember.optim.OptimizerError, match=r"1 param group\(s\) of sizes \[2\].*1 of sizes \[1\]"):
        opt.load_state_dict(sd)


def test_load_rejects_state_of_the_wrong_shape():
    opt = _sgd()
    sd = opt.state_dict()
    sd["state"] = {1: {"momentum_buffer": ember.zeros(4)}}
    with pytest.raises(ember.ShapeError, match=r"'momentum_buffer' of parameter 1 has shape \(4,\).*\(3,\)"):
        opt.load_state_dict(sd)


def test_load_rejects_unknown_keys_and_bad_values():
    opt = _sgd()
    sd = opt.state_dict()
    sd["param_groups"][0]["lr_decay"] = 0.5
    with pytest.raises(ember.optim.OptimizerError, match="unknown key 'lr_decay'"):
        opt.load_state_dict(sd)
    sd = opt.state_dict()
    sd["param_groups"][0]["lr"] = -1.0
    with pytest.raises(ember.optim.OptimizerError, match="invalid lr=-1.0"):
        opt.load_state_dict(sd)
    with pytest.raises(ember.optim.OptimizerError, match="'state' and 'param_groups'"):
        opt.load_state_dict({"state": {}})
    assert opt.param_groups[0]["lr"] == 0.1  # a failed load changes nothing

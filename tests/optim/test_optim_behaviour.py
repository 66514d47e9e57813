"""What an optimizer does besides the arithmetic: updates in place, skips parameters without
gradients, zero_grad, named parameters, repr, and the module doctests."""

import doctest
import importlib

import numpy as np
import pytest

import ember
from ember.optim import SGD, Adam, RMSprop


def _loss_step(opt, params):
    opt.zero_grad()
    sum(((p - 1.0) ** 2).sum() for p in params).backward()
    opt.step()


@pytest.mark.parametrize(
    "make",
    [
        lambda ps: SGD(ps, lr=0.1, momentum=0.9),
        lambda ps: Adam(ps, lr=0.1, amsgrad=True),
        lambda ps: RMSprop(ps, lr=0.1, momentum=0.5, centered=True),
    ],
)
def test_parameters_and_state_are_updated_in_place(make):
    host = np.zeros(4, dtype=np.float32)
    p = ember.as_tensor(host).requires_grad_()  # shares memory with `host`
    buffer = p._data
    opt = make([p])
    _loss_step(opt, [p])
    state = dict(opt.state[p])
    before = {k: v.numpy().copy() for k, v in state.items() if isinstance(v, ember.Tensor)}
    _loss_step(opt, [p])
    assert p._data is buffer
    assert host.tolist() == p.tolist() and host[0] != 0  # the outside view saw both steps
    for key, value in state.items():
        if isinstance(value, ember.Tensor):
            assert opt.state[p][key] is value, f"state {key!r} was replaced, not updated"
            assert not np.array_equal(value.numpy(), before[key]), f"state {key!r} did not change"


def test_momentum_buffer_does_not_alias_the_gradient():
    """The first momentum buffer is a copy: the gradient may be shared with another leaf."""
    a, b = ember.zeros(2, requires_grad=True), ember.zeros(2, requires_grad=True)
    a.grad = b.grad = ember.ones(2)
    opt = SGD([a, b], lr=0.1, momentum=0.9)
    opt.step()
    assert opt.state[a]["momentum_buffer"]._data is not a.grad._data
    opt.step()
    assert a.tolist() == pytest.approx([-0.29, -0.29]) and b.tolist() == a.tolist()


def test_parameters_without_gradients_are_left_alone():
    used, unused = ember.ones(2, requires_grad=True), ember.ones(2, requires_grad=True)
    frozen = ember.ones(2)  # requires_grad=False is allowed
    opt = Adam([used, unused, frozen], lr=0.1)
    _loss_step(opt, [used * 3.0])
    assert unused.tolist() == [1.0, 1.0] and frozen.tolist() == [1.0, 1.0]
    assert used.tolist() != [1.0, 1.0]
    assert list(opt.state_dict()["state"]) == [0]


def test_zero_grad():
    p = ember.ones(3, requires_grad=True)
    opt = SGD([p], lr=0.1)
    (p * p).sum().backward()
    opt.zero_grad(set_to_none=False)
    assert p.grad.tolist() == [0.0, 0.0, 0.0] and p.grad.dtype is p.dtype
    (p * p).sum().backward()
    assert p.grad.tolist() == [2.0, 2.0, 2.0]
    opt.zero_grad()
    assert p.grad is None


def test_named_parameters_and_repr():
    a, b = ember.zeros(2, requires_grad=True), ember.zeros(3, requires_grad=True)
    opt = SGD([("layer.weight", a), ("layer.bias", b)], lr=0.1, momentum=0.9)
    params = opt.param_groups[0]["params"]
    assert len(params) == 2 and params[0] is a and params[1] is b
    sd = opt.state_dict()
    assert sd["param_groups"][0]["param_names"] == ["layer.weight", "layer.bias"]
    text = repr(opt)
    assert text.startswith("SGD (\nParameter Group 0\n") and "    momentum: 0.9" in text
    assert "params" not in text


def test_float64_parameters_keep_their_dtype():
    p = ember.ones(3, dtype=ember.float64, requires_grad=True)
    opt = Adam([p], lr=0.1)
    _loss_step(opt, [p * 2.0])
    assert p.dtype is ember.float64 and opt.state[p]["exp_avg"].dtype is ember.float64


@pytest.mark.parametrize(
    "module",
    [
        "ember.optim",
        "ember.optim.optimizer",
        "ember.optim.sgd",
        "ember.optim.adam",
        "ember.optim.rmsprop",
        "ember.optim.functional",
        "ember.optim.lr_scheduler",
        "ember.optim.clip",
        "ember.optim.state",
        "ember.optim.adagrad",
    ],
)
def test_doctests(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0

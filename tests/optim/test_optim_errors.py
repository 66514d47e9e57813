"""Bad input gives an ember error that names the cause and the user's line."""

import numpy as np
import pytest

import ember
from ember.optim import SGD, Adam, AdamW, OptimizerError, RMSprop


def w(*shape):
    return ember.zeros(*(shape or (2,)), requires_grad=True)


def _raises(match, fn, cls=OptimizerError):
    with pytest.raises(cls, match=match) as info:
        fn()
    assert isinstance(info.value, ember.EmberError)
    assert "(at test_optim_errors.py:" in str(info.value), str(info.value)
    return str(info.value)


@pytest.mark.parametrize("cls", [SGD, Adam, AdamW, RMSprop])
def test_negative_lr(cls):
    msg = _raises(r"invalid lr=-0.1 in param group 0: it must be a finite number >= 0", lambda: cls([w()], lr=-0.1))
    assert msg.startswith(cls.__name__)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: SGD([w()], lr="0.1"), "invalid lr='0.1'"),
        (lambda: SGD([w()], lr=float("nan")), "invalid lr=nan"),
        (lambda: SGD([w()], lr=0.1, momentum=-0.5), "invalid momentum=-0.5"),
        (lambda: SGD([w()], lr=0.1, nesterov=True), "nesterov=True needs momentum > 0 and dampening = 0"),
        (lambda: SGD([w()], lr=0.1, momentum=0.9, dampening=0.1, nesterov=True), "dampening=0.1"),
        (lambda: SGD([w()], lr=0.1, maximize=1), "invalid maximize=1 .* True or False"),
        (lambda: Adam([w()], betas=(0.9, 1.0)), r"invalid betas=\(0.9, 1.0\).*\[0, 1\)"),
        (lambda: Adam([w()], betas=0.9), "a pair of numbers"),
        (lambda: Adam([w()], eps=-1e-8), "invalid eps"),
        (lambda: AdamW([w()], weight_decay=-0.01), "invalid weight_decay=-0.01"),
        (lambda: RMSprop([w()], alpha=-0.1), "invalid alpha=-0.1"),
        (lambda: Adam([{"params": [w()], "lr": -1.0}]), "invalid lr=-1.0 in param group 0"),
    ],
)
def test_bad_hyperparameters(make, match):
    _raises(match, make)


def test_unknown_param_group_key_suggests_the_right_one():
    msg = _raises(
        "unknown key 'weight_deacy' in param group 1; did you mean 'weight_decay'",
        lambda: Adam([{"params": [w()]}, {"params": [w()], "weight_deacy": 0.1}]),
    )
    assert "Adam knows amsgrad, betas" in msg


def test_non_leaf_tensor():
    x = w()
    y = x * 2
    _raises(
        r"parameter 0 of param group 0 \(a tensor of shape \(2,\).*\) is not a leaf: it was computed "
        r"by 'mul'.*\.detach\(\)\.requires_grad_\(\)",
        lambda: SGD([y], lr=0.1),
    )


@pytest.mark.parametrize(
    "params, match",
    [
        (lambda: w(), r"got a single tensor of shape \(2,\); wrap it in a list"),
        (list, "empty parameter list"),
        (lambda: [w(), 3.0], "parameter 1 of param group 0 is a float, not a tensor"),
        (lambda: [ember.zeros(2, dtype=ember.int64)], "has dtype int64; only floating-point"),
        (lambda: {w()}, "got a set"),
        (lambda: [w(), {"params": [w()]}], "mixes tensors and param-group dicts"),
        (lambda: [{"lr": 0.1}], "param group 0 has no 'params' entry"),
        (lambda: 5, "must be an iterable of tensors, got int"),
    ],
)
def test_bad_params(params, match):
    _raises(match, lambda: SGD(params(), lr=0.1))


def test_duplicate_parameters():
    a = w()
    _raises(
        r"parameter 1 of param group 0 .* appears twice \(also earlier in this group\)", lambda: SGD([a, a], lr=0.1)
    )
    _raises(r"appears twice \(also in param group 0\)", lambda: SGD([{"params": [a]}, {"params": [w(), a]}], lr=0.1))


def test_grad_of_the_wrong_shape():
    a = w(3)
    a.grad = ember.zeros(4)
    opt = SGD([a], lr=0.1)
    _raises(
        r"parameter 0 of param group 0 has shape \(3,\) but its .grad has shape \(4,\)", opt.step, cls=ember.ShapeError
    )


def test_read_only_parameter_buffer():
    frozen = np.zeros(3, dtype=np.float32)
    frozen.flags.writeable = False
    p = ember.as_tensor(frozen).requires_grad_()
    p.grad = ember.ones(3)
    opt = SGD([p], lr=0.1)
    _raises(r"cannot update a tensor of shape \(3,\) .* in place: .*read-only.*\.clone\(\)", opt.step)


def test_errors_are_value_errors_too():
    """Code written for torch catches ValueError; it still works."""
    with pytest.raises(ValueError):
        SGD([w()], lr=-1.0)

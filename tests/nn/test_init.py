"""ember.nn.init: the distributions (bounds, moments) PyTorch's formulas give, generator
control, and reproducible default layer initialization under ember.manual_seed."""

import math

import numpy as np
import pytest
from references import known

import ember
from ember import nn
from ember.nn import init


def stats(t):
    a = t.numpy().astype(np.float64)
    return a.min(), a.max(), a.mean(), a.std()


def test_gains_match_torch(torch):
    for name in ("linear", "conv2d", "sigmoid", "tanh", "relu", "selu"):
        assert init.calculate_gain(name) == pytest.approx(known(lambda: torch.nn.init.calculate_gain(name)))
    assert init.calculate_gain("leaky_relu", 0.2) == pytest.approx(
        known(lambda: torch.nn.init.calculate_gain("leaky_relu", 0.2))
    )
    with pytest.raises(ValueError, match="unknown nonlinearity"):
        init.calculate_gain("swishy")


@pytest.mark.parametrize(
    "fn,kw,bound,std",
    [
        (init.kaiming_uniform_, {}, math.sqrt(2) * math.sqrt(3 / 200), None),
        (init.kaiming_uniform_, {"a": math.sqrt(5)}, 1 / math.sqrt(200), None),
        (init.kaiming_uniform_, {"mode": "fan_out", "nonlinearity": "relu"}, math.sqrt(2) * math.sqrt(3 / 400), None),
        (init.xavier_uniform_, {"gain": 2.0}, 2.0 * math.sqrt(6 / 600), None),
        (init.kaiming_normal_, {"nonlinearity": "relu"}, None, math.sqrt(2 / 200)),
        (init.kaiming_normal_, {"mode": "fan_out", "nonlinearity": "relu"}, None, math.sqrt(2 / 400)),
        (init.xavier_normal_, {}, None, math.sqrt(2 / 600)),
    ],
)
def test_fan_based_inits(fn, kw, bound, std):
    t = ember.empty(16, 8, 5, 5)  # fan_in = 8 * 25 = 200, fan_out = 16 * 25 = 400
    fn(t, generator=ember.Generator(0), **kw)
    lo, hi, mean, sd = stats(t)
    if bound is not None:
        assert -bound <= lo and hi < bound and hi > 0.95 * bound and lo < -0.95 * bound
        assert sd == pytest.approx(bound / math.sqrt(3), rel=0.05)
    else:
        assert sd == pytest.approx(std, rel=0.05) and abs(mean) < 0.05 * std


def test_simple_fills_and_trunc_normal():
    t = ember.empty(3, 4)
    assert init.ones_(t).numpy().sum() == 12 and init.zeros_(t).numpy().sum() == 0
    assert (init.constant_(t, 2.5).numpy() == 2.5).all()
    lo, hi, mean, sd = stats(init.uniform_(ember.empty(20000), -2, 3))
    assert lo >= -2 and hi < 3 and mean == pytest.approx(0.5, abs=0.05)
    lo, hi, mean, sd = stats(init.normal_(ember.empty(20000), 1.0, 0.5))
    assert mean == pytest.approx(1.0, abs=0.02) and sd == pytest.approx(0.5, rel=0.03)
    t = init.trunc_normal_(ember.empty(20000), mean=0.0, std=1.0, a=-1.0, b=1.5)
    lo, hi, mean, sd = stats(t)
    assert lo >= -1.0 and hi <= 1.5 and lo < -0.99 and hi > 1.49
    # mean of N(0,1) truncated to [-1, 1.5]: (phi(-1) - phi(1.5)) / (Phi(1.5) - Phi(-1))
    phi = lambda x: math.exp(-x * x / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    Phi = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))  # noqa: E731
    assert mean == pytest.approx((phi(-1) - phi(1.5)) / (Phi(1.5) - Phi(-1)), abs=0.02)
    with pytest.raises(ember.ShapeError):
        init.kaiming_uniform_(ember.empty(5))


def test_generator_controls_the_draw():
    a = init.normal_(ember.empty(10), generator=ember.Generator(7))
    b = init.normal_(ember.empty(10), generator=ember.Generator(7))
    c = init.normal_(ember.empty(10), generator=ember.Generator(8))
    assert a.equal(b) and not a.equal(c)


def test_default_layer_init_is_reproducible_under_manual_seed():
    def build():
        return nn.Sequential(
            nn.Conv2d(3, 8, 3), nn.Linear(10, 4), nn.Embedding(6, 3), nn.LSTM(4, 5), nn.MultiheadAttention(8, 2)
        )

    ember.manual_seed(123)
    a = build().state_dict()
    ember.manual_seed(123)
    b = build().state_dict()
    ember.manual_seed(124)
    c = build().state_dict()
    assert all(a[k].equal(b[k]) for k in a)
    assert not a["1.weight"].equal(c["1.weight"])


def test_linear_and_conv_default_init_follow_torch():
    lin = nn.Linear(300, 50)
    bound = 1 / math.sqrt(300)
    for p in (lin.weight, lin.bias):
        lo, hi, _, _ = stats(p)
        assert -bound <= lo and hi < bound
    lo, hi, _, sd = stats(lin.weight)
    assert hi > 0.95 * bound and sd == pytest.approx(bound / math.sqrt(3), rel=0.05)
    conv = nn.Conv2d(16, 32, 3)
    bound = 1 / math.sqrt(16 * 9)
    lo, hi, _, sd = stats(conv.weight)
    assert -bound <= lo and hi < bound and sd == pytest.approx(bound / math.sqrt(3), rel=0.05)
    lstm = nn.LSTM(4, 25)
    assert max(abs(v) for p in lstm.parameters() for v in stats(p)[:2]) <= 1 / 5
    mha = nn.MultiheadAttention(16, 4)
    assert float(mha.in_proj_bias.abs().sum()) == 0 and float(mha.out_proj.bias.abs().sum()) == 0
    assert stats(mha.in_proj_weight)[1] <= math.sqrt(6 / (16 + 48))

"""model.summary(input_shape) and nn.summary.summary: rows, shapes, totals; the model untouched."""

import numpy as np

import ember
from ember import nn
from ember.nn.summary import summary


def test_rows_shapes_and_totals_match_the_model():
    model = ember.models.get("resnet18")
    s = summary(model, (3, 32, 32))
    assert s.total_params == model.num_parameters() == 11173962
    assert sum(r.params for r in s.rows) == s.total_params
    assert s.rows[0] == ("conv1", "Conv2d", (-1, 64, 32, 32), 1728)
    assert s.rows[-1] == ("fc", "Linear", (-1, 10), 5130)
    assert "Total params: 11,173,962" in str(s)


def test_frozen_parameters_count_as_non_trainable(capsys):
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    model[0].requires_grad_(False)
    model.summary((4,))
    out = capsys.readouterr().out
    assert "Trainable params: 8" in out and "Non-trainable params: 15" in out and "1 (ReLU)" in out


def test_summary_leaves_mode_stats_and_forward_alone():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Dropout(0.5))
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    summary(model, (1, 8, 8))
    assert model.training and all(m.training for m in model.modules())
    assert all(np.array_equal(before[k], v.numpy()) for k, v in model.state_dict().items())
    assert "forward" not in model[0].__dict__
    assert summary(nn.Linear(3, 2), (3,)).rows == [("Linear", "Linear", (-1, 2), 8)]


def test_integer_inputs_for_token_models():
    model = ember.models.get("transformer", vocab_size=20)
    s = summary(model, (16,), dtype=ember.int64)
    assert s.rows[-1].output_shape == (-1, 16, 20)

"""The Trainer's non-finite guard: one NaN in one input sample is caught (ReLU hides it from the
loss, the gradient norm shows it), by name of step and batch, and no checkpoint ever holds NaN."""

import numpy as np
import pytest

import ember
from ember import nn, optim
from ember.data import ArrayDataset, DataLoader
from ember.io import latest_checkpoint, read_checkpoint, to_numpy
from ember.train.trainer import NonFiniteError, Trainer

BAD_BATCH = 2  # the poisoned sample lands in the third batch of epoch 1 (no shuffle)


def make(tmp_path, jit, on_nonfinite="stop"):
    ember.manual_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 4)).astype(np.float32)
    y = (x.sum(1) > 0).astype(np.int64)
    x[BAD_BATCH * 16 + 5, 1] = np.nan
    loader = DataLoader(ArrayDataset(x, y), batch_size=16)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    return Trainer(
        model,
        optim.SGD(model.parameters(), lr=0.1),
        loader,
        out_dir=tmp_path,
        checkpoint_every=1,
        progress=False,
        jit=jit,
        on_nonfinite=on_nonfinite,
    )


def finite_checkpoints(run):
    tensors, meta = read_checkpoint(latest_checkpoint(run))
    return meta["step"], all(np.isfinite(to_numpy(t)).all() for t in tensors.values())


@pytest.mark.parametrize("jit", [False, True])
def test_a_nan_sample_stops_the_run_naming_step_and_batch(tmp_path, jit):
    trainer = make(tmp_path, jit)
    # The ReLU maps the NaN hidden unit to 0, so the loss is finite: only the gradient shows it.
    with pytest.raises(NonFiniteError, match=r"gradient norm became nan .* at step 3 \(epoch 1, batch 3 "):
        trainer.fit(epochs=2)
    step, finite = finite_checkpoints(tmp_path)
    assert step == 2 and finite  # the last good checkpoint, and only good ones


@pytest.mark.parametrize("jit", [False, True])
def test_skip_leaves_the_parameters_untouched_and_counts_it(tmp_path, jit):
    trainer = make(tmp_path, jit, on_nonfinite="skip")
    history = trainer.fit(epochs=2)
    assert trainer.skipped_steps == 2 and history[-1]["skipped_steps"] == 2  # once per epoch
    assert trainer.step == 8
    assert all(np.isfinite(p.numpy()).all() for p in trainer.model.parameters())
    assert finite_checkpoints(tmp_path) == (8, True)


def test_skip_does_not_apply_the_update(tmp_path):
    trainer = make(tmp_path, False, on_nonfinite="skip")
    before = {}

    @trainer.every(1)
    def snapshot(t):
        before[t.step] = [p.numpy().copy() for p in t.model.parameters()]

    trainer.fit(epochs=1)
    assert all(np.array_equal(a, b) for a, b in zip(before[BAD_BATCH], before[BAD_BATCH + 1]))
    assert not all(np.array_equal(a, b) for a, b in zip(before[1], before[2]))


def test_a_checkpoint_with_nan_parameters_is_refused(tmp_path):
    trainer = make(tmp_path, False)
    trainer.fit(epochs=1, max_steps=1)
    with ember.no_grad():
        next(iter(trainer.model.parameters())).fill_(float("nan"))
    with pytest.raises(NonFiniteError, match="not saving step 1: .* NaN/inf"):
        trainer.save()
    assert finite_checkpoints(tmp_path) == (1, True)


def test_on_nonfinite_must_be_known(tmp_path):
    with pytest.raises(ember.EmberError, match="on_nonfinite"):
        make(tmp_path, False, on_nonfinite="ignore")

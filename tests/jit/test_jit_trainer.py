"""The Trainer compiles its step with ember.jit by default; jit=False and EMBER_JIT=0 turn it off."""

import numpy as np
import pytest

import ember
from ember import models, optim
from ember.data import ArrayDataset, DataLoader
from ember.train.trainer import Trainer


def _fit(jit, epochs=2, scheduler=False, clip=None):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((100, 12)).astype(np.float32)  # 100 = 3 batches of 32 + 4
    y = (x[:, :3].sum(1) > 0).astype(np.int64) + (x[:, 3] > 1)
    ember.manual_seed(0)
    model = models.MLP(12, (16,), 3, dropout=0.1)
    opt = optim.Adam(model.parameters(), lr=1e-2)
    sched = optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7) if scheduler else None
    loader = DataLoader(ArrayDataset(x, y), batch_size=32, shuffle=True, seed=0)
    trainer = Trainer(
        model, opt, loader, progress=False, jit=jit, scheduler=sched, scheduler_interval="step", clip_grad_norm=clip
    )
    history = trainer.fit(epochs)
    return trainer, history, model


@pytest.mark.parametrize("options", [{}, {"scheduler": True, "clip": 0.5}], ids=["plain", "schedule-clip"])
def test_jitted_trainer_trains_like_the_eager_one(options):
    t_eager, h_eager, m_eager = _fit(False, **options)
    t_jit, h_jit, m_jit = _fit(True, **options)
    for a, b in zip(h_eager, h_jit):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5)
        assert a["train_accuracy"] == b["train_accuracy"]
    for p, q in zip(m_eager.parameters(), m_jit.parameters()):
        np.testing.assert_allclose(q.numpy(), p.numpy(), rtol=1e-5, atol=1e-6)
    assert t_eager._compiled_step is None
    # Full batches: one trace that creates Adam's state, one that reuses it; the last, smaller
    # batch of each epoch is another signature, traced once for both epochs.
    assert t_jit._compiled_step.trace_count == 3


def test_ember_jit_0_makes_the_trainer_eager(monkeypatch):
    monkeypatch.setenv("EMBER_JIT", "0")
    trainer, _, _ = _fit(True, epochs=1)
    assert trainer._compiled_step.trace_count == 0


def test_the_cli_has_a_no_jit_flag():
    import argparse

    from ember.train import cli

    parser = argparse.ArgumentParser()
    cli.add_subcommands(parser.add_subparsers())
    assert parser.parse_args(["train", "mnist", "--no-jit"]).no_jit is True
    assert parser.parse_args(["train", "mnist"]).no_jit is False

"""Trainer callbacks: EarlyStopping, ModelCheckpoint (best k), ReduceLROnPlateau, and their state
across a pause and resume."""

import json
import math
import os

import pytest

import ember
from ember import nn, optim
from ember.data import ArrayDataset, DataLoader
from ember.errors import EmberError
from ember.io.checkpoint import list_checkpoints, read_checkpoint
from ember.train import Trainer
from ember.train.callbacks import Callback, EarlyStopping, ModelCheckpoint, Monitor, ReduceLROnPlateau


def make(out_dir=None, lr=0.5, callbacks=(), seed=0):
    ember.manual_seed(seed)
    x = ember.randn(96, 4)
    y = (x.sum(1) > 0).long()
    train = DataLoader(ArrayDataset(x.numpy(), y.numpy()), batch_size=16, shuffle=True, seed=seed)
    test = DataLoader(ArrayDataset(x.numpy()[:48], y.numpy()[:48]), batch_size=16)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    return Trainer(
        model,
        optim.SGD(model.parameters(), lr=lr),
        train,
        eval_loader=test,
        out_dir=out_dir,
        progress=False,
        jit=False,
        callbacks=list(callbacks),
    )


def test_monitor_modes_and_a_missing_metric():
    assert Monitor("eval_accuracy").mode == "max" and Monitor("train_loss").mode == "min"
    assert Monitor("eval_loss", "max").mode == "max"
    with pytest.raises(EmberError, match="mode"):
        Monitor("eval_loss", "up")
    with pytest.raises(EmberError, match="eval_loss.*not in the epoch's record.*eval_loader"):
        Monitor("eval_loss").value({"epoch": 1, "train_loss": 0.5})


def test_early_stopping_ends_a_run_that_stopped_improving():
    # A learning rate of 1e-12 changes nothing: the loss never improves by min_delta after epoch 1.
    stop = EarlyStopping("train_loss", patience=2, min_delta=1e-3)
    trainer = make(lr=1e-12, callbacks=[stop])
    history = trainer.fit(epochs=10)
    assert len(history) == 3 and stop.stopped_epoch == 3 and trainer.should_stop
    assert "stopped early after epoch 3" in stop.reason()
    trainer = make(lr=0.5, callbacks=[EarlyStopping("eval_loss", patience=50)])
    assert len(trainer.fit(epochs=4)) == 4  # improving or patient: runs to the end


def test_early_stopping_rejects_a_bad_patience():
    with pytest.raises(EmberError, match="patience"):
        EarlyStopping(patience=0)


def test_model_checkpoint_keeps_the_k_best_and_records_them(tmp_path):
    best = ModelCheckpoint("eval_loss", save_top_k=2)
    trainer = make(tmp_path, callbacks=[best])
    history = trainer.fit(epochs=5)
    ranked = sorted((r["eval_loss"], r["step"]) for r in history)[:2]
    kept = [c.step for c in list_checkpoints(tmp_path / "best")]
    assert sorted(kept) == sorted(step for _, step in ranked)  # the two best; the rest deleted
    assert best.best_model_score == ranked[0][0]
    assert best.best_model_path.endswith(f"ckpt-{ranked[0][1]:08d}.safetensors")
    _, meta = read_checkpoint(best.best_model_path)  # the file says what it scored
    assert meta["extra"]["monitor"] == "eval_loss" and meta["extra"]["score"] == ranked[0][0]
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in records if r["split"] == "best"][-1]
    assert last["best_path"] == best.best_model_path
    _, run_meta = read_checkpoint(tmp_path)  # and the run's own checkpoint
    assert run_meta["extra"]["callbacks"]["ModelCheckpoint"]["kept"][0] == [ranked[0][0], ranked[0][1]]


def test_model_checkpoint_maximises_an_accuracy(tmp_path):
    best = ModelCheckpoint("eval_accuracy", save_top_k=1)
    history = make(tmp_path, callbacks=[best]).fit(epochs=3)
    assert best.best_model_score == max(r["eval_accuracy"] for r in history)
    assert len(list_checkpoints(tmp_path / "best")) == 1


def test_model_checkpoint_needs_a_place_to_write():
    with pytest.raises(EmberError, match="dirpath or a Trainer with out_dir"):
        make(None, callbacks=[ModelCheckpoint()]).fit(epochs=1)


def test_reduce_lr_on_plateau_lowers_the_rate():
    plateau = ReduceLROnPlateau("train_loss", patience=0, factor=0.5, threshold=1e-3)
    trainer = make(lr=1e-12, callbacks=[plateau])
    rates = []
    trainer.at_epoch_end(lambda t, record: rates.append(t.optimizer.param_groups[0]["lr"]))
    trainer.fit(epochs=4)
    # The hooks run before the callbacks: epoch 1 sets the best, each later epoch halves the rate.
    assert rates == pytest.approx([1e-12, 1e-12, 5e-13, 2.5e-13])
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(1.25e-13)


def test_resume_keeps_callback_state(tmp_path):
    def callbacks():
        return [
            EarlyStopping("eval_loss", patience=2, min_delta=0.02),
            ModelCheckpoint("eval_loss", save_top_k=2),
            ReduceLROnPlateau("eval_loss", patience=0, factor=0.5),
        ]

    straight = make(tmp_path / "straight", callbacks=callbacks())
    straight.fit(epochs=8)
    paused = make(tmp_path / "paused", callbacks=callbacks())
    paused.fit(epochs=8, max_steps=15)  # stops inside epoch 3 (6 batches an epoch)
    assert paused.paused
    resumed = make(tmp_path / "paused", callbacks=callbacks())
    assert resumed.resume()
    assert [cb.state_dict() for cb in resumed.callbacks] == [cb.state_dict() for cb in paused.callbacks]
    resumed.fit(epochs=8)
    assert resumed.history == straight.history
    assert [cb.state_dict() for cb in resumed.callbacks] == [cb.state_dict() for cb in straight.callbacks]
    assert sorted(os.listdir(tmp_path / "paused" / "best")) == sorted(os.listdir(tmp_path / "straight" / "best"))


def test_a_stopped_run_stays_stopped_on_resume(tmp_path):
    stop = EarlyStopping("train_loss", patience=1, min_delta=1e-3)
    trainer = make(tmp_path, lr=1e-12, callbacks=[stop])
    assert len(trainer.fit(epochs=10)) == 2
    again = make(tmp_path, lr=1e-12, callbacks=[EarlyStopping("train_loss", patience=1, min_delta=1e-3)])
    again.resume()
    assert len(again.fit(epochs=10)) == 2 and again.should_stop


def test_resume_without_a_callbacks_state_is_an_error(tmp_path):
    make(tmp_path).fit(epochs=1)
    later = make(tmp_path, callbacks=[EarlyStopping()])
    with pytest.raises(EmberError, match="no state for callback EarlyStopping"):
        later.resume()


def test_a_callback_sees_every_hook():
    seen = []

    class Spy(Callback):
        def setup(self, trainer):
            seen.append("setup")

        def on_fit_start(self, trainer):
            seen.append("start")

        def on_epoch_end(self, trainer, record):
            seen.append(record["epoch"])
            assert not math.isnan(record["eval_loss"])

        def on_fit_end(self, trainer):
            seen.append("end")

    make(callbacks=[Spy()]).fit(epochs=2)
    assert seen == ["setup", "start", 1, 2, "end"]

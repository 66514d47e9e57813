"""ember.io.checkpoint: the directory layer (sidecars, checksums, atomic commits, pruning)."""

import json
import os
import warnings

import pytest

from ember.io import (
    CheckpointError,
    CheckpointWarning,
    TensorBytes,
    checkpoint_path,
    latest_checkpoint,
    list_checkpoints,
    read_checkpoint,
    write_checkpoint,
)

META = {
    "optimizer": {"name": "adam", "lr": 1e-3, "betas": [0.9, 0.999]},
    "rng": {"key": 2**64 - 1, "counter": 7},
    "data_position": {"epoch": 2, "index": 513},
    "config": {"layers": [784, 128, 10]},
}


def ckpt(step):
    """Tensors whose contents identify the step they were written at."""
    return {
        "w": TensorBytes("I64", (4,), step.to_bytes(8, "little") * 4),
        "b": TensorBytes("F32", (), b"\0\0\x80?"),
        "empty": TensorBytes("U8", (0, 3), b""),
    }


def snapshot(directory):
    """{file name: bytes} of everything in ``directory``, to prove nothing changed."""
    return {n: open(os.path.join(directory, n), "rb").read() for n in sorted(os.listdir(directory))}


def names(directory):
    return sorted(os.listdir(directory))


def test_round_trip(tmp_path):
    path = write_checkpoint(tmp_path, 12, ckpt(12), META)
    assert path == checkpoint_path(tmp_path, 12) == str(tmp_path / "ckpt-00000012.safetensors")
    assert names(tmp_path) == ["ckpt-00000012.json", "ckpt-00000012.safetensors"]
    for source in (tmp_path, path, str(tmp_path / "ckpt-00000012.json")):
        tensors, meta = read_checkpoint(source)
        assert {k: bytes(t.data) for k, t in tensors.items()} == {k: bytes(t.data) for k, t in ckpt(12).items()}
        assert meta == {**META, "step": 12}


def test_sidecar_fields(tmp_path):
    import hashlib

    path = write_checkpoint(tmp_path, 5, ckpt(5), META)
    sidecar = json.loads((tmp_path / "ckpt-00000005.json").read_text())
    data = open(path, "rb").read()
    assert sidecar["format"] == "ember.checkpoint" and sidecar["format_version"] == 2
    assert sidecar["step"] == 5 and sidecar["num_tensors"] == 3 and sidecar["size"] == len(data)
    assert sidecar["sha256"] == hashlib.sha256(data).hexdigest()
    assert sidecar["tensors_file"] == "ckpt-00000005.safetensors"
    assert sidecar["meta"] == {**META, "step": 5}
    body = {k: v for k, v in sidecar.items() if k != "sidecar_sha256"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    assert sidecar["sidecar_sha256"] == hashlib.sha256(canonical).hexdigest()


def test_numpy_arrays_accepted(tmp_path):
    np = pytest.importorskip("numpy")
    write_checkpoint(tmp_path, 1, {"w": np.arange(6, dtype=np.float32).reshape(2, 3)})
    from ember.io import to_numpy

    assert to_numpy(read_checkpoint(tmp_path)[0]["w"]).tolist() == [[0, 1, 2], [3, 4, 5]]


@pytest.mark.parametrize(
    "kwargs, error",
    [
        (dict(step=-1), ValueError),
        (dict(step=1.0), ValueError),
        (dict(step=True), ValueError),
        (dict(keep_last=0), ValueError),
        (dict(meta={"step": 99}), ValueError),
        (dict(meta={"loss": float("nan")}), ValueError),
        (dict(meta={"f": print}), TypeError),
        (dict(tensors={"w": TensorBytes("F32", (2,), b"")}), ValueError),
    ],
)
def test_bad_arguments_change_nothing(tmp_path, kwargs, error):
    write_checkpoint(tmp_path, 1, ckpt(1))
    before = snapshot(tmp_path)
    args = dict(directory=tmp_path, step=2, tensors=ckpt(2), meta=None) | kwargs
    with pytest.raises(error):
        write_checkpoint(**args)
    assert snapshot(tmp_path) == before


def test_keep_last(tmp_path):
    for step in range(6):
        write_checkpoint(tmp_path, step * 10, ckpt(step), keep_last=2)
    assert names(tmp_path) == [
        "ckpt-00000040.json",
        "ckpt-00000040.safetensors",
        "ckpt-00000050.json",
        "ckpt-00000050.safetensors",
    ]
    for step in range(3):
        write_checkpoint(tmp_path, 100 + step, ckpt(step), keep_last=None)
    assert len(list_checkpoints(tmp_path)) == 5


def test_keep_last_never_deletes_the_new_checkpoint(tmp_path):
    """Rewinding to an earlier step with newer ones present still keeps what was just written."""
    write_checkpoint(tmp_path, 50, ckpt(50))
    write_checkpoint(tmp_path, 10, ckpt(10), keep_last=1)
    assert [c.step for c in list_checkpoints(tmp_path)] == [10, 50]


def test_rewrite_same_step(tmp_path):
    write_checkpoint(tmp_path, 3, ckpt(3), {"v": 1})
    write_checkpoint(tmp_path, 3, ckpt(4), {"v": 2})
    tensors, meta = read_checkpoint(tmp_path)
    assert meta["v"] == 2 and bytes(tensors["w"].data) == bytes(ckpt(4)["w"].data)
    assert len(names(tmp_path)) == 2


@pytest.mark.parametrize("failing_call", [1, 2])  # 1: the tensors file's rename, 2: the sidecar's
def test_crash_before_rename_leaves_previous_checkpoint(tmp_path, monkeypatch, failing_call):
    write_checkpoint(tmp_path, 1, ckpt(1), META)
    before = snapshot(tmp_path)
    real_replace, calls = os.replace, []

    def crashing_replace(src, dst):
        calls.append(dst)
        if len(calls) == failing_call:
            raise OSError("simulated crash before rename")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crashing_replace)
    with pytest.raises(OSError, match="simulated crash"):
        write_checkpoint(tmp_path, 2, ckpt(2), META)
    monkeypatch.undo()
    assert snapshot(tmp_path) == before  # previous intact, no temp file, no half checkpoint
    assert latest_checkpoint(tmp_path) == checkpoint_path(tmp_path, 1)
    assert read_checkpoint(tmp_path)[1]["step"] == 1


def test_crash_during_write_leaves_previous_checkpoint(tmp_path, monkeypatch):
    write_checkpoint(tmp_path, 1, ckpt(1))
    before = snapshot(tmp_path)
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError, match="disk full"):
        write_checkpoint(tmp_path, 2, ckpt(2))
    monkeypatch.undo()
    assert snapshot(tmp_path) == before


def test_leftovers_of_a_killed_writer_are_ignored_then_cleaned(tmp_path):
    write_checkpoint(tmp_path, 1, ckpt(1))
    (tmp_path / "ckpt-00000002.safetensors").write_bytes(b"half a file")  # no sidecar: uncommitted
    (tmp_path / ".ckpt-00000002.safetensors.abcd.tmp").write_bytes(b"partial")
    (tmp_path / "notes.txt").write_text("not ours")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an interrupted write is expected, not worth a warning
        assert latest_checkpoint(tmp_path) == checkpoint_path(tmp_path, 1)
    assert [c.status for c in list_checkpoints(tmp_path)] == ["ok", "incomplete"]
    with pytest.raises(CheckpointError, match="sidecar ckpt-00000002.json is missing"):
        read_checkpoint(tmp_path / "ckpt-00000002.safetensors")
    write_checkpoint(tmp_path, 3, ckpt(3))
    assert names(tmp_path) == [
        "ckpt-00000001.json",
        "ckpt-00000001.safetensors",
        "ckpt-00000003.json",
        "ckpt-00000003.safetensors",
        "notes.txt",
    ]


def corrupt(path, how):
    data = bytearray(open(path, "rb").read())
    if how == "flip":
        data[-1] ^= 0xFF
    elif how == "truncate":
        del data[-5:]
    open(path, "wb").write(bytes(data))


@pytest.mark.parametrize(
    "how, cause",
    [
        ("flip", "checksum mismatch"),
        ("truncate", "sidecar says"),
        ("delete", "tensors file is missing"),
        ("bad sidecar", "sidecar is not valid JSON"),
    ],
)
def test_corrupt_newest_falls_back_with_warning(tmp_path, how, cause):
    for step in (1, 2, 3):
        write_checkpoint(tmp_path, step, ckpt(step))
    newest = checkpoint_path(tmp_path, 3)
    if how == "delete":
        os.unlink(newest)
    elif how == "bad sidecar":
        (tmp_path / "ckpt-00000003.json").write_text("{")
    else:
        corrupt(newest, how)
    with pytest.warns(CheckpointWarning, match=cause):
        assert latest_checkpoint(tmp_path) == checkpoint_path(tmp_path, 2)
    with pytest.raises(CheckpointError, match=cause) as info:
        read_checkpoint(newest)
    assert "ckpt-00000003" in str(info.value)
    with pytest.warns(CheckpointWarning):
        assert read_checkpoint(tmp_path)[1]["step"] == 2
    assert [c.status == "ok" for c in list_checkpoints(tmp_path, verify=True)] == [True, True, False]


def test_all_corrupt_means_none(tmp_path):
    write_checkpoint(tmp_path, 1, ckpt(1))
    corrupt(checkpoint_path(tmp_path, 1), "flip")
    with pytest.warns(CheckpointWarning):
        assert latest_checkpoint(tmp_path) is None
    with pytest.warns(CheckpointWarning), pytest.raises(CheckpointError, match="no complete checkpoint"):
        read_checkpoint(tmp_path)


def test_missing_directory(tmp_path):
    assert latest_checkpoint(tmp_path / "nope") is None
    assert list_checkpoints(tmp_path) == []


@pytest.mark.parametrize(
    "edit, cause",
    [
        (lambda s: [1], "not an ember checkpoint sidecar"),
        (lambda s: s | {"format": "other"}, "not an ember checkpoint sidecar"),
        (lambda s: {k: v for k, v in s.items() if k != "sha256"}, "'sha256' is missing"),
        (lambda s: s | {"size": "12"}, "'size' is missing or is not of type int"),
        (lambda s: s | {"num_tensors": True}, "'num_tensors'"),
        (lambda s: s | {"meta": None}, "'meta'"),
        (lambda s: s | {"format_version": 99}, "newer ember"),
        (lambda s: s | {"sha256": "0" * 64}, "sidecar checksum mismatch"),
        (lambda s: s | {"meta": {**s["meta"], "step": 7}}, "sidecar checksum mismatch"),
        (lambda s: s | {"meta": {**s["meta"], "lr": 1.0}}, "sidecar checksum mismatch"),
        (lambda s: {k: v for k, v in s.items() if k != "sidecar_sha256"}, "sidecar checksum mismatch"),
        (lambda s: s | {"time": float("nan")}, "sidecar checksum mismatch"),
        (lambda s: _reseal(s | {"sha256": "0" * 64}), "sha256 checksum mismatch"),
        (lambda s: _reseal(s | {"meta": {**s["meta"], "step": 7}}), "disagrees with meta step"),
    ],
)
def test_tampered_sidecar(tmp_path, edit, cause):
    write_checkpoint(tmp_path, 1, ckpt(1))
    sidecar = tmp_path / "ckpt-00000001.json"
    sidecar.write_text(json.dumps(edit(json.loads(sidecar.read_text()))))
    with pytest.raises(CheckpointError, match=cause):
        read_checkpoint(tmp_path / "ckpt-00000001.safetensors")


def _reseal(sidecar):
    """An edit that also recomputes the sidecar's own checksum (a deliberate forgery)."""
    from ember.io.checkpoint import _content_hash

    return sidecar | {"sidecar_sha256": _content_hash(sidecar)}


def test_stale_temp_files_and_interrupted_writes_are_swept(tmp_path):
    from ember.io import sweep

    write_checkpoint(tmp_path, 1, ckpt(1))
    (tmp_path / ".ckpt-00000002.safetensors.0a1b2c.tmp").write_bytes(b"x" * 1000)
    (tmp_path / "ckpt-00000002.safetensors").write_bytes(b"half")
    (tmp_path / "notes.tmp").write_text("not ours")
    assert sweep(tmp_path) == ["ckpt-00000002.safetensors", ".ckpt-00000002.safetensors.0a1b2c.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt-00000001.json",
        "ckpt-00000001.safetensors",
        "notes.tmp",
    ]


def test_list_checkpoints(tmp_path):
    import time

    t0 = time.time()
    for step in (7, 8):
        write_checkpoint(tmp_path, step, ckpt(step))
    (tmp_path / "ckpt-00000009.safetensors").write_bytes(b"x")
    infos = list_checkpoints(tmp_path)
    assert [(c.step, c.num_tensors, c.status) for c in infos] == [(7, 3, "ok"), (8, 3, "ok"), (9, None, "incomplete")]
    assert infos[0].size == os.path.getsize(infos[0].path) and t0 - 1 <= infos[0].time <= time.time() + 1
    assert infos[2].size == 1 and infos[2].time is None


def test_large_step_numbers_sort_numerically(tmp_path):
    write_checkpoint(tmp_path, 99_999_999, ckpt(1))
    write_checkpoint(tmp_path, 100_000_000, ckpt(2))
    assert latest_checkpoint(tmp_path).endswith("ckpt-100000000.safetensors")


def test_failed_cleanup_is_a_warning_not_a_failed_save(tmp_path, monkeypatch):
    write_checkpoint(tmp_path, 1, ckpt(1))
    import ember.io.checkpoint as module

    monkeypatch.setattr(module, "_remove", lambda path: (_ for _ in ()).throw(PermissionError(path)))
    with pytest.warns(CheckpointWarning, match="cleaning up old files failed"):
        write_checkpoint(tmp_path, 2, ckpt(2), keep_last=1)
    monkeypatch.undo()
    assert read_checkpoint(tmp_path)[1]["step"] == 2

"""ember.save / ember.load, and ember.io's file functions taking a state_dict as it is."""

import io
import json
import math
import struct

import numpy as np
import pytest
from references import known

import ember
from ember import nn, optim
from ember.io import CheckpointError, load_file, read_checkpoint, save_file, write_checkpoint


def _same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("name", ember.models.names())
def test_every_zoo_model_round_trips(name, tmp_path):
    kwargs = {"vocab_size": 40} if name == "transformer" else {}
    ember.manual_seed(0)
    model = ember.models.get(name, **kwargs)
    path = tmp_path / f"{name}.safetensors"
    ember.save(model.state_dict(), path)
    ember.manual_seed(1)  # a differently initialised copy
    other = ember.models.get(name, **kwargs)
    loaded = ember.load(path)
    assert sorted(loaded) == sorted(model.state_dict())
    other.load_state_dict(loaded)
    for key, value in model.state_dict().items():
        assert _same(other.state_dict()[key], value), key


@pytest.mark.parametrize(
    "make",
    [
        lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9),
        lambda ps: optim.Adam(ps, lr=0.01),
        lambda ps: optim.AdamW(ps, lr=0.01),
        lambda ps: optim.RMSprop(ps, lr=0.01),
        lambda ps: optim.Adagrad(ps, lr=0.05),
        lambda ps: optim.Adadelta(ps),
    ],
)
def test_optimizer_state_round_trips_and_continues_identically(make, tmp_path):
    ember.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = make(model.parameters())
    x, y = ember.randn(16, 4), ember.randint(0, 2, (16,))

    def step(m, o):
        o.zero_grad()
        nn.functional.cross_entropy(m(x), y).backward()
        o.step()

    step(model, opt)
    ember.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": 1}, tmp_path / "ck")
    step(model, opt)  # the reference's second step

    ember.manual_seed(5)
    model2 = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt2 = make(model2.parameters())
    ck = ember.load(tmp_path / "ck")
    assert ck["step"] == 1 and isinstance(next(iter(ck["optim"]["state"])), int)
    model2.load_state_dict(ck["model"])
    opt2.load_state_dict(ck["optim"])
    step(model2, opt2)
    for (k, a), b in zip(model.state_dict().items(), model2.state_dict().values()):
        assert _same(a, b), k


def test_nested_structure_round_trips_exactly():
    obj = {
        "a": [ember.tensor([1, 2], dtype=ember.int64), (1, 2.5, None, "s", True)],
        3: {"$odd": ember.zeros(2, 3, dtype=ember.float64)},
        "floats": [float("inf"), -float("inf")],
        "nan": float("nan"),
        "w": ember.ones(2, requires_grad=True),
        "np": np.arange(3, dtype=np.int16),
        (1, 2): "tuple key",
    }
    buf = io.BytesIO()
    ember.save(obj, buf)
    back = ember.load(io.BytesIO(buf.getvalue()))
    assert set(back) == set(obj)
    assert _same(back["a"][0], obj["a"][0]) and back["a"][1] == obj["a"][1]
    assert _same(back[3]["$odd"], obj[3]["$odd"])
    assert back["floats"] == obj["floats"] and math.isnan(back["nan"])
    assert back["w"].requires_grad and not back["a"][0].requires_grad
    assert back["np"].dtype == np.int16 and back["np"].tolist() == [0, 1, 2]
    assert back[(1, 2)] == "tuple key"


def test_a_bare_tensor_and_its_names_in_the_file(tmp_path):
    ember.save(ember.arange(4), tmp_path / "t")
    assert ember.load(tmp_path / "t").tolist() == [0, 1, 2, 3]
    ember.save(nn.Linear(3, 2).state_dict(), tmp_path / "sd")
    tensors, meta = load_file(tmp_path / "sd")  # other safetensors readers see plain names
    assert sorted(tensors) == ["bias", "weight"] and meta["format"] == "ember.save"


def test_a_plain_safetensors_file_loads_as_a_dict_of_tensors(tmp_path):
    save_file({"w": ember.io.TensorBytes("F32", (2,), struct.pack("<2f", 1, 2))}, tmp_path / "p")
    assert ember.load(tmp_path / "p")["w"].tolist() == [1.0, 2.0]


def test_map_location_moves_tensors(tmp_path):
    ember.save({"w": ember.ones(2)}, tmp_path / "m")
    assert ember.load(tmp_path / "m", map_location="python")["w"].backend.name == "python"
    assert ember.load(tmp_path / "m", map_location=ember.device("cpu"))["w"].device == "cpu"


def test_what_cannot_be_saved_is_named_with_its_place():
    with pytest.raises(TypeError, match=r"cannot store Linear at obj\['model'\]\[0\].*state_dict"):
        ember.save({"model": [nn.Linear(2, 2)]}, io.BytesIO())
    with pytest.raises(TypeError, match=r"the dict at obj\['a'\] has a key of type Tensor"):
        ember.save({"a": {ember.ones(1): 1}}, io.BytesIO())
    with pytest.raises(ValueError, match="weights_only=False"):
        ember.load(io.BytesIO(), weights_only=False)


def _with_structure(structure: str) -> bytes:
    from ember.io import save_bytes

    return save_bytes({}, {"format": "ember.save", "format_version": "1", "structure": structure})


@pytest.mark.parametrize(
    "structure, cause",
    [
        ('{"$tensor": "missing"}', "malformed"),
        ("not json", "not valid JSON"),
        ('{"$float": "1e999x"}', "malformed"),
        ('{"$dict": [[[1], 2]]}', "malformed"),
        ("[" * 100000 + "]" * 100000, "JSON|deeply"),
    ],
)
def test_a_hostile_structure_is_a_checkpoint_error(structure, cause):
    with pytest.raises(CheckpointError, match=cause):
        ember.load(io.BytesIO(_with_structure(structure)))


def test_newer_format_is_refused_by_name():
    from ember.io import save_bytes

    blob = save_bytes({}, {"format": "ember.save", "format_version": "9", "structure": "1"})
    with pytest.raises(CheckpointError, match="newer ember"):
        ember.load(io.BytesIO(blob))


def test_io_save_file_takes_a_state_dict(tmp_path):
    # The reported bug: ValueError: not enough values to unpack (expected 3, got 2).
    model = nn.Linear(3, 2)
    save_file(model.state_dict(), tmp_path / "w.safetensors")
    other = nn.Linear(3, 2)
    other.load_state_dict(load_file(tmp_path / "w.safetensors")[0])
    assert _same(other.weight, model.weight) and _same(other.bias, model.bias)


def test_checkpoint_of_a_state_dict_loads_back_into_the_model(tmp_path):
    # The reported bug: read_checkpoint -> load_state_dict raised "ragged nested sequence".
    model = nn.Linear(3, 2)
    write_checkpoint(tmp_path, 1, model.state_dict(), {"note": "x"})
    tensors, meta = read_checkpoint(tmp_path)
    other = nn.Linear(3, 2)
    other.load_state_dict(tensors)
    assert _same(other.weight, model.weight) and json.dumps(meta)


def test_a_torch_save_file_is_named_for_what_it_is(tmp_path, torch):
    def torch_file():
        buf = io.BytesIO()
        torch.save({"w": torch.ones(2)}, buf)
        return np.frombuffer(buf.getvalue(), np.uint8)

    (tmp_path / "model.pt").write_bytes(known(torch_file).tobytes())  # torch.save's bytes, stored
    with pytest.raises(CheckpointError, match="zip archive, as torch.save writes.*never unpickles"):
        ember.load(tmp_path / "model.pt")
    import pickle

    with pytest.raises(CheckpointError, match="a Python pickle"):
        ember.load(io.BytesIO(pickle.dumps({"a": 1})))


def test_save_load_and_devices_work_without_numpy():
    """The browser build has no numpy: ember.save/load, devices and inference_mode must not need it."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import sys, io
        sys.modules["numpy"] = None
        import ember
        x = ember.ones(2)
        assert x.backend.name == "python" and x.device == "cpu" and x.to("cpu") is x
        buf = io.BytesIO()
        ember.save({"w": x, "n": (1, 2.5)}, buf)
        back = ember.load(io.BytesIO(buf.getvalue()))
        assert back["w"].tolist() == [1.0, 1.0] and back["n"] == (1, 2.5)
        with ember.inference_mode():
            assert not (x.requires_grad_() * 2).requires_grad
        print("ok")
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr

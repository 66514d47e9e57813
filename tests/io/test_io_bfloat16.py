"""bfloat16 safetensors: a file as torch's safetensors writes it (header JSON, then the raw
little-endian bf16 bits) loads equal to torch; ember writes the same bytes back."""

import json
import struct

import numpy as np
from references import known

import ember
from ember import io


def torch_style_file(tensors) -> bytes:
    """The safetensors layout (8-byte header length, JSON header, data), written by hand:
    ``tensors`` maps name -> (dtype code, shape, raw bytes)."""
    header, offset, data = {}, 0, b""
    for name, (code, shape, raw) in tensors.items():
        header[name] = {"dtype": code, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def test_torch_bf16_weights_load_equal_to_torch(torch, tmp_path):
    torch.manual_seed(0)
    layer = torch.nn.Linear(5, 3).to(torch.bfloat16)
    state = known(lambda: {k: v.view(torch.int16).numpy() for k, v in layer.state_dict().items()})
    values = known(lambda: {k: v.float().numpy() for k, v in layer.state_dict().items()})
    path = tmp_path / "model.safetensors"
    path.write_bytes(torch_style_file({k: ("BF16", v.shape, v.astype("<i2").tobytes()) for k, v in state.items()}))

    loaded = ember.load(path)  # tensors, bfloat16 kept
    assert {k: v.dtype for k, v in loaded.items()} == {"bias": ember.bfloat16, "weight": ember.bfloat16}
    for k, v in loaded.items():
        np.testing.assert_array_equal(v.float().numpy(), values[k])

    model = ember.nn.Linear(5, 3)  # float32 weights: cast on load
    model.load_state_dict(loaded)
    assert model.weight.dtype is ember.float32
    np.testing.assert_array_equal(model.weight.numpy(), values["weight"])
    x = np.linspace(-1, 1, 10, dtype=np.float32).reshape(2, 5)
    want = known(lambda: layer.float()(torch.tensor(x)).detach().numpy())
    np.testing.assert_allclose(model(ember.tensor(x)).numpy(), want, rtol=1e-6, atol=1e-6)

    # saved again from bf16 tensors, the data bytes are torch's
    again = tmp_path / "again.safetensors"
    io.save_file(loaded, again)
    entries, _ = io.load_file(again)
    for k, tb in entries.items():
        assert tb.dtype == "BF16" and bytes(tb.data) == state[k].astype("<i2").tobytes()


def test_bf16_model_round_trips_through_ember_save(tmp_path):
    ember.manual_seed(0)
    model = ember.nn.Conv2d(2, 3, 3).to(ember.bfloat16)
    path = tmp_path / "m.safetensors"
    ember.save(model.state_dict(), path)
    entries, _ = io.load_file(path)
    assert {tb.dtype for tb in entries.values()} == {"BF16"}
    assert sum(tb.nbytes for tb in entries.values()) == 2 * model.num_parameters()  # 2 bytes a weight
    back = ember.load(path)
    for k, v in model.state_dict().items():
        assert back[k].dtype is ember.bfloat16 and back[k].float().tolist() == v.float().tolist()

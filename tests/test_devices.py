"""ember.device, Tensor.device, x.to(device) and ember.cuda, as a torch user types them."""

import pytest
from references import known

import ember
from ember import nn
from ember.errors import BackendError


def test_device_object_reads_like_torch(torch):
    d = ember.device("cuda:1")
    assert (d.type, d.index, str(d), repr(d)) == ("cuda", 1, "cuda:1", "device(type='cuda', index=1)")

    def fields(dev):
        return dev.type, dev.index, str(dev), repr(dev)

    for spec in (("cuda:1",), ("cuda", 1), ("cpu",), ("cuda",)):  # torch.device's answers, stored
        want = known(lambda: fields(torch.device(*spec)))
        assert fields(ember.device(*spec)) == want, f"device{spec}: ember {fields(ember.device(*spec))}, torch {want}"
    assert ember.device("cuda", 1) == d and ember.device(d) == d
    assert ember.device("cpu") == "cpu" and hash(ember.device("cpu")) == hash("cpu")
    assert ember.device("cpu") != ember.device("cuda")
    with pytest.raises(AttributeError):
        d.type = "cpu"


@pytest.mark.parametrize(
    "bad, cause",
    [
        ("gpu", "unknown device type 'gpu'"),
        ("cuda:x", "invalid index"),
        (("cuda:0", 1), "given twice"),
        (("cuda", -1), "non-negative"),
    ],
)
def test_bad_devices_name_the_cause_and_the_line(bad, cause):
    args = bad if isinstance(bad, tuple) else (bad,)
    with pytest.raises(ValueError, match=cause) as info:
        ember.device(*args)
    assert "test_devices.py" in str(info.value)


def test_tensor_device_is_a_device_that_to_accepts():
    x = ember.ones(2)
    assert isinstance(x.device, ember.device) and x.device == "cpu"
    assert x.to(x.device) is x and x.to("cpu") is x and x.to(ember.device("cpu")) is x


def test_cpu_keeps_a_cpu_backend_and_means_the_default_elsewhere():
    x = ember.ones(2, backend="python")
    assert x.to("cpu") is x  # python runs on the CPU: nothing moves
    assert x.to("numpy").backend.name == "numpy"  # a backend name still moves
    with ember.backend("python"):
        assert ember.devices.backend_for("cpu").name == "python"  # the current CPU backend wins


def test_module_to_device():
    model = nn.Linear(2, 2).to(ember.device("cpu"))
    assert model.weight.device == "cpu"


def test_cuda_without_a_gpu_is_a_clear_error():
    if ember.cuda.is_available():
        pytest.skip("a CUDA backend is usable here")
    with pytest.raises(BackendError, match="no backend runs on device 'cuda'.*plugins/cupy") as info:
        ember.ones(2).to("cuda")
    assert "test_devices.py" in str(info.value)


def test_cuda_is_available_matches_the_backends():
    usable = [
        row
        for row in ember.list_backends()
        if row.get("status") == "ok" and any(str(d).startswith("cuda") for d in row.get("devices", ()))
    ]
    assert ember.cuda.is_available() == bool(usable)


def test_unknown_backend_hint_is_a_command_that_works_from_the_repository():
    from ember.registry import REGISTRY, install_hint

    assert install_hint("numba") == "Install it from ember's repository: `pip install ./plugins/numba`"
    with pytest.raises(BackendError) as info:
        ember.ones(1).to("nosuch")
    assert "pip install ./plugins/NAME" in str(info.value) and "ember-nosuch" not in str(info.value)
    assert set(REGISTRY.infos) >= {"numpy", "python"}


def test_cpu_and_cuda_methods():
    x = ember.ones(2)
    assert x.cpu() is x
    model = nn.Linear(2, 2)
    assert model.cpu() is model and model.weight.device == "cpu"
    if not ember.cuda.is_available():
        with pytest.raises(BackendError, match="no backend runs on device 'cuda'"):
            x.cuda()


def test_non_blocking_is_accepted_as_in_torch():
    x = ember.ones(2)
    assert x.to("cpu", non_blocking=True) is x
    assert x.to(ember.float64, non_blocking=True).dtype == ember.float64
    assert nn.Linear(2, 2).to("cpu", non_blocking=True).weight.device == "cpu"

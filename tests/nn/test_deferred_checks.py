"""nll_loss's target check on a device backend: no host read when the loss is computed, the
same error (naming the user's line) at the next read from that backend. The device backend
here is the NumPy backend declaring ``Capabilities.on_device`` and counting its host reads."""

import inspect

import numpy as np
import pytest

import ember
import ember.nn.functional as F
from ember import deferred
from ember.backend import BackendInfo
from ember.backends.numpy.backend import NumpyBackend
from ember.registry import REGISTRY


class DeviceNumpy(NumpyBackend):
    """NumPy, declared as a device backend; counts every read of values by the host."""

    name = "numpy-device-test"

    def __init__(self):
        self.reads = 0

    def capabilities(self):
        caps = super().capabilities()
        caps.on_device = True
        return caps

    def to_list(self, buf):
        self.reads += 1
        return super().to_list(buf)

    def to_numpy(self, buf):
        self.reads += 1
        return super().to_numpy(buf)

    def to_bytes(self, buf):
        self.reads += 1
        return super().to_bytes(buf)


@pytest.fixture
def device():
    backend = DeviceNumpy()
    ember.register_backend(BackendInfo(backend.name, lambda: backend))
    yield backend
    deferred.PENDING.pop(backend, None)
    for table in (REGISTRY.infos, REGISTRY.origin, REGISTRY.loaded):  # leave the registry as it was
        table.pop(backend.name, None)


def _logits(backend, n=4, c=3):
    rng = np.random.default_rng(0)
    return ember.tensor(rng.standard_normal((n, c)).astype(np.float32), backend=backend)


def _line():
    return inspect.currentframe().f_back.f_lineno


def test_the_cpu_check_is_immediate_and_names_the_line():
    logp = _logits("numpy").log_softmax(-1)
    with pytest.raises(ValueError, match="nll_loss: target 3 is out of range for 3 classes") as info:
        line = _line() + 1
        F.nll_loss(logp, ember.tensor([0, 3, 1, 2]))
    assert f"test_deferred_checks.py:{line}" in str(info.value)
    assert not deferred.PENDING


def test_nll_loss_reads_nothing_from_a_device_backend(device):
    logp = _logits(device.name).log_softmax(-1)
    target = ember.tensor([0, 2, 1, 2], backend=device.name)
    before = device.reads
    loss = F.nll_loss(logp, target)
    assert device.reads == before  # no .item(): no host synchronisation
    assert deferred.PENDING.get(device)  # the check waits for the next read
    want = F.nll_loss(ember.tensor(logp.numpy()), ember.tensor(target.numpy()))
    assert loss.item() == pytest.approx(want.item(), rel=1e-6)
    assert not deferred.PENDING  # the read ran the check: it passed


def test_a_bad_target_raises_at_the_next_read_naming_the_loss_line(device):
    logits = _logits(device.name)
    line = _line() + 1  # the next line's number (the formatter splits `a; b` in two)
    loss = F.cross_entropy(logits, ember.tensor([0, 7, 1, -2], backend=device.name))
    total = loss * 2  # more device work: still no error, no read
    with pytest.raises(ValueError, match="nll_loss: target 7 is out of range for 3 classes") as info:
        total.item()
    assert f"test_deferred_checks.py:{line}" in str(info.value)
    assert "loss = F.cross_entropy" in str(info.value)
    assert np.isfinite(total.item())  # reported once; the clamped loss is finite meanwhile


@pytest.mark.parametrize("read", ["item", "tolist", "numpy", "to", "flush"])
def test_every_host_read_raises_it(device, read):
    logp = _logits(device.name).log_softmax(-1)
    F.nll_loss(logp, ember.tensor([0, 1, 5, 1], backend=device.name))
    other = ember.ones(2, backend=device.name)
    ember.ones(2, backend="numpy").tolist()  # reading another backend does not run it
    reads = {
        "item": lambda: other.sum().item(),
        "tolist": other.tolist,
        "numpy": other.numpy,
        "to": lambda: other.to("numpy"),
        "flush": deferred.flush,
    }
    with pytest.raises(ValueError, match="target 5 is out of range"):
        reads[read]()


def test_ignored_targets_pass_and_negative_ones_fail(device):
    logp = _logits(device.name).log_softmax(-1)
    F.nll_loss(logp, ember.tensor([0, -100, 2, -100], backend=device.name))
    deferred.flush(device)  # -100 is ignore_index: fine
    F.nll_loss(logp, ember.tensor([0, -1, 2, 1], backend=device.name))
    with pytest.raises(ValueError, match="target -1 is out of range for 3 classes"):
        deferred.flush(device)


def test_a_loop_keeps_one_pending_check_per_call_site(device):
    logp = _logits(device.name).log_softmax(-1)
    good = ember.tensor([0, 1, 2, 1], backend=device.name)
    bad = ember.tensor([0, 1, 9, 1], backend=device.name)
    for step in range(50):
        F.nll_loss(logp, bad if step == 20 else good)
    assert len(deferred.PENDING[device]) == 1  # folded on the device, step after step
    with pytest.raises(ValueError, match="target 9 is out of range"):
        deferred.flush()


def test_doctests():
    import doctest

    result = doctest.testmod(deferred, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0

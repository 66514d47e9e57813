"""ember.utils.data as a PyTorch script uses it, and the pieces behind it: TensorDataset,
transform=/target_transform= on datasets, ToTensor, and DataLoader workers."""

import doctest
import os
import time

import numpy as np
import pytest
from references import known

import ember
from ember.data import ArrayDataset, SyntheticCIFAR10
from ember.data.transforms import Compose, Normalize, RandomCrop, RandomHorizontalFlip, ToTensor
from ember.utils.data import DataLoader, Dataset, TensorDataset, random_split


def test_doctests():
    import ember.utils.data as mod

    assert doctest.testmod(mod).failed == 0


def test_tensor_dataset_takes_tensors_and_batches_them():
    x, y = ember.randn(10, 3), ember.randint(0, 2, (10,))
    ds = TensorDataset(x, y)
    xb, yb = next(iter(DataLoader(ds, batch_size=4)))
    assert isinstance(xb, ember.Tensor) and xb.shape == (4, 3)
    np.testing.assert_array_equal(xb.numpy(), x.numpy()[:4])
    assert [len(s) for s in random_split(ds, [0.7, 0.3])] == [7, 3]


def test_to_tensor_matches_torchvisions_rule(torch):
    hwc = np.random.default_rng(0).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    # torchvision's ToTensor on an ndarray: HWC -> CHW, uint8 divided by 255 in float32
    want = known(lambda: torch.from_numpy(hwc).permute(2, 0, 1).contiguous().float().div(255))
    assert want.dtype == np.float32 and want.shape == (3, 5, 7)
    np.testing.assert_array_equal(ToTensor()(hwc), want)
    np.testing.assert_array_equal(ToTensor()(hwc[..., 0]), want[:1])
    batch = np.stack([hwc, hwc])
    np.testing.assert_array_equal(ToTensor()(batch), np.stack([want, want]))
    chw = np.ones((1, 4, 4), np.float64)
    assert ToTensor()(chw).dtype == np.float32 and ToTensor()(chw).shape == (1, 4, 4)
    with pytest.raises(ValueError, match="uint8 image"):
        ToTensor()(np.zeros(3, np.uint8))


def test_normalize_matches_torch(torch):
    x = np.random.default_rng(1).random((3, 4, 4), dtype=np.float32)
    mean, std = (0.1, 0.2, 0.3), (0.5, 0.25, 2.0)
    want = known(lambda: (torch.from_numpy(x) - torch.tensor(mean).view(3, 1, 1)) / torch.tensor(std).view(3, 1, 1))
    assert want.dtype == np.float32 and want.shape == (3, 4, 4)
    np.testing.assert_allclose(Normalize(mean, std)(x), want, rtol=1e-6, atol=1e-7)


def test_dataset_transforms_per_sample_and_in_the_loader():
    data = SyntheticCIFAR10(n=20, seed=0)
    tf = Compose([ToTensor(), Normalize((0.5,), (0.5,))])
    ds = SyntheticCIFAR10(n=20, seed=0, transform=tf, target_transform=lambda y: y * 0 + 7)
    x, y = ds[3]
    np.testing.assert_allclose(x, (data.data[3] - 0.5) / 0.5, rtol=1e-6)
    assert y == 7
    # a per-sample target_transform sends the loader down the per-sample path: same values
    xb, yb = next(iter(DataLoader(ds, batch_size=5, to_tensor=False)))
    np.testing.assert_allclose(xb, (data.data[:5] - 0.5) / 0.5, rtol=1e-6)
    assert yb.tolist() == [7] * 5
    # batched transforms on the dataset run once per batch, seeded like the loader's own
    aug = SyntheticCIFAR10(n=20, seed=0, transform=Compose([RandomCrop(32, padding=4), RandomHorizontalFlip()]))
    a = [x for x, _ in DataLoader(aug, batch_size=8, seed=3, to_tensor=False)]
    b = [
        x
        for x, _ in DataLoader(
            data,
            batch_size=8,
            seed=3,
            to_tensor=False,
            transform=Compose([RandomCrop(32, padding=4), RandomHorizontalFlip()]),
        )
    ]
    assert all(np.array_equal(p, q) for p, q in zip(a, b))


def test_mnist_takes_torchvisions_keywords():
    from ember.data import MNIST

    try:
        ds = MNIST(train=False, download=False, transform=Compose([ToTensor(), Normalize((0.1307,), (0.3081,))]))
    except ember.data.DataError as e:
        pytest.skip(f"MNIST not available offline: {e}")
    x, y = ds[0]
    assert x.shape == (1, 28, 28) and x.dtype == np.float32 and abs(float(x.min()) + 0.4242) < 1e-3


def _augmented(n=64):
    return SyntheticCIFAR10(n=n, seed=0, transform=Compose([RandomCrop(32, padding=4), RandomHorizontalFlip()]))


@pytest.mark.parametrize("workers, mode", [(1, "thread"), (2, "thread"), (2, "process"), (3, "auto")])
def test_workers_give_the_same_batches_in_the_same_order(workers, mode):
    def run(**kw):
        loader = DataLoader(_augmented(), batch_size=6, shuffle=True, seed=4, to_tensor=False, **kw)
        return [(x, y) for _ in range(2) for x, y in loader]  # two epochs

    ref = run()
    got = run(num_workers=workers, worker_mode=mode)
    assert len(ref) == len(got) == 2 * 11
    assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(ref, got))


class _Squares(Dataset):
    """A Python __getitem__: the case where auto mode uses processes."""

    def __len__(self):
        return 40

    def __getitem__(self, i):
        return np.array([i * i, os.getpid()]), i


def test_auto_uses_processes_for_python_getitem_and_threads_for_arrays():
    batches = list(DataLoader(_Squares(), batch_size=8, num_workers=2, to_tensor=False))
    assert [y.tolist() for _, y in batches] == [list(range(i, i + 8)) for i in range(0, 40, 8)]
    assert np.all(np.concatenate([x[:, 0] for x, _ in batches]) == np.arange(40) ** 2)
    assert os.getpid() not in {int(p) for x, _ in batches for p in x[:, 1]}
    batches = list(DataLoader(_Squares(), batch_size=8, num_workers=2, worker_mode="thread", to_tensor=False))
    assert {int(p) for x, _ in batches for p in x[:, 1]} == {os.getpid()}


class _Broken(Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        if i == 7:
            raise KeyError("sample 7 is corrupt")
        return np.zeros(2), i


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_worker_error_reaches_the_loop_with_its_cause(mode):
    loader = DataLoader(_Broken(), batch_size=2, num_workers=2, worker_mode=mode, to_tensor=False)
    with pytest.raises(KeyError, match="sample 7 is corrupt") as info:
        list(loader)
    assert any("DataLoader" in n for n in getattr(info.value, "__notes__", []))


def test_workers_prefetch_while_the_loop_works():
    class SlowSample(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            time.sleep(0.05)
            return np.zeros(1), i

    loader = DataLoader(SlowSample(), batch_size=2, num_workers=2, worker_mode="thread", to_tensor=False)
    it = iter(loader)
    next(it)
    time.sleep(0.3)  # the workers fill the queue meanwhile
    t = time.monotonic()
    rest = list(it)
    assert len(rest) == 3 and time.monotonic() - t < 0.09  # already made: no 0.1 s batch waited for


@pytest.mark.parametrize(
    "kw, cause",
    [
        ({"num_workers": -1}, "num_workers"),
        ({"num_workers": 1.5}, "num_workers"),
        ({"worker_mode": "fibre"}, "worker_mode"),
    ],
)
def test_bad_worker_settings_are_refused(kw, cause):
    with pytest.raises(ValueError, match=cause):
        DataLoader(ArrayDataset(np.arange(3)), **kw)


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_leaving_the_loop_early_stops_the_workers(mode):
    import multiprocessing
    import threading

    loader = DataLoader(_Squares(), batch_size=2, num_workers=2, worker_mode=mode, to_tensor=False)
    for i, _ in enumerate(loader):
        if i == 1:
            break
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (
        multiprocessing.active_children() or any(t.name.startswith("ember-data-worker") for t in threading.enumerate())
    ):
        time.sleep(0.05)
    assert not multiprocessing.active_children()
    assert not [t for t in threading.enumerate() if t.name.startswith("ember-data-worker")]

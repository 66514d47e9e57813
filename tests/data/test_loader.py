import gc
import threading
import time
from unittest import mock

import numpy as np
import pytest

import ember
from ember.data import ArrayDataset, DataLoader, Dataset, random_split
from ember.data.transforms import Compose, RandomCrop, RandomHorizontalFlip


def ds(n=10):
    return ArrayDataset(np.arange(n) * 10, np.arange(n))


def batches(loader, limit=None):
    out = []
    for i, b in enumerate(loader):
        if limit is not None and i >= limit:
            break
        out.append(tuple(np.array(a) for a in b))
    return out


def same(a, b):
    return len(a) == len(b) and all(
        len(x) == len(y) and all(np.array_equal(p, q) for p, q in zip(x, y)) for x, y in zip(a, b)
    )


def prefetch_threads():
    return [t for t in threading.enumerate() if t.name == "ember-data-prefetch"]


@pytest.fixture(autouse=True)
def no_thread_leaks():
    yield
    gc.collect()
    deadline = time.monotonic() + 5
    while prefetch_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not prefetch_threads(), "a prefetch thread outlived its iterator"


def test_unshuffled_order_and_last_batch():
    got = batches(DataLoader(ds(10), batch_size=4, to_tensor=False))
    assert [y.tolist() for _, y in got] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_shuffle_uses_seed_plus_epoch_permutation():
    loader = DataLoader(ds(10), batch_size=10, shuffle=True, seed=3, to_tensor=False)
    for epoch in range(3):
        ((_, y),) = batches(loader)
        assert y.tolist() == np.random.default_rng(3 + epoch).permutation(10).tolist()


def test_same_seed_same_batches_new_epoch_new_order():
    a = DataLoader(ds(50), batch_size=8, shuffle=True, seed=7, to_tensor=False)
    b = DataLoader(ds(50), batch_size=8, shuffle=True, seed=7, to_tensor=False)
    a0, b0, a1 = batches(a), batches(b), batches(a)
    assert same(a0, b0)
    assert not same(a0, a1)
    for epoch in (a0, a1):  # each epoch is a permutation of the data
        assert sorted(np.concatenate([y for _, y in epoch]).tolist()) == list(range(50))
    c = DataLoader(ds(50), batch_size=8, shuffle=True, seed=8, to_tensor=False)
    assert not same(a0, batches(c))


def test_drop_last_and_len():
    loader = DataLoader(ds(10), batch_size=4, drop_last=True, to_tensor=False)
    assert len(loader) == 2 and [len(y) for _, y in batches(loader)] == [4, 4]
    assert len(DataLoader(ds(10), batch_size=4)) == 3
    assert len(DataLoader(ds(8), batch_size=4, drop_last=True)) == 2


def test_set_epoch():
    a = DataLoader(ds(20), batch_size=5, shuffle=True, to_tensor=False)
    batches(a), batches(a)
    epoch2 = batches(a)
    b = DataLoader(ds(20), batch_size=5, shuffle=True, to_tensor=False)
    b.set_epoch(2)
    assert same(batches(b), epoch2)


@pytest.mark.parametrize("prefetch", [0, 2])
def test_resume_mid_epoch_yields_exactly_the_remaining_batches(prefetch):
    aug = Compose([RandomCrop(2, padding=1), RandomHorizontalFlip()])
    data = ArrayDataset(np.random.default_rng(0).random((37, 1, 2, 2), dtype=np.float32), np.arange(37))

    def make():
        return DataLoader(data, batch_size=4, shuffle=True, seed=11, transform=aug, prefetch=prefetch, to_tensor=False)

    reference = make()
    ref_epochs = [batches(reference) for _ in range(3)]

    first = make()
    batches(first)  # epoch 0 complete
    it = iter(first)
    seen = [tuple(next(it)) for _ in range(3)]  # 3 batches of epoch 1, then "crash"
    state = first.state_dict()
    assert (state["epoch"], state["batch"]) == (1, 3)
    assert same(seen, ref_epochs[1][:3])
    del it

    resumed = make()
    resumed.load_state_dict(state)
    assert same(batches(resumed), ref_epochs[1][3:])  # remaining batches, augmentations included
    assert same(batches(resumed), ref_epochs[2])  # and the run continues as if never stopped


def test_state_between_epochs_points_at_next_epoch():
    loader = DataLoader(ds(10), batch_size=5, to_tensor=False)
    assert loader.state_dict()["epoch"] == 0
    batches(loader)
    assert (loader.state_dict()["epoch"], loader.state_dict()["batch"]) == (1, 0)
    it = iter(loader)
    next(it), next(it)  # every batch handed out, generator not yet exhausted
    assert (loader.state_dict()["epoch"], loader.state_dict()["batch"]) == (2, 0)
    del it


def test_load_state_dict_rejects_a_different_loader():
    state = DataLoader(ds(10), batch_size=5, seed=1).state_dict()
    with pytest.raises(ValueError, match="seed: saved 1, now 2"):
        DataLoader(ds(10), batch_size=5, seed=2).load_state_dict(state)


def test_prefetch_gives_identical_batches():
    kw = dict(batch_size=3, shuffle=True, seed=4, transform=RandomHorizontalFlip(), to_tensor=False)
    data = ArrayDataset(np.arange(60, dtype=np.float32).reshape(10, 1, 2, 3), np.arange(10))
    assert same(batches(DataLoader(data, prefetch=0, **kw)), batches(DataLoader(data, prefetch=3, **kw)))


class Exploding(Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        if i == 6:
            raise KeyError(f"sample {i} is broken")
        return np.float32(i), i


def test_worker_error_is_reraised_with_its_traceback():
    loader = DataLoader(Exploding(), batch_size=2, prefetch=2, to_tensor=False)
    got = []
    with pytest.raises(KeyError, match="sample 6 is broken") as info:
        for b in loader:
            got.append(b)
    assert len(got) == 3  # the batches before the broken one still arrive, in order
    note = "\n".join(getattr(info.value, "__notes__", []))
    assert "prefetch thread" in note and "Traceback" in note and "__getitem__" in note


def test_transform_error_in_worker():
    def bad(x):
        raise ValueError("bad transform")

    with pytest.raises(ValueError, match="bad transform"):
        batches(DataLoader(ds(4), batch_size=2, transform=bad, to_tensor=False))


@pytest.mark.parametrize("how", ["break", "del"])
def test_early_stop_does_not_leak_threads(how):
    data = ArrayDataset(np.zeros((1000, 4)), np.zeros(1000))
    loader = DataLoader(data, batch_size=1, prefetch=2, to_tensor=False)
    if how == "break":
        for _ in loader:
            break
    else:
        it = iter(loader)
        next(it)
        assert prefetch_threads()
        del it
    gc.collect()
    deadline = time.monotonic() + 5
    while prefetch_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not prefetch_threads()


def test_array_dataset_is_gathered_without_per_sample_calls():
    data = ArrayDataset(np.arange(40).reshape(20, 1, 1, 2), np.arange(20))
    train, _ = random_split(data, [15, 5], seed=0)
    with mock.patch.object(ArrayDataset, "__getitem__", side_effect=AssertionError("per-sample path used")):
        got = batches(DataLoader(train, batch_size=4, shuffle=True, transform=RandomHorizontalFlip(0), to_tensor=False))
    assert sorted(np.concatenate([y for _, y in got]).tolist()) == sorted(train.indices.tolist())


def test_fast_and_per_sample_paths_agree():
    data = ArrayDataset(np.random.default_rng(1).random((13, 1, 3, 3), dtype=np.float32), np.arange(13))
    sub = random_split(data, [9, 4], seed=2)[0]
    from ember.data import default_collate

    kw = dict(batch_size=4, shuffle=True, seed=9, transform=RandomCrop(3, padding=1), to_tensor=False)
    fast = batches(DataLoader(sub, **kw))
    slow = batches(DataLoader(sub, collate=lambda s: default_collate(s), **kw))
    assert same(fast, slow)


def test_per_sample_transform_and_dict_samples():
    class Dicts(Dataset):
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return {"x": np.full(2, i), "y": i}

    b = next(iter(DataLoader(Dicts(), batch_size=3, to_tensor=False)))
    assert b["x"].shape == (3, 2) and b["y"].tolist() == [0, 1, 2]
    got = batches(DataLoader(ds(4), batch_size=2, transform=lambda x: -x, to_tensor=False))
    assert got[1][0].tolist() == [-20, -30]


def test_batches_do_not_alias_the_dataset():
    data = ArrayDataset(np.zeros((4, 2)))
    (x,) = next(iter(DataLoader(data, batch_size=4, to_tensor=False)))
    x += 1
    assert data.arrays[0].sum() == 0


def test_bad_arguments():
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader(ds(), batch_size=0)
    with pytest.raises(ValueError, match="seed"):
        DataLoader(ds(), seed=-1)


def test_to_tensor_uses_ember_as_tensor():
    as_tensor = getattr(ember, "as_tensor", None)
    loader = DataLoader(ds(4), batch_size=2)
    if as_tensor is None:
        with pytest.raises(RuntimeError, match="needs ember.as_tensor.*to_tensor=False"):
            iter(loader)
        return
    x, y = next(iter(loader))
    assert type(x) is type(as_tensor(np.zeros(1)))
    np.testing.assert_array_equal(np.asarray(x), [0, 10])


@pytest.mark.slow
def test_throughput_cifar_shaped():
    from ember.data import SyntheticCIFAR10

    data = SyntheticCIFAR10(n=20000, seed=0)
    loader = DataLoader(
        data,
        batch_size=256,
        shuffle=True,
        transform=Compose([RandomCrop(32, 4), RandomHorizontalFlip()]),
        to_tensor=False,
    )
    t = time.perf_counter()
    n = sum(len(y) for _, y in loader)
    rate = n / (time.perf_counter() - t)
    assert n == 20000
    print(f"{rate:.0f} samples/s")

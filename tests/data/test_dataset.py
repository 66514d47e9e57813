import numpy as np
import pytest

from ember.data import ArrayDataset, ConcatDataset, Dataset, Subset, random_split
from ember.data.dataset import array_view


def test_array_dataset_rows():
    x, y = np.arange(12).reshape(6, 2), np.arange(6)
    ds = ArrayDataset(x, y)
    assert len(ds) == 6
    xi, yi = ds[3]
    assert xi.tolist() == [6, 7] and yi == 3


def test_array_dataset_length_mismatch_names_shapes():
    with pytest.raises(ValueError, match=r"\(3, 2\), \(4,\)"):
        ArrayDataset(np.zeros((3, 2)), np.zeros(4))


def test_base_class_requires_methods():
    with pytest.raises(NotImplementedError):
        len(Dataset())


def test_subset_and_nested_view():
    ds = ArrayDataset(np.arange(10) * 10)
    sub = Subset(Subset(ds, [9, 8, 7, 6]), [3, 0])
    assert [sub[i][0] for i in range(len(sub))] == [60, 90]
    arrays, index = array_view(sub)
    assert index.tolist() == [6, 9]


def test_subset_index_out_of_range():
    with pytest.raises(IndexError):
        Subset(ArrayDataset(np.arange(3)), [3])


def test_random_split_is_seeded_disjoint_and_complete():
    ds = ArrayDataset(np.arange(100))
    a = random_split(ds, [70, 30], seed=5)
    b = random_split(ds, [70, 30], seed=5)
    c = random_split(ds, [70, 30], seed=6)
    assert [s.indices.tolist() for s in a] == [s.indices.tolist() for s in b]
    assert a[0].indices.tolist() != c[0].indices.tolist()
    assert sorted(np.concatenate([s.indices for s in a]).tolist()) == list(range(100))


def test_random_split_fractions_and_errors():
    assert [len(s) for s in random_split(ArrayDataset(np.arange(11)), [0.5, 0.5])] == [6, 5]
    with pytest.raises(ValueError, match="summing to 10"):
        random_split(ArrayDataset(np.arange(10)), [3, 3])


def test_concat():
    ds = ConcatDataset([ArrayDataset(np.arange(3)), ArrayDataset(np.arange(10, 12))])
    assert [ds[i][0] for i in range(len(ds))] == [0, 1, 2, 10, 11]
    assert ds[-1][0] == 11
    with pytest.raises(IndexError):
        ds[5]


def test_subclass_overriding_getitem_is_not_fancy_indexed():
    class Doubled(ArrayDataset):
        def __getitem__(self, i):
            return (self.arrays[0][i] * 2,)

    assert array_view(Doubled(np.arange(3))) is None

"""``ember.utils.data``: torch.utils.data's names for ember's datasets and loader.

The same objects as :mod:`ember.data`, under the names a PyTorch script imports:

>>> import ember
>>> from ember.utils.data import DataLoader, TensorDataset, random_split
>>> ds = TensorDataset(ember.arange(8).reshape(4, 2), ember.tensor([0, 1, 0, 1]))
>>> train, val = random_split(ds, [3, 1])
>>> [y.tolist() for x, y in DataLoader(train, batch_size=2)]
[[0, 0], [1]]
"""

from ..data.dataset import ConcatDataset, Dataset, Subset, TensorDataset, random_split
from ..data.loader import DataLoader, default_collate

__all__ = ["ConcatDataset", "DataLoader", "Dataset", "Subset", "TensorDataset", "default_collate", "random_split"]

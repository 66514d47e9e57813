"""ember.data: datasets, transforms and the DataLoader.

>>> from ember.data import ArrayDataset, DataLoader
>>> import numpy as np
>>> batches = DataLoader(ArrayDataset(np.arange(5)), batch_size=2, to_tensor=False)
>>> [x.tolist() for (x,) in batches]
[[0, 1], [2, 3], [4]]

Modules, in the order data flows: ``download`` and ``sources`` find files (cache → offline
copies → network), ``idx`` and ``safe_pickle`` parse them, ``mnist`` and ``cifar`` define the
datasets (``text`` a text file as a character dataset, ``fake`` torchvision's FakeData), ``dataset`` the containers,
``transforms`` augmentation, ``loader`` batching.
"""

from . import transforms
from .cifar import CIFAR10, SyntheticCIFAR10
from .dataset import ArrayDataset, ConcatDataset, Dataset, Subset, TensorDataset, random_split
from .download import cache_dir
from .errors import ChecksumError, DataError, DownloadError
from .fake import FakeData
from .idx import read_idx, write_idx
from .loader import DataLoader, default_collate
from .mnist import MNIST, FashionMNIST
from .text import TextFile

__all__ = [
    "ArrayDataset",
    "CIFAR10",
    "ChecksumError",
    "ConcatDataset",
    "DataError",
    "DataLoader",
    "Dataset",
    "DownloadError",
    "FakeData",
    "FashionMNIST",
    "MNIST",
    "Subset",
    "SyntheticCIFAR10",
    "TensorDataset",
    "TextFile",
    "cache_dir",
    "default_collate",
    "random_split",
    "read_idx",
    "transforms",
    "write_idx",
]

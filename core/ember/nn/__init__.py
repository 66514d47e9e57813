"""``ember.nn``: layers, models' building blocks and losses, with PyTorch's names.

The pieces, in reading order: parameter.py (Parameter) → module.py (Module: registration,
traversal, state_dict, train/eval, to) → functional.py (every layer as a function, F) →
init.py (initializers) → the layers (linear, conv, upsampling, activation, normalization, rnn,
attention, transformer, loss) → container.py (Sequential, ModuleList, ModuleDict).

>>> import ember
>>> from ember import nn
>>> ember.manual_seed(0)  # doctest: +ELLIPSIS
<ember.random.Generator object at ...>
>>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
>>> loss = nn.CrossEntropyLoss()(model(ember.randn(5, 4)), ember.tensor([0, 1, 2, 0, 1]))
>>> loss.backward()
>>> model[0].weight.grad.shape
(8, 4)
"""

from . import functional, init
from .activation import GELU, Dropout, LeakyReLU, LogSoftmax, ReLU, Sigmoid, SiLU, Softmax, Tanh
from .attention import MultiheadAttention
from .container import ModuleDict, ModuleList, Sequential
from .conv import AdaptiveAvgPool2d, AvgPool2d, Conv1d, Conv2d, ConvTranspose2d, MaxPool2d
from .linear import Embedding, Flatten, Identity, Linear, Unflatten
from .loss import BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, L1Loss, MSELoss, NLLLoss, SmoothL1Loss
from .module import IncompatibleKeys, Module, StateDictError
from .normalization import BatchNorm1d, BatchNorm2d, GroupNorm, LayerNorm, RMSNorm
from .parameter import Parameter
from .rnn import GRU, LSTM, GRUCell
from .transformer import TransformerDecoder, TransformerDecoderLayer, TransformerEncoder, TransformerEncoderLayer
from .upsampling import Upsample

__all__ = [
    "functional",
    "init",
    "Module",
    "Parameter",
    "StateDictError",
    "IncompatibleKeys",
    "Sequential",
    "ModuleList",
    "ModuleDict",
    "Identity",
    "Linear",
    "Flatten",
    "Unflatten",
    "Embedding",
    "Conv1d",
    "Conv2d",
    "ConvTranspose2d",
    "MaxPool2d",
    "AvgPool2d",
    "AdaptiveAvgPool2d",
    "Upsample",
    "BatchNorm1d",
    "BatchNorm2d",
    "LayerNorm",
    "GroupNorm",
    "RMSNorm",
    "Dropout",
    "ReLU",
    "LeakyReLU",
    "GELU",
    "SiLU",
    "Tanh",
    "Sigmoid",
    "Softmax",
    "LogSoftmax",
    "LSTM",
    "GRU",
    "GRUCell",
    "MultiheadAttention",
    "TransformerEncoderLayer",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerDecoder",
    "CrossEntropyLoss",
    "NLLLoss",
    "MSELoss",
    "L1Loss",
    "HuberLoss",
    "SmoothL1Loss",
    "BCEWithLogitsLoss",
    "BCELoss",
]


def __getattr__(name):
    # ember.nn.utils re-exports ember.optim's clipping; loaded on first use so that importing
    # ember.nn does not import ember.optim.
    if name == "utils":
        from importlib import import_module

        return import_module(f"{__name__}.utils")
    raise AttributeError(f"module 'ember.nn' has no attribute {name!r}")

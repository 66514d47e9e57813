"""``ember.models``: the model zoo, built from ember.nn, and a registry by name.

>>> import ember
>>> model = ember.models.get("cnn")
>>> type(model).__name__
'LeNet'
"""

from __future__ import annotations

from ..errors import EmberError, located
from .lenet import LeNet
from .mlp import MLP
from .resnet import BasicBlock, ResNet, resnet18
from .transformer import CharTransformer


class UnknownModelError(EmberError, KeyError):
    """``ember.models.get`` was asked for a name it does not know."""

    def __str__(self):  # KeyError would quote the message
        return str(self.args[0])


#: name -> constructor; ``get(name, **kw)`` calls it with the keyword arguments.
REGISTRY = {
    "mlp": MLP,
    "cnn": LeNet,
    "lenet": LeNet,
    "resnet18": resnet18,
    "transformer": CharTransformer,
}


def names():
    """The names ``get`` knows."""
    return sorted(REGISTRY)


def register(name, constructor):
    """Add a model constructor under ``name`` (for ``get`` and the command line)."""
    REGISTRY[name] = constructor


def get(name, **kwargs):
    """Build the model registered as ``name`` with keyword arguments.

    >>> import ember
    >>> ember.models.get("mlp", hidden=(32,)).num_parameters()
    25450
    """
    try:
        constructor = REGISTRY[name]
    except KeyError:
        raise located(UnknownModelError, f"unknown model {name!r}; known models: {', '.join(names())}") from None
    return constructor(**kwargs)


__all__ = [
    "MLP",
    "LeNet",
    "ResNet",
    "BasicBlock",
    "resnet18",
    "CharTransformer",
    "get",
    "names",
    "register",
    "REGISTRY",
    "UnknownModelError",
]

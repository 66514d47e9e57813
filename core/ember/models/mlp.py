"""MLP: the multi-layer perceptron for flattened images (benchmark workload W1)."""

from __future__ import annotations

from .. import nn


class MLP(nn.Sequential):
    """Flatten, then ``Linear -> ReLU [-> Dropout]`` per hidden size, then a Linear head.

    It is a Sequential, so its state_dict names (``1.weight``, ...) match a torch
    ``nn.Sequential`` built the same way.

    >>> import ember
    >>> from ember.models import MLP
    >>> MLP()(ember.zeros(2, 1, 28, 28)).shape
    (2, 10)
    >>> MLP().num_parameters()
    669706
    """

    def __init__(self, in_features=784, hidden=(512, 512), num_classes=10, dropout=0.0):
        layers = [nn.Flatten()]
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            if dropout:
                layers.append(nn.Dropout(dropout))
            width = h
        layers.append(nn.Linear(width, num_classes))
        super().__init__(*layers)
        self.in_features, self.hidden, self.num_classes = in_features, tuple(hidden), num_classes

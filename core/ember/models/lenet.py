"""LeNet: the small CNN for 1x28x28 digits (benchmark workload W2)."""

from __future__ import annotations

from .. import nn


class LeNet(nn.Module):
    """conv 1->32 3x3, ReLU, max-pool 2, conv 32->64 3x3, ReLU, max-pool 2, flatten,
    fc 1600->128, ReLU, fc 128->10 (28 -> 26 -> 13 -> 11 -> 5).

    >>> import ember
    >>> from ember.models import LeNet
    >>> LeNet()(ember.zeros(2, 1, 28, 28)).shape
    (2, 10)
    >>> LeNet().num_parameters()
    225034
    """

    def __init__(self, in_channels=1, num_classes=10, image_size=28):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        side = ((image_size - 2) // 2 - 2) // 2
        self.fc1 = nn.Linear(64 * side * side, 128)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x):
        x = nn.functional.max_pool2d(self.conv1(x).relu(), 2)
        x = nn.functional.max_pool2d(self.conv2(x).relu(), 2)
        return self.fc2(self.fc1(x.flatten(1)).relu())

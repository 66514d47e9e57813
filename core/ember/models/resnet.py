"""ResNet-18 for 32x32 images (CIFAR): a 3x3 stem and no max-pool, BasicBlocks [2, 2, 2, 2].

Names follow torchvision (``layer1.0.conv1.weight``, ``layer2.0.downsample.0.weight``, ``fc``),
so the parameter count (11,173,962 for 10 classes) and the state_dict line up with torch.
"""

from __future__ import annotations

from .. import nn
from ..nn import init


class BasicBlock(nn.Module):
    """Two 3x3 conv + BatchNorm layers with an identity (or 1x1 conv + BN) shortcut."""

    expansion = 1

    def __init__(self, in_planes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        if stride != 1 or in_planes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes)
            )
        else:
            self.downsample = None

    def forward(self, x):
        out = self.bn1(self.conv1(x)).relu()
        out = self.bn2(self.conv2(out))
        shortcut = x if self.downsample is None else self.downsample(x)
        return (out + shortcut).relu()


class ResNet(nn.Module):
    """A CIFAR-style ResNet of BasicBlocks; ``blocks`` gives the number per stage and
    ``width`` the channels of the first (each later stage doubles them): 64 is ResNet's,
    a narrower one is for quick tests.

    >>> import ember
    >>> from ember.models import ResNet, resnet18
    >>> resnet18().num_parameters(), ResNet((1, 1, 1, 1), width=8).num_parameters()
    (11173962, 78002)
    """

    def __init__(self, blocks=(2, 2, 2, 2), num_classes=10, in_channels=3, width=64):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, width, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        planes, in_planes = (width, 2 * width, 4 * width, 8 * width), width
        for i, (p, n) in enumerate(zip(planes, blocks)):
            stage = []
            for j in range(n):
                stage.append(BasicBlock(in_planes, p, stride=2 if i > 0 and j == 0 else 1))
                in_planes = p
            setattr(self, f"layer{i + 1}", nn.Sequential(*stage))
        self.fc = nn.Linear(8 * width, num_classes)
        # torchvision's init: He-normal (fan_out) convolutions, BatchNorm scale 1 and shift 0.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.bn1(self.conv1(x)).relu()
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(x.mean((2, 3)))


def resnet18(num_classes=10, in_channels=3):
    """ResNet-18, CIFAR variant (3x3 stem, no max-pool), for (N, in_channels, 32, 32) input."""
    return ResNet((2, 2, 2, 2), num_classes, in_channels)

"""PyTorch twins of kiln's model zoo (src/models/*.cpp, include/kiln/models.h).

The module names and registration order match kiln exactly, so state_dict keys (and their order)
are identical on both sides: a kiln checkpoint loads into these models and vice versa. The model
goldens (tools/goldens/gen_models.py) and the train benchmark (bench/) import this module.

    import torch_models
    net = torch_models.create("airbench", width=0.25)      # same arguments as kiln::models::create
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

MODEL_NAMES = ("tutorial", "resnet18", "airbench")


# ---- the PyTorch CIFAR-10 tutorial CNN ----
class TutorialCNN(nn.Module):
    """The PyTorch CIFAR-10 tutorial's Net; in_channels/image_size generalize it (Fashion-MNIST:
    1 channel, 28x28 -> fc1 takes 16*4*4)."""

    def __init__(self, in_channels=3, num_classes=10, image_size=32):
        super().__init__()
        side = tutorial_feature_side(image_size)
        self.conv1 = nn.Conv2d(in_channels, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * side * side, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def tutorial_feature_side(image_size):
    side = ((image_size - 4) // 2 - 4) // 2
    if side < 1:
        raise ValueError(f"tutorial: image_size {image_size} is too small (needs >= 14)")
    return side


# ---- ResNet-18 for CIFAR (kuangliu/pytorch-cifar) ----
class BasicBlock(nn.Module):
    def __init__(self, in_planes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    def __init__(self, num_classes=10, in_channels=3):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        in_planes = 64
        for i, (planes, stride) in enumerate([(64, 1), (128, 2), (256, 2), (512, 2)]):
            layer = nn.Sequential(BasicBlock(in_planes, planes, stride), BasicBlock(planes, planes, 1))
            setattr(self, f"layer{i + 1}", layer)
            in_planes = planes
        self.linear = nn.Linear(512, num_classes)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)  # = kuangliu's avg_pool2d(out, 4) at 32x32
        return self.linear(out)


# ---- airbench94-style net ----
# BatchNorm as airbench94: its "momentum 0.6" is the weight of the old running value, i.e.
# PyTorch momentum 1 - 0.6 = 0.4; eps 1e-12. Unlike airbench94 the BN weight is trainable.
AIRBENCH_BN_MOMENTUM = 0.4
AIRBENCH_BN_EPS = 1e-12
AIRBENCH_SCALE = 1.0 / 9.0


def airbench_widths(width):
    """(stem, block1, block2, block3) channel counts for a width multiplier."""
    if not width > 0:
        raise ValueError(f"airbench: width must be > 0, got {width}")

    def round8(c):
        return max(8, 8 * int(math.floor(c / 8 + 0.5)))

    stem = max(1, int(math.floor(24 * width + 0.5)))
    return stem, round8(64 * width), round8(256 * width), round8(256 * width)


def dirac_init_(conv):
    """airbench94's Conv.reset_parameters: zero bias, identity on the first in_channels outputs."""
    with torch.no_grad():
        if conv.bias is not None:
            conv.bias.zero_()
        w = conv.weight
        nn.init.dirac_(w[:min(w.size(0), w.size(1))])


class ConvGroup(nn.Module):
    def __init__(self, channels_in, channels_out):
        super().__init__()
        self.conv1 = nn.Conv2d(channels_in, channels_out, 3, padding=1, bias=False)
        self.pool = nn.MaxPool2d(2)
        self.norm1 = nn.BatchNorm2d(channels_out, eps=AIRBENCH_BN_EPS, momentum=AIRBENCH_BN_MOMENTUM)
        self.conv2 = nn.Conv2d(channels_out, channels_out, 3, padding=1, bias=False)
        self.norm2 = nn.BatchNorm2d(channels_out, eps=AIRBENCH_BN_EPS, momentum=AIRBENCH_BN_MOMENTUM)
        self.activ = nn.GELU()
        dirac_init_(self.conv1)
        dirac_init_(self.conv2)

    def forward(self, x):
        x = self.activ(self.norm1(self.pool(self.conv1(x))))
        return self.activ(self.norm2(self.conv2(x)))


class Airbench(nn.Module):
    def __init__(self, width=1.0, num_classes=10, in_channels=3):
        super().__init__()
        stem, w1, w2, w3 = airbench_widths(width)
        self.whiten = nn.Conv2d(in_channels, stem, 2, padding=0, bias=True)
        self.activ = nn.GELU()
        self.block1 = ConvGroup(stem, w1)
        self.block2 = ConvGroup(w1, w2)
        self.block3 = ConvGroup(w2, w3)
        self.linear = nn.Linear(w3, num_classes, bias=False)
        dirac_init_(self.whiten)

    def forward(self, x):
        x = self.activ(self.whiten(x))
        x = self.block3(self.block2(self.block1(x)))
        x = torch.amax(x, dim=(2, 3))  # global max-pool (airbench94's MaxPool2d(3) on 3x3)
        return self.linear(x) * AIRBENCH_SCALE


def create(name, width=1.0, in_channels=3, num_classes=10, image_size=32):
    """Same arguments and names as kiln::models::create."""
    if name != "airbench" and width != 1.0:
        raise ValueError(f"model '{name}': width {width} applies only to airbench")
    if name == "tutorial":
        return TutorialCNN(in_channels, num_classes, image_size)
    if name == "resnet18":
        return ResNet18(num_classes, in_channels)
    if name == "airbench":
        return Airbench(width, num_classes, in_channels)
    raise ValueError(f"unknown model '{name}'; valid: {', '.join(MODEL_NAMES)}")


# Factory functions with the names of include/kiln/models.h.
def tutorial_cnn(in_channels=3, num_classes=10, image_size=32):
    return TutorialCNN(in_channels, num_classes, image_size)


tutorial = tutorial_cnn


def resnet18(num_classes=10, in_channels=3):
    return ResNet18(num_classes, in_channels)


def airbench(width=1.0, num_classes=10, in_channels=3):
    return Airbench(width, num_classes, in_channels)

"""ResNet-18 with GroupNorm, the model of the FedMRUR / FedSAM line of work and of FedStyle.

Batch normalization keeps running statistics that do not average well across non-IID
clients, so federated ResNets replace it with group normalization. Choices:

* **Groups**: ``GroupNorm(2, channels)`` everywhere (two groups per layer), as in the
  public FedSAM / MoFedSAM / FedMRUR code bases.
* **Stem**: for inputs smaller than ``IMAGENET_STEM_SIDE`` (128) pixels, the small-image stem
  (3x3 convolution, stride 1, no max-pool) of He et al.'s CIFAR networks, used for 32x32 CIFAR
  and 64x64 TinyImageNet alike (inputs smaller than 16x16, such as 8x8 digits, work too,
  because the final pooling is adaptive); from 128 pixels on (FedStyle's 224x224 Office Home
  and Adaptiope), the ImageNet stem of He, Zhang, Ren, Sun, "Deep Residual Learning for Image
  Recognition", CVPR 2016, Table 1: 7x7 convolution with stride 2, then a 3x3 max-pool with
  stride 2 (a 7x7 final map at 224 px; the small stem would keep 28x28 and cost about 15
  times the compute). Both stems have the same stage names and flat layout apart from the
  first convolution's kernel.
* **Body / head**: the body is everything up to the global average pool and flatten (a
  512-wide representation); the head is the linear classifier.
* **Stages**: ``stem`` (first convolution and its norm), ``layer1`` … ``layer4`` (the four
  residual stages) and ``head``, so stage-wise algorithms can treat each resolution apart.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from fedclock.algorithms.fed_model import FedModel

GROUPS = 2
IMAGENET_STEM_SIDE = 128
"""Inputs at least this many pixels on their smaller side get the ImageNet stem."""


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with group norm and an identity (or 1x1 projection) shortcut."""

    def __init__(self, in_channels: int, channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels, 3, stride=stride, padding=1, bias=False)
        self.norm1 = nn.GroupNorm(GROUPS, channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=1, padding=1, bias=False)
        self.norm2 = nn.GroupNorm(GROUPS, channels)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != channels:
            self.shortcut = nn.Sequential(nn.Conv2d(in_channels, channels, 1, stride=stride, bias=False),
                                          nn.GroupNorm(GROUPS, channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


def _stage(in_channels: int, channels: int, stride: int) -> nn.Sequential:
    return nn.Sequential(BasicBlock(in_channels, channels, stride), BasicBlock(channels, channels, 1))


def imagenet_stem(input_shape: Sequence[int]) -> bool:
    """Whether inputs of ``input_shape`` (channels, height, width) get the ImageNet stem."""
    return len(input_shape) == 3 and min(int(input_shape[1]), int(input_shape[2])) >= IMAGENET_STEM_SIDE


class ResNet18GN(FedModel):
    """ResNet-18 (2-2-2-2 basic blocks, widths 64-128-256-512) with GroupNorm; the stem
    follows the input size (module docstring, :func:`imagenet_stem`)."""

    def __init__(self, input_shape: Sequence[int], num_classes: int) -> None:
        channels = int(input_shape[0])
        large = imagenet_stem(input_shape)
        conv = (nn.Conv2d(channels, 64, 7, stride=2, padding=3, bias=False) if large
                else nn.Conv2d(channels, 64, 3, stride=1, padding=1, bias=False))
        body = nn.Sequential(
            conv,                                                          # body.0
            nn.GroupNorm(GROUPS, 64),                                      # body.1
            nn.Sequential(nn.ReLU(), nn.MaxPool2d(3, stride=2, padding=1)) if large else nn.ReLU(),
            _stage(64, 64, 1),                                             # body.3
            _stage(64, 128, 2),                                            # body.4
            _stage(128, 256, 2),                                           # body.5
            _stage(256, 512, 2),                                           # body.6
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        super().__init__(body, nn.Linear(512, num_classes), {
            "stem": ("body.0.", "body.1."), "layer1": ("body.3.",), "layer2": ("body.4.",),
            "layer3": ("body.5.",), "layer4": ("body.6.",), "head": ("head.",)})

"""A small CNN: two convolutions with BatchNorm and ReLU, pooling, a linear head."""

import torch
import torch.nn as nn

BATCH, CHANNELS, SIZE, CLASSES = 8, 3, 32, 10


class Model(nn.Module):
    def __init__(self, channels: int, classes: int):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(channels, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return [CHANNELS, CLASSES]

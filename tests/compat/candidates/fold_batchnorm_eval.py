"""BatchNorm folded into the convolution's own weight and bias in `__init__` (the model is for
inference: the reference puts itself in eval mode), the BatchNorm then dropped."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        bn = nn.BatchNorm2d(out_channels)
        with torch.no_grad():
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.5, 0.5)
            bn.running_mean.uniform_(-0.2, 0.2)
            bn.running_var.uniform_(0.5, 2.0)
            scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
            self.conv.weight.mul_(scale.view(-1, 1, 1, 1))
            self.conv.bias.copy_((self.conv.bias - bn.running_mean) * scale + bn.bias)

    def forward(self, x):
        return F.relu(F.conv2d(x, self.conv.weight, self.conv.bias))

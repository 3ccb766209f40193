import cuda_extension
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        return cuda_extension.leaky_relu_forward(x.contiguous(), self.negative_slope)

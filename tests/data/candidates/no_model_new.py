"""Test candidate: defines no ModelNew."""

import torch.nn as nn


class Model(nn.Module):
    pass

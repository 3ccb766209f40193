"""Test candidate: not valid Python."""

class ModelNew(nn.Module:
    pass

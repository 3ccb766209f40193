"""Test candidate: its C++ does not compile."""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

extension = load_inline(
    "test_build_error",
    cpp_sources=["#include <torch/types.h>\nint broken( { return 0 }"],
    no_implicit_headers=True,
)


class ModelNew(nn.Module):
    def forward(self, x):
        return x

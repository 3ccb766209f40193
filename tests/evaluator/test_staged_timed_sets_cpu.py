"""On the CPU the timed sets are not staged: each call's inputs are loaded just before it
(tests/gpu/test_staged_timed_sets.py has the GPU side)."""

import torch

from pytest_cudaagent.timer import staged_on_device


def test_nothing_is_staged_on_the_cpu():
    assert staged_on_device([[torch.randn(16)]], output_bytes=64, device="cpu") is None

"""The candidate's timed sets go to the device before the first timed call when they fit
(timer.staged_on_device), so its calls run back to back as the baselines' do."""

import pytest
import torch

from pytest_cudaagent.timer import staged_on_device


@pytest.mark.gpu
def test_timed_sets_are_staged_on_the_device_with_their_values_when_they_fit():
    host_sets = [[torch.randn(256, 256), 0.5] for _ in range(3)]
    staged = staged_on_device(host_sets, output_bytes=256 * 256 * 4, device="cuda")
    assert staged is not None and len(staged) == 3
    for host, on_device in zip(host_sets, staged, strict=True):
        assert on_device[0].is_cuda and torch.equal(on_device[0].cpu(), host[0])
        assert on_device[1] == 0.5


@pytest.mark.gpu
def test_timed_sets_that_would_take_half_the_free_memory_go_over_per_call():
    free_bytes, _ = torch.cuda.mem_get_info()
    assert staged_on_device([[torch.randn(16)]], output_bytes=free_bytes, device="cuda") is None

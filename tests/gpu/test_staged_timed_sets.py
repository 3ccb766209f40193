"""The candidate's timed sets go to the device before the first timed call when they fit
(timer.staged_on_device), so its calls run back to back as the baselines' do."""

import pytest
import torch

from pytest_cudaagent.timing.timer import staged_on_device


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


@pytest.mark.gpu
def test_output_copies_give_the_candidates_freed_blocks_back_to_its_next_call():
    """The copies go into memory taken before the first timed call: a candidate with a temporary
    and an output (a convolution, then its own ReLU) allocates nothing new from its second call
    on, as the eager baseline, whose outputs are dropped. Copied call by call, each copy took
    a block the candidate had just freed and every call went to cudaMalloc while timed."""
    from pytest_cudaagent.timing.timer import OutputCopies

    calls, shape = 8, (16, 128, 56, 56)
    output_bytes = 16 * 128 * 56 * 56 * 4

    def forward(x):
        temporary = x * 2.0  # freed when forward returns, as a conv's output before its ReLU
        return torch.relu(temporary)

    def segments_made(copy_with) -> int:
        torch.cuda.empty_cache()
        inputs = [torch.randn(shape, device="cuda") for _ in range(calls)]
        copies = OutputCopies([output_bytes], calls, "cuda") if copy_with == "slab" else None
        kept, made = [], []
        for x in inputs:
            before = torch.cuda.memory_stats()["segment.all.allocated"]
            output = forward(x)
            made.append(torch.cuda.memory_stats()["segment.all.allocated"] - before)
            kept.append(copies.copy(output) if copies is not None else output.clone())
            del output
        torch.cuda.synchronize()
        return sum(made[1:])

    assert segments_made("slab") == 0
    assert segments_made("clone") > 0  # what it was: a new segment inside every timed call

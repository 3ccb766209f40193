"""On the CPU the timed sets are not staged: each call's inputs are loaded just before it
(tests/gpu/test_staged_timed_sets.py has the GPU side)."""

import torch

from pytest_cudaagent.timing.timer import staged_on_device


def test_nothing_is_staged_on_the_cpu():
    assert staged_on_device([[torch.randn(16)]], output_bytes=64, device="cpu") is None


def test_output_copies_are_exact_views_of_one_slab_taken_up_front():
    """timer.OutputCopies on the CPU (its allocator side is tested on the GPU): every dtype and
    layout comes back with its values, shape and dtype; all copies share the one slab; what
    the slab has no room for gets its own copy."""
    from pytest_cudaagent.timing.timer import OutputCopies

    outputs = [torch.randn(3, 5).t(), torch.arange(7, dtype=torch.int64), torch.rand(4) > 0.5,
               torch.randn(2, 3, dtype=torch.complex64), torch.randn(5).half(), torch.empty(0, 4)]
    copies = OutputCopies([t.numel() * t.element_size() for t in outputs], 1, "cpu")
    copied = [copies.copy(t) for t in outputs]
    slab = copies._slab.untyped_storage().data_ptr()
    for original, copy in zip(outputs, copied, strict=True):
        assert copy.dtype == original.dtype and copy.shape == original.shape
        assert torch.equal(copy, original)
        assert copy.untyped_storage().data_ptr() == slab
    original = outputs[0].clone()
    outputs[0].mul_(2)
    assert torch.equal(copied[0], original)  # a copy, not a view of the output
    extra = torch.randn(10)
    overflow = copies.copy(extra)  # the slab is full: a copy of its own
    assert torch.equal(overflow, extra) and overflow.untyped_storage().data_ptr() != slab

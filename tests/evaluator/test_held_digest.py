"""Held outputs beyond the budget for copies are remembered by a digest of their bytes
(outputs.HeldDigest, computed where the output lives), not by a host copy: check_held still finds
every write into storage a call handed out, and nothing that left it alone."""

import pytest
import torch

from pytest_cudaagent.rules import outputs
from pytest_cudaagent.rules.outputs import HeldDigest, content_digest, held_copies, storage_changes


@pytest.fixture
def no_budget(monkeypatch):
    monkeypatch.setattr(outputs, "HELD_ON_DEVICE_BUDGET_BYTES", 0)
    monkeypatch.setattr(outputs, "DIGEST_CHUNK_ELEMENTS", 1000)  # many chunks, as a large output has


def reused(output, change) -> bool:
    kept = held_copies([output], {})
    assert isinstance(kept[0], HeldDigest)
    change(output)
    return bool(storage_changes([output], kept))


def test_every_kind_of_write_into_held_storage_is_found(no_budget):
    assert reused(torch.randn(64, 50), lambda t: t.__setitem__((63, 49), t[63, 49] + 1))  # one element
    assert reused(torch.randn(64, 50), lambda t: t.copy_(torch.randn(64, 50)))  # the next call's answer
    assert reused(torch.arange(3000.0).reshape(60, 50), lambda t: t.copy_(t.flip(0)))  # the same values moved
    swapped = torch.randn(10, 50)

    def swap(t):
        first, second = t[0, 0].clone(), t[9, 49].clone()
        t[0, 0], t[9, 49] = second, first
    assert reused(swapped, swap)  # two elements swapped: the weighted sum sees it
    assert reused(torch.randn(8, 8), lambda t: t.resize_(4, 16))  # its shape changed under the caller
    assert reused(torch.zeros(8, 8), lambda t: t.fill_(-0.0))  # other bytes, equal values: still a write


def test_storage_left_alone_or_rewritten_bit_for_bit_is_not_reuse(no_budget):
    assert not reused(torch.randn(64, 50), lambda t: None)
    assert not reused(torch.randn(64, 50), lambda t: t.copy_(t.clone()))  # the same bytes written back
    assert not reused(torch.full((3,), float("nan")), lambda t: None)  # NaN: bytes, not values


@pytest.mark.parametrize("make", [
    lambda: torch.randn(101, 7).half(),  # odd bytes per row: byte-wise words in some chunks
    lambda: torch.randn(33, 3).to(torch.bfloat16),
    lambda: torch.randn(40, 60).t(),  # not contiguous
    lambda: torch.randn(5, 6, 7)[:, ::2],
    lambda: torch.tensor(3.5),  # no dimension
    lambda: torch.empty(0, 4),
    lambda: torch.rand(50, 50) > 0.5,
    lambda: torch.randint(0, 100, (77,), dtype=torch.int64),
    lambda: torch.randn(20, 20, dtype=torch.complex64),
], ids=["fp16-odd", "bf16", "transposed", "strided", "scalar", "empty", "bool", "int64", "complex"])
def test_the_digest_takes_any_output_and_is_the_same_until_it_changes(make, no_budget):
    output = make()
    assert content_digest(output) == content_digest(output.clone()) == content_digest(output)
    kept = held_copies([output], {})
    assert not storage_changes([output], kept)
    if output.numel():  # (an empty one takes no budget: a copy of nothing)
        assert isinstance(kept[0], HeldDigest)
        flat = output.view(-1) if output.is_contiguous() else output
        if output.dtype == torch.bool:
            flat.logical_not_()
        else:
            flat.add_(1)
        assert storage_changes([output], kept)


def test_within_the_budget_a_copy_beyond_it_a_digest(monkeypatch):
    small = torch.randn(16)
    monkeypatch.setattr(outputs, "HELD_ON_DEVICE_BUDGET_BYTES", small.nbytes)
    state: dict = {}
    kept = held_copies([small, torch.randn(16)], state)
    assert isinstance(kept[0], torch.Tensor) and isinstance(kept[1], HeldDigest)
    assert state["held_on_device_bytes"] == small.nbytes


def test_a_sparse_output_is_not_held_for_comparison_and_does_not_break_the_check(no_budget):
    sparse = torch.eye(6).to_sparse()
    kept = held_copies([sparse, torch.randn(4)], {})
    assert kept[0] is None and isinstance(kept[1], HeldDigest)
    assert storage_changes([sparse, torch.randn(4)], kept)[0].detail.startswith("forward returned output 1")

"""The correctness calls' outputs are held within a window of the device's memory (#38: nine
held 8 GiB outputs of level1/39_L2Norm_ with the call's own tensors are more than an H100 has):
past it the oldest are compared and let go, the latest two always kept, and a write into storage
handed out is still found, whether the output was let go before the end or held to it."""

import torch

from pytest_cudaagent.resources.footprints import Measures, estimate, held_calls_at_peak
from pytest_cudaagent.rules.outputs import (
    HELD_AT_LEAST,
    HeldOutputs,
    held_copies,
    held_window_bytes,
)

GiB = 1 << 30
ELEMENT_BYTES = 4 * 1000  # one output below: 1000 float32


def calls(outputs_of, count: int, window_bytes: int) -> tuple[list, HeldOutputs]:
    """`count` calls, each output held as the candidate's worker holds it; the largest number held at once."""
    held = HeldOutputs(window_bytes)
    most = 0
    for call in range(count):
        output = outputs_of(call)
        held.hold([output], held_copies([output], {}))
        most = max(most, len(held.held))
    return held.check(), held, most


def test_honest_outputs_beyond_the_window_are_let_go_and_nothing_is_found():
    found, held, most = calls(lambda call: torch.full((1000,), float(call)), 9, window_bytes=3 * ELEMENT_BYTES)
    assert found == [] and most == 3 and held.let_go == 6
    assert held.held == []  # check() lets go of the rest


def test_within_the_window_every_output_is_held_to_the_end():
    found, held, most = calls(lambda call: torch.full((1000,), float(call)), 9, window_bytes=100 * ELEMENT_BYTES)
    assert found == [] and most == 9 and held.let_go == 0


def test_the_latest_two_are_held_whatever_their_size():
    _, held, most = calls(lambda call: torch.zeros(1000), 9, window_bytes=0)
    assert most == HELD_AT_LEAST == 2 and held.let_go == 7


def test_a_persistent_output_buffer_is_found_when_its_outputs_are_let_go():
    buffer = torch.zeros(1000)

    def persistent(call):  # the same storage every call, this call's answer written into it
        return buffer.fill_(float(call))
    found, held, _ = calls(persistent, 9, window_bytes=0)
    assert held.let_go == 7 and found and {violation.rule for violation in found} == {"output_reused"}


def test_a_ring_of_buffers_the_window_holds_is_found():
    ring = [torch.zeros(1000) for _ in range(3)]

    def cycling(call):
        return ring[call % 3].fill_(float(call))
    for window in (3 * ELEMENT_BYTES, 100 * ELEMENT_BYTES):
        found, _, _ = calls(cycling, 9, window_bytes=window)
        assert found, window
    # The limit (HeldOutputs' docstring): a ring longer than the window, here three buffers past
    # a window of two, is let go before its buffer comes round again.
    found, _, _ = calls(cycling, 9, window_bytes=0)
    assert found == []


def test_a_write_after_the_output_was_let_go_is_not_charged():
    """An output let go is the candidate's again (the allocator may hand its memory out): its
    check was made when it was let go, against every call made until then."""
    outputs = [torch.full((1000,), float(call)) for call in range(4)]
    held = HeldOutputs(window_bytes=0)
    for output in outputs:
        held.hold([output], held_copies([output], {}))
    outputs[0].fill_(-1.0)  # let go at the third call
    assert held.check() == []
    held.hold([outputs[1]], held_copies([outputs[1]], {}))
    outputs[1].fill_(-1.0)  # held: found
    assert [violation.rule for violation in held.check()] == ["output_reused"]


def test_the_window_is_a_quarter_of_the_device_memory():
    assert held_window_bytes(80 * GiB) == 20 * GiB


def test_the_footprint_counts_the_outputs_the_window_holds():
    """level1/39_L2Norm_ at full size (8 GiB outputs) on an 80 GiB H100: two held and the call's
    own, not nine; on a 141 GiB H200 four and the call's; small outputs: all nine."""
    assert held_calls_at_peak(8 * GiB, 9, 80 * GiB) == 3
    assert held_calls_at_peak(8 * GiB, 9, 141 * GiB) == 5
    assert held_calls_at_peak(1 << 20, 9, 80 * GiB) == 9
    assert held_calls_at_peak(8 * GiB, 9, None) == 9  # the device's memory unknown: every call
    from pytest_cudaagent.core.config import EvalConfig

    config = EvalConfig(device="cuda", trials=5, timing=False)
    measures = Measures(device_peak_bytes=24 * GiB, input_bytes=8 * GiB, output_bytes=8 * GiB)
    on_h100 = estimate(measures, config, "cuda", memory_total=80 * GiB)
    assert on_h100.device_bytes == 2 * (512 << 20) + 2 * 24 * GiB + 3 * 8 * GiB
    assert estimate(measures, config, "cuda", memory_total=None).device_bytes == 2 * (512 << 20) + 2 * 24 * GiB + 9 * 8 * GiB

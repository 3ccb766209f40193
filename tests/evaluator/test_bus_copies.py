"""Copies across the bus with the host side registered for the copy (core/bus_copies.py): the same
bytes as a plain copy, the host range locked only while the copy runs, a refused registration
falls back and leaves no error behind for the next launch check; small, strided, pinned or
host-to-host copies are made as they are."""

import pytest
import torch

from pytest_cudaagent.core import bus_copies
from pytest_cudaagent.core.shared_tensors import shared_copy, shared_empty


def test_host_to_host_and_small_copies_are_plain(monkeypatch):
    registrations = []
    monkeypatch.setattr(bus_copies, "registered", lambda host: registrations.append(host))
    source = torch.arange(1000, dtype=torch.float32)
    destination = torch.empty_like(source)
    assert bus_copies.copy_across(destination, source) is destination
    assert torch.equal(destination, source) and registrations == []
    assert bus_copies.to_device(source, "cpu") is source


def test_only_large_contiguous_unpinned_host_tensors_are_worth_registering(monkeypatch):
    monkeypatch.setattr(bus_copies, "PIN_FROM_BYTES", 4096)
    large = torch.zeros(2048, dtype=torch.float32)
    assert bus_copies._worth_registering(large)
    assert not bus_copies._worth_registering(large[:512])  # 2 KiB: under the floor
    assert not bus_copies._worth_registering(large.view(1024, 2).t())  # strided
    assert not bus_copies._worth_registering(torch.zeros(2048, dtype=torch.float32).to_sparse())


def test_without_a_cuda_runtime_registration_declines_and_the_copy_is_made(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("a CUDA runtime is here: the GPU test below covers it")
    host = shared_empty((1 << 20,), torch.float32)
    with bus_copies.registered(host) as locked:
        assert locked is False


@pytest.mark.gpu
def test_on_the_gpu_large_copies_are_registered_for_the_copy_only_and_exact(monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    monkeypatch.setattr(bus_copies, "PIN_FROM_BYTES", 1 << 20)
    seen_pinned = []
    original = bus_copies.registered

    def watching(host):
        manager = original(host)

        class Watch:
            def __enter__(self):
                locked = manager.__enter__()
                seen_pinned.append((locked, host.is_pinned()))
                return locked

            def __exit__(self, *exc):
                return manager.__exit__(*exc)

        return Watch()

    monkeypatch.setattr(bus_copies, "registered", watching)
    on_device = torch.randn(3 << 20, device="cuda")
    host = shared_copy(on_device)  # device -> fresh shared memory, registered for the copy
    assert torch.equal(host, on_device.cpu())
    assert seen_pinned == [(True, True)] and not host.is_pinned()  # unregistered after
    back = bus_copies.to_device(host, "cuda")
    assert torch.equal(back, on_device) and seen_pinned[-1] == (True, True) and not host.is_pinned()
    # A refusal (here a real one, of a pointer to nothing) copies all the same and leaves no
    # error for the next launch's check to raise.
    real = torch.cuda.cudart()

    class Refusing:
        def cudaHostRegister(self, start, size, flags):
            return real.cudaHostRegister(0, 4096, 0)  # cudaErrorInvalidValue, recorded as the last error

        def __getattr__(self, name):
            return getattr(real, name)

    monkeypatch.setattr(torch.cuda, "cudart", lambda: Refusing())
    again = torch.empty_like(on_device)
    bus_copies.copy_across(again, host)
    assert seen_pinned[-1] == (False, False)
    assert torch.equal(again, on_device)
    torch.ones(4, device="cuda").add_(1)  # a launch check: raises on a stale error
    torch.cuda.synchronize()

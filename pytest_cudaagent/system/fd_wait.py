"""Waiting for a file descriptor to become readable, whatever its number: poll(2), never
select(2), which cannot take a descriptor above 1023 (`ValueError: filedescriptor out of range in
select()`). An evaluating process holds one descriptor per tensor it received in shared memory (a
level-3 model's state dict is hundreds), so its pipes' numbers pass 1023 (issue #38)."""

from __future__ import annotations

import select

_READABLE = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR


def readable(fd: int, timeout_s: float | None) -> bool:
    """Whether `fd` can be read (data, or end-of-file) within `timeout_s` (None: wait until it can)."""
    poller = select.poll()
    poller.register(fd, _READABLE)
    return bool(poller.poll(None if timeout_s is None else max(0, int(timeout_s * 1000))))


def ready(fds: list[int], timeout_s: float | None = None) -> list[int]:
    """Those of `fds` that can be read, waiting up to `timeout_s` for one (None: until one can)."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, _READABLE)
    return [fd for fd, _ in poller.poll(None if timeout_s is None else max(0, int(timeout_s * 1000)))]

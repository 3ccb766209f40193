"""One object per process, made on first use and emptied when the process exits: what an
evaluating process keeps between its evaluations (the reference worker waiting for its next
problem, the references kept for a problem's next candidates, the candidate worker started ahead),
each holding processes that must not outlive it."""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PerProcess(Generic[T]):
    """`get()` makes the object with `make` on first use and registers `empty` (called with it)
    for the process's exit; `empty()` empties it now, if it was made (the object stays, for the
    next use)."""

    def __init__(self, make: Callable[[], T], empty: Callable[[T], None]):
        self._make, self._empty = make, empty
        self._made: T | None = None
        self._lock = threading.Lock()

    def get(self) -> T:
        with self._lock:
            if self._made is None:
                self._made = self._make()
                atexit.register(self.empty)
            return self._made

    def empty(self) -> None:
        made = self._made
        if made is not None:
            self._empty(made)

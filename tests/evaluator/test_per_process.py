"""core/per_process.py: the one object a process keeps between evaluations."""

import atexit

from pytest_cudaagent.core.per_process import PerProcess


class Holder:
    def __init__(self):
        self.emptied = 0

    def empty(self):
        self.emptied += 1


def test_made_once_on_first_use_and_emptied_on_request_and_at_exit(monkeypatch):
    registered = []
    monkeypatch.setattr(atexit, "register", registered.append)
    made = []
    slot = PerProcess(lambda: made.append(Holder()) or made[-1], Holder.empty)
    slot.empty()  # nothing made yet: nothing to empty, nothing made
    assert made == [] and registered == []
    first = slot.get()
    assert slot.get() is first and len(made) == 1
    assert registered == [slot.empty]  # once, for the process's exit
    slot.empty()
    assert first.emptied == 1 and slot.get() is first  # emptied, kept for the next use

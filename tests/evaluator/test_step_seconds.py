"""A worker's own seconds per step inside a request (core.step_seconds.StepSeconds), and how the parent
keeps them (channel.Worker._count_steps): the candidate's worker may send anything there, and
only a few plain numbers with short names are kept, never more than the profile holds."""

import time

from pytest_cudaagent.core.step_seconds import StepSeconds
from pytest_cudaagent.workers.channel import STEPS_AT_MOST, Worker


def test_steps_are_summed_and_taken_once():
    steps = StepSeconds()
    for _ in range(2):
        with steps("call"):
            time.sleep(0.01)
    steps.add("copy", 0.5)
    taken = steps.taken()
    assert set(taken) == {"call", "copy"}
    assert 0.02 <= taken["call"] < 1.0 and taken["copy"] == 0.5
    assert steps.taken() == {}  # the next request counts afresh


def test_steps_given_a_dict_add_to_it():
    profile = {"compare": 1.0}
    steps = StepSeconds(profile)  # the evaluating process's Result.profile, a Worker's waits
    steps.add("compare", 0.5)
    with steps("parent.close"):
        pass
    assert profile["compare"] == 1.5 and "parent.close" in profile


def test_a_step_that_raises_is_still_counted():
    steps = StepSeconds()
    try:
        with steps("call"):
            raise ValueError
    except ValueError:
        pass
    assert "call" in steps.taken()


def _worker() -> Worker:
    worker = Worker.__new__(Worker)  # only its counts: no process
    worker.seconds = {}
    return worker


def test_reply_steps_are_kept_under_the_request():
    worker = _worker()
    worker._count_steps("forward", {"kind": "forward", "steps": {"call": 0.25, "outputs_to_host": 0.5}})
    worker._count_steps("forward", {"kind": "forward", "steps": {"call": 0.25}})
    assert worker.seconds == {"forward.call": 0.5, "forward.outputs_to_host": 0.5}


def test_forged_steps_are_not_kept():
    worker = _worker()
    for steps in ("0.5", [("call", 0.5)], {f"s{n}": 0.1 for n in range(STEPS_AT_MOST + 1)}):
        worker._count_steps("forward", {"kind": "forward", "steps": steps})
    assert worker.seconds == {}
    worker._count_steps("forward", {"kind": "forward", "steps": {
        "x" * 41: 0.1, "negative": -1.0, "huge": 1e9, "an_int": 3, "a_bool": True, "nan": float("nan"),
        7: 0.1, "kept": 0.1}})
    assert worker.seconds == {"forward.kept": 0.1}
    worker._count_steps("forward", {"kind": "forward"})  # no steps: nothing
    assert worker.seconds == {"forward.kept": 0.1}

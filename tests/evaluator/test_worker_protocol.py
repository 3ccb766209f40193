"""The worker protocol as classes (worker.py): each request a worker answers is one method,
`handle_<request>`, of its side's server, and the loop they share answers as it always has."""

import pytest

from pytest_cudaagent.workers.worker import (
    CANDIDATE_REPLY_KEYS,
    CandidateServer,
    ReferenceServer,
    RequestServer,
)

# What the evaluator asks each side (evaluation.py), by name.
REFERENCE_REQUESTS = {"sizes", "prepare", "draw_set", "drop_sets", "fresh_sets", "repeats_itself", "baseline", "calibrate",
                      "release"}
CANDIDATE_REQUESTS = {"construct", "keep_build", "forward", "check_held", "warm", "stage", "time", "audit"}


def test_each_request_has_its_method_on_its_side():
    assert set(ReferenceServer.requests()) == REFERENCE_REQUESTS
    assert set(CandidateServer.requests()) == CANDIDATE_REQUESTS


def test_every_candidate_request_has_its_reply_keys_and_no_other():
    # The messages the candidate's worker sends besides replies: error, its sandbox report, built.
    assert set(CANDIDATE_REPLY_KEYS) - {"error", "sandbox", "built"} == CANDIDATE_REQUESTS


class _Pipe:
    def __init__(self, requests):
        self.requests, self.sent = list(requests), []

    def recv(self):
        if not self.requests:
            raise EOFError
        return self.requests.pop(0)

    def send(self, message):
        self.sent.append(message)


class _Echo(RequestServer):
    def handle_echo(self, value, twice=False):
        return {"value": value * 2 if twice else value}

    def handle_fail(self):
        raise ValueError("no")

    def handle_leave(self):
        raise SystemExit(3)


@pytest.mark.parametrize("last", [("exit",), None])
def test_the_loop_answers_by_name_until_exit_or_the_pipe_closes(last):
    pipe = _Pipe([("echo", 2), ("echo", 2, True), ("fail",), ("unknown",), *([last] if last else []), ("echo", 9)])
    if last is None:
        pipe.requests.pop()  # the pipe closes after "unknown"
    _Echo(pipe).serve()
    assert pipe.sent[:2] == [{"kind": "echo", "value": 2}, {"kind": "echo", "value": 4}]
    failed, unknown = pipe.sent[2:4]
    assert (failed["kind"], failed["phase"], failed["error_type"], failed["message"]) == ("error", "fail", "ValueError", "no")
    assert (unknown["kind"], unknown["phase"], unknown["error_type"]) == ("error", "unknown", "KeyError")
    assert len(pipe.sent) == 4  # nothing answered after exit


def test_an_exit_from_a_request_is_answered_and_ends_the_loop():
    pipe = _Pipe([("leave",), ("echo", 1)])
    _Echo(pipe).serve()
    assert [(m["kind"], m["phase"], m["error_type"]) for m in pipe.sent] == [("error", "leave", "SystemExit")]


def test_the_loop_hands_back_the_request_it_was_told_to_stop_at():
    """serve_requests(until="load"): a reference worker's next problem (reused_reference.py) ends
    the loop with its arguments, unanswered; ("exit",) and a closed pipe end it with None."""
    from pytest_cudaagent.workers.worker import serve_requests

    pipe = _Pipe([("echo", 1), ("load", {"problem": "next.py"}), ("echo", 2)])
    echo = _Echo(pipe)
    assert serve_requests(pipe, echo.handlers(), until="load") == ({"problem": "next.py"},)
    assert pipe.sent == [{"kind": "echo", "value": 1}] and pipe.requests == [("echo", 2)]
    assert serve_requests(_Pipe([("exit",), ("load", {})]), echo.handlers(), until="load") is None
    assert serve_requests(_Pipe([("echo", 3)]), echo.handlers(), until="load") is None

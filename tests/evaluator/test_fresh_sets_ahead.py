"""The timed calls' fresh sets are asked of the reference ahead, while the candidate builds and
runs its trials (evaluation.py, _ask_fresh_sets_ahead): the guess comes from the reference's own
call time, a faster candidate gets the rest drawn after its warm-up, every set is handed out once,
and replies are taken in request order."""

import itertools

import torch

from pytest_cudaagent import EvalConfig, TimingConfig
from pytest_cudaagent.core.files import check_candidate
from pytest_cudaagent.evaluation import Evaluation
from pytest_cudaagent.timing.timer import fresh_call_count
from tests.helpers import CPU_CANDIDATES, PROBLEMS

TIMING = TimingConfig(repeat_ms=100, min_samples=4, max_samples=1000, rotating_inputs=2)
SEEDS = itertools.count()


def fresh(count: int) -> list[dict]:
    return [{"seed": next(SEEDS), "inputs": [torch.zeros(256)], "outputs": [torch.zeros(256)]} for _ in range(count)]


class FakeReference:
    """Answers requests in the order they were sent, as the reference worker does."""

    def __init__(self):
        self.sent: list[tuple] = []
        self.unanswered: list[tuple] = []

    def send(self, message: tuple) -> None:
        self.sent.append(message)
        self.unanswered.append(message)

    def receive(self, timeout_s: float, label: str | None = None) -> dict:
        message = self.unanswered.pop(0)
        if message[0] == "fresh_sets":
            return {"sets": fresh(message[1])}
        return {"deterministic": True, "detail": None}

    def request(self, message: tuple, timeout_s: float) -> dict:
        self.send(message)
        return self.receive(timeout_s)


def evaluation() -> Evaluation:
    config = EvalConfig(device="cpu", timing_config=TIMING)
    return Evaluation(PROBLEMS / "row_sum.py", check_candidate(CPU_CANDIDATES / "row_sum.py"), config, "cpu")


def prepared(forward_ms: float) -> dict:
    return {"sets": fresh(3), "forward_ms": forward_ms}


SET_BYTES = 2 * 256 * 4


def test_the_guess_is_for_a_candidate_twice_as_fast_as_the_reference_plus_the_audited_round():
    run, reference = evaluation(), FakeReference()
    run._ask_fresh_sets_ahead(reference, prepared(forward_ms=2.0))
    assert reference.sent == [("fresh_sets", fresh_call_count(1.0, SET_BYTES, TIMING) + 2)] == [("fresh_sets", 102)]


def test_a_candidate_slower_than_the_guess_takes_the_first_sets_drawn_and_no_more_are_asked():
    run, reference = evaluation(), FakeReference()
    run._ask_fresh_sets_ahead(reference, prepared(forward_ms=2.0))
    sets = run._fresh_sets(reference, 30)
    assert len(sets) == 30 and len(reference.sent) == 1
    assert run._fresh_sets(reference, 5)[0]["seed"] not in {s["seed"] for s in sets}  # never handed out twice


def test_a_candidate_faster_than_the_guess_gets_the_rest_drawn_after_its_warm_up():
    run, reference = evaluation(), FakeReference()
    run._ask_fresh_sets_ahead(reference, prepared(forward_ms=20.0))
    guess = reference.sent[0][1]
    sets = run._fresh_sets(reference, guess + 40)
    assert len(sets) == guess + 40 and reference.sent[1] == ("fresh_sets", 40)
    assert len({s["seed"] for s in sets}) == len(sets)


def test_a_question_for_the_reference_during_the_trials_takes_the_pending_sets_first():
    run, reference = evaluation(), FakeReference()
    run._ask_fresh_sets_ahead(reference, prepared(forward_ms=2.0))
    assert run._reference_repeats_itself(reference, 0) is True  # would get the sets' reply otherwise
    assert [message[0] for message in reference.sent] == ["fresh_sets", "repeats_itself"]
    assert len(run._fresh_sets(reference, 10)) == 10 and len(reference.sent) == 2


def test_without_a_reference_call_time_nothing_is_asked_ahead():
    run, reference = evaluation(), FakeReference()
    run._ask_fresh_sets_ahead(reference, {"sets": fresh(3), "forward_ms": None})
    assert reference.sent == [] and len(run._fresh_sets(reference, 4)) == 4

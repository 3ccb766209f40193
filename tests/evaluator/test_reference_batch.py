"""A batch's candidates share each problem's reference (EvalConfig.reference_batch,
reference_batch.py): the same construction and correctness inputs for all of them, fresh timed
inputs for each, nothing one candidate writes reaching the next, and no sharing without an id,
across problems or settings, or once the reference has failed."""

import dataclasses
import re
import threading

import pytest

from pytest_cudaagent import evaluate
from pytest_cudaagent.core.config import TimingConfig
from pytest_cudaagent.workers.reference_batch import ReferenceStore, batch_key, close_kept
from pytest_cudaagent.workers.reference_batch import store as reference_store
from tests.helpers import PROBLEMS, TEST_CANDIDATES, cpu_config

PROBLEM = PROBLEMS / "linear_bias_relu.py"
DIGESTS = TEST_CANDIDATES / "input_digest_linear_relu.py"
# Few timed calls, so every digest the candidate prints stays inside Result.log's tail.
TIMING = TimingConfig(warmup_ms=5, repeat_ms=20, min_samples=6, max_samples=12, rotating_inputs=2)


@pytest.fixture(autouse=True)
def no_kept_references():
    close_kept()
    yield
    close_kept()


def config(batch: str, **overrides):
    return cpu_config(**{"policy": "permissive", "timing": True, "timing_config": TIMING, "reference_batch": batch,
                         **overrides})


def printed(result, kind: str) -> list[str]:
    return re.findall(rf"^{kind} ([0-9a-f]{{16}})$", result.log, flags=re.MULTILINE)


def test_a_batch_shares_weights_and_trial_inputs_but_not_timed_inputs():
    first = evaluate(PROBLEM, DIGESTS, config("batch-a"))
    second = evaluate(PROBLEM, DIGESTS, config("batch-a"))
    alone = evaluate(PROBLEM, DIGESTS, config(""))
    assert [first.status, second.status, alone.status] == ["passed"] * 3, [first.error, second.error, alone.error]
    assert first.env["reference_shared"] == 1 and second.env["reference_shared"] == 2
    assert "reference_shared" not in alone.env
    # The same seed, so the same weights; the correctness and warm-up sets are the batch's.
    assert printed(first, "weights") == printed(second, "weights")
    shared_sets = 5 + TIMING.rotating_inputs  # the trials' sets and the warm-up's
    first_inputs, second_inputs = printed(first, "input"), printed(second, "input")
    assert len(set(first_inputs) & set(second_inputs)) == shared_sets
    # Every timed call of each got inputs of its own.
    assert len(first_inputs) > shared_sets and len(second_inputs) > shared_sets
    # Without an id: a seed and inputs of its own.
    assert printed(alone, "weights") != printed(first, "weights")
    assert not set(printed(alone, "input")) & set(first_inputs)
    # The second evaluation started no reference of its own and prepared nothing.
    assert "parent.spawn_reference" not in second.profile and "reference.prepare" not in second.profile
    assert "reference.prepare" in first.profile
    # Its CPU seconds are its own share of the kept worker's, not the first evaluation's too: the
    # two shares add up to what the kept worker (idle since) has used in all. (Not "the second's
    # below the first's": on a loaded machine a timed request timed again costs the second more.)
    (kept,) = reference_store()._kept.values()
    assert first.env["pids"]["reference"] == second.env["pids"]["reference"] == kept.worker.process.pid
    total = kept.worker.read_cpu_seconds()
    shares = (first.profile["cpu.reference"], second.profile["cpu.reference"])
    assert min(shares) >= 0 and abs(sum(shares) - total) <= 0.1 + 0.1 * total, (shares, total)


def test_what_a_candidate_writes_into_what_it_was_sent_does_not_reach_the_next():
    vandal = evaluate(PROBLEM, TEST_CANDIDATES / "zeroes_shared_memory.py", config("batch-b", timing=False))
    honest = evaluate(PROBLEM, DIGESTS, config("batch-b", timing=False))
    assert vandal.status != "passed"
    assert honest.env["reference_shared"] == 2
    assert honest.status == "passed", honest.error


def test_a_candidate_that_fails_to_build_leaves_the_reference_to_the_next(tmp_path):
    # Its fresh timed sets were asked for ahead; their reply is collected before the reference is kept.
    failing = tmp_path / "fails_on_import.py"
    failing.write_text("import torch.nn as nn\nraise RuntimeError('its build failed')\n"
                       "class ModelNew(nn.Module):\n    pass\n")
    broken = evaluate(PROBLEM, failing, config("batch-c"))
    honest = evaluate(PROBLEM, DIGESTS, config("batch-c"))
    assert broken.status == "build_error"
    assert honest.env["reference_shared"] == 2
    assert honest.status == "passed", honest.error


def test_other_problems_settings_or_batches_do_not_share():
    evaluate(PROBLEM, DIGESTS, config("batch-d", timing=False))
    other_batch = evaluate(PROBLEM, DIGESTS, config("batch-e", timing=False))
    other_trials = evaluate(PROBLEM, DIGESTS, config("batch-d", timing=False, trials=3))
    other_problem = evaluate(PROBLEMS / "leaky_relu.py", TEST_CANDIDATES / "pytorch_leaky_relu.py",
                             config("batch-d", timing=False))
    assert [r.env["reference_shared"] for r in (other_batch, other_trials, other_problem)] == [1, 1, 1]


def test_batch_key_covers_the_problem_contents_and_every_setting(tmp_path):
    problem = tmp_path / "problem.py"
    problem.write_text(PROBLEM.read_text())
    settings = config("batch").to_dict()
    key = batch_key("batch", problem, "cpu", settings)
    assert key == batch_key("batch", problem, "cpu", dict(settings))
    assert key != batch_key("other", problem, "cpu", settings)
    assert key != batch_key("batch", problem, "cuda", settings)
    assert key != batch_key("batch", problem, "cpu", {**settings, "tolerance": "strict"})
    problem.write_text(PROBLEM.read_text() + "\n# changed\n")
    assert key != batch_key("batch", problem, "cpu", settings)


class FakeProcess:
    def __init__(self):
        self.alive = True

    def is_alive(self) -> bool:
        return self.alive


class FakeWorker:
    def __init__(self):
        self.process = FakeProcess()
        self.closed = False

    def close(self) -> None:
        self.closed = True
        self.process.alive = False


def kept(worker):
    from pytest_cudaagent.workers.reference_batch import KeptReference

    return KeptReference(worker, {"sets": []}, 1)


def test_the_store_keeps_a_few_closes_the_oldest_and_forgets_dead_workers():
    store = ReferenceStore(keep_at_most=2)
    workers = [FakeWorker() for _ in range(3)]
    for index, worker in enumerate(workers):
        store.keep(f"key-{index}", kept(worker))
    assert workers[0].closed and not workers[1].closed and len(store) == 2
    assert store.take("key-0") is None
    assert store.take("key-1").worker is workers[1]
    assert store.take("key-1") is None  # taken: given back with keep
    workers[2].process.alive = False  # died between evaluations
    assert store.take("key-2") is None and workers[2].closed
    store.keep("key-3", kept(FakeWorker()))
    store.close_all()
    assert len(store) == 0


def test_another_thread_neither_takes_nor_keeps():
    store = ReferenceStore()
    mine, theirs = FakeWorker(), FakeWorker()
    store.keep("key", kept(mine))
    seen = {}

    def other_thread():
        seen["taken"] = store.take("key")
        store.keep("key-2", kept(theirs))

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert seen["taken"] is None and theirs.closed and len(store) == 1
    store.close_all()


def test_the_process_store_is_one_and_close_kept_empties_it():
    store = reference_store()
    assert reference_store() is store
    worker = FakeWorker()
    store.keep("key", kept(worker))
    close_kept()
    assert worker.closed and len(store) == 0


def test_config_round_trips_the_batch_id():
    settings = config("batch-f")
    from pytest_cudaagent import EvalConfig

    assert EvalConfig.from_dict(settings.to_dict()).reference_batch == "batch-f"
    assert EvalConfig().reference_batch == ""
    assert dataclasses.replace(settings, reference_batch="").reference_batch == ""

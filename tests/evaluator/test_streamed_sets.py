"""Sets drawn one at a time (#38): where a pair's sets and the copies lent from them would take
more than a share of the host's memory (footprints.streams_sets; level1/39_L2Norm_'s 112 GiB
killed the run on the H100 machine's 125 GiB), the reference draws each trial's set when it is
needed and both processes let go of it once judged. Every verdict stays what it is with the sets
drawn together: here every pair is streamed (the share set to 0) and judged as usual."""

import pytest

from pytest_cudaagent import evaluate
from pytest_cudaagent.core.config import EvalConfig
from pytest_cudaagent.resources import footprints
from pytest_cudaagent.resources.footprints import Measures, estimate, streams_sets
from tests.helpers import QUICK_TIMING, TEST_CANDIDATES, TEST_PROBLEMS, cpu_config

from ..compat.test_real_code import CONVENTIONS, UNWATCHED_STALE_RNN

GiB = 1 << 30
LEAKY = TEST_PROBLEMS / "small_leaky_relu.py"


@pytest.fixture
def streamed(monkeypatch, tmp_path):
    monkeypatch.setattr(footprints, "SETS_AT_ONCE_SHARE", 0.0)
    # A cache of its own: the footprint (which decides streaming) is measured afresh.
    return cpu_config(cache_dir=str(tmp_path / "cache"), memory_policy="admit", policy="permissive")


def streamed_result(problem, candidate, config, **overrides):
    import dataclasses

    result = evaluate(problem, candidate, dataclasses.replace(config, **overrides))
    assert result.env.get("sets_streamed") is True, result.env
    assert "reference.draw_set" in result.profile  # every trial's set after the first drawn on demand
    return result


def test_an_honest_candidate_passes_with_its_sets_streamed(streamed):
    result = streamed_result(LEAKY, TEST_CANDIDATES / "pytorch_leaky_relu.py", streamed)
    assert result.status == "passed", result.summary()
    assert len(result.trials) == 5 and all(trial.correct for trial in result.trials)
    # Trials 1-4 were drawn into the storages of the sets let go before them.
    assert result.env["sets_recycled"] == 4


SHAPE_ALTERNATES = """import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x * 2.0

_draws = [0]

def get_inputs():
    _draws[0] += 1
    return [torch.randn(64, 64 + _draws[0] % 2)]  # 65 wide, then 64, 65, ...

def get_init_inputs():
    return []
"""


def test_a_set_counts_as_recycled_only_when_every_tensor_found_a_storage_of_its_shape(streamed, tmp_path):
    """Sets of alternating shapes: the second set (64 wide) finds only the first's 65-wide
    storages, so it is drawn into fresh memory and not counted; each later set finds the storage
    of the set two before it."""
    problem = tmp_path / "alternating.py"
    problem.write_text(SHAPE_ALTERNATES)
    candidate = tmp_path / "alternating_new.py"
    candidate.write_text(SHAPE_ALTERNATES.replace("class Model", "class ModelNew"))
    result = streamed_result(problem, candidate, streamed)
    assert result.status == "passed", result.summary()
    assert result.env["sets_recycled"] == 3


@pytest.mark.parametrize("candidate", ["zeros_output.py", "wrong_shape.py", "nan_output.py"])
def test_a_wrong_candidate_is_still_incorrect(streamed, candidate):
    result = streamed_result(LEAKY, TEST_CANDIDATES / candidate, streamed)
    assert result.status == "incorrect", result.summary()


def test_a_stateful_reference_is_judged_call_by_call_and_replayed_from_seeds(streamed):
    """The replay of a failed trial draws the earlier sets again from their seeds (the sets
    themselves were let go): the reference repeats itself, so a candidate that forgets the state
    is incorrect, not the reference's fault; an exact copy passes."""
    problem = CONVENTIONS / "problems" / "stateful_rnn.py"
    honest = streamed_result(problem, CONVENTIONS / "candidates" / "stateful_rnn_sample_1.py", streamed,
                             policy="permissive")
    assert honest.status == "passed" and honest.stateful_reference, honest.summary()
    forgets = streamed_result(problem, CONVENTIONS / "candidates" / "stateful_rnn_sample_2.py", streamed,
                              policy="permissive")
    assert forgets.status == "incorrect" and forgets.nondeterministic_trials == [], forgets.summary()
    counter = streamed_result(CONVENTIONS / "problems" / "call_counter.py",
                              CONVENTIONS / "candidates" / "call_counter.py", streamed, policy="permissive")
    assert counter.status == "incorrect" and counter.nondeterministic_trials == [], counter.summary()


def test_the_unwatched_call_is_still_judged(streamed, tmp_path):
    candidate = tmp_path / "unwatched_stale_rnn.py"
    candidate.write_text(UNWATCHED_STALE_RNN)
    result = streamed_result(CONVENTIONS / "problems" / "stateful_rnn.py", candidate, streamed, policy="permissive")
    assert result.status == "incorrect" and "called without the operator audit" in result.error


def test_a_streamed_pair_is_timed_on_warm_up_sets_drawn_after_its_trials(streamed):
    result = streamed_result(LEAKY, TEST_CANDIDATES / "pytorch_leaky_relu.py", streamed, timing=True,
                             timing_config=QUICK_TIMING, baselines=("eager",))
    assert result.status == "passed", result.summary()
    assert result.timing["candidate"].samples > 0 and result.timing["eager"].samples > 0


def test_a_streamed_reference_serves_no_later_candidate_of_a_batch(streamed):
    """Its sets are let go as they are judged: the batch's next candidate gets a reference of its own."""
    import dataclasses

    config = dataclasses.replace(streamed, reference_batch="batch-streamed")
    first = streamed_result(LEAKY, TEST_CANDIDATES / "pytorch_leaky_relu.py", config)
    second = streamed_result(LEAKY, TEST_CANDIDATES / "pytorch_leaky_relu.py", config)
    assert first.passed and second.passed
    assert "reference_shared" not in second.env or second.env["reference_shared"] == 1


def test_which_pairs_are_streamed():
    """By the machine's whole memory, not what is free: the same choice alone and in a batch."""
    config = EvalConfig(device="cuda", trials=5, timing=False)
    l2norm = Measures(device_peak_bytes=24 * GiB, input_bytes=8 * GiB, output_bytes=8 * GiB)
    small = Measures(device_peak_bytes=GiB, input_bytes=64 << 20, output_bytes=64 << 20)
    assert streams_sets(l2norm, config, host_total=125 * GiB)  # the H100 machine: 7 sets of 16 GiB
    assert not streams_sets(l2norm, config, host_total=2048 * GiB)
    assert not streams_sets(small, config, host_total=24 * GiB)
    # Streamed, the host holds one trial set and the two lent copies, not seven sets.
    assert estimate(l2norm, config, "cuda", host_total=125 * GiB).host_bytes == 3 * 16 * GiB
    assert estimate(l2norm, config, "cuda", host_total=2048 * GiB).host_bytes == 7 * 16 * GiB


LARGE_SETS = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4096, 4096)]  # 64 MiB in, 64 MiB out: 128 MiB a set


def get_init_inputs():
    return []
'''


def test_the_reference_holds_one_set_at_a_time(tmp_path, monkeypatch):
    """Measured, not assumed: the reference's process peaks at its five sets drawn together
    (640 MiB of shared memory) and at about one streamed, whose sets both sides let go once judged."""
    import dataclasses

    problem = tmp_path / "large_sets.py"
    problem.write_text(LARGE_SETS)
    candidate = tmp_path / "candidate.py"
    candidate.write_text(LARGE_SETS.replace("class Model(", "class ModelNew("))
    config = cpu_config(memory_policy="admit", policy="permissive")
    peaks = {}
    for share, label in ((1.0, "together"), (0.0, "streamed")):
        monkeypatch.setattr(footprints, "SETS_AT_ONCE_SHARE", share)
        result = evaluate(problem, candidate, dataclasses.replace(config, cache_dir=str(tmp_path / label)))
        assert result.status == "passed", result.summary()
        assert bool(result.env.get("sets_streamed")) == (label == "streamed")
        peaks[label] = result.env["peak_rss_gib"]["reference"] * 1024  # MiB
    assert peaks["streamed"] < peaks["together"] - 300, peaks

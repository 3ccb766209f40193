"""The candidate's timed calls and the eager baseline's in alternating rounds, each side's samples
pooled, the speedup the ratio of their lower deciles (TimingConfig.timing_rounds, `--timing-rounds
N`, and host_bound_rounds for a host-bound call, #40): timed one after the other, seconds apart,
both medians move with the host in between. One round by default."""

import contextlib
import dataclasses
import json
import os
import types

from pytest_cudaagent import EvalConfig, TimingConfig, evaluate
from pytest_cudaagent.core.files import check_candidate
from pytest_cudaagent.core.result import Result, TimingStats
from pytest_cudaagent.evaluation import Evaluation
from pytest_cudaagent.timing.timer import timing_rounds
from tests.helpers import CPU_CANDIDATES, PROBLEMS

TIMING = TimingConfig(repeat_ms=100, min_samples=10, max_samples=1000, timing_rounds=3)


def evaluation(timing: TimingConfig = TIMING, device: str = "cpu", baselines=("eager",)) -> Evaluation:
    config = EvalConfig(device="cpu", timing_config=timing, baselines=baselines)
    return Evaluation(PROBLEMS / "row_sum.py", check_candidate(CPU_CANDIDATES / "row_sum.py"), config, device)


def test_one_round_by_default_ten_for_a_host_bound_call_and_only_eager_is_interleaved():
    default = TimingConfig()
    assert default.timing_rounds == 1 and default.host_bound_rounds == 10
    assert timing_rounds(1.0, 0.9, default) == 1  # its kernels' time
    assert timing_rounds(1.0, None, default) == 1  # the CPU: no device time to compare with
    assert timing_rounds(2.0, 0.5, default) == 10  # four times its device time: the host's
    assert timing_rounds(2.0, 0.5, dataclasses.replace(default, timing_rounds=12)) == 12
    assert timing_rounds(2.0, 0.5, dataclasses.replace(default, host_bound_ratio=None)) == 1
    assert evaluation()._interleaved == [] and evaluation(device="cuda")._interleaved == []
    assert evaluation(baselines=("compile",))._interleaved is None
    assert evaluation(baselines=("compile",))._round_counts(50, 10) == [50]  # nothing to interleave


def test_the_option_sets_the_rounds_and_refuses_fewer_than_one():
    import pytest

    from pytest_cudaagent.options import eval_config

    assert eval_config({"timing-rounds": "3"}).timing_config.timing_rounds == 3
    with pytest.raises(ValueError, match="--timing-rounds"):
        eval_config({"timing-rounds": "0"})


def test_the_candidates_calls_split_into_rounds_of_at_least_a_third_of_min_samples():
    run = evaluation()
    assert run._round_counts(50, 3) == [17, 17, 16]
    assert run._round_counts(10, 3) == [4, 3, 3]
    assert run._round_counts(5, 3) == [5]  # too few calls to split into rounds of three
    assert sum(run._round_counts(1000, 3)) == 1000
    assert run._round_counts(50, 1) == [50]
    assert run._round_counts(50, 10) == [5] * 10  # rounds of at least two


class Reference:
    """The reference's worker: answers each eager round with as many samples as it was asked."""

    process = types.SimpleNamespace(pid=os.getpid())

    def __init__(self, log: list, settings: dict, speeds_ms: tuple = ()):
        self.log, self.settings, self.speeds_ms = log, settings, list(speeds_ms)

    def request(self, message: tuple, timeout_s: float) -> dict:
        self.log.append(message[:2] + message[4:5] + message[6:8])  # request, mode, count, first round, lock held
        count = message[4] if len(message) > 4 else 10
        per_call_ms = self.speeds_ms.pop(0) if self.speeds_ms else 2.0
        return {"samples_ms": [per_call_ms] * count, "device_ms": None, "launch_overlapped": False,
                "backend_settings": self.settings, "quiet": True, "beside": ""}


class Candidate:
    """The candidate's worker: answers the warm-up with a 2 ms call (50 timed calls of 100 ms),
    its kernels' time `device_ms` (None: the CPU), and the backend settings it left in force."""

    def __init__(self, device_ms: float | None = None, settings: dict | None = None):
        self.device_ms, self.settings = device_ms, settings or {}

    def request(self, message: tuple, timeout_s: float) -> dict:
        assert message[0] == "warm"
        return {"per_call_ms": 2.0, "device_ms": self.device_ms, "device_busy_ms": None, "kernel_names": [],
                "own_kernel_names": [], "launch_overlapped": False, "findings": [], "precision": [],
                "backend_settings": self.settings}


def time_with(run: Evaluation, monkeypatch, timed_request) -> None:
    """`run`'s candidate timed with `timed_request` in place of the worker's timed requests, no
    lock, fresh sets or CPU watch check around them; what the evaluator runs beside the
    candidate's timed calls (an eager round) right before or right after them, as _timed_request
    does."""
    def eager_round_beside(worker, reference_worker, warm, count, before_time=None, after_time=None):
        if before_time is not None:
            before_time()
        reply = timed_request(worker, reference_worker, warm, count)
        if after_time is not None:
            after_time()
        return reply

    monkeypatch.setattr(run, "_timing_lock", lambda who, worker: contextlib.nullcontext())
    monkeypatch.setattr(run, "_timed_request", eager_round_beside)
    monkeypatch.setattr(run, "_collect_fresh_sets", lambda reference_worker: None)
    monkeypatch.setattr(run, "_check_watched_time", lambda median, audit: None)


def test_candidate_and_eager_rounds_alternate_and_each_side_pools_its_samples(monkeypatch, tmp_path):
    run = evaluation(dataclasses.replace(TIMING, repeat_ms=100))
    run.config.cache_dir = tmp_path / "cache"
    settings = {"configured": "as configured"}
    run.result.backend_settings["candidate"] = settings
    run.result.correct = True  # its trials passed
    log: list = []

    def timed_request(worker, reference_worker, warm, count):
        log.append(("time", count))
        return {"samples_ms": [1.0] * count}, {"audited_ms": 1.0}, [], [], None

    time_with(run, monkeypatch, timed_request)
    monkeypatch.setattr(run, "_set_count", lambda: run.config.trials + 3)
    reference = Reference(log, settings)
    run._time_candidate(Candidate(settings=settings), reference, [{"inputs": [], "outputs": []}])
    # Each eager round beside its round of the candidate's, in the candidate's hold of the lock:
    # before it in the first and third rounds, after it in the second.
    assert log == [("baseline", "eager", 17, True, True), ("time", 17), ("time", 17),
                   ("baseline", "eager", 17, False, True), ("baseline", "eager", 16, False, True), ("time", 16)]
    run._time_baselines(reference)
    assert len(log) == 6  # the eager baseline is not measured again after the candidate
    assert run.result.timing["candidate"].samples == run.result.timing["eager"].samples == 50
    assert run.result.timing["candidate"].median_ms == 1.0 and run.result.timing["eager"].median_ms == 2.0
    assert not list((tmp_path / "cache" / "baselines").glob("*.json"))  # neither read from the cache nor written to it


def test_the_speedup_in_rounds_divides_the_sides_lower_deciles(monkeypatch, tmp_path):
    """The same code on a host that switches speed (2 ms a call slow, 1 ms fast) between the
    rounds: slow for the first round and its eager round, fast for the next round and a half,
    slow again for the last eager round. Pooled, the candidate's median is 1 ms and eager's 2 ms
    (2.0x); each side met the fast host in a round, and their lower deciles (1 ms each) read
    1.0x. Each round's medians are kept."""
    run = evaluation()
    run.config.cache_dir = tmp_path / "cache"
    settings = {"configured": "as configured"}
    run.result.backend_settings["candidate"] = settings
    run.result.correct = run.result.passed = True
    candidate_speeds = [2.0, 1.0, 1.0]

    def timed_request(worker, reference_worker, warm, count):
        return {"samples_ms": [candidate_speeds.pop(0)] * count}, {"audited_ms": 1.0}, [], [], None

    time_with(run, monkeypatch, timed_request)
    monkeypatch.setattr(run, "_set_count", lambda: run.config.trials + 3)
    reference = Reference([], settings, speeds_ms=(2.0, 1.0, 2.0))
    run._time_candidate(Candidate(settings=settings), reference, [{"inputs": [], "outputs": []}])
    run._time_baselines(reference)
    run._speedups()
    assert run.result.timing["eager"].median_ms / run.result.timing["candidate"].median_ms == 2.0
    assert run.result.timing["eager"].fast_ms == run.result.timing["candidate"].fast_ms == 1.0
    medians = [{side: round_[side] for side in ("candidate_ms", "eager_ms")} for round_ in run.result.timing_rounds]
    assert medians == [{"candidate_ms": 2.0, "eager_ms": 2.0}, {"candidate_ms": 1.0, "eager_ms": 1.0},
                       {"candidate_ms": 1.0, "eager_ms": 2.0}]
    # Each round's samples kept beside its medians, every timed call of both sides.
    assert [set(round_["candidate_samples_ms"]) for round_ in run.result.timing_rounds] == [{2.0}, {1.0}, {1.0}]
    assert sum(len(round_["eager_samples_ms"]) for round_ in run.result.timing_rounds) == \
        run.result.timing["eager"].samples
    assert run.result.speedup_vs_eager == 1.0


def test_with_one_round_the_speedup_is_the_ratio_of_the_medians_and_no_rounds_are_kept():
    run = evaluation(dataclasses.replace(TIMING, timing_rounds=1))
    run.result.passed = True
    run.result.timing = {"candidate": TimingStats(1.0, 0.0, 10), "eager": TimingStats(1.5, 0.0, 10)}
    run._candidate_rounds = [[1.0] * 10]
    run._speedups()
    assert run.result.speedup_vs_eager == 1.5 and run.result.timing_rounds == []


def test_a_host_bound_call_is_timed_in_ten_rounds_and_a_device_bound_one_in_one(monkeypatch):
    """With the default one round, a call whose wall time is four times its kernels' (2 ms
    against 0.5) gets host_bound_rounds; one at its kernels' time stays in one round, its eager
    baseline timed after it (and cached)."""
    for device_ms, expected in ((0.5, 10), (1.9, 1)):
        run = evaluation(dataclasses.replace(TIMING, timing_rounds=1, host_bound_repeat_ms=100), device="cuda")
        run.result.correct = True
        run.result.backend_settings["candidate"] = {}
        monkeypatch.setattr(run, "_set_count", lambda run=run: run.config.trials + 3)
        monkeypatch.setattr(run, "_check_kernels", lambda warm: None)
        monkeypatch.setattr(run, "_check_busy_time", lambda median, busy: None)
        log: list = []

        def timed_request(worker, reference_worker, warm, count, log=log):
            log.append(("time", count))
            return {"samples_ms": [2.0] * count}, {"audited_ms": 1.0}, [], [], None

        time_with(run, monkeypatch, timed_request)
        run._time_candidate(Candidate(device_ms), Reference(log, {}), [{"inputs": [], "outputs": []}])
        assert sum(entry[0] == "time" for entry in log) == expected
        assert sum(entry[0] == "baseline" for entry in log) == (expected if expected > 1 else 0)
        assert len(run._interleaved) == (expected if expected > 1 else 0)


def test_in_rounds_the_compile_speedup_divides_lower_deciles_too():
    """The compile baseline is timed after the candidate in one window, but a candidate timed
    in rounds is a host-bound one: its speedup over compile divides lower deciles as eager's
    does, not its pooled median (which met the slow host more) by compile's."""
    run = evaluation(baselines=("eager", "compile"))
    run.result.passed = True
    candidate = TimingStats.from_samples([1.0] * 4 + [1.6] * 16)  # median 1.6, lower decile 1.0
    compile_ = TimingStats.from_samples([0.5] * 10 + [0.8] * 10)  # median 0.65, lower decile 0.5
    eager = TimingStats.from_samples([1.0] * 20)
    run.result.timing = {"candidate": candidate, "eager": eager, "compile": compile_}
    run._candidate_rounds = [[1.0] * 4 + [1.6] * 6, [1.6] * 10]
    run._interleaved = [{"samples_ms": [1.0] * 10}, {"samples_ms": [1.0] * 10}]
    run._speedups()
    assert run.result.speedup_vs_compile == 0.5 and run.result.speedup_vs_eager == 1.0
    run._candidate_rounds, run._interleaved = [[1.0] * 20], []  # one round: the medians
    run._speedups()
    assert run.result.speedup_vs_compile == 0.65 / 1.6 and run.result.speedup_vs_eager == 1.0 / 1.6


def test_a_stateful_references_speedups_keep_the_medians():
    """A stateful reference's timed outputs are not compared (an RNN's self.hidden): there a
    call that skipped its work one time in five would set the lower decile, so in rounds its
    speedups stay the medians' ratio."""
    run = evaluation()
    run.result.passed = True
    run.result.stateful_reference = True
    skipping = TimingStats.from_samples([0.1] * 5 + [2.0] * 15)  # fast where it skipped its work
    run.result.timing = {"candidate": skipping, "eager": TimingStats.from_samples([2.0] * 20)}
    run._candidate_rounds = [[0.1] * 5 + [2.0] * 5, [2.0] * 10]
    run._interleaved = [{"samples_ms": [2.0] * 10}, {"samples_ms": [2.0] * 10}]
    run._speedups()
    assert run.result.speedup_vs_eager == 1.0 and len(run.result.timing_rounds) == 2
    run.result.stateful_reference = False
    run._speedups()
    assert run.result.speedup_vs_eager > 10  # compared outputs: the decile is the candidate's own


def test_in_rounds_the_busy_time_check_holds_the_lower_decile(monkeypatch):
    """A candidate whose timed calls beat its kernels' busy time one time in five (a path that
    runs only unwatched) sets the lower decile the speedup divides: the GPU's consistency check
    holds that decile, not the median, to the busy time."""
    run = evaluation(dataclasses.replace(TIMING, timing_rounds=1, host_bound_repeat_ms=100), device="cuda")
    run.result.correct = True
    run.result.backend_settings["candidate"] = {}
    checked: list = []
    monkeypatch.setattr(run, "_set_count", lambda: run.config.trials + 3)
    monkeypatch.setattr(run, "_check_kernels", lambda warm: None)
    monkeypatch.setattr(run, "_check_busy_time", lambda timed_ms, busy: checked.append(timed_ms))

    def timed_request(worker, reference_worker, warm, count):
        return {"samples_ms": [0.1] + [2.0] * (count - 1)}, {"audited_ms": 1.0}, [], [], None

    time_with(run, monkeypatch, timed_request)
    run._time_candidate(Candidate(device_ms=0.5), Reference([], {}), [{"inputs": [], "outputs": []}])
    assert len(run._candidate_rounds) == 10
    assert checked == [run.result.timing["candidate"].fast_ms] and checked[0] < 2.0


def test_a_verdict_in_a_round_ends_the_rounds(monkeypatch):
    run = evaluation()
    run.result.correct = True
    log: list = []

    def timed_request(worker, reference_worker, warm, count):
        log.append(("time", count))
        run.result.violations.append("a violation found in this round")
        return {"samples_ms": [1.0] * count}, {"audited_ms": 1.0}, [], [], None

    time_with(run, monkeypatch, timed_request)
    run._time_candidate(Candidate(), Reference(log, {}), [{"inputs": [], "outputs": []}])
    # The first eager round came before; after the verdict neither another round of the
    # candidate's nor one of eager's.
    assert log == [("baseline", "eager", 17, True, True), ("time", 17)]


def test_with_one_round_eager_is_measured_after_the_candidate_and_cached(monkeypatch, tmp_path):
    run = evaluation(dataclasses.replace(TIMING, timing_rounds=1))
    run.config.cache_dir = tmp_path / "cache"
    settings = {"configured": "as configured"}
    run.result.backend_settings["candidate"] = settings
    log: list = []
    monkeypatch.setattr(run, "_set_count", lambda: run.config.trials + 3)
    run._time_baselines(Reference(log, settings))
    assert log == [("baseline", "eager")]
    assert len(list((tmp_path / "cache" / "baselines").glob("*.json"))) == 1


def test_a_cpu_evaluation_times_eager_in_rounds_between_the_candidates(tmp_path, monkeypatch):
    """End to end on the CPU backend: three timed requests of the candidate, the eager baseline's
    samples as many as the candidate's, and no eager entry in the baseline cache. Each eager round
    runs inside the candidate's hold of the timing lock (the reference's worker takes none of
    its own), beside the candidate's round: before it, then after it, then before."""
    log = tmp_path / "lock.log"
    monkeypatch.setenv("CUDAAGENT_LOCK_LOG", str(log))
    config = EvalConfig(device="cpu", baselines=("eager",), cache_dir=tmp_path / "cache",
                        timing_config=TimingConfig(timing_rounds=3))
    result = evaluate(PROBLEMS / "leaky_relu.py", CPU_CANDIDATES / "leaky_relu.py", config)
    assert result.passed, result.summary()
    assert len(result.env["timed_loop"]) == 3
    holders = [line.split()[1] for line in log.read_text().splitlines()]
    assert len(holders) == 4 and all(">" in holder for holder in holders), holders  # warm-up and three rounds
    # As many as the candidate's or, where eager ran slower, as many as fit its rounds' time.
    assert 6 <= result.timing["eager"].samples <= result.timing["candidate"].samples
    assert len(result.timing_rounds) == 3
    for side in ("candidate", "eager"):  # every timed call's sample, round by round
        assert sum(len(round_[f"{side}_samples_ms"]) for round_ in result.timing_rounds) == result.timing[side].samples
        assert [len(round_[f"{side}_started_ms"]) for round_ in result.timing_rounds] == \
            [len(round_[f"{side}_samples_ms"]) for round_ in result.timing_rounds]
    # When each call began, after the first: the first round's eager calls, then its candidate's;
    # the second round's candidate calls, then its eager ones; the third as the first.
    starts = [start for index, round_ in enumerate(result.timing_rounds)
              for start in (round_["eager_started_ms"] + round_["candidate_started_ms"] if index % 2 == 0
                            else round_["candidate_started_ms"] + round_["eager_started_ms"])]
    assert starts[0] == 0.0 and starts == sorted(starts) and len(set(starts)) == len(starts)
    assert result.speedup_vs_eager == result.timing["eager"].fast_ms / result.timing["candidate"].fast_ms
    assert Result.from_json(result.to_json()).timing_rounds == result.timing_rounds  # kept in the file
    cached = [json.loads(path.read_text()) for path in (tmp_path / "cache").rglob("*.json")]
    assert not [entry for entry in cached if entry.get("mode") == "eager"]


class SlowEager:
    """The reference's side of timed_as_the_candidate on the CPU: one set, a 2 ms call."""

    device = "cpu"

    def __init__(self):
        import torch

        self.sets = [{"inputs": [torch.ones(4)], "outputs": [torch.ones(4)]}]
        self._warmed_round = None

    def draw_inputs(self, seed: int) -> list:
        import torch

        return [torch.ones(4)]


def test_an_eager_round_fits_the_candidates_round_time_and_is_warmed_once(monkeypatch):
    """A candidate faster than eager: eager's round takes as many calls as fit the candidate's
    round time (never under two), not the candidate's count; its warm-up and profile run in the
    evaluation's first round only."""
    import time as clock

    from pytest_cudaagent.timing.timer import Clock, Timer
    from pytest_cudaagent.workers.worker import ReferenceServer

    def eager(x):
        clock.sleep(0.002)
        return x

    side = SlowEager()
    timer = Timer(Clock("cpu"), TimingConfig(warmup_ms=10))
    warm_ups: list = []
    warm_up = timer.warm_up
    monkeypatch.setattr(timer, "warm_up", lambda *args: warm_ups.append(1) or warm_up(*args))
    first = ReferenceServer.timed_as_the_candidate(side, timer, eager, [0], count=50, round_ms=20.0)
    assert 2 <= len(first.samples_ms) <= 10  # 20 ms of 2 ms calls, not 50 of them
    assert ReferenceServer.timed_as_the_candidate(side, timer, eager, [0], count=50, round_ms=1.0).samples_ms
    assert len(ReferenceServer.timed_as_the_candidate(side, timer, eager, [0], count=50, round_ms=1.0).samples_ms) == 2
    assert len(warm_ups) == 1  # the later rounds reuse the first's
    assert len(ReferenceServer.timed_as_the_candidate(side, timer, eager, [0], count=3, round_ms=1000.0).samples_ms) == 3
    assert len(ReferenceServer.timed_as_the_candidate(side, timer, eager, [0], count=None).samples_ms) >= 10
    assert len(warm_ups) == 2  # no round: warmed as ever

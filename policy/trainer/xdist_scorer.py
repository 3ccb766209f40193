"""`scorer: xdist`: a whole rollout batch scored by one `pytest -n <workers>` run of the evaluator's
plugin, the path `cudaagent bench` takes (benchmark.batch: one worker pinned per GPU, the per-GPU
timing lock, Results as JSONL). For the batch-synchronous stages, which generate a batch, score it,
then update.

Every episode gets a reward: one whose candidate is missing from the results (a worker died, the
run never started or stopped early) gets -1, and `episodes.jsonl` in the work dir says why."""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from pytest_cudaagent.timing.locks import lock_dir

from .environments import Environment, Task

FAILED_REWARD = -1.0
MISSING_RESULT = "no result (worker died?)"


@dataclass
class _Pending:
    task: Task
    assistant_turns: list[str]
    future: Future


class _BatchFuture(Future):
    """Resolved by the batch's pytest run; asking for the result starts that run if nobody has
    (a caller never waits on a run that was not started)."""

    def __init__(self, scorer: XdistScorer):
        super().__init__()
        self._scorer = scorer

    def result(self, timeout=None):
        self._scorer.flush()
        return super().result(timeout)


@dataclass
class ScoredEpisode:
    """One line of episodes.jsonl: an episode's reward and, unless it passed, why."""

    batch: int
    task_id: str
    problem: str
    candidate: str | None
    reward: float
    status: str | None
    reason: str | None
    host: str = ""  # the machine that scored it
    process: int | None = None  # the trainer process whose episode it was


def xdist_layout(devices: list[str]) -> tuple[str, tuple[str, ...] | None]:
    """(evaluator device, GPUs to pin over) for the scoring devices: one worker per entry, so
    ["cuda:0", "cuda:1"] is two workers, one per GPU, and ["cpu", "cpu"] two CPU workers."""
    kinds = {device.split(":", 1)[0] for device in devices}
    if kinds == {"cpu"}:
        return "cpu", None
    if kinds == {"cuda"} and all(":" in device for device in devices):
        gpus = tuple(dict.fromkeys(device.split(":", 1)[1] for device in devices))
        return "cuda", gpus
    raise ValueError(f"scoring_devices {devices} cannot be one pytest-xdist run: list GPUs as cuda:N "
                     "(a GPU listed twice gets two workers) or only cpu entries")


class XdistScorer:
    """Episodes are held until the batch is complete (`flush`, which runs() collect calls), then
    scored by one pytest-xdist run in a background thread: the trainer's no-grad passes that do not
    need the scores go on meanwhile, as with the pool."""

    def __init__(self, environment: Environment, devices: list[str], work_dir: str | Path,
                 process: int | None = None):
        for method in ("candidate_source", "problem_file", "evaluator_config"):
            if not hasattr(environment, method):
                raise ValueError(f"scorer xdist needs an environment that writes candidate files "
                                 f"(cuda-single-turn); {type(environment).__name__} has no {method}(); "
                                 "use scorer: pool or inline")
        self.environment = environment
        self.device, self.gpus = xdist_layout(devices)
        self.workers = len(devices)
        # Absolute: the pytest run works in a folder of its own.
        self.work_dir = Path(work_dir).resolve()
        self._pending: list[_Pending] = []
        # A resumed stage goes on after the batches already on disk (run_batch never overwrites results).
        self._batches = len(list(self.work_dir.glob("batch-*")))
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        # Which machine and process score here, on which devices: scorer.json beside the batches.
        self.host, self.process = socket.gethostname(), process
        self.work_dir.mkdir(parents=True, exist_ok=True)
        (self.work_dir / "scorer.json").write_text(json.dumps(
            {"host": self.host, "process": process, "devices": devices, "workers": self.workers,
             "lock_dir": str(lock_dir())}))

    def submit(self, task: Task, assistant_turns: list[str]) -> Future:
        future = _BatchFuture(self)
        with self._lock:
            self._pending.append(_Pending(task, list(assistant_turns), future))
        return future

    def flush(self) -> None:
        """Starts scoring every episode submitted so far (in the background); a no-op when none waits."""
        with self._lock:
            pending, self._pending = self._pending, []
            if not pending:
                return
            batch = self._batches
            self._batches += 1
            thread = threading.Thread(target=self._score_batch, args=(batch, pending), daemon=True,
                                      name=f"xdist-scorer-{batch}")
            self._threads.append(thread)
        thread.start()

    def close(self) -> None:
        for thread in self._threads:
            thread.join()

    def _score_batch(self, batch: int, pending: list[_Pending]) -> None:
        try:
            episodes = score_batch(self.environment, pending, self.work_dir / f"batch-{batch:05d}", batch,
                                   self.device, self.gpus, self.workers)
        except Exception as error:  # whatever went wrong, training goes on without these rewards
            episodes = [ScoredEpisode(batch, item.task.task_id, "", None, FAILED_REWARD, None,
                                      f"scoring failed: {type(error).__name__}: {error}") for item in pending]
        for episode in episodes:
            episode.host, episode.process = self.host, self.process
        try:
            self.work_dir.mkdir(parents=True, exist_ok=True)
            with open(self.work_dir / "episodes.jsonl", "a") as log:
                for episode in episodes:
                    log.write(json.dumps(dataclasses.asdict(episode)) + "\n")
        finally:  # the trainer waits on these whatever happened to the log
            for item, episode in zip(pending, episodes, strict=True):
                item.future.set_result(episode.reward)


def score_batch(environment, pending: list[_Pending], batch_dir: Path, batch: int, device: str,
                gpus: tuple[str, ...] | None, workers: int) -> list[ScoredEpisode]:
    """Writes the batch's candidate files, runs them through pytest-xdist and reads the Results
    back; one ScoredEpisode per pending episode, in order."""
    from benchmark.batch import PYTEST_RAN, BatchError, BatchSettings, log_tail, run_batch
    from pytest_cudaagent.core.files import BadFileError, check_candidate
    from pytest_cudaagent.records.pairing import Pair
    from pytest_cudaagent.records.results_file import pair_key

    candidates_dir = batch_dir / "candidates"
    candidates_dir.mkdir(parents=True, exist_ok=True)
    episodes: list[ScoredEpisode] = []
    pairs: dict[int, Pair] = {}  # episode index -> its pair
    for index, item in enumerate(pending):
        task = item.task
        problem = str(Path(environment.problem_file(task)).resolve())
        episode = ScoredEpisode(batch, task.task_id, problem, None, FAILED_REWARD, None, None)
        episodes.append(episode)
        source = environment.candidate_source(task, item.assistant_turns)
        if source is None:
            episode.reason = "no code in the answer"
            continue
        candidate = candidates_dir / f"{index:04d}-{Path(problem).stem}.py"
        candidate.write_text(source)
        episode.candidate = str(candidate)
        try:
            # What the pool's evaluate() would refuse before running anything: -1 there too.
            check_candidate(candidate)
        except BadFileError as error:
            episode.reason = str(error)
            continue
        pairs[index] = Pair(Path(problem), candidate)
    if not pairs:
        return episodes

    # The environment's EvalConfig, whole (the batch writes it to .bench-run/eval_config.json).
    config = dataclasses.replace(environment.evaluator_config(device), device=device)
    settings = BatchSettings(config=config, workers=workers, gpus=gpus)
    results_path = batch_dir / "results.jsonl"
    try:
        outcome = run_batch(list(pairs.values()), results_path, settings, console=Console(quiet=True))
    except (OSError, BatchError) as error:  # e.g. the interpreter is gone, no GPU visible
        missing_reason = f"scoring run could not start: {error}"
        results = {}
    else:
        results = {pair_key(r.problem, r.candidate): r for r in outcome.new_results}
        missing_reason = MISSING_RESULT
        if outcome.pytest_exit not in PYTEST_RAN:
            last_lines = log_tail(outcome.log_path, 4).replace("\n", " | ")
            missing_reason = f"scoring run failed (pytest exit {outcome.pytest_exit}): {last_lines}"
    for index, pair in pairs.items():
        episode = episodes[index]
        result = results.get(pair.key)
        if result is None:
            episode.reason = missing_reason
            continue
        episode.reward, episode.status = float(result.reward), result.status
        episode.reason = None if result.passed else f"{result.status}: {result.error}"
    return episodes

"""scorer: xdist — a rollout batch scored by one pytest-xdist run of the plugin: the config, the
faults that cost a candidate its reward (never the run), and the same rewards as scorer: pool,
through a short RFT stage on the tiny model."""

import json
import random
from pathlib import Path

import pytest

from experiments.reward_latency import (
    QUICK_CANDIDATE,
    QUICK_EVAL_OPTIONS,
    FixedAnswerEnvironment,
)
from policy.trainer.config import StageConfig, TrainConfig, default_scorer, from_dict
from policy.trainer.environments import TargetTokenEnvironment
from policy.trainer.metrics import read_metrics
from policy.trainer.rewards import DevicePoolScorer, build_scorer
from policy.trainer.stages import run_pipeline
from policy.trainer.xdist_scorer import MISSING_RESULT, XdistScorer, xdist_layout

from .worker_killer import KILL_MARKER

REPO = Path(__file__).resolve().parents[2]
PROBLEM = REPO / "tests" / "data" / "problems" / "small_leaky_relu.py"
CANDIDATES = REPO / "tests" / "data" / "candidates"


def candidate_file(directory: Path, name: str, source: str) -> str:
    path = directory / f"{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    return str(path)


def environment_for(candidates: list[str | None], **eval_options) -> FixedAnswerEnvironment:
    answers = tuple((str(PROBLEM), candidate) for candidate in candidates)
    return FixedAnswerEnvironment(str(PROBLEM), device="cpu", eval_options={**QUICK_EVAL_OPTIONS, **eval_options},
                                  answers=answers)


def score_all(scorer, environment) -> list[float]:
    tasks = environment.sample_tasks(len(environment.answers), random.Random(0))
    futures = [scorer.submit(task, ["(the model's answer; the environment fixes the candidate)"]) for task in tasks]
    scorer.flush()
    return [future.result() for future in futures]


def episode_log(work_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (work_dir / "episodes.jsonl").read_text().splitlines()]


# -- config ------------------------------------------------------------------------------------


def test_the_run_gets_the_environments_eval_config_whole(tmp_path, monkeypatch):
    """Every setting of the environment's EvalConfig reaches the batch: the convention, backend
    and memory policy too, which a flag-by-flag hand-over once left at their defaults."""
    import dataclasses

    from benchmark import batch

    seen = {}

    def capture(pairs, results_path, settings, **_):
        seen["settings"] = settings
        raise batch.BatchError("only the settings are looked at")

    monkeypatch.setattr(batch, "run_batch", capture)
    environment = environment_for([candidate_file(tmp_path, "good", QUICK_CANDIDATE)], backend="strict-fp32",
                                  memory_policy="retry", run_timeout_s=9.0)
    environment = dataclasses.replace(environment, convention="cuda-agent")
    scorer = XdistScorer(environment, ["cpu"], tmp_path / "scoring")
    assert score_all(scorer, environment) == [-1.0]
    config = seen["settings"].config
    assert config == environment.evaluator_config("cpu")
    assert (config.convention, config.backend, config.memory_policy, config.run_timeout_s) == \
        ("cuda-agent", "strict-fp32", "retry", 9.0)


def test_unknown_scorer_names_the_allowed_ones():
    with pytest.raises(ValueError, match="unknown scorer 'xdsit'; use one of inline, pool, xdist"):
        from_dict(TrainConfig, {"stages": [{"name": "rft", "environment": {"scorer": "xdsit"}}]}, "x.yaml")


def test_batch_synchronous_stages_default_to_xdist_and_multi_turn_to_the_pool():
    for stage in ("ppo-single-turn", "rft", "value-pretrain"):
        assert default_scorer(stage, "cuda-single-turn") == "xdist"
    assert default_scorer("ppo-multi-turn", "cuda-single-turn") == "pool"
    assert default_scorer("rft", "target-token") == "inline"  # toy rewards cost microseconds
    assert default_scorer("rft", "cuda-agent") == "inline"  # scores inside its own loop
    config = from_dict(StageConfig, {"name": "rft", "environment": {"kind": "cuda-single-turn"}}, "x")
    assert config.environment.scorer == "xdist"
    explicit = from_dict(StageConfig, {"name": "rft", "environment": {"kind": "cuda-single-turn", "scorer": "pool"}}, "x")
    assert explicit.environment.scorer == "pool"


def test_xdist_layout_gives_one_worker_per_device_entry():
    assert xdist_layout(["cpu", "cpu"]) == ("cpu", None)
    assert xdist_layout(["cuda:0", "cuda:1", "cuda:0", "cuda:1"]) == ("cuda", ("0", "1"))
    with pytest.raises(ValueError, match="cuda:N"):
        xdist_layout(["cuda:0", "cpu"])


def test_xdist_needs_an_environment_that_writes_candidate_files(tmp_path):
    with pytest.raises(ValueError, match="scorer xdist needs an environment that writes candidate files"):
        build_scorer(TargetTokenEnvironment(), "xdist", ["cpu"], tmp_path)


# -- faults: each costs the candidates concerned -1 with a reason, never the training run ---------


def test_a_pytest_run_that_cannot_start_gives_every_candidate_minus_one(tmp_path, monkeypatch):
    good = candidate_file(tmp_path, "good", QUICK_CANDIDATE)
    environment = environment_for([good, None, candidate_file(tmp_path, "syntax", "class ModelNew(:\n")])
    monkeypatch.setattr("benchmark.batch.sys.executable", str(tmp_path / "no-such-python"))
    scorer = XdistScorer(environment, ["cpu", "cpu"], tmp_path / "scoring")
    assert score_all(scorer, environment) == [-1.0, -1.0, -1.0]
    reasons = [episode["reason"] for episode in episode_log(tmp_path / "scoring")]
    assert reasons[0].startswith("scoring run could not start:") and "no-such-python" in reasons[0]
    assert reasons[1] == "no code in the answer"
    assert "syntax error on line 1" in reasons[2]  # refused before the run, as evaluate() refuses it


def test_a_pytest_run_that_fails_at_start_up_gives_minus_one_with_its_exit(tmp_path, monkeypatch):
    environment = environment_for([candidate_file(tmp_path, "good", QUICK_CANDIDATE)])
    monkeypatch.setenv("PYTEST_ADDOPTS", "--no-such-option")  # pytest stops before collecting
    scorer = XdistScorer(environment, ["cpu"], tmp_path / "scoring")
    assert score_all(scorer, environment) == [-1.0]
    (episode,) = episode_log(tmp_path / "scoring")
    assert episode["reason"].startswith("scoring run failed (pytest exit 4)")
    assert "--no-such-option" in episode["reason"]  # the log's last lines say what went wrong


def test_a_resumed_stage_scores_into_new_batch_folders(tmp_path):
    (tmp_path / "scoring" / "batch-00000").mkdir(parents=True)  # left by the run before the resume
    environment = environment_for([None])
    scorer = XdistScorer(environment, ["cpu"], tmp_path / "scoring")
    assert score_all(scorer, environment) == [-1.0]
    assert [episode["batch"] for episode in episode_log(tmp_path / "scoring")] == [1]


@pytest.mark.slow
def test_dead_workers_exits_and_hangs_cost_only_their_own_candidates(tmp_path, monkeypatch):
    # A worker that dies: a plugin kills the xdist worker itself on one candidate (a candidate's
    # own os._exit only ends the evaluator's child process: status crashed).
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p tests.trainer.worker_killer")
    sleeper = "import time\ntime.sleep(600)\n\n\nclass ModelNew:\n    pass\n"
    candidates = [
        candidate_file(tmp_path, "good", QUICK_CANDIDATE),
        str(CANDIDATES / "os_exit.py"),
        candidate_file(tmp_path, "sleeps_at_import", sleeper),
        candidate_file(tmp_path, "good_but_worker_dies", QUICK_CANDIDATE + KILL_MARKER),
    ]
    # A short build (import) timeout, long enough for an honest import on a loaded 2-core box (5 s
    # was not, with another xdist worker busy); the reference still gets the usual run timeout.
    environment = environment_for(candidates, build_timeout_s=30)
    scorer = XdistScorer(environment, ["cpu", "cpu"], tmp_path / "scoring")
    assert score_all(scorer, environment) == [1.0, -1.0, -1.0, -1.0]
    episodes = episode_log(tmp_path / "scoring")
    assert episodes[0]["status"] == "passed" and episodes[0]["reason"] is None
    assert episodes[1]["status"] == "crashed" and "exit" in episodes[1]["reason"]
    assert episodes[2]["status"] == "timeout" and episodes[2]["reason"].startswith("timeout: build")
    # The batch runner gives a pair whose pytest worker died a harness_error row (ours, not the
    # candidate's; --resume evaluates it again), which the scorer passes on with its reason.
    assert episodes[3]["status"] == "harness_error"
    assert "worker" in episodes[3]["reason"] and episodes[3]["reason"] != MISSING_RESULT
    scorer.close()


# -- the same rewards as the pool, through a training stage -------------------------------------


@pytest.mark.slow
def test_rft_with_the_xdist_scorer_gets_the_pools_rewards(tmp_path, monkeypatch):
    candidates = [
        candidate_file(tmp_path, "correct", QUICK_CANDIDATE),
        str(CANDIDATES / "zeros_output.py"),  # incorrect
        candidate_file(tmp_path, "fails_to_build", "raise ImportError('no such extension')\n\n\nclass ModelNew:\n    pass\n"),
        None,  # no code in the answer
    ]
    environment = environment_for(candidates)
    monkeypatch.setattr("policy.trainer.runtime.build_environment", lambda kind, options: environment)
    config = from_dict(TrainConfig, {
        "output_dir": str(tmp_path / "run"), "tensorboard": False, "progress": False,
        "stages": [{"name": "rft", "environment": {"kind": "cuda-single-turn", "scoring_devices": ["cpu", "cpu"]},
                    "rollout": {"max_new_tokens": 4, "max_total_tokens": 128},
                    "rft": {"rounds": 1, "tasks_per_round": 4, "minibatch_size": 1, "micro_batch_size": 1}}],
    }, "test")
    assert config.stages[0].environment.scorer == "xdist"  # the stage's default
    run_pipeline(config)

    stage_dir = tmp_path / "run" / "00-rft"
    episodes = episode_log(stage_dir / "scoring" / "process-0")
    xdist_rewards = [episode["reward"] for episode in episodes]
    assert [episode["status"] for episode in episodes] == ["passed", "incorrect", "build_error", None]
    pool = DevicePoolScorer(environment, ["cpu", "cpu"])
    try:
        assert xdist_rewards == score_all(pool, environment) == [1.0, -1.0, -1.0, -1.0]
    finally:
        pool.close()
    (metrics,) = read_metrics(stage_dir / "metrics.jsonl")
    assert metrics["kept"] == 1 and metrics["reward_mean"] == pytest.approx(-0.5)


@pytest.mark.gpu
def test_xdist_scores_cuda_candidates_one_worker_per_gpu_as_the_pool_does(tmp_path):
    import torch

    problems = sorted((REPO / "examples" / "problems").glob("*.py"))
    answers = tuple((str(p), str(REPO / "examples" / "candidates" / "cuda" / p.name)) for p in problems)
    # Correctness only: the reward then does not hang on timing noise near the speed-up thresholds.
    environment = FixedAnswerEnvironment(str(REPO / "examples" / "problems"), device="cuda",
                                         eval_options={"timing": False}, answers=answers)
    devices = [f"cuda:{index}" for index in range(torch.cuda.device_count())]
    scorer = XdistScorer(environment, devices, tmp_path / "scoring")
    xdist_rewards = score_all(scorer, environment)
    scorer.close()
    pool = DevicePoolScorer(environment, devices)
    try:
        assert xdist_rewards == score_all(pool, environment) == [1.0] * len(answers)
    finally:
        pool.close()
    log = (tmp_path / "scoring" / "batch-00000" / "pytest.log").read_text()
    assert f"-n {len(devices)}" in log.splitlines()[0]  # one pytest-xdist run, a worker per GPU

"""The CUDA environments: their evaluator settings (the environment's device, both baselines),
and the cuda-agent environment (the agent's ReAct loop in real workspaces) feeding multi-turn
PPO end to end on the CPU, from the config the GPU run uses."""

import json
import random
from pathlib import Path
from types import SimpleNamespace

import pytest

from policy.trainer.agent_loop import AgentLoopEnvironment
from policy.trainer.config import TrainConfig
from policy.trainer.cuda_single_turn import CudaSingleTurnEnvironment
from policy.trainer.metrics import read_metrics
from policy.trainer.stages import run_pipeline

REPO = Path(__file__).resolve().parents[2]
PROBLEMS = REPO / "examples" / "problems"
AGENTIC_GPU_CONFIG = REPO / "policy" / "trainer" / "configs" / "tiny-agentic-gpu.yaml"


def test_agent_tools_evaluate_on_the_environment_device(tmp_path, monkeypatch):
    # SolveConfig's default toolbox evaluates on the CPU; a cuda environment must not inherit that.
    monkeypatch.setattr("policy.evaluation_pool.EvaluationPool", lambda device, gpus=None: None)
    environment = AgentLoopEnvironment(str(PROBLEMS), device="cuda", eval_options={"trials": 2})
    eval_config = environment.solve_config(tmp_path, max_new_tokens=64).toolbox.eval_config
    assert (eval_config.device, eval_config.trials) == ("cuda", 2)
    assert eval_config.baselines == ("eager", "compile")  # rewards 2 and 3 stay reachable


def test_single_turn_scoring_keeps_both_baselines(monkeypatch):
    configs = []

    def fake_evaluate(problem, candidate, config):
        configs.append(config)
        return SimpleNamespace(reward=3.0)

    monkeypatch.setattr("pytest_cudaagent.evaluate", fake_evaluate)
    environment = CudaSingleTurnEnvironment(str(PROBLEMS), device="cuda", eval_options={"trials": 2})
    (task,) = environment.sample_tasks(1, random.Random(0))
    assert environment.score(task, ["```python\nclass ModelNew: pass\n```"], "cuda") == 3.0
    (config,) = configs
    assert (config.device, config.trials, config.baselines) == ("cuda", 2, ("eager", "compile"))


@pytest.mark.slow
def test_agentic_gpu_config_runs_its_loop_on_the_cpu(tmp_path):
    config = TrainConfig.from_yaml(AGENTIC_GPU_CONFIG)
    config.output_dir = str(tmp_path / "run")
    config.mixed_precision = "no"
    config.progress = config.tensorboard = False
    (stage,) = config.stages
    stage.environment.options.update(device="cpu", problems=str(PROBLEMS), work_dir=str(tmp_path / "episodes"))
    run_pipeline(config)

    stage_dir = tmp_path / "run" / "00-ppo-multi-turn"
    records = read_metrics(stage_dir / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1]
    assert all(r["generated_tokens"] > 0 and -1 <= r["reward_mean"] <= 3 for r in records)
    assert (stage_dir / "checkpoints" / "step-000001").is_dir() and (stage_dir / "final" / "actor").is_dir()
    trajectories = sorted((tmp_path / "episodes").glob("step-*/round-*/trajectories/*.jsonl"))
    assert len(trajectories) == 2 * stage.ppo.tasks_per_step  # every episode of both steps
    for trajectory in trajectories:
        end = json.loads(trajectory.read_text().splitlines()[-1])
        assert end["event"] == "end" and end["turns"] <= stage.environment.options["max_turns"]

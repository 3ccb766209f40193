"""The stages end to end on the CPU through `cudaagent train`: each stage starts from the previous
one's models, writes metrics and final models, resumes from its checkpoint, and skips when done."""

import argparse
import json
from pathlib import Path

import pytest
import yaml

from policy.trainer.cli import register_train
from policy.trainer.config import TrainConfig
from policy.trainer.metrics import read_metrics
from policy.trainer.stages import run_pipeline

pytestmark = pytest.mark.slow

TOY_ROLLOUT = {"max_new_tokens": 6, "max_total_tokens": 256}
SCRIPTED = {"kind": "scripted-tools", "options": {"max_turns": 2}}


def pipeline_config(output_dir: Path) -> dict:
    return {
        "output_dir": str(output_dir),
        "model": "tiny",
        "tiny_model": {"hidden_size": 32, "layers": 1},
        "save_every": 1,
        "progress": False,
        "stages": [
            {"name": "ppo-single-turn", "environment": {"kind": "target-token"}, "rollout": TOY_ROLLOUT,
             "ppo": {"steps": 2, "tasks_per_step": 8, "minibatch_size": 4, "micro_batch_size": 2, "kl_coef": 0.0}},
            {"name": "rft", "environment": SCRIPTED, "rollout": TOY_ROLLOUT,
             "rft": {"rounds": 1, "tasks_per_round": 8, "min_reward": 0.0, "minibatch_size": 4, "micro_batch_size": 4}},
            {"name": "value-pretrain", "environment": SCRIPTED, "rollout": TOY_ROLLOUT,
             "value": {"rounds": 1, "tasks_per_round": 8, "epochs": 1, "minibatch_size": 4, "micro_batch_size": 4}},
            {"name": "ppo-multi-turn", "environment": SCRIPTED, "rollout": TOY_ROLLOUT,
             "ppo": {"steps": 2, "tasks_per_step": 8, "minibatch_size": 8, "micro_batch_size": 4, "kl_coef": 0.05}},
        ],
    }


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="cudaagent")
    register_train(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


def test_every_stage_runs_and_hands_its_models_to_the_next(tmp_path, capsys):
    output_dir = tmp_path / "run"
    config_path = tmp_path / "train.yaml"
    config_path.write_text(yaml.safe_dump(pipeline_config(output_dir)))
    assert run_cli(["train", "--config", str(config_path), "--no-progress"]) == 0
    assert "ppo-multi-turn" in capsys.readouterr().out

    stage_dirs = [output_dir / name for name in ("00-ppo-single-turn", "01-rft", "02-value-pretrain", "03-ppo-multi-turn")]
    origins = [json.loads((d / "stage_config.json").read_text()) for d in stage_dirs]
    base = str(output_dir / "base-model")
    assert (origins[0]["actor_from"], origins[0]["critic_from"]) == (base, base)
    assert origins[1]["actor_from"] == str(stage_dirs[0] / "final" / "actor")
    assert origins[2]["actor_from"] == str(stage_dirs[1] / "final" / "actor")
    assert origins[2]["critic_from"] == str(stage_dirs[0] / "final" / "critic")
    assert origins[3]["actor_from"] == str(stage_dirs[1] / "final" / "actor")
    assert origins[3]["critic_from"] == str(stage_dirs[2] / "final" / "critic")
    assert (stage_dirs[1] / "final" / "actor" / "config.json").exists()
    assert not (stage_dirs[1] / "final" / "critic").exists()  # RFT trains only the actor
    assert (stage_dirs[2] / "final" / "critic" / "value_head.pt").exists()
    assert not (stage_dirs[2] / "final" / "actor").exists()  # value pretraining only the critic

    ppo_records = read_metrics(stage_dirs[3] / "metrics.jsonl")
    assert [r["step"] for r in ppo_records] == [0, 1]
    for key in ("reward_mean", "pass_rate", "kl", "entropy", "clip_fraction", "value_loss",
                "explained_variance", "generated_tokens_per_second", "reward_counts"):
        assert key in ppo_records[-1]
    assert ppo_records[-1]["kl"] != 0.0  # the reference is used once the actor has moved
    assert list((stage_dirs[3] / "tensorboard").glob("events.out.tfevents.*"))

    # A second run finds every stage done and trains nothing.
    assert run_pipeline(TrainConfig.from_yaml(config_path)) == {}


def test_interrupted_stage_resumes_from_its_checkpoint(tmp_path):
    data = pipeline_config(tmp_path / "run")
    data["stages"] = data["stages"][:1]
    config = TrainConfig.from_yaml(_write(tmp_path / "a.yaml", data))
    run_pipeline(config)
    stage_dir = tmp_path / "run" / "00-ppo-single-turn"
    assert [p.name for p in (stage_dir / "checkpoints").iterdir()] == ["step-000001"]
    # Pretend the run stopped after step 1 and the config now asks for three steps.
    (stage_dir / "final" / "stage_done.json").unlink()
    data["stages"][0]["ppo"]["steps"] = 3
    run_pipeline(TrainConfig.from_yaml(_write(tmp_path / "b.yaml", data)))
    steps = [r["step"] for r in read_metrics(stage_dir / "metrics.jsonl")]
    assert steps == [0, 1, 1, 2]  # steps 1 and 2 re-run from the step-1 checkpoint


def test_single_turn_stage_refuses_a_multi_turn_environment(tmp_path):
    data = pipeline_config(tmp_path / "run")
    data["stages"] = [{**data["stages"][0], "environment": SCRIPTED}]
    with pytest.raises(ValueError, match="use ppo-multi-turn"):
        run_pipeline(TrainConfig.from_yaml(_write(tmp_path / "c.yaml", data)))


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path

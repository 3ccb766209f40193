"""Training configs: the shipped examples load, and mistakes are reported with what to do."""

from pathlib import Path

import pytest

from policy.trainer.config import TrainConfig
from policy.trainer.ppo import PPOConfig
from policy.trainer.rft import RFTConfig

CONFIG_DIR = Path(__file__).resolve().parents[2] / "policy" / "trainer" / "configs"


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_example_configs_load(path):
    config = TrainConfig.from_yaml(path)
    assert config.stages
    for stage in config.stages:
        assert stage.settings is not None


def test_nested_sections_become_dataclasses(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("stages:\n  - name: rft\n    rft: {rounds: 3, lr: 0.5}\n    rollout: {max_new_tokens: 7}\n")
    (stage,) = TrainConfig.from_yaml(path).stages
    assert isinstance(stage.rft, RFTConfig) and stage.rft.rounds == 3 and stage.rft.lr == 0.5
    assert stage.rollout.max_new_tokens == 7 and stage.ppo is None


def test_unknown_key_names_the_known_ones(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("stages:\n  - name: ppo-multi-turn\n    ppo: {stepz: 3}\n")
    with pytest.raises(ValueError, match=r"stages\[0\]\.ppo.*'stepz'.*known keys.*'steps'"):
        TrainConfig.from_yaml(path)


def test_unknown_stage_lists_the_stages(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("stages:\n  - name: dpo\n")
    with pytest.raises(ValueError, match="stages are ppo-single-turn"):
        TrainConfig.from_yaml(path)


def test_missing_file_points_at_examples(tmp_path):
    with pytest.raises(FileNotFoundError, match="policy/trainer/configs"):
        TrainConfig.from_yaml(tmp_path / "nope.yaml")


def test_batch_sizes_must_divide():
    with pytest.raises(ValueError, match="multiple of minibatch_size"):
        PPOConfig(tasks_per_step=10, minibatch_size=4, micro_batch_size=2)


def test_inference_batch_size_must_be_positive():
    with pytest.raises(ValueError, match="inference_batch_size .0. must be at least 1"):
        PPOConfig(inference_batch_size=0)
    assert PPOConfig(inference_batch_size=64).inference_batch_size == 64


def test_stage_names_for_the_cli_are_the_configs_stages():
    """`cudaagent train --stage` lists stage_names.STAGE_NAMES (no training stack at --help time)."""
    from policy.trainer.config import STAGE_SETTINGS
    from policy.trainer.stage_names import STAGE_NAMES

    assert set(STAGE_NAMES) == set(STAGE_SETTINGS)


def test_relative_paths_in_a_config_resolve_against_the_callers_folder(tmp_path):
    """The bundled configs name examples/problems and runs/... from the repository root: paths in
    a config are the caller's, like those on the command line, whatever folder the config is in."""
    path = tmp_path / "configs" / "c.yaml"
    path.parent.mkdir()
    path.write_text("output_dir: runs/x\nmodel: models/base\nstages:\n  - name: ppo-multi-turn\n"
                    "    environment: {kind: cuda-agent, options: {problems: probs, work_dir: runs/ep, max_turns: 3}}\n"
                    "  - name: rft\n")
    config = TrainConfig.from_yaml(path)
    config.resolve_paths(tmp_path / "user")
    assert config.output_dir == str(tmp_path / "user" / "runs" / "x")
    assert config.model == str(tmp_path / "user" / "models" / "base") and config.critic_model is None
    assert config.stages[0].environment.options == {"problems": str(tmp_path / "user" / "probs"),
                                                    "work_dir": str(tmp_path / "user" / "runs" / "ep"), "max_turns": 3}
    tiny = TrainConfig(model="tiny")
    tiny.resolve_paths(tmp_path)
    assert tiny.model == "tiny"


def test_the_h100_pipeline_builds_every_stages_candidates_through_the_shared_header():
    """Training scores thousands of candidates: each stage's evaluator takes the shared PCH."""
    from policy.trainer.rewards import evaluator_config

    config = TrainConfig.from_yaml(CONFIG_DIR / "h100-pipeline.yaml")
    for stage in config.stages:
        options = stage.environment.options["eval_options"]
        assert evaluator_config("cuda", options).fast_build is True, stage.name
    assert evaluator_config("cuda", {}).fast_build is False  # a single evaluation's default

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

"""The trainer's stages on one base (stage_trainer.py): the settings they share, with the defaults
each had, and the one loop they run."""

import dataclasses

import pytest

from policy.trainer.ppo import PPOConfig, PPOTrainer
from policy.trainer.rft import RFTConfig, RFTTrainer
from policy.trainer.stage_trainer import StageSettings, StageTrainer
from policy.trainer.value_pretrain import ValuePretrainConfig, ValuePretrainer

SHARED = {"minibatch_size": 8, "micro_batch_size": 4, "weight_decay": 0.0, "max_grad_norm": 1.0, "pass_threshold": 1.0}


@pytest.mark.parametrize("settings", [PPOConfig, RFTConfig, ValuePretrainConfig])
def test_every_stage_has_the_shared_settings_with_their_defaults(settings):
    assert issubclass(settings, StageSettings)
    defaults = {field.name: field.default for field in dataclasses.fields(settings())}
    assert {name: defaults[name] for name in SHARED} == SHARED
    with pytest.raises(ValueError, match="multiple of micro_batch_size"):
        settings(minibatch_size=8, micro_batch_size=3)


def test_each_stage_counts_its_iterations_in_its_own_setting():
    assert PPOConfig(steps=7).iterations == 7
    assert RFTConfig(rounds=5).iterations == 5
    assert ValuePretrainConfig(rounds=3).iterations == 3


@pytest.mark.parametrize("trainer", [PPOTrainer, RFTTrainer, ValuePretrainer])
def test_every_stage_runs_the_one_loop_and_supplies_its_iteration(trainer):
    assert issubclass(trainer, StageTrainer)
    assert trainer.train is StageTrainer.train
    assert trainer.iteration is not StageTrainer.iteration


class _Logger:
    def __init__(self):
        self.lines = []

    def log(self, index, metrics, histograms):
        self.lines.append((index, metrics, histograms))


class _Runtime:
    stage_name, progress, save_every, accelerator = "test", False, 2, None

    def __init__(self):
        self.logger = _Logger()


@dataclasses.dataclass
class _Settings(StageSettings):
    rounds: int = 4

    @property
    def iterations(self):
        return self.rounds


class _Counting(StageTrainer):
    def iteration(self, index):
        return {"index": index}, f"scores {index}"


def test_the_loop_runs_from_the_first_iteration_logs_each_and_checkpoints_every_save_every():
    runtime, saved = _Runtime(), []
    summary = _Counting(_Settings(), runtime).train(1, saved.append)
    assert [index for index, _, _ in runtime.logger.lines] == [1, 2, 3]
    assert runtime.logger.lines[0][2] == {"reward": "scores 1"}
    assert saved == [2]  # never after the last iteration: the stage's end exports instead
    assert summary == {"index": 3}

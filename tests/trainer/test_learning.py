"""Learning on the CPU: each algorithm, on a toy task with a verifiable reward, moves its metric
from chance to near perfect. The curves land in metrics.jsonl (printed on failure)."""

import copy

import pytest
from accelerate.utils import set_seed

from policy.tiny_model import build_tiny_model_and_tokenizer
from policy.trainer.environments import (
    PromptOutcomeEnvironment,
    ScriptedToolEnvironment,
    TargetTokenEnvironment,
)
from policy.trainer.metrics import read_metrics
from policy.trainer.ppo import PPOConfig, PPOTrainer
from policy.trainer.rft import RFTConfig, RFTTrainer
from policy.trainer.value_model import ValueModel
from policy.trainer.value_pretrain import ValuePretrainConfig, ValuePretrainer

pytestmark = pytest.mark.slow


def _curve(tmp_path, key):
    return [round(record[key], 3) for record in read_metrics(tmp_path / "metrics.jsonl")]


def test_ppo_raises_reward_from_chance_to_near_one(tmp_path, make_runtime):
    set_seed(0)
    model, tokenizer = build_tiny_model_and_tokenizer()
    config = PPOConfig(steps=16, tasks_per_step=32, minibatch_size=16, micro_batch_size=8, ppo_epochs=2,
                       actor_lr=3e-3, critic_lr=1e-3, kl_coef=0.0)
    runtime = make_runtime(tmp_path, tokenizer, TargetTokenEnvironment(), config.accumulation_steps)
    PPOTrainer(config, runtime, model, ValueModel.from_causal_lm(model), copy.deepcopy(model)).train(0, save=None)
    rewards = _curve(tmp_path, "reward_mean")
    print("PPO reward curve:", rewards)
    assert sum(rewards[:2]) / 2 < 0.5, rewards
    assert sum(rewards[-3:]) / 3 > 0.9, rewards
    entropies = _curve(tmp_path, "entropy")
    assert entropies[-1] < entropies[0]  # the policy sharpened on the rewarded tokens


def test_rft_raises_reward_from_chance_to_near_one(tmp_path, make_runtime):
    set_seed(0)
    model, tokenizer = build_tiny_model_and_tokenizer()
    config = RFTConfig(rounds=12, tasks_per_round=32, epochs=4, lr=1e-2, minibatch_size=8, micro_batch_size=8)
    runtime = make_runtime(tmp_path, tokenizer, TargetTokenEnvironment())
    RFTTrainer(config, runtime, model).train(0, save=None)
    rewards = _curve(tmp_path, "reward_mean")
    print("RFT reward curve:", rewards)
    assert rewards[0] < 0.5, rewards
    assert max(rewards[-3:]) > 0.9, rewards
    kept = [record["kept"] for record in read_metrics(tmp_path / "metrics.jsonl")]
    assert kept == [round(r * 32) for r in rewards]  # exactly the rewarded episodes are kept


def test_value_pretraining_raises_held_out_explained_variance(tmp_path, make_runtime):
    set_seed(0)
    model, tokenizer = build_tiny_model_and_tokenizer()
    config = ValuePretrainConfig(rounds=3, tasks_per_round=32, epochs=4, lr=3e-3, minibatch_size=4, micro_batch_size=4)
    runtime = make_runtime(tmp_path, tokenizer, PromptOutcomeEnvironment())
    actor_weights = copy.deepcopy(model.state_dict())
    ValuePretrainer(config, runtime, model, ValueModel.from_causal_lm(model)).train(0, save=None)
    # Measured on each round's fresh episodes before the critic fits them.
    held_out = _curve(tmp_path, "explained_variance")
    print("value pretraining explained variance:", held_out)
    assert held_out[0] < 0.2, held_out
    assert held_out[-1] > 0.8, held_out
    assert all((model.state_dict()[k] == v).all() for k, v in actor_weights.items())  # actor frozen


def test_multi_turn_ppo_learns_through_masked_tool_output(tmp_path, make_runtime):
    set_seed(0)
    model, tokenizer = build_tiny_model_and_tokenizer()
    config = PPOConfig(steps=24, tasks_per_step=32, minibatch_size=16, micro_batch_size=8, ppo_epochs=2,
                       actor_lr=3e-3, critic_lr=1e-3, kl_coef=0.01)
    runtime = make_runtime(tmp_path, tokenizer, ScriptedToolEnvironment(max_turns=3), config.accumulation_steps)
    PPOTrainer(config, runtime, model, ValueModel.from_causal_lm(model), copy.deepcopy(model)).train(0, save=None)
    rewards = _curve(tmp_path, "reward_mean")
    print("multi-turn PPO reward curve:", rewards)
    assert sum(rewards[:2]) / 2 < 0.4, rewards
    assert sum(rewards[-3:]) / 3 > 0.8, rewards

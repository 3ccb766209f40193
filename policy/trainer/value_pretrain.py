"""Value pretraining, next to its config: with the actor frozen, sample episodes and fit the critic
to their returns, so multi-turn PPO starts with advantages that mean something. Each round's
explained variance is measured on fresh episodes before the critic fits them (held out)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from .core import clipped_value_loss, explained_variance, gae_advantages, token_rewards
from .ppo import critic_values, in_chunks
from .rollout import pad_rollouts, resolve_scores
from .runtime import mean_over_processes, sum_over_processes
from .stage_trainer import StageSettings, StageTrainer


@dataclass
class ValuePretrainConfig(StageSettings):
    rounds: int = 4
    tasks_per_round: int = 32
    epochs: int = 4
    lr: float = 1e-5
    gamma: float = 1.0
    # 1.0: Monte-Carlo returns (the critic is untrained, so bootstrapping from it would teach it
    # its own noise); PPO's lambda applies once PPO starts.
    lam: float = 1.0

    @property
    def iterations(self) -> int:
        return self.rounds


class ValuePretrainer(StageTrainer):
    def __init__(self, config: ValuePretrainConfig, runtime, actor, critic):
        super().__init__(config, runtime)
        actor.requires_grad_(False)
        self.actor = self.accelerator.prepare_model(actor, evaluation_mode=True)
        optimizer = torch.optim.AdamW(critic.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        self.critic, self.optimizer = self.accelerator.prepare(critic, optimizer)

    def fit(self, batch, returns) -> float:
        """Epochs of the critic's squared error to `returns` (no clipping: no old values to stay
        near); the mean loss."""
        def loss_of(micro_batch, rows, token_count):
            values = critic_values(self.critic, micro_batch)
            return clipped_value_loss(values, values, returns[rows], micro_batch.action_mask, None, token_count).loss

        return self.minibatch_epochs(batch, self.config.epochs, self.critic, self.optimizer, loss_of)

    def iteration(self, round_index: int) -> tuple[dict, torch.Tensor]:
        """One round: sample episodes with the frozen actor, measure the critic on them, fit it."""
        runtime, config, accelerator = self.runtime, self.config, self.accelerator
        collect_start = time.perf_counter()
        rollouts = runtime.collect(self.actor, round_index, config.tasks_per_round)
        batch = pad_rollouts(rollouts, runtime.tokenizer.pad_token_id).to(accelerator.device)
        mask = batch.action_mask
        values_before = in_chunks(lambda b: critic_values(self.critic, b), batch, config.micro_batch_size)
        scores = resolve_scores(rollouts).to(accelerator.device)
        collect_seconds = time.perf_counter() - collect_start
        # The actor is the reference here, so the KL penalty is zero: rewards are the scores.
        rewards = token_rewards(scores, torch.zeros_like(mask), mask, kl_coef=0.0)
        _, returns = gae_advantages(rewards, values_before, mask, config.gamma, config.lam)
        fit_start = time.perf_counter()
        value_loss = self.fit(batch, returns)
        values_after = in_chunks(lambda b: critic_values(self.critic, b), batch, config.micro_batch_size)
        metrics, all_scores = self.reward_metrics(scores)  # every process's episodes, as PPO logs
        process_sum = sum_over_processes(accelerator)
        metrics.update(
            value_loss=mean_over_processes(accelerator, value_loss),
            explained_variance=explained_variance(values_before, returns, mask, process_sum),
            explained_variance_after_fit=explained_variance(values_after, returns, mask, process_sum),
            collect_seconds=collect_seconds,
            fit_seconds=time.perf_counter() - fit_start,
        )
        return metrics, all_scores

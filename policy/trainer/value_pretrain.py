"""Value pretraining, next to its config: with the actor frozen, sample episodes and fit the critic
to their returns, so multi-turn PPO starts with advantages that mean something. Each round's
explained variance is measured on fresh episodes before the critic fits them (held out)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from .core import clipped_value_loss, explained_variance, gae_advantages, token_rewards
from .metrics import reward_summary
from .ppo import critic_values, in_chunks
from .rollout import Minibatched, micro_batches, pad_rollouts, resolve_scores
from .runtime import mean_over_processes, sum_over_processes


@dataclass
class ValuePretrainConfig(Minibatched):
    rounds: int = 4
    tasks_per_round: int = 32
    epochs: int = 4
    lr: float = 1e-5
    weight_decay: float = 0.0
    gamma: float = 1.0
    # 1.0: Monte-Carlo returns (the critic is untrained, so bootstrapping from it would teach it
    # its own noise); PPO's lambda applies once PPO starts.
    lam: float = 1.0
    minibatch_size: int = 8
    micro_batch_size: int = 4
    max_grad_norm: float = 1.0
    pass_threshold: float = 1.0

    def __post_init__(self):
        self.check_minibatches()


class ValuePretrainer:
    def __init__(self, config: ValuePretrainConfig, runtime, actor, critic):
        self.config = config
        self.runtime = runtime
        self.accelerator = runtime.accelerator
        actor.requires_grad_(False)
        self.actor = self.accelerator.prepare_model(actor, evaluation_mode=True)
        optimizer = torch.optim.AdamW(critic.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        self.critic, self.optimizer = self.accelerator.prepare(critic, optimizer)

    def fit(self, batch, returns) -> float:
        config, accelerator = self.config, self.accelerator
        losses = []
        for _epoch in range(config.epochs):
            for rows, token_count in micro_batches(batch.action_mask, config.minibatch_size, config.micro_batch_size):
                micro_batch = batch.select(rows)
                with accelerator.accumulate(self.critic):
                    values = critic_values(self.critic, micro_batch)
                    loss = clipped_value_loss(values, values, returns[rows], micro_batch.action_mask, None, token_count).loss
                    accelerator.backward(loss)
                    if accelerator.sync_gradients:
                        accelerator.clip_grad_norm_(self.critic.parameters(), config.max_grad_norm)
                    self.optimizer.step()
                    self.optimizer.zero_grad()
                losses.append(loss.item())
        return sum(losses) / max(len(losses), 1)

    def train(self, first_round: int, save) -> dict:
        from .progress import StageProgress

        runtime, config, accelerator = self.runtime, self.config, self.accelerator
        summary = {}
        with StageProgress(runtime.stage_name, config.rounds, first_round, runtime.progress) as progress:
            for round_index in range(first_round, config.rounds):
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
                all_scores = runtime.gather_scores(scores)  # every process's episodes, as PPO logs
                metrics = reward_summary(all_scores, config.pass_threshold)
                process_sum = sum_over_processes(accelerator)
                metrics.update(
                    value_loss=mean_over_processes(accelerator, value_loss),
                    explained_variance=explained_variance(values_before, returns, mask, process_sum),
                    explained_variance_after_fit=explained_variance(values_after, returns, mask, process_sum),
                    collect_seconds=collect_seconds,
                    fit_seconds=time.perf_counter() - fit_start,
                )
                runtime.logger.log(round_index, metrics, {"reward": all_scores})
                progress.advance(metrics)
                summary = metrics
                if (round_index + 1) % runtime.save_every == 0 and round_index + 1 < config.rounds:
                    save(round_index + 1)
        return summary

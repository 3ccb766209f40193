"""PPO for a causal-LM actor with a separate critic and a frozen reference, next to its config.
One step: collect episodes, score them (in a worker pool, while the trainer runs its no-grad
forward passes), turn scores and KL into per-token rewards, GAE over the model's own tokens,
then PPO epochs of clipped policy and value updates in minibatches with gradient accumulation.
Single-turn and multi-turn PPO are the same step; only the environment differs."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from .core import (
    clipped_policy_loss,
    clipped_value_loss,
    explained_variance,
    gae_advantages,
    kl_estimate,
    masked_mean,
    masked_sum,
    masked_whiten,
    token_entropy,
    token_logprobs,
    token_rewards,
)
from .metrics import reward_summary
from .rollout import Minibatched, Rollout, RolloutBatch, micro_batches, pad_rollouts, resolve_scores


@dataclass
class PPOConfig(Minibatched):
    steps: int = 20
    # Episodes collected per step on each process.
    tasks_per_step: int = 16
    # Episodes per optimizer step, and per forward/backward pass (the rest is accumulation).
    minibatch_size: int = 8
    micro_batch_size: int = 4
    ppo_epochs: int = 2
    actor_lr: float = 1e-6
    critic_lr: float = 5e-6
    weight_decay: float = 0.0
    # The paper's rewards are sparse and at the end of long episodes: no discount, and a lambda
    # just under 1 to trade a little bias for variance.
    gamma: float = 1.0
    lam: float = 0.95
    clip_range: float = 0.2
    # None: unclipped value loss.
    value_clip_range: float | None = 0.2
    value_loss_coef: float = 0.5
    entropy_coef: float = 0.0
    # KL to the reference as a per-token reward penalty (InstructGPT, TRL) ...
    kl_coef: float = 0.02
    kl_estimator: str = "k1"
    # ... and/or as a loss term (k3 estimator, GRPO/verl style); 0 disables.
    kl_loss_coef: float = 0.0
    whiten_advantages: bool = True
    max_grad_norm: float = 1.0
    # A reward at or above this counts as a pass (milestone reward 1 = correct).
    pass_threshold: float = 1.0

    def __post_init__(self):
        if self.tasks_per_step % self.minibatch_size:
            raise ValueError(f"tasks_per_step ({self.tasks_per_step}) must be a multiple of "
                             f"minibatch_size ({self.minibatch_size})")
        self.check_minibatches()

    @property
    def uses_reference(self) -> bool:
        return self.kl_coef > 0 or self.kl_loss_coef > 0


def policy_logprobs(actor, batch: RolloutBatch, temperature: float, with_entropy: bool = False):
    """Per-token log-probs (and entropies) of batch tokens 1..T-1 under `actor`."""
    logits = actor(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1]
    logprobs = token_logprobs(logits, batch.input_ids[:, 1:], temperature)
    if not with_entropy:
        return logprobs, None
    return logprobs, token_entropy(logits, temperature)


def critic_values(critic, batch: RolloutBatch) -> torch.Tensor:
    """V(s_t) for the state before each of tokens 1..T-1."""
    return critic(batch.input_ids, batch.attention_mask)[:, :-1].float()


@torch.no_grad()
def in_micro_batches(forward, batch: RolloutBatch, micro_batch_size: int) -> torch.Tensor:
    return torch.cat(
        [forward(batch.select(torch.arange(s, min(s + micro_batch_size, len(batch)))))
         for s in range(0, len(batch), micro_batch_size)]
    )


class PPOTrainer:
    def __init__(self, config: PPOConfig, runtime, actor, critic, reference=None):
        self.config = config
        self.runtime = runtime
        accelerator = runtime.accelerator
        self.accelerator = accelerator
        actor_optimizer = torch.optim.AdamW(actor.parameters(), lr=config.actor_lr, weight_decay=config.weight_decay)
        critic_optimizer = torch.optim.AdamW(critic.parameters(), lr=config.critic_lr, weight_decay=config.weight_decay)
        self.actor, self.actor_optimizer, self.critic, self.critic_optimizer = accelerator.prepare(
            actor, actor_optimizer, critic, critic_optimizer
        )
        self.reference = None
        if config.uses_reference:
            if reference is None:
                raise ValueError("kl_coef or kl_loss_coef is set, so PPO needs a reference model")
            reference.requires_grad_(False)
            self.reference = accelerator.prepare_model(reference, evaluation_mode=True)
        self.temperature = runtime.rollout_config.temperature
        self.pad_token_id = runtime.tokenizer.pad_token_id

    def step(self, rollouts: list[Rollout]) -> dict:
        config, accelerator = self.config, self.accelerator
        batch = pad_rollouts(rollouts, self.pad_token_id).to(accelerator.device)
        mask = batch.action_mask
        micro = config.micro_batch_size

        # 1. Forward passes that do not need the scores: they run while the pool still scores.
        old_logprobs = in_micro_batches(lambda b: policy_logprobs(self.actor, b, self.temperature)[0], batch, micro)
        old_values = in_micro_batches(lambda b: critic_values(self.critic, b), batch, micro)
        ref_logprobs = old_logprobs
        if self.reference is not None:
            ref_logprobs = in_micro_batches(lambda b: policy_logprobs(self.reference, b, self.temperature)[0], batch, micro)
        scores = resolve_scores(rollouts).to(accelerator.device)

        # 2. Per-token rewards (score on the last model token, KL penalty on every one) and GAE.
        kl_per_token = kl_estimate(old_logprobs, ref_logprobs, config.kl_estimator)
        rewards = token_rewards(scores, kl_per_token, mask, config.kl_coef)
        advantages, returns = gae_advantages(rewards, old_values, mask, config.gamma, config.lam)
        if config.whiten_advantages:
            advantages = masked_whiten(advantages, mask)

        # 3. PPO epochs: shuffled minibatches, each an optimizer step over accumulated micro-batches.
        update_stats: dict[str, list[float]] = {}
        for _epoch in range(config.ppo_epochs):
            for rows, token_count in micro_batches(mask, config.minibatch_size, micro):
                stats = self._update(batch.select(rows), old_logprobs[rows], old_values[rows],
                                     ref_logprobs[rows], advantages[rows], returns[rows], token_count)
                for name, value in stats.items():
                    update_stats.setdefault(name, []).append(value)

        sequence_kl = masked_sum(kl_estimate(old_logprobs, ref_logprobs, "k1"), mask) / len(batch)
        metrics = {name: sum(values) / len(values) for name, values in update_stats.items()}
        metrics.update(
            kl=sequence_kl.item(),
            explained_variance=explained_variance(old_values, returns, mask),
            advantage_mean=masked_mean(advantages, mask).item(),
            return_mean=masked_mean(returns, mask).item(),
            # How far the sampler's log-probs are from the trainer's (vLLM drift, precision).
            sampler_logprob_gap=masked_mean((batch.sampler_logprobs - old_logprobs).abs(), mask).item(),
            generated_tokens=mask.sum().item(),
            sequence_length=batch.attention_mask.sum(1).float().mean().item(),
        )
        return metrics, scores

    def _update(self, micro_batch, old_logprobs, old_values, ref_logprobs, advantages, returns, token_count):
        config, accelerator = self.config, self.accelerator
        mask = micro_batch.action_mask
        with accelerator.accumulate(self.actor, self.critic):
            need_entropy_grad = config.entropy_coef > 0
            logits = self.actor(input_ids=micro_batch.input_ids, attention_mask=micro_batch.attention_mask).logits[:, :-1]
            logprobs = token_logprobs(logits, micro_batch.input_ids[:, 1:], self.temperature)
            with torch.set_grad_enabled(need_entropy_grad):
                entropy = token_entropy(logits, self.temperature)
            policy = clipped_policy_loss(logprobs, old_logprobs, advantages, mask, config.clip_range, token_count)
            values = critic_values(self.critic, micro_batch)
            value = clipped_value_loss(values, old_values, returns, mask, config.value_clip_range, token_count)
            loss = policy.loss + config.value_loss_coef * value.loss
            if need_entropy_grad:
                loss = loss - config.entropy_coef * masked_sum(entropy, mask) / token_count
            if config.kl_loss_coef > 0:
                loss = loss + config.kl_loss_coef * masked_sum(kl_estimate(logprobs, ref_logprobs, "k3"), mask) / token_count
            accelerator.backward(loss)
            stats = {}
            if accelerator.sync_gradients:
                stats["actor_grad_norm"] = float(accelerator.clip_grad_norm_(self.actor.parameters(), config.max_grad_norm))
                stats["critic_grad_norm"] = float(accelerator.clip_grad_norm_(self.critic.parameters(), config.max_grad_norm))
            self.actor_optimizer.step()
            self.critic_optimizer.step()
            self.actor_optimizer.zero_grad()
            self.critic_optimizer.zero_grad()
        stats.update(
            policy_loss=policy.loss.item(),
            value_loss=value.loss.item(),
            clip_fraction=policy.clip_fraction.item(),
            value_clip_fraction=value.clip_fraction.item(),
            approx_kl=policy.approx_kl.item(),
            entropy=masked_mean(entropy.detach(), mask).item(),
        )
        return stats

    def train(self, first_step: int, save) -> dict:
        """Steps `first_step`..config.steps-1; `save(step)` writes a resumable checkpoint."""
        from .progress import StageProgress

        runtime, config = self.runtime, self.config
        summary = {}
        with StageProgress(runtime.stage_name, config.steps, first_step, runtime.progress) as progress:
            for step in range(first_step, config.steps):
                rollout_start = time.perf_counter()
                rollouts = runtime.collect(self.actor, step, config.tasks_per_step)
                rollout_seconds = time.perf_counter() - rollout_start
                update_start = time.perf_counter()
                metrics, scores = self.step(rollouts)
                update_seconds = time.perf_counter() - update_start
                all_scores = runtime.gather_scores(scores)
                metrics.update(reward_summary(all_scores, config.pass_threshold))
                metrics.update(
                    rollout_seconds=rollout_seconds,
                    update_seconds=update_seconds,
                    generated_tokens_per_second=metrics["generated_tokens"] / max(rollout_seconds, 1e-9),
                    trained_tokens_per_second=metrics["sequence_length"] * len(rollouts)
                    * config.ppo_epochs / max(update_seconds, 1e-9),
                )
                runtime.logger.log(step, metrics, {"reward": all_scores})
                progress.advance(metrics)
                summary = metrics
                if (step + 1) % runtime.save_every == 0 and step + 1 < config.steps:
                    save(step + 1)
        return summary

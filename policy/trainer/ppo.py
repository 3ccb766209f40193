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
    chosen_logprobs,
    clipped_policy_loss,
    clipped_value_loss,
    explained_variance,
    gae_advantages,
    kl_estimate,
    masked_mean,
    masked_sum,
    masked_whiten,
    token_entropy,
    token_rewards,
    vocab_logprobs,
)
from .rollout import Rollout, RolloutBatch, micro_batches, pad_rollouts, resolve_scores
from .runtime import sum_over_processes
from .stage_trainer import StageSettings, StageTrainer

# A slice of the shifted (length T-1) columns; None: all of them.
Columns = slice | None


@dataclass
class PPOConfig(StageSettings):
    steps: int = 20
    # Episodes collected per step on each process.
    tasks_per_step: int = 16
    # Episodes per no-grad forward pass (old log-probs, reference log-probs, values); None: the
    # micro-batch size. These passes keep no activations for a backward pass, so several times
    # micro_batch_size usually fits, and fewer, larger passes keep a GPU busier.
    inference_batch_size: int | None = None
    ppo_epochs: int = 2
    actor_lr: float = 1e-6
    critic_lr: float = 5e-6
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

    def __post_init__(self):
        if self.tasks_per_step % self.minibatch_size:
            raise ValueError(f"tasks_per_step ({self.tasks_per_step}) must be a multiple of "
                             f"minibatch_size ({self.minibatch_size})")
        super().__post_init__()
        if self.inference_batch_size is not None and self.inference_batch_size < 1:
            raise ValueError(f"inference_batch_size ({self.inference_batch_size}) must be at least 1, "
                             "or left out to use micro_batch_size")

    @property
    def iterations(self) -> int:
        return self.steps

    @property
    def uses_reference(self) -> bool:
        return self.kl_coef > 0 or self.kl_loss_coef > 0


# These forward passes give the models no attention mask. The batch is right-padded, so under
# causal attention no position before a sequence's end sees the padding after it: every position
# a loss reads is the same with or without the mask. Without one, attention takes its causal
# kernel whatever the lengths, where episodes of different lengths would otherwise build a
# [batch, 1, T, T] mask and run the slower masked kernel.
def policy_logprobs(actor, batch: RolloutBatch, temperature: float, columns: Columns = None):
    """(log-probs of the batch's tokens, log-softmax over the vocabulary) at the shifted `columns`
    (default all: tokens 1..T-1). The logits are computed at those positions only, from inputs
    that end at the last one; the vocabulary log-softmax is returned for an entropy."""
    start, stop, _ = (columns or slice(None)).indices(batch.input_ids.shape[1] - 1)
    logits = actor(input_ids=batch.input_ids[:, :stop], use_cache=False, logits_to_keep=stop - start).logits
    if logits.shape[1] != stop - start:
        # A forward that swallows unknown keywords would hand back every position, and gather
        # would then pair log-probs with the wrong tokens without complaint.
        raise TypeError(f"{type(actor).__name__} returned logits for {logits.shape[1]} positions where "
                        f"logits_to_keep asked for {stop - start}; the trainer needs a causal LM that "
                        "supports logits_to_keep (transformers 4.50 or later)")
    log_probs = vocab_logprobs(logits, temperature)
    return chosen_logprobs(log_probs, batch.input_ids[:, start + 1 : stop + 1]), log_probs


def critic_values(critic, batch: RolloutBatch, columns: Columns = None) -> torch.Tensor:
    """V(s_t) for the state before each of tokens 1..T-1, at the shifted `columns` (default all)."""
    start, stop, _ = (columns or slice(None)).indices(batch.input_ids.shape[1] - 1)
    return critic(batch.input_ids[:, :stop])[:, start:stop].float()


@torch.no_grad()
def in_chunks(forward, batch: RolloutBatch, chunk_size: int) -> torch.Tensor:
    """`forward` over consecutive chunks of `chunk_size` episodes (views of the batch), joined."""
    return torch.cat([forward(batch.select(slice(start, start + chunk_size)))
                      for start in range(0, len(batch), chunk_size)])


class PPOTrainer(StageTrainer):
    def __init__(self, config: PPOConfig, runtime, actor, critic, reference=None):
        super().__init__(config, runtime)
        accelerator = self.accelerator
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
        padded = pad_rollouts(rollouts, self.pad_token_id)
        # Read on the host before the copy to the device. From here on every per-token tensor
        # covers these columns only: the rest hold no model token, and nothing reads them.
        columns = padded.model_token_columns()
        batch = padded.to(accelerator.device)
        mask = batch.action_mask[:, columns]
        chunk = config.inference_batch_size or config.micro_batch_size

        # 1. Forward passes that do not need the scores: they run while the pool still scores.
        old_logprobs = in_chunks(lambda b: policy_logprobs(self.actor, b, self.temperature, columns)[0], batch, chunk)
        old_values = in_chunks(lambda b: critic_values(self.critic, b, columns), batch, chunk)
        ref_logprobs = old_logprobs
        if self.reference is not None:
            ref_logprobs = in_chunks(lambda b: policy_logprobs(self.reference, b, self.temperature, columns)[0],
                                     batch, chunk)
        scores = resolve_scores(rollouts).to(accelerator.device)

        # 2. Per-token rewards (score on the last model token, KL penalty on every one) and GAE.
        kl_per_token = kl_estimate(old_logprobs, ref_logprobs, config.kl_estimator)
        rewards = token_rewards(scores, kl_per_token, mask, config.kl_coef)
        advantages, returns = gae_advantages(rewards, old_values, mask, config.gamma, config.lam)
        process_sum = sum_over_processes(accelerator)
        if config.whiten_advantages:
            advantages = masked_whiten(advantages, mask, sum_over_processes=process_sum)

        # 3. PPO epochs: shuffled minibatches, each an optimizer step over accumulated micro-batches.
        # Statistics stay on the device until the end: a host read per micro-batch would make the
        # host wait for the device before it could queue the next micro-batch.
        update_stats: dict[str, list[torch.Tensor]] = {}
        for _epoch in range(config.ppo_epochs):
            for rows, token_count in micro_batches(mask, config.minibatch_size, config.micro_batch_size):
                stats = self._update(batch.select(rows), columns, old_logprobs[rows], old_values[rows],
                                     ref_logprobs[rows], advantages[rows], returns[rows], token_count)
                for name, value in stats.items():
                    update_stats.setdefault(name, []).append(value)

        sequence_kl = masked_sum(kl_estimate(old_logprobs, ref_logprobs, "k1"), mask) / len(batch)
        summary = {name: torch.stack(values).mean() for name, values in update_stats.items()}
        summary.update(
            kl=sequence_kl,
            advantage_mean=masked_mean(advantages, mask),
            return_mean=masked_mean(returns, mask),
            # How far the sampler's log-probs are from the trainer's (vLLM drift, precision).
            sampler_logprob_gap=masked_mean((batch.sampler_logprobs[:, columns] - old_logprobs).abs(), mask),
            generated_tokens=mask.sum(),
            sequence_length=batch.attention_mask.sum(1).float().mean(),
        )
        statistics = torch.stack([value.float() for value in summary.values()])
        processes = accelerator.num_processes
        if processes > 1:
            # Every process's batch counts: means of the per-process means (equal episode
            # counts), and the token count summed.
            statistics = accelerator.reduce(statistics, reduction="mean")
        # One device-to-host copy for every statistic.
        metrics = dict(zip(summary, statistics.tolist(), strict=True))
        metrics["generated_tokens"] *= processes
        metrics["explained_variance"] = explained_variance(old_values, returns, mask, process_sum)
        return metrics, scores

    def _update(self, micro_batch, columns, old_logprobs, old_values, ref_logprobs, advantages, returns, token_count):
        config, accelerator = self.config, self.accelerator
        mask = micro_batch.action_mask[:, columns]
        with accelerator.accumulate(self.actor, self.critic):
            need_entropy_grad = config.entropy_coef > 0
            logprobs, log_probs = policy_logprobs(self.actor, micro_batch, self.temperature, columns)
            with torch.set_grad_enabled(need_entropy_grad):
                entropy = token_entropy(log_probs)
            policy = clipped_policy_loss(logprobs, old_logprobs, advantages, mask, config.clip_range, token_count)
            values = critic_values(self.critic, micro_batch, columns)
            value = clipped_value_loss(values, old_values, returns, mask, config.value_clip_range, token_count)
            loss = policy.loss + config.value_loss_coef * value.loss
            if need_entropy_grad:
                loss = loss - config.entropy_coef * masked_sum(entropy, mask) / token_count
            if config.kl_loss_coef > 0:
                loss = loss + config.kl_loss_coef * masked_sum(kl_estimate(logprobs, ref_logprobs, "k3"), mask) / token_count
            accelerator.backward(loss)
            stats = {}
            if accelerator.sync_gradients:
                for name, model in (("actor_grad_norm", self.actor), ("critic_grad_norm", self.critic)):
                    grad_norm = accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm)
                    stats[name] = torch.as_tensor(grad_norm, device=accelerator.device).detach()
            self.actor_optimizer.step()
            self.critic_optimizer.step()
            self.actor_optimizer.zero_grad()
            self.critic_optimizer.zero_grad()
        stats.update(
            policy_loss=policy.loss.detach(),
            value_loss=value.loss.detach(),
            clip_fraction=policy.clip_fraction,
            value_clip_fraction=value.clip_fraction,
            approx_kl=policy.approx_kl,
            entropy=masked_mean(entropy.detach(), mask),
        )
        return stats

    def iteration(self, step: int) -> tuple[dict, torch.Tensor]:
        """One PPO step: collect episodes, then `step` on them."""
        runtime, config = self.runtime, self.config
        rollout_start = time.perf_counter()
        rollouts = runtime.collect(self.actor, step, config.tasks_per_step)
        rollout_seconds = time.perf_counter() - rollout_start
        update_start = time.perf_counter()
        metrics, scores = self.step(rollouts)
        update_seconds = time.perf_counter() - update_start
        rewards, all_scores = self.reward_metrics(scores)
        metrics.update(rewards)
        metrics.update(
            rollout_seconds=rollout_seconds,
            update_seconds=update_seconds,
            generated_tokens_per_second=metrics["generated_tokens"] / max(rollout_seconds, 1e-9),
            # Over all processes: every process trains on as many episodes as this one.
            trained_tokens_per_second=metrics["sequence_length"] * len(rollouts) * self.accelerator.num_processes
            * config.ppo_epochs / max(update_seconds, 1e-9),
        )
        return metrics, all_scores

"""PPOTrainer.step against the PPO step written out plainly here, as the trainer ran it before its
speed-ups: logits and values at every position of the padded batch, no-grad passes in
micro-batches, log-softmax over the whole vocabulary, a host float per metric per micro-batch.
The trainer's shortcuts (forward passes over the model-token columns only, no-grad passes in
chunks of `inference_batch_size`, metrics kept on the device until the end) must leave the
updated weights and every metric as they were."""

import copy
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from accelerate import Accelerator

from policy.tiny_model import build_tiny_model_and_tokenizer
from policy.trainer.config import RolloutConfig
from policy.trainer.core import (
    clipped_policy_loss,
    clipped_value_loss,
    explained_variance,
    gae_advantages,
    kl_estimate,
    masked_mean,
    masked_sum,
    masked_whiten,
    token_rewards,
)
from policy.trainer.ppo import PPOConfig, PPOTrainer, critic_values, in_chunks, policy_logprobs
from policy.trainer.rollout import Rollout, pad_rollouts, resolve_scores
from policy.trainer.value_model import ValueModel

PAD = 0


def mixed_rollouts(vocab_size: int, seed: int = 0) -> list[Rollout]:
    """Eight episodes that exercise every column rule: prompts of different lengths (the first
    model token is not in the same column everywhere), multi-turn episodes with tool tokens
    between model turns, episodes that end in tool tokens (trailing columns without any model
    token) and lengths that differ (right padding)."""
    generator = torch.Generator().manual_seed(seed)
    # (prompt tokens, then alternating model / tool segment lengths)
    shapes = [(5, [4]), (9, [3, 2, 2]), (7, [2, 3, 1, 4]), (6, [5, 2]),
              (8, [1]), (5, [2, 1, 3, 3]), (10, [6]), (7, [3, 4])]
    rewards = [1.0, -1.0, 2.0, 0.0, 3.0, -1.0, 1.0, 0.5]
    rollouts = []
    for (prompt, segments), reward in zip(shapes, rewards, strict=True):
        token_ids, action_mask = [], [0] * prompt
        for index, length in enumerate(segments):
            action_mask += [1 - index % 2] * length
        token_ids = torch.randint(2, vocab_size, (len(action_mask),), generator=generator).tolist()
        sampler = [-float(torch.rand((), generator=generator)) * 5 * m for m in action_mask]
        rollouts.append(Rollout("mixed", token_ids, action_mask, sampler, reward=reward))
    return rollouts


def full_logprobs_and_entropy(model, batch, temperature):
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1]
    log_probs = (logits.float() / temperature).log_softmax(-1)
    chosen = log_probs.gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)
    return chosen, -(log_probs.exp() * log_probs).sum(-1)


def reference_step(actor, critic, reference, rollouts, config: PPOConfig, temperature: float):
    """(metrics, actor, critic) after one plain PPO step on single-process, full-precision models."""
    batch = pad_rollouts(rollouts, PAD)
    mask = batch.action_mask
    micro = config.micro_batch_size
    chunks = [torch.arange(start, min(start + micro, len(batch))) for start in range(0, len(batch), micro)]
    with torch.no_grad():
        old_logprobs = torch.cat([full_logprobs_and_entropy(actor, batch.select(r), temperature)[0] for r in chunks])
        ref_logprobs = torch.cat([full_logprobs_and_entropy(reference, batch.select(r), temperature)[0] for r in chunks])
        old_values = torch.cat([critic(batch.select(r).input_ids, batch.select(r).attention_mask)[:, :-1] for r in chunks])
    scores = resolve_scores(rollouts)
    rewards = token_rewards(scores, kl_estimate(old_logprobs, ref_logprobs, config.kl_estimator), mask, config.kl_coef)
    advantages, returns = gae_advantages(rewards, old_values, mask, config.gamma, config.lam)
    advantages = masked_whiten(advantages, mask)

    actor_optimizer = torch.optim.AdamW(actor.parameters(), lr=config.actor_lr, weight_decay=config.weight_decay)
    critic_optimizer = torch.optim.AdamW(critic.parameters(), lr=config.critic_lr, weight_decay=config.weight_decay)
    stats = defaultdict(list)
    accumulation = config.accumulation_steps
    for _epoch in range(config.ppo_epochs):
        order = torch.randperm(len(batch))
        for start in range(0, len(batch), config.minibatch_size):
            minibatch = order[start : start + config.minibatch_size]
            token_count = mask[minibatch].sum().clamp(min=1) / accumulation
            for micro_start in range(0, len(minibatch), micro):
                rows = minibatch[micro_start : micro_start + micro]
                part = batch.select(rows)
                part_mask = part.action_mask
                logprobs, entropy = full_logprobs_and_entropy(actor, part, temperature)
                policy = clipped_policy_loss(logprobs, old_logprobs[rows], advantages[rows], part_mask,
                                             config.clip_range, token_count)
                values = critic(part.input_ids, part.attention_mask)[:, :-1]
                value = clipped_value_loss(values, old_values[rows], returns[rows], part_mask,
                                           config.value_clip_range, token_count)
                loss = (policy.loss + config.value_loss_coef * value.loss
                        - config.entropy_coef * masked_sum(entropy, part_mask) / token_count
                        + config.kl_loss_coef * masked_sum(kl_estimate(logprobs, ref_logprobs[rows], "k3"), part_mask)
                        / token_count)
                (loss / accumulation).backward()
                if micro_start + micro == len(minibatch):
                    for name, model, optimizer in (("actor", actor, actor_optimizer), ("critic", critic, critic_optimizer)):
                        stats[f"{name}_grad_norm"].append(float(torch.nn.utils.clip_grad_norm_(model.parameters(),
                                                                                               config.max_grad_norm)))
                        optimizer.step()
                        optimizer.zero_grad()
                stats["policy_loss"].append(policy.loss.item())
                stats["value_loss"].append(value.loss.item())
                stats["clip_fraction"].append(policy.clip_fraction.item())
                stats["value_clip_fraction"].append(value.clip_fraction.item())
                stats["approx_kl"].append(policy.approx_kl.item())
                stats["entropy"].append(masked_mean(entropy.detach(), part_mask).item())
    metrics = {name: sum(values) / len(values) for name, values in stats.items()}
    metrics.update(
        kl=(masked_sum(old_logprobs - ref_logprobs, mask) / len(batch)).item(),
        explained_variance=explained_variance(old_values, returns, mask),
        advantage_mean=masked_mean(advantages, mask).item(),
        return_mean=masked_mean(returns, mask).item(),
        sampler_logprob_gap=masked_mean((batch.sampler_logprobs - old_logprobs).abs(), mask).item(),
        generated_tokens=mask.sum().item(),
        sequence_length=batch.attention_mask.sum(1).float().mean().item(),
    )
    return metrics, actor, critic


@pytest.fixture(scope="module")
def models():
    """Actor, critic and a reference that differs from the actor (so the KL terms are not zero)."""
    actor, _ = build_tiny_model_and_tokenizer(hidden_size=32, layers=2, seed=0)
    critic = ValueModel.from_causal_lm(actor)
    # A value head of the backbone's scale, so the value loss and its clipping matter.
    torch.nn.init.normal_(critic.value_head.weight, std=0.3)
    reference = copy.deepcopy(actor)
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    return actor, critic, reference


SETTINGS = {
    "defaults": dict(),
    "temperature-entropy-kl-loss": dict(temperature=0.7, entropy_coef=0.05, kl_loss_coef=0.1, kl_estimator="k3"),
    "one-chunk": dict(inference_batch_size=8),
    "uneven-chunks": dict(inference_batch_size=3, value_clip_range=None),
}


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_step_matches_the_plain_full_sequence_step(models, setting):
    options = dict(SETTINGS[setting])
    temperature = options.pop("temperature", 1.0)
    config = PPOConfig(steps=1, tasks_per_step=8, minibatch_size=4, micro_batch_size=2, ppo_epochs=2,
                       actor_lr=1e-3, critic_lr=1e-3, kl_coef=0.1, **options)
    actor, critic, reference = models
    rollouts = mixed_rollouts(actor.config.vocab_size)

    torch.manual_seed(7)
    expected, expected_actor, expected_critic = reference_step(
        copy.deepcopy(actor), copy.deepcopy(critic), reference, rollouts, config, temperature)

    runtime = SimpleNamespace(accelerator=Accelerator(gradient_accumulation_steps=config.accumulation_steps),
                              rollout_config=RolloutConfig(temperature=temperature),
                              tokenizer=SimpleNamespace(pad_token_id=PAD))
    trainer = PPOTrainer(config, runtime, copy.deepcopy(actor), copy.deepcopy(critic), copy.deepcopy(reference))
    torch.manual_seed(7)
    metrics, scores = trainer.step(rollouts)

    assert scores.tolist() == [r.reward for r in rollouts]
    assert set(metrics) == set(expected)
    for name, value in expected.items():
        assert metrics[name] == pytest.approx(value, rel=1e-4, abs=1e-5), name
    assert isinstance(metrics["generated_tokens"], float)
    # Adam moves each weight by about the learning rate whatever its gradient's size, so rounding
    # in a near-zero gradient can move a weight by a fraction of it (measured: under 1% here); a
    # wrong gradient moves many weights by the whole learning rate.
    for trained, plain in ((trainer.actor, expected_actor), (trainer.critic, expected_critic)):
        for (name, parameter), plain_parameter in zip(trained.named_parameters(), plain.parameters(), strict=True):
            torch.testing.assert_close(parameter, plain_parameter, rtol=0, atol=0.05 * config.actor_lr, msg=name)
    # The step moved the weights: the comparison above is not between two untouched models.
    assert any(not torch.equal(a, b) for a, b in zip(trainer.actor.parameters(), actor.parameters(), strict=True))


def test_forward_passes_over_the_model_token_columns_match_full_passes_sliced(models):
    actor, critic, _ = models
    batch = pad_rollouts(mixed_rollouts(actor.config.vocab_size), PAD)
    columns = batch.model_token_columns()
    # The prompts differ in length and some episodes end in tool tokens: the window is a strict
    # part of the columns on both sides, so the passes really are shorter.
    assert 0 < columns.start and columns.stop < batch.action_mask.shape[1]
    with torch.no_grad():
        full_logprobs, full_entropy = full_logprobs_and_entropy(actor, batch, temperature=0.7)
        logprobs, log_probs = policy_logprobs(actor, batch, 0.7, columns)
        full_values = critic(batch.input_ids, batch.attention_mask)[:, :-1]
        values = in_chunks(lambda b: critic_values(critic, b, columns), batch, 3)
    assert logprobs.shape == values.shape == (len(batch), columns.stop - columns.start)
    # Every real token (the passes run without the attention mask: only positions past a
    # sequence's end, the right padding, may differ, and nothing reads those).
    real = batch.attention_mask[:, 1:].bool()
    assert (~real[:, columns]).any()
    torch.testing.assert_close(logprobs[real[:, columns]], full_logprobs[:, columns][real[:, columns]], rtol=0, atol=1e-5)
    entropy = -(log_probs.exp() * log_probs).sum(-1)
    torch.testing.assert_close(entropy[real[:, columns]], full_entropy[:, columns][real[:, columns]], rtol=0, atol=1e-5)
    torch.testing.assert_close(values[real[:, columns]], full_values[:, columns][real[:, columns]], rtol=0, atol=1e-5)
    # No columns given: every position, as before.
    torch.testing.assert_close(policy_logprobs(actor, batch, 0.7)[0][real], full_logprobs[real], rtol=0, atol=1e-5)


def test_a_model_that_ignores_logits_to_keep_is_refused(models):
    actor, _, _ = models
    batch = pad_rollouts(mixed_rollouts(actor.config.vocab_size), PAD)

    def every_position(input_ids, **_ignored):
        return actor(input_ids=input_ids)

    with pytest.raises(TypeError, match="supports logits_to_keep"):
        policy_logprobs(every_position, batch, 1.0, batch.model_token_columns())

"""The PPO arithmetic against values worked out by hand."""

import math

import pytest
import torch

from policy.trainer.core import (
    clipped_policy_loss,
    clipped_value_loss,
    explained_variance,
    gae_advantages,
    kl_estimate,
    masked_mean,
    masked_whiten,
    token_entropy,
    token_logprobs,
    token_rewards,
    vocab_logprobs,
)


def test_gae_single_turn_by_hand():
    # Three model tokens, reward 1 at the end, gamma 0.9, lambda 0.5, values 0.5, 0.6, 0.7.
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.6, 0.7]])
    mask = torch.ones(1, 3)
    advantages, returns = gae_advantages(rewards, values, mask, gamma=0.9, lam=0.5)
    delta2 = 1.0 - 0.7                      # 0.3 (episode ends: no bootstrap)
    delta1 = 0.0 + 0.9 * 0.7 - 0.6          # 0.03
    delta0 = 0.0 + 0.9 * 0.6 - 0.5          # 0.04
    a2 = delta2
    a1 = delta1 + 0.45 * a2                 # gamma * lambda = 0.45
    a0 = delta0 + 0.45 * a1
    assert advantages[0].tolist() == pytest.approx([a0, a1, a2])
    assert returns[0].tolist() == pytest.approx([a0 + 0.5, a1 + 0.6, a2 + 0.7])


def test_gae_skips_tool_tokens_between_turns():
    # Tokens: model, tool, tool, model. Tool tokens are not steps: the first model token
    # bootstraps from the value of the second model token, and tool positions get nothing.
    rewards = torch.tensor([[0.0, 5.0, 5.0, 2.0]])  # rewards on tool tokens must be ignored
    values = torch.tensor([[1.0, 9.0, 9.0, 1.5]])
    mask = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    advantages, returns = gae_advantages(rewards, values, mask, gamma=1.0, lam=1.0)
    a3 = 2.0 - 1.5
    a0 = (0.0 + 1.5 - 1.0) + a3
    assert advantages[0].tolist() == pytest.approx([a0, 0.0, 0.0, a3])
    assert returns[0].tolist() == pytest.approx([2.0, 0.0, 0.0, 2.0])


def test_gae_padding_after_episode_does_not_leak():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    values = torch.tensor([[0.25, 7.0], [0.0, 0.0]])
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    advantages, _ = gae_advantages(rewards, values, mask, gamma=1.0, lam=1.0)
    assert advantages[0].tolist() == pytest.approx([0.75, 0.0])
    assert advantages[1].tolist() == pytest.approx([1.0, 1.0])


def step_by_step_gae(rewards, values, mask, gamma, lam):
    """GAE as the recursion reads, one episode and one token at a time."""
    advantages = torch.zeros_like(rewards)
    for row in range(rewards.shape[0]):
        next_value = next_advantage = 0.0
        for t in reversed(range(rewards.shape[1])):
            if mask[row, t]:
                delta = rewards[row, t] + gamma * next_value - values[row, t]
                next_advantage = delta + gamma * lam * next_advantage
                next_value = values[row, t]
                advantages[row, t] = next_advantage
    return advantages, (advantages + values) * mask


def test_gae_matches_the_recursion_on_random_multi_turn_masks():
    generator = torch.Generator().manual_seed(0)
    rewards, values = torch.randn(6, 40, generator=generator), torch.randn(6, 40, generator=generator)
    mask = (torch.rand(6, 40, generator=generator) < 0.6).float()
    mask[0] = 0  # an episode without model tokens gets nothing
    advantages, returns = gae_advantages(rewards, values, mask, gamma=0.97, lam=0.9)
    expected_advantages, expected_returns = step_by_step_gae(rewards, values, mask, 0.97, 0.9)
    assert torch.allclose(advantages, expected_advantages, atol=1e-6)
    assert torch.allclose(returns, expected_returns, atol=1e-6)
    assert advantages[0].abs().sum() == 0 and (advantages * (1 - mask)).abs().sum() == 0


def test_gae_over_the_model_token_columns_equals_gae_over_all():
    # The trainer runs GAE on the columns from the first model token of any episode to the last.
    generator = torch.Generator().manual_seed(1)
    rewards, values = torch.randn(4, 30, generator=generator), torch.randn(4, 30, generator=generator)
    mask = torch.zeros(4, 30)
    mask[0, 8:12] = mask[1, 10:20] = mask[2, 9:11] = mask[2, 15:22] = mask[3, 12:14] = 1
    full_advantages, full_returns = gae_advantages(rewards, values, mask, gamma=1.0, lam=0.95)
    columns = slice(8, 22)
    advantages, returns = gae_advantages(rewards[:, columns], values[:, columns], mask[:, columns], 1.0, 0.95)
    assert torch.equal(advantages, full_advantages[:, columns]) and torch.equal(returns, full_returns[:, columns])
    assert full_advantages[:, :8].abs().sum() == 0 and full_advantages[:, 22:].abs().sum() == 0


def test_token_rewards_put_score_on_last_model_token_and_kl_everywhere():
    mask = torch.tensor([[0.0, 1.0, 1.0, 0.0], [1.0, 0.0, 1.0, 0.0]])
    kl = torch.tensor([[9.0, 0.5, 1.0, 9.0], [2.0, 9.0, 0.0, 9.0]])
    rewards = token_rewards(torch.tensor([3.0, -1.0]), kl, mask, kl_coef=0.1)
    expected = torch.tensor([[0.0, -0.05, 3.0 - 0.1, 0.0], [-0.2, 0.0, -1.0, 0.0]])
    assert torch.allclose(rewards, expected)


def test_masked_whiten_uses_only_masked_entries():
    values = torch.tensor([[1.0, 3.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    whitened = masked_whiten(values, mask)
    # mean 2, unbiased variance 2 -> (1-2)/sqrt(2), (3-2)/sqrt(2); the masked entry becomes 0.
    assert whitened[0].tolist() == pytest.approx([-1 / math.sqrt(2), 1 / math.sqrt(2), 0.0], abs=1e-6)
    assert masked_mean(torch.tensor([[1.0, 3.0, 100.0]]), mask).item() == 2.0


def test_policy_loss_clips_large_ratios_by_hand():
    old = torch.zeros(1, 3)
    new = torch.log(torch.tensor([[1.5, 0.5, 1.1]]))  # ratios 1.5, 0.5, 1.1
    advantages = torch.tensor([[1.0, -1.0, 2.0]])
    mask = torch.ones(1, 3)
    terms = clipped_policy_loss(new, old, advantages, mask, clip_range=0.2)
    # token 0: max(-1.5, -1.2) = -1.2 (clipped); token 1: max(0.5, 0.8) = 0.8 (clipped);
    # token 2: max(-2.2, -2.2) = -2.2 (inside the range)
    assert terms.loss.item() == pytest.approx((-1.2 + 0.8 - 2.2) / 3)
    assert terms.clip_fraction.item() == pytest.approx(2 / 3)


def test_policy_loss_ignores_masked_tokens_and_uses_given_normaliser():
    old = torch.zeros(1, 2)
    new = torch.zeros(1, 2)
    advantages = torch.tensor([[1.0, 1000.0]])
    mask = torch.tensor([[1.0, 0.0]])
    assert clipped_policy_loss(new, old, advantages, mask, 0.2).loss.item() == pytest.approx(-1.0)
    assert clipped_policy_loss(new, old, advantages, mask, 0.2, token_count=4).loss.item() == pytest.approx(-0.25)


def test_value_loss_clipped_by_hand():
    values = torch.tensor([[1.0, 0.0]])
    old_values = torch.tensor([[0.0, 0.0]])
    returns = torch.tensor([[2.0, 1.0]])
    mask = torch.ones(1, 2)
    terms = clipped_value_loss(values, old_values, returns, mask, clip_range=0.5)
    # token 0: unclipped (1-2)^2 = 1, clipped value 0.5 -> (0.5-2)^2 = 2.25 -> 2.25; token 1: 1
    assert terms.loss.item() == pytest.approx(0.5 * (2.25 + 1.0) / 2)
    assert terms.clip_fraction.item() == pytest.approx(0.5)
    plain = clipped_value_loss(values, old_values, returns, mask, clip_range=None)
    assert plain.loss.item() == pytest.approx(0.5 * (1.0 + 1.0) / 2)


def test_kl_estimators_by_hand():
    logprobs = torch.tensor([math.log(0.5)])
    reference = torch.tensor([math.log(0.25)])
    log_ratio = math.log(2.0)
    assert kl_estimate(logprobs, reference, "k1").item() == pytest.approx(log_ratio)
    assert kl_estimate(logprobs, reference, "k2").item() == pytest.approx(0.5 * log_ratio**2)
    assert kl_estimate(logprobs, reference, "k3").item() == pytest.approx(0.5 - 1 + log_ratio)
    with pytest.raises(ValueError, match="k1"):
        kl_estimate(logprobs, reference, "k4")


def test_token_logprobs_match_log_softmax_with_temperature():
    logits = torch.randn(2, 3, 7)
    tokens = torch.randint(0, 7, (2, 3))
    expected = torch.gather((logits / 0.7).log_softmax(-1), -1, tokens.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(token_logprobs(logits, tokens, temperature=0.7), expected, atol=1e-6)


def test_token_entropy_from_vocab_logprobs():
    logits = torch.randn(2, 3, 7)
    probabilities = (logits / 0.7).softmax(-1)
    expected = -(probabilities * probabilities.log()).sum(-1)
    assert torch.allclose(token_entropy(vocab_logprobs(logits, temperature=0.7)), expected, atol=1e-6)
    uniform = vocab_logprobs(torch.zeros(1, 5), temperature=1.0)
    assert token_entropy(uniform).item() == pytest.approx(math.log(5))


def test_explained_variance():
    targets = torch.tensor([[1.0, 2.0, 3.0, 50.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    assert explained_variance(targets.clone(), targets, mask) == pytest.approx(1.0)
    assert explained_variance(torch.full_like(targets, 2.0), targets, mask) == pytest.approx(0.0)
    assert explained_variance(torch.zeros_like(targets), targets, mask) == pytest.approx(0.0)
    assert explained_variance(-targets, targets, mask) < 0

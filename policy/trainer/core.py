"""The PPO arithmetic as plain tensor functions: masked statistics, token log-probs, GAE, the
clipped policy and value losses, KL estimators and explained variance. Every function takes a
`mask` of the tokens that count (the model's own tokens) and ignores the rest."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


def masked_sum(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum()


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    # clamp: an all-masked minibatch contributes zero instead of NaN.
    return (values * mask).sum() / mask.sum().clamp(min=1)


def masked_moments(values: torch.Tensor, mask: torch.Tensor,
                   sum_over_processes: Callable[[torch.Tensor], torch.Tensor] | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, unbiased variance: Bessel's correction, as TRL and verl) over the masked entries;
    with `sum_over_processes`, over the masked entries of every process's batch."""
    total = sum_over_processes or (lambda tensor: tensor)
    count = total(mask.sum())
    mean = total(masked_sum(values, mask)) / count.clamp(min=1)
    variance = total(masked_sum((values - mean) ** 2, mask)) / (count - 1).clamp(min=1)
    return mean, variance


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True,
                  sum_over_processes: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """Zero mean, unit variance over the masked entries; masked entries come back as zero.
    `sum_over_processes` (data-parallel runs) sums a tensor over every process's batch, so each
    process whitens with the whole batch's mean and variance, as one process holding it would."""
    mean, variance = masked_moments(values, mask, sum_over_processes)
    whitened = (values - mean) * torch.rsqrt(variance + 1e-8)
    if not shift_mean:
        whitened = whitened + mean
    return whitened * mask


def vocab_logprobs(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log_softmax(logits / temperature) over the vocabulary, in fp32. One fused kernel: cheaper
    than gather - logsumexp, whose composite amax / subtract / exp / sum passes each read the whole
    [batch, length, vocab] tensor (forward and backward). Already-fp32 logits at temperature 1
    (accelerate's mixed precision hands logits back in fp32) are not copied first."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    return logits.log_softmax(-1)


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log p(token_ids[t] | ...) where logits[t] is the distribution over token_ids[t]; the caller
    aligns them (logits[:, :-1] with input_ids[:, 1:]). Temperature matches the sampler's."""
    return chosen_logprobs(vocab_logprobs(logits, temperature), token_ids)


def chosen_logprobs(log_probs: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """The entries of `vocab_logprobs` output at `token_ids`."""
    return torch.gather(log_probs, -1, token_ids.unsqueeze(-1)).squeeze(-1)


def token_entropy(log_probs: torch.Tensor) -> torch.Tensor:
    """Entropy of each position's distribution, from its `vocab_logprobs` (computed once and
    shared with the chosen tokens' log-probs)."""
    return -(log_probs.exp() * log_probs).sum(-1)


def kl_estimate(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: str = "k1") -> torch.Tensor:
    """Per-token estimates of KL(policy || reference) from samples of the policy (Schulman's k1,
    k2, k3): k1 is unbiased but can go negative, k3 is unbiased and never negative."""
    log_ratio = logprobs - ref_logprobs
    if kind == "k1":
        return log_ratio
    if kind == "k2":
        return 0.5 * log_ratio**2
    if kind == "k3":
        return torch.exp(-log_ratio) - 1 + log_ratio
    raise ValueError(f"unknown KL estimator {kind!r}; use 'k1', 'k2' or 'k3'")


def token_rewards(
    scores: torch.Tensor, kl_per_token: torch.Tensor, mask: torch.Tensor, kl_coef: float
) -> torch.Tensor:
    """Per-token rewards: -kl_coef * KL on every model token, plus the episode's score on its last
    model token (the sparse outcome reward of the paper)."""
    rewards = -kl_coef * kl_per_token * mask
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    last_token = torch.where(mask.bool(), positions, -1).max(dim=1).values
    has_tokens = last_token >= 0
    rows = torch.arange(mask.shape[0], device=mask.device)[has_tokens]
    rewards[rows, last_token[has_tokens]] += scores[has_tokens].to(rewards.dtype)
    return rewards


def gae_advantages(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns) by generalised advantage estimation over the masked tokens only.

    Unmasked tokens (prompt, tool output, padding) are not time steps: the recursion passes over
    them unchanged, so the last model token of one turn bootstraps from the first model token of
    the next turn, and the episode ends after its last model token (value 0 beyond)."""
    # Every step runs a handful of small kernels, one column at a time, so the loop is kept to the
    # fewest: the carries switch with torch.where (the same values as blending with a 0/1 mask)
    # and the advantages are masked once at the end instead of column by column.
    batch_size, length = rewards.shape
    is_step = mask.bool()
    advantages = torch.empty_like(rewards)
    next_value = torch.zeros(batch_size, dtype=rewards.dtype, device=rewards.device)
    next_advantage = torch.zeros_like(next_value)
    for t in reversed(range(length)):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        advantage = delta + gamma * lam * next_advantage
        advantages[:, t] = advantage
        next_value = torch.where(is_step[:, t], values[:, t], next_value)
        next_advantage = torch.where(is_step[:, t], advantage, next_advantage)
    advantages = advantages * mask
    returns = (advantages + values) * mask
    return advantages, returns


@dataclass
class PolicyLossTerms:
    loss: torch.Tensor
    clip_fraction: torch.Tensor
    approx_kl: torch.Tensor


def clipped_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_range: float,
    token_count: torch.Tensor | float | None = None,
) -> PolicyLossTerms:
    """PPO's clipped surrogate, averaged per token. `token_count` is the normaliser: the masked
    token count of the whole minibatch when it is split into gradient-accumulation micro-batches,
    so each token weighs the same whatever micro-batch it lands in."""
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - clip_range, 1 + clip_range)
    per_token = torch.maximum(unclipped, clipped)
    normaliser = mask.sum().clamp(min=1) if token_count is None else token_count
    with torch.no_grad():
        clip_fraction = masked_mean((clipped > unclipped).float(), mask)
        approx_kl = masked_mean(0.5 * (logprobs - old_logprobs) ** 2, mask)
    return PolicyLossTerms(masked_sum(per_token, mask) / normaliser, clip_fraction, approx_kl)


@dataclass
class ValueLossTerms:
    loss: torch.Tensor
    clip_fraction: torch.Tensor


def clipped_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip_range: float | None,
    token_count: torch.Tensor | float | None = None,
) -> ValueLossTerms:
    """0.5 * max((V - R)^2, (clip(V, V_old +- eps) - R)^2) per token; `clip_range=None` gives the
    plain squared error (value pretraining has no old values to stay near)."""
    unclipped = (values - returns) ** 2
    normaliser = mask.sum().clamp(min=1) if token_count is None else token_count
    if clip_range is None:
        return ValueLossTerms(0.5 * masked_sum(unclipped, mask) / normaliser, torch.zeros((), device=values.device))
    values_clipped = old_values + torch.clamp(values - old_values, -clip_range, clip_range)
    clipped = (values_clipped - returns) ** 2
    with torch.no_grad():
        clip_fraction = masked_mean((clipped > unclipped).float(), mask)
    return ValueLossTerms(0.5 * masked_sum(torch.maximum(unclipped, clipped), mask) / normaliser, clip_fraction)


def explained_variance(predictions: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor,
                       sum_over_processes: Callable[[torch.Tensor], torch.Tensor] | None = None) -> float:
    """1 - Var(target - prediction) / Var(target) over masked tokens: 1 is perfect, 0 is no better
    than predicting the mean, negative is worse. `sum_over_processes`: over every process's batch."""
    _, target_variance = masked_moments(targets, mask, sum_over_processes)
    _, error_variance = masked_moments(targets - predictions, mask, sum_over_processes)
    if target_variance.item() == 0:
        return float("nan")
    return float(1 - error_variance / target_variance)

"""The trainer's record of one episode (token ids, which tokens the model wrote, reward) and its
padding into the shifted tensors the losses use: position t of every tensor is about token t+1."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

import torch


@dataclass
class Rollout:
    task_id: str
    token_ids: list[int]
    # 1 where the model generated the token (it carries policy loss), 0 for prompt/tool output.
    action_mask: list[int]
    # Log-probs the sampler reported for the model's tokens (0.0 elsewhere); kept to measure how
    # far the rollout engine drifts from the trainer's own forward pass.
    sampler_logprobs: list[float]
    assistant_turns: list[str] = field(default_factory=list)
    invalid_tool_calls: int = 0
    truncated: bool = False
    # The score arrives later when it is computed in a worker pool (see rewards.py).
    reward_future: Future | None = None
    reward: float | None = None

    def resolve_reward(self) -> float:
        if self.reward is None:
            if self.reward_future is None:
                raise RuntimeError(f"rollout {self.task_id} was never scored; submit it to a scorer")
            self.reward = float(self.reward_future.result())
        return self.reward

    @property
    def generated_token_count(self) -> int:
        return sum(self.action_mask)


@dataclass
class RolloutBatch:
    """Right-padded tensors; `action_mask` and `sampler_logprobs` are already shifted (length T-1)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    action_mask: torch.Tensor
    sampler_logprobs: torch.Tensor

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def select(self, rows: torch.Tensor | slice) -> RolloutBatch:
        """The given rows; a slice gives views instead of copies."""
        return RolloutBatch(*(getattr(self, name)[rows] for name in self.__dataclass_fields__))

    def model_token_columns(self) -> slice:
        """The columns of the shifted tensors from the first model token of any episode to the
        last. Everything PPO reads is masked to model tokens, so its forward passes need logits
        and values in these columns only, and (causal attention) no input after the last one.
        A batch without model tokens gets column 0, which its mask zeroes like any other."""
        columns = self.action_mask.any(0).nonzero().flatten().tolist()
        return slice(columns[0], columns[-1] + 1) if columns else slice(0, 1)

    def to(self, device) -> RolloutBatch:
        return RolloutBatch(*(getattr(self, name).to(device) for name in self.__dataclass_fields__))


def pad_rollouts(rollouts: list[Rollout], pad_token_id: int) -> RolloutBatch:
    length = max(len(r.token_ids) for r in rollouts)
    input_ids = torch.full((len(rollouts), length), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rollouts), length), dtype=torch.long)
    action_mask = torch.zeros((len(rollouts), length), dtype=torch.float32)
    sampler_logprobs = torch.zeros((len(rollouts), length), dtype=torch.float32)
    for row, rollout in enumerate(rollouts):
        n = len(rollout.token_ids)
        input_ids[row, :n] = torch.tensor(rollout.token_ids)
        attention_mask[row, :n] = 1
        action_mask[row, :n] = torch.tensor(rollout.action_mask, dtype=torch.float32)
        sampler_logprobs[row, :n] = torch.tensor(rollout.sampler_logprobs, dtype=torch.float32)
    # Token 0 is never predicted, so the mask over predictions starts at token 1.
    return RolloutBatch(input_ids, attention_mask, action_mask[:, 1:], sampler_logprobs[:, 1:])


def resolve_scores(rollouts: list[Rollout]) -> torch.Tensor:
    """Wait for every rollout's reward (called as late as possible, so scoring overlaps the
    trainer's own forward passes)."""
    return torch.tensor([r.resolve_reward() for r in rollouts], dtype=torch.float32)


def micro_batches(mask: torch.Tensor, minibatch_size: int, micro_batch_size: int):
    """Yields (rows, token_count) for one pass over the batch in shuffled minibatches split into
    micro-batches. token_count is the minibatch's masked token count divided by the number of
    micro-batches: accelerate divides each micro-batch loss by the accumulation steps, so a loss
    summed over tokens and divided by token_count is the minibatch's per-token mean."""
    accumulation_steps = minibatch_size // micro_batch_size
    order = torch.randperm(mask.shape[0], device=mask.device)
    for start in range(0, len(order), minibatch_size):
        minibatch_rows = order[start : start + minibatch_size]
        token_count = mask[minibatch_rows].sum().clamp(min=1) / accumulation_steps
        for micro_start in range(0, len(minibatch_rows), micro_batch_size):
            yield minibatch_rows[micro_start : micro_start + micro_batch_size], token_count


class Minibatched:
    """For the stage configs that train in minibatches of micro-batches (`minibatch_size`,
    `micro_batch_size` fields): the divisibility check and the gradient-accumulation count."""

    def check_minibatches(self) -> None:
        if self.minibatch_size % self.micro_batch_size:
            raise ValueError(f"minibatch_size ({self.minibatch_size}) must be a multiple of "
                             f"micro_batch_size ({self.micro_batch_size})")

    @property
    def accumulation_steps(self) -> int:
        return self.minibatch_size // self.micro_batch_size


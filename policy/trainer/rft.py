"""Rejection fine-tuning, next to its config: sample episodes with the current actor, keep the
ones that earned a positive reward without looping or malformed tool calls, and fine-tune the
actor on the model-written tokens of those (tool output and prompts carry no loss). Rounds repeat
this with the improved actor."""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from dataclasses import dataclass

import torch

from .core import masked_sum
from .ppo import policy_logprobs
from .rollout import Rollout, pad_rollouts, resolve_scores
from .runtime import mean_over_processes, share_evenly
from .stage_trainer import StageSettings, StageTrainer


@dataclass
class RFTConfig(StageSettings):
    rounds: int = 1
    # Episodes sampled per round on each process.
    tasks_per_round: int = 64
    # Keep episodes whose reward is at least this (milestone reward 1 = correct).
    min_reward: float = 1.0
    # An assistant turn repeated more than this many times marks an unproductive loop.
    max_repeated_turns: int = 2
    max_invalid_tool_calls: int = 0
    # Drop episodes cut off by the token or turn budget.
    drop_truncated: bool = False
    epochs: int = 2
    lr: float = 1e-5

    @property
    def iterations(self) -> int:
        return self.rounds


def rejection_reason(rollout: Rollout, config: RFTConfig) -> str | None:
    """Why an episode is not fit to imitate, or None to keep it."""
    if rollout.resolve_reward() < config.min_reward:
        return "low_reward"
    if rollout.invalid_tool_calls > config.max_invalid_tool_calls:
        return "invalid_tool_calls"
    turn_counts = Counter(turn.strip() for turn in rollout.assistant_turns)
    if turn_counts and max(turn_counts.values()) > config.max_repeated_turns:
        return "repeated_turns"
    if config.drop_truncated and rollout.truncated:
        return "truncated"
    return None


class RFTTrainer(StageTrainer):
    def __init__(self, config: RFTConfig, runtime, actor):
        super().__init__(config, runtime)
        optimizer = torch.optim.AdamW(actor.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        self.actor, self.optimizer = self.accelerator.prepare(actor, optimizer)

    def fine_tune(self, kept: list[Rollout]) -> float:
        """Epochs of masked next-token cross-entropy on the kept episodes; the mean loss."""
        batch = pad_rollouts(kept, self.runtime.tokenizer.pad_token_id).to(self.accelerator.device)

        def loss_of(micro_batch, rows, token_count):
            # Temperature 1: imitate the tokens themselves, not the sampler's sharpening.
            logprobs, _ = policy_logprobs(self.actor, micro_batch, temperature=1.0)
            return -masked_sum(logprobs, micro_batch.action_mask) / token_count

        return self.minibatch_epochs(batch, self.config.epochs, self.actor, self.optimizer, loss_of)

    def iteration(self, round_index: int) -> tuple[dict, torch.Tensor]:
        """One round: sample episodes, keep the fit ones, fine-tune on them."""
        runtime, config = self.runtime, self.config
        collect_start = time.perf_counter()
        rollouts = runtime.collect(self.actor, round_index, config.tasks_per_round)
        scores = resolve_scores(rollouts)
        collect_seconds = time.perf_counter() - collect_start
        reasons = Counter(rejection_reason(r, config) for r in rollouts)
        # Scored already (resolve_scores above): the future, which does not pickle, goes.
        kept = [dataclasses.replace(r, reward_future=None) for r in rollouts
                if rejection_reason(r, config) is None]
        # Every process must run the same number of optimizer steps: the kept episodes
        # of all processes are dealt out evenly (on one process, nothing changes).
        kept, kept_everywhere = share_evenly(runtime.accelerator, kept)
        fine_tune_start = time.perf_counter()
        sft_loss = (mean_over_processes(runtime.accelerator, self.fine_tune(kept)) if kept
                    else float("nan"))
        metrics, all_scores = self.reward_metrics(scores)  # every process's episodes, as PPO logs
        metrics.update(
            kept=kept_everywhere,
            trained_on=len(kept) * runtime.accelerator.num_processes,
            sft_loss=sft_loss,
            collect_seconds=collect_seconds,
            fine_tune_seconds=time.perf_counter() - fine_tune_start,
            **{f"dropped_{reason}": count for reason, count in reasons.items() if reason},
        )
        return metrics, all_scores

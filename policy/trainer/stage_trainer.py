"""What every training stage stands on (ppo.py for ppo-single-turn and ppo-multi-turn, rft.py,
value_pretrain.py): the settings they share, and the loop they run. Each stage supplies one
iteration (a PPO step, an RFT or value-pretraining round): collect episodes, train on them, and
return its metrics with every process's scores; the loop logs them, shows them and checkpoints."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .metrics import reward_summary
from .rollout import Minibatched, RolloutBatch, micro_batches


@dataclass
class StageSettings(Minibatched):
    """The settings every stage has; each stage's settings dataclass adds its own."""

    # Episodes per optimizer step, and per forward/backward pass (the rest is accumulation).
    minibatch_size: int = 8
    micro_batch_size: int = 4
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    # A reward at or above this counts as a pass (milestone reward 1 = correct).
    pass_threshold: float = 1.0

    def __post_init__(self):
        self.check_minibatches()

    @property
    def iterations(self) -> int:
        """How many iterations the stage runs (its rounds, or PPO's steps)."""
        raise NotImplementedError


class StageTrainer:
    """The loop of a stage: iterations `first`..config.iterations-1, each `iteration(index)`, its
    metrics logged and shown, and a resumable checkpoint every `save_every` iterations."""

    def __init__(self, config: StageSettings, runtime):
        self.config = config
        self.runtime = runtime
        self.accelerator = runtime.accelerator

    def iteration(self, index: int) -> tuple[dict, torch.Tensor]:
        """One iteration of the stage: (its metrics, every process's episode scores)."""
        raise NotImplementedError

    def train(self, first: int, save) -> dict:
        """Iterations `first`..config.iterations-1; `save(index)` writes a resumable checkpoint.
        The last iteration's metrics."""
        from .progress import StageProgress

        runtime, total = self.runtime, self.config.iterations
        summary = {}
        with StageProgress(runtime.stage_name, total, first, runtime.progress) as progress:
            for index in range(first, total):
                metrics, all_scores = self.iteration(index)
                runtime.logger.log(index, metrics, {"reward": all_scores})
                progress.advance(metrics)
                summary = metrics
                if (index + 1) % runtime.save_every == 0 and index + 1 < total:
                    save(index + 1)
        return summary

    def reward_metrics(self, scores: torch.Tensor) -> tuple[dict, torch.Tensor]:
        """(the reward summary, every process's scores) of this process's episode `scores`."""
        all_scores = self.runtime.gather_scores(scores)
        return reward_summary(all_scores, self.config.pass_threshold), all_scores

    def minibatch_epochs(self, batch: RolloutBatch, epochs: int, model, optimizer,
                         loss_of: Callable[[RolloutBatch, torch.Tensor, torch.Tensor], torch.Tensor]) -> float:
        """`epochs` passes over `batch` in shuffled minibatches, each one optimizer step of `model`
        over its accumulated micro-batches, the loss `loss_of(micro_batch, rows, token_count)`
        (rollout.micro_batches); the mean micro-batch loss."""
        config, accelerator = self.config, self.accelerator
        losses = []
        for _epoch in range(epochs):
            for rows, token_count in micro_batches(batch.action_mask, config.minibatch_size, config.micro_batch_size):
                micro_batch = batch.select(rows)
                with accelerator.accumulate(model):
                    loss = loss_of(micro_batch, rows, token_count)
                    accelerator.backward(loss)
                    if accelerator.sync_gradients:
                        accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm)
                    optimizer.step()
                    optimizer.zero_grad()
                losses.append(loss.item())
        return sum(losses) / max(len(losses), 1)

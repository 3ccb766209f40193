"""What every stage needs besides its algorithm: the accelerator, the models loaded from the
previous stage, the environment and its scorer, task sampling, rollout collection and logging."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import gather_object, set_seed
from transformers import AutoModelForCausalLM

from .episodes import collect_rollouts
from .generation import InProcessGenerator
from .metrics import MetricsLogger
from .rewards import build_scorer
from .rollout import Rollout
from .value_model import ValueModel


def build_environment(kind: str, options: dict):
    """The environment named in the config; the CUDA ones are imported only when asked for."""
    if kind == "target-token":
        from .environments import TargetTokenEnvironment

        return TargetTokenEnvironment(**_tuples(options))
    if kind == "scripted-tools":
        from .environments import ScriptedToolEnvironment

        return ScriptedToolEnvironment(**_tuples(options))
    if kind == "prompt-outcome":
        from .environments import PromptOutcomeEnvironment

        return PromptOutcomeEnvironment(**options)
    if kind == "cuda-single-turn":
        from .cuda_single_turn import CudaSingleTurnEnvironment

        return CudaSingleTurnEnvironment(**options)
    if kind == "cuda-agent":
        from .agent_loop import AgentLoopEnvironment

        return AgentLoopEnvironment(**options)
    raise ValueError(
        f"unknown environment kind {kind!r}; use target-token, scripted-tools, prompt-outcome, cuda-single-turn or cuda-agent"
    )


def _tuples(options: dict) -> dict:
    # YAML gives lists; the toy environments hold tuples so they stay hashable and picklable.
    return {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}


def load_actor(path: str | Path, gradient_checkpointing: bool = False) -> torch.nn.Module:
    actor = AutoModelForCausalLM.from_pretrained(path)
    if gradient_checkpointing:
        actor.gradient_checkpointing_enable()
        # Generation under checkpointing must not cache-bust; the cache is off only in training.
        actor.config.use_cache = False
    return actor


def load_critic(path: str | Path, gradient_checkpointing: bool = False) -> ValueModel:
    critic = ValueModel.from_pretrained(path)
    if gradient_checkpointing:
        critic.backbone.gradient_checkpointing_enable()
    return critic


@dataclass
class StageRuntime:
    stage_name: str
    stage_dir: Path
    accelerator: Accelerator
    tokenizer: object
    environment: object
    scorer: object
    logger: MetricsLogger
    rollout_config: object
    seed: int
    save_every: int
    progress: bool
    # The stage's starting actor: what a vLLM sampler loads before the first weight push.
    model_path: Path | None = None
    vllm: object | None = None  # the VLLMSampler, built at the first collection that needs it

    @classmethod
    def create(cls, train_config, stage, stage_dir: Path, tokenizer, gradient_accumulation_steps: int = 1,
               model_path: Path | None = None):
        accelerator = Accelerator(
            mixed_precision=train_config.mixed_precision,
            gradient_accumulation_steps=gradient_accumulation_steps,
        )
        if stage.rollout.engine == "vllm" and accelerator.num_processes > 1:
            raise ValueError("rollout engine vllm runs one engine in the trainer's process and supports one "
                             "process only; on several GPUs use engine: in-process")
        environment = build_environment(stage.environment.kind, stage.environment.options)
        # Each process scores its own episodes on its own machine's devices, in a folder of its own.
        scorer = build_scorer(environment, stage.environment.scorer, stage.environment.scoring_devices,
                              scoring_dir(train_config, stage_dir) / f"process-{accelerator.process_index}",
                              process=accelerator.process_index)
        logger = MetricsLogger(stage_dir, stage.name, train_config.tensorboard, accelerator.is_main_process)
        return cls(
            stage.name, stage_dir, accelerator, tokenizer, environment, scorer, logger, stage.rollout,
            train_config.seed, train_config.save_every, train_config.progress and accelerator.is_main_process,
            model_path,
        )

    def task_rng(self, step: int) -> random.Random:
        # Seeded by step and process: a resumed run sees the same tasks, processes see different ones.
        return random.Random(f"{self.seed}-{self.stage_name}-{step}-{self.accelerator.process_index}")

    def generator_for(self, actor) -> InProcessGenerator:
        return InProcessGenerator(
            model=self.accelerator.unwrap_model(actor),
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=self.tokenizer.eos_token_id,
            temperature=self.rollout_config.temperature,
            batch_size=self.rollout_config.generation_batch_size,
        )

    def collect(self, actor, step: int, count: int) -> list[Rollout]:
        """`count` episodes with the current actor. An environment that drives its own episodes
        (the agent loop) runs them; otherwise they run here in lockstep."""
        rng = self.task_rng(step)
        sampler = self.vllm_sampler(actor) if self.rollout_config.engine == "vllm" else None
        if hasattr(self.environment, "run_episodes"):
            return self.environment.run_episodes(
                self.accelerator.unwrap_model(actor), self.tokenizer, rng, count, self.rollout_config, step,
                engine=sampler.engine if sampler else None,
            )
        rollouts = collect_rollouts(
            sampler or self.generator_for(actor),
            self.tokenizer,
            self.environment,
            self.environment.sample_tasks(count, rng),
            self.scorer,
            self.rollout_config.max_new_tokens,
            self.rollout_config.max_total_tokens,
        )
        self.scorer.flush()  # the batch is complete: a batch scorer starts now
        return rollouts

    def vllm_sampler(self, actor):
        """The stage's vLLM sampler (built once, from model_path) with `actor`'s current weights."""
        if self.vllm is None:
            from .vllm_sampler import VLLMSampler

            if self.model_path is None:
                raise ValueError("rollout engine vllm needs the stage's model path to start the engine from")
            self.vllm = VLLMSampler(self.model_path, self.rollout_config.temperature, self.tokenizer.eos_token_id,
                                    self.rollout_config.generation_batch_size, self.rollout_config.vllm_options)
        self.vllm.push_weights(self.accelerator.unwrap_model(actor))
        return self.vllm

    def gather_scores(self, scores: torch.Tensor) -> torch.Tensor:
        """Every process's episode rewards (the same count on each), for metrics."""
        return self.accelerator.gather(scores.to(self.accelerator.device)).cpu()

    def close(self) -> None:
        if self.vllm is not None:
            self.vllm.close()
        self.scorer.close()
        self.logger.close()
        if hasattr(self.environment, "close"):
            self.environment.close()


SCORING_DIR_ENV = "CUDAAGENT_SCORING_DIR"


def scoring_dir(train_config, stage_dir: Path) -> Path:
    """The stage's scoring folder on this machine: under the config's scoring_dir, else under
    $CUDAAGENT_SCORING_DIR (a node-local disk, set per machine), else STAGE_DIR/scoring."""
    root = train_config.scoring_dir or os.environ.get(SCORING_DIR_ENV)
    return Path(root).resolve() / stage_dir.name if root else stage_dir / "scoring"


def seed_process(accelerator, seed: int) -> None:
    """Seeds python, numpy and torch with `seed` plus the process index: data-parallel processes
    must sample different answers (the same seed everywhere would make them generate the same
    tokens for the same prompt, and the batch would hold copies), while process 0, and so every
    one-process run, keeps the plain seed."""
    set_seed(seed + accelerator.process_index)


# Data-parallel helpers: on one process each is the identity (no collective call), so single-GPU
# and CPU runs take no distributed path at all.
def sum_over_processes(accelerator) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """A function that sums a tensor over the data-parallel processes; None on one process."""
    if accelerator.num_processes == 1:
        return None
    return lambda tensor: accelerator.reduce(tensor, reduction="sum")


def mean_over_processes(accelerator, value: float) -> float:
    """The mean of a per-process number (a loss) over the processes."""
    if accelerator.num_processes == 1:
        return value
    return accelerator.reduce(torch.tensor([value], device=accelerator.device), reduction="mean").item()


def share_evenly(accelerator, items: list) -> tuple[list, int]:
    """(this process's share, the count over all processes) of per-process lists of different
    lengths: every process gets the same number, dealt round-robin from all of them, so all run
    the same number of optimizer steps (DDP waits for every process at each backward); at most
    num_processes - 1 items are left out."""
    if accelerator.num_processes == 1:
        return items, len(items)
    everything = [item for share in gather_object([items]) for item in share]
    processes = accelerator.num_processes
    each = len(everything) // processes
    mine = everything[accelerator.process_index::processes][:each]
    return mine, len(everything)

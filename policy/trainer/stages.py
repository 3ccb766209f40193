"""The paper's recipe as a pipeline of stages (ppo-single-turn, rft, value-pretrain,
ppo-multi-turn, in any order the config lists): each stage starts from the models the previous
stages produced, resumes from its own latest checkpoint, and is skipped once finished."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from transformers import AutoTokenizer
from transformers.utils import logging as transformers_logging

from .checkpoint import (
    export_final,
    final_model_paths,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    stage_is_done,
)
from .config import StageConfig, TrainConfig
from .runtime import StageRuntime, load_actor, load_critic, seed_process


def base_model_path(config: TrainConfig) -> Path:
    """The starting actor: the configured directory, or the tiny offline model built once."""
    if config.model != "tiny":
        path = Path(config.model)
        if not (path / "config.json").exists():
            raise FileNotFoundError(
                f"model {config.model!r} is not a local transformers model directory (no config.json); "
                "training runs offline: download the model first, or use model: tiny"
            )
        return path
    from policy.tiny_model import build_and_save_tiny_model

    path = Path(config.output_dir) / "base-model"
    if (path / "config.json").exists():
        return path
    # Under several processes each builds the same seeded model in a folder of its own and the
    # first rename wins: no process ever reads a half-written one (a half-written tokenizer does
    # not load). No accelerate state here: a PartialState made before the stage's Accelerator
    # would fix the distributed set-up without the Accelerator's options.
    building = path.with_name(f"{path.name}.building-{os.getpid()}")
    build_and_save_tiny_model(
        building, hidden_size=config.tiny_model.hidden_size, layers=config.tiny_model.layers, seed=config.tiny_model.seed
    )
    try:
        building.rename(path)
    except OSError:  # another process got there first
        shutil.rmtree(building, ignore_errors=True)
    return path


def stage_dir_for(config: TrainConfig, index: int, stage: StageConfig) -> Path:
    return Path(config.output_dir) / f"{index:02d}-{stage.name}"


def run_stage(config: TrainConfig, stage: StageConfig, stage_dir: Path, actor_path: Path, critic_path: Path,
              resume: bool = True) -> dict:
    tokenizer = AutoTokenizer.from_pretrained(actor_path)
    settings = stage.settings
    runtime = StageRuntime.create(config, stage, stage_dir, tokenizer, settings.accumulation_steps, actor_path)
    seed_process(runtime.accelerator, config.seed)
    checkpointing = config.gradient_checkpointing
    if stage.name == "ppo-single-turn" and runtime.environment.max_turns != 1:
        raise ValueError(
            f"ppo-single-turn needs a single-turn environment, but {stage.environment.kind!r} allows "
            f"{runtime.environment.max_turns} turns; use ppo-multi-turn or a single-turn environment"
        )
    if stage.name in ("ppo-single-turn", "ppo-multi-turn"):
        from .ppo import PPOTrainer

        reference = load_actor(actor_path) if settings.uses_reference else None
        trainer = PPOTrainer(settings, runtime, load_actor(actor_path, checkpointing),
                             load_critic(critic_path, checkpointing), reference)
        trained = {"actor": trainer.actor, "critic": trainer.critic}
    elif stage.name == "rft":
        from .rft import RFTTrainer

        trainer = RFTTrainer(settings, runtime, load_actor(actor_path, checkpointing))
        trained = {"actor": trainer.actor}
    else:
        from .value_pretrain import ValuePretrainer

        trainer = ValuePretrainer(settings, runtime, load_actor(actor_path), load_critic(critic_path, checkpointing))
        trained = {"critic": trainer.critic}

    accelerator = runtime.accelerator
    first_step = 0
    checkpoint = latest_checkpoint(stage_dir) if resume else None
    if checkpoint is not None:
        first_step = load_checkpoint(accelerator, checkpoint)
        accelerator.print(f"{stage.name}: resuming from {checkpoint} (step {first_step})")
    if accelerator.is_main_process:
        stage_dir.mkdir(parents=True, exist_ok=True)
        (stage_dir / "stage_config.json").write_text(json.dumps(
            {"stage": stage.name, "actor_from": str(actor_path), "critic_from": str(critic_path),
             "config": config.to_dict()}, indent=2, default=str))
    try:
        summary = trainer.train(first_step, save=lambda step: save_checkpoint(accelerator, stage_dir, step))
        export_final(accelerator, stage_dir, tokenizer, summary=summary, **trained)
    finally:
        runtime.close()
    return summary


def run_pipeline(config: TrainConfig, only_stage: str | None = None, resume: bool = True) -> dict[str, dict]:
    """Runs the configured stages in order; returns each run stage's last metrics. With
    `only_stage`, runs just that one, from whatever earlier stages have finished."""
    transformers_logging.disable_progress_bar()
    if only_stage is not None and only_stage not in [s.name for s in config.stages]:
        raise ValueError(f"stage {only_stage!r} is not in the config; it lists {[s.name for s in config.stages]}")
    actor_path = base_model_path(config)
    critic_path = Path(config.critic_model) if config.critic_model else actor_path
    summaries = {}
    for index, stage in enumerate(config.stages):
        stage_dir = stage_dir_for(config, index, stage)
        selected = only_stage is None or stage.name == only_stage
        if selected and not stage_is_done(stage_dir):
            summaries[stage.name] = run_stage(config, stage, stage_dir, actor_path, critic_path, resume)
        if not stage_is_done(stage_dir):
            continue
        trained_actor, trained_critic = final_model_paths(stage_dir)
        actor_path = trained_actor or actor_path
        critic_path = trained_critic or critic_path
    if torch.distributed.is_initialized():
        # Leave together: a process that exits while another still uses the process group
        # can abort it.
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return summaries

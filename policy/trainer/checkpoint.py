"""A stage's files: resumable checkpoints (accelerate's full state: models, optimizers, RNGs, plus
the step) under <stage>/checkpoints/, and the final models under <stage>/final/, which is what
the next stage starts from.

A checkpoint is written under a temporary name and renamed once whole, so a run killed while
saving leaves the previous checkpoint as the latest; resume never loads half of one."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

FINAL_MARKER = "stage_done.json"
TRAINER_STATE = "trainer_state.json"
CHECKPOINT_NAME = re.compile(r"step-(\d+)")
# Every process writes its part (its RNG states) into the one directory, so the temporary name is
# the same for all of them rather than carrying a pid.
TEMPORARY_SUFFIX = ".tmp"


def checkpoint_dirs(stage_dir: Path) -> list[Path]:
    found = [(int(match[1]), path) for path in (stage_dir / "checkpoints").glob("step-*")
             if (match := CHECKPOINT_NAME.fullmatch(path.name)) and (path / TRAINER_STATE).exists()]
    return [path for _, path in sorted(found)]


def latest_checkpoint(stage_dir: Path) -> Path | None:
    existing = checkpoint_dirs(stage_dir)
    return existing[-1] if existing else None


def save_checkpoint(accelerator, stage_dir: Path, step: int, keep_last: int = 2) -> Path:
    """Everything needed to continue at `step`; older checkpoints beyond `keep_last` are removed
    (each holds optimizer states, twice the models' size)."""
    path = stage_dir / "checkpoints" / f"step-{step:06d}"
    temporary = path.with_name(path.name + TEMPORARY_SUFFIX)
    if accelerator.is_main_process:
        for leftover in path.parent.glob(f"*{TEMPORARY_SUFFIX}"):  # from a run killed while saving
            shutil.rmtree(leftover, ignore_errors=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(temporary))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        (temporary / TRAINER_STATE).write_text(json.dumps({"step": step}))
        shutil.rmtree(path, ignore_errors=True)  # this step saved before, by a run resumed earlier
        os.replace(temporary, path)
        for old in checkpoint_dirs(stage_dir)[:-keep_last]:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return path


def load_checkpoint(accelerator, path: Path) -> int:
    """Restores the state saved at `path`; returns the number of steps already done."""
    accelerator.load_state(str(path))
    return json.loads((path / TRAINER_STATE).read_text())["step"]


def export_final(accelerator, stage_dir: Path, tokenizer, actor=None, critic=None, summary=None) -> Path:
    """Writes the stage's trained models in transformers format (loadable without this code's
    checkpoint layout) and marks the stage done."""
    final_dir = stage_dir / "final"
    for name, model in (("actor", actor), ("critic", critic)):
        if model is None:
            continue
        state_dict = accelerator.get_state_dict(model)
        if accelerator.is_main_process:
            unwrapped = accelerator.unwrap_model(model)
            unwrapped.save_pretrained(final_dir / name, state_dict=state_dict)
            tokenizer.save_pretrained(final_dir / name)
    if accelerator.is_main_process:
        (final_dir / FINAL_MARKER).write_text(json.dumps(summary or {}, indent=2, default=float))
    accelerator.wait_for_everyone()
    return final_dir


def stage_is_done(stage_dir: Path) -> bool:
    return (stage_dir / "final" / FINAL_MARKER).exists()


def final_model_paths(stage_dir: Path) -> tuple[Path | None, Path | None]:
    """(actor, critic) directories the finished stage wrote; None for the ones it did not train."""
    final_dir = stage_dir / "final"
    return tuple((final_dir / name) if (final_dir / name).exists() else None for name in ("actor", "critic"))

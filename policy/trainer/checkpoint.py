"""A stage's files: resumable checkpoints (accelerate's full state: models, optimizers, RNGs, plus
the step) under <stage>/checkpoints/, and the final models under <stage>/final/, which is what
the next stage starts from."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

FINAL_MARKER = "stage_done.json"
TRAINER_STATE = "trainer_state.json"


def checkpoint_dirs(stage_dir: Path) -> list[Path]:
    found = (stage_dir / "checkpoints").glob("step-*")
    return sorted((p for p in found if (p / TRAINER_STATE).exists()), key=lambda p: int(p.name[5:]))


def latest_checkpoint(stage_dir: Path) -> Path | None:
    existing = checkpoint_dirs(stage_dir)
    return existing[-1] if existing else None


def save_checkpoint(accelerator, stage_dir: Path, step: int, keep_last: int = 2) -> Path:
    """Everything needed to continue at `step`; older checkpoints beyond `keep_last` are removed
    (each holds optimizer states, twice the models' size)."""
    path = stage_dir / "checkpoints" / f"step-{step:06d}"
    accelerator.save_state(str(path))
    if accelerator.is_main_process:
        (path / TRAINER_STATE).write_text(json.dumps({"step": step}))
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

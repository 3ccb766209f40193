"""Shared pieces for the trainer tests: the tiny model and a StageRuntime around a toy
environment, built without a YAML config."""

from __future__ import annotations

import pytest
import torch
from accelerate import Accelerator

from policy.tiny_model import build_tiny_model_and_tokenizer
from policy.trainer.config import RolloutConfig
from policy.trainer.metrics import MetricsLogger
from policy.trainer.rewards import InlineScorer
from policy.trainer.runtime import StageRuntime


@pytest.fixture(autouse=True)
def one_torch_thread():
    """The tiny model's ops are too small to split across threads; on the shared 2-core CI
    machine two threads per op made a PPO step ten times slower than one."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_pair():
    return build_tiny_model_and_tokenizer(hidden_size=64, layers=2, seed=0)


@pytest.fixture
def make_runtime():
    """StageRuntime(tmp_path, tokenizer, environment, accumulation_steps=1, max_new_tokens=6)."""
    return _make_runtime


def _make_runtime(tmp_path, tokenizer, environment, accumulation_steps=1, max_new_tokens=6, stage="test",
                  mixed_precision="no"):
    accelerator = Accelerator(gradient_accumulation_steps=accumulation_steps, mixed_precision=mixed_precision)
    return StageRuntime(
        stage_name=stage,
        stage_dir=tmp_path,
        accelerator=accelerator,
        tokenizer=tokenizer,
        environment=environment,
        scorer=InlineScorer(environment),
        logger=MetricsLogger(tmp_path, stage, tensorboard=False),
        rollout_config=RolloutConfig(max_new_tokens=max_new_tokens, max_total_tokens=256),
        seed=0,
        save_every=10_000,
        progress=False,
    )

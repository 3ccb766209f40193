"""The trainer on a CUDA GPU: bf16 mixed precision through accelerate, learning still works, the
sampler agrees with the trainer, and the throughput benchmark runs (timings are its output, not
asserted here)."""

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
from accelerate.utils import set_seed

from policy.tiny_model import build_tiny_model_and_tokenizer
from policy.trainer.environments import TargetTokenEnvironment
from policy.trainer.metrics import read_metrics
from policy.trainer.ppo import PPOConfig, PPOTrainer
from policy.trainer.value_model import ValueModel

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]


def test_bf16_ppo_on_gpu_learns_and_sampler_agrees(tmp_path, make_runtime):
    # Under bf16 on an H100 the reward climbs more slowly than the fp32 CPU run of
    # test_learning.py (one H100 run: 0.375, 0.19, 0.19, 0.47, ... at the start and still
    # 0.81-0.91 at steps 14-16, where the CPU run is above 0.9). So: 32 steps, and the test asks
    # for a clear rise from chance (~0.3 on this task) to a high level rather than a near-perfect
    # score at a fixed step. A trainer that does not learn stays near 0.3 and fails; each mean
    # covers 4 x 32 episodes, so its sampling noise is about 0.04, well inside the margins.
    set_seed(0)
    model, tokenizer = build_tiny_model_and_tokenizer()
    config = PPOConfig(steps=32, tasks_per_step=32, minibatch_size=16, micro_batch_size=8, ppo_epochs=2,
                       actor_lr=3e-3, critic_lr=1e-3, kl_coef=0.0)
    runtime = make_runtime(tmp_path, tokenizer, TargetTokenEnvironment(), config.accumulation_steps,
                           mixed_precision="bf16")
    trainer = PPOTrainer(config, runtime, model, ValueModel.from_causal_lm(model), copy.deepcopy(model))
    assert trainer.accelerator.device.type == "cuda"
    trainer.train(0, save=None)
    records = read_metrics(tmp_path / "metrics.jsonl")
    rewards = [r["reward_mean"] for r in records]
    print("bf16 PPO reward curve:", [round(r, 3) for r in rewards])
    start, end = sum(rewards[:4]) / 4, sum(rewards[-4:]) / 4
    assert start < 0.5, rewards  # the random model is at chance
    assert end > 0.75 and end - start > 0.35, rewards
    # Generation runs on the fp32 weights, the trainer's pass under bf16 autocast: close, not equal.
    assert max(r["sampler_logprob_gap"] for r in records) < 0.1


def test_ppo_throughput_benchmark_runs_on_gpu(tmp_path):
    output = tmp_path / "ppo.json"
    subprocess.run([sys.executable, "-m", "experiments.ppo_throughput", "--impl", "cuda-agent", "--hidden", "256",
                    "--layers", "4", "--batch", "16", "--prompt", "64", "--response", "64", "--minibatch", "8",
                    "--micro", "4", "--iterations", "2", "--json", str(output)], cwd=REPO, check=True)
    (record,) = json.loads(output.read_text())["records"]
    assert record["tokens_per_s"] > 0 and record["peak_memory_gib"] > 0

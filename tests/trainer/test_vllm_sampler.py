"""`rollout.engine: vllm` without vLLM installed: a stand-in `vllm` module records what the
trainer hands it. Every collection must first push the actor's current weights (the ones the
coming update starts from), and the episodes must be the engine's answers."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from policy.tiny_model import build_tiny_model_and_tokenizer
from policy.trainer.config import TrainConfig, from_dict
from policy.trainer.metrics import read_metrics
from policy.trainer.ppo import PPOTrainer
from policy.trainer.stages import run_pipeline


class StandInLLM:
    """vllm.LLM's surface the trainer uses: generate, apply_model, reset_prefix_cache."""

    built: list = []

    def __init__(self, model, **options):
        self.model_path, self.options = model, options
        self.pushed: list[dict[str, torch.Tensor]] = []
        self.cache_resets = 0
        self.requests: list = []
        _, self.tokenizer = build_tiny_model_and_tokenizer()
        self.llm_engine = types.SimpleNamespace(model_config=types.SimpleNamespace(max_model_len=4096))
        StandInLLM.built.append(self)

    def get_tokenizer(self):
        return self.tokenizer

    def apply_model(self, function):
        pushed = self.pushed

        class VLLMModel:
            def load_weights(self, weights):
                pushed.append({name: tensor.clone() for name, tensor in weights})

        return [function(VLLMModel())]

    def reset_prefix_cache(self):
        self.cache_resets += 1

    def generate(self, prompts, params, use_tqdm):
        self.requests.append((prompts, [p.options for p in params]))
        # Always "7" then end of turn: the target-token task pays 1 for it.
        answer = self.tokenizer.encode("7", add_special_tokens=False) + [self.tokenizer.eos_token_id]

        def step(token):
            return {token: types.SimpleNamespace(logprob=-0.5)}

        completion = types.SimpleNamespace(token_ids=tuple(answer), text="7", finish_reason="stop",
                                           logprobs=[step(t) for t in answer])
        return [types.SimpleNamespace(outputs=[completion]) for _ in prompts]


class StandInParams:
    def __init__(self, **options):
        self.options = options


@pytest.fixture
def stand_in_vllm(monkeypatch):
    StandInLLM.built = []
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=StandInLLM, SamplingParams=StandInParams))
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def test_weights_are_pushed_before_every_collection_and_answers_come_from_vllm(tmp_path, stand_in_vllm, monkeypatch):
    after_each_step = []
    original_step = PPOTrainer.step

    def recording_step(self, rollouts):
        result = original_step(self, rollouts)
        after_each_step.append({k: v.detach().clone() for k, v in self.accelerator.unwrap_model(self.actor).state_dict().items()})
        return result

    monkeypatch.setattr(PPOTrainer, "step", recording_step)
    config = from_dict(TrainConfig, {
        "output_dir": str(tmp_path / "run"), "model": "tiny", "tensorboard": False, "progress": False,
        "stages": [{"name": "ppo-single-turn", "environment": {"kind": "target-token"},
                    "rollout": {"max_new_tokens": 6, "max_total_tokens": 128, "engine": "vllm",
                                "vllm_options": {"gpu_memory_utilization": 0.3}},
                    "ppo": {"steps": 3, "tasks_per_step": 8, "minibatch_size": 8, "micro_batch_size": 4,
                            "actor_lr": 1e-2, "kl_coef": 0.0}}],
    }, "test")
    run_pipeline(config)

    (llm,) = StandInLLM.built  # one engine for the stage
    assert llm.model_path == str(tmp_path / "run" / "base-model")
    assert llm.options == {"gpu_memory_utilization": 0.3}
    assert len(llm.pushed) == 3 and llm.cache_resets == 3
    base, _ = build_tiny_model_and_tokenizer()
    base_state = base.state_dict()
    # Push 0: the starting weights; push k: the weights after update k-1, which changed them.
    assert all(torch.equal(llm.pushed[0][name], base_state[name]) for name in base_state)
    for k in (1, 2):
        assert all(torch.equal(llm.pushed[k][name], after_each_step[k - 1][name]) for name in base_state)
        assert not all(torch.equal(llm.pushed[k][name], llm.pushed[k - 1][name]) for name in base_state)
    # The episodes are vLLM's answers: every one pays 1 (a random tiny model scores ~0.3).
    assert [r["reward_mean"] for r in read_metrics(tmp_path / "run" / "00-ppo-single-turn" / "metrics.jsonl")] == [1.0] * 3
    prompts, params = llm.requests[0]
    assert len(prompts) == 8 and all(p["prompt_token_ids"] for p in prompts)
    eos = llm.tokenizer.eos_token_id
    assert params[0] == {"max_tokens": 6, "temperature": 1.0, "top_p": 1.0, "seed": None, "logprobs": 1,
                         "stop_token_ids": [eos]}


def test_unknown_rollout_engine_is_refused():
    with pytest.raises(ValueError, match="in-process or vllm"):
        from_dict(TrainConfig, {"stages": [{"name": "rft", "rollout": {"engine": "sglang"}}]}, "test")

"""Rollouts from vLLM inside the trainer's process (`rollout.engine: vllm`): one `vllm.LLM` per
stage, built from the stage's starting model, with the actor's current weights pushed into it in
place before every collection, so each step samples from the policy it is about to update. The
lockstep episodes use `generate`; the agent loop drives `engine` (policy.engines.VLLMEngine)."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from .generation import Completion


class VLLMSampler:
    def __init__(self, model_path: str | Path, temperature: float, eos_token_id: int, max_batch: int = 256,
                 llm_options: dict | None = None):
        from policy.engines import SamplingConfig, VLLMEngine

        # The engine core in this process (vLLM's V1 engine otherwise runs it in a child): the
        # weight push then hands tensors over without serialising them. Set before the LLM exists.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        # Plain temperature sampling, as the in-process sampler: PPO optimises this distribution.
        # stop_token_ids: the end-of-turn marker ends an answer even if the model's config names
        # another end-of-sequence token.
        sampling = SamplingConfig(temperature=temperature, extra={"stop_token_ids": [eos_token_id]})
        self.engine = VLLMEngine(str(model_path), sampling, max_batch=max_batch, **(llm_options or {}))
        self.eos_token_id = eos_token_id
        self.pushes = 0

    def push_weights(self, model: torch.nn.Module) -> None:
        """Loads `model`'s current parameters (transformers names) into the vLLM model in place;
        vLLM's `load_weights` maps them onto its fused layers. Cached prefixes were computed with
        the old weights, so the cache is reset."""
        weights = [(name, tensor.detach()) for name, tensor in model.state_dict().items()]
        llm = self.engine.llm
        llm.apply_model(lambda vllm_model: vllm_model.load_weights(weights))
        if hasattr(llm, "reset_prefix_cache"):
            llm.reset_prefix_cache()
        self.pushes += 1

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], max_new_tokens: int) -> list[Completion]:
        from policy.engines import GenerationRequest

        generations = self.engine.generate_batch(
            [GenerationRequest([], max_new_tokens, prompt_ids=prompt) for prompt in prompts])
        completions = []
        for generation in generations:
            ids = list(generation.token_ids or [])
            # vLLM reports log-probs of its own (untempered) distribution; the trainer recomputes
            # the old log-probs itself, so these only feed the sampler_logprob_gap metric.
            logprobs = list(generation.logprobs or [0.0] * len(ids))
            completions.append(Completion(ids, logprobs, finished=generation.finish_reason == "stop"))
        return completions

    def close(self) -> None:
        self.engine.close()

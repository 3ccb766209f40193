"""In-process sampling from the actor with the log-prob of every sampled token. Sampling is plain
temperature sampling (no top-k/top-p) so the sampler's distribution is the one PPO optimises."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .core import token_logprobs


@dataclass
class Completion:
    token_ids: list[int]
    logprobs: list[float]
    # True when the model ended its turn (emitted end-of-turn) within the token budget.
    finished: bool


@dataclass
class InProcessGenerator:
    """Generates with the (unwrapped) actor itself: what the CPU runs and what a single-GPU run
    without vLLM uses. `model` is read at each call, so updated weights are used at once."""

    model: torch.nn.Module
    pad_token_id: int
    eos_token_id: int
    temperature: float = 1.0
    batch_size: int = 64

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], max_new_tokens: int) -> list[Completion]:
        completions: list[Completion] = []
        for start in range(0, len(prompts), self.batch_size):
            completions += self._generate_chunk(prompts[start : start + self.batch_size], max_new_tokens)
        return completions

    def _generate_chunk(self, prompts: list[list[int]], max_new_tokens: int) -> list[Completion]:
        device = next(self.model.parameters()).device
        width = max(len(p) for p in prompts)
        # Left padding lines the prompts up at the right edge, where generation continues.
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        for row, prompt in enumerate(prompts):
            input_ids[row, width - len(prompt) :] = torch.tensor(prompt)
            attention_mask[row, width - len(prompt) :] = 1
        was_training = self.model.training
        self.model.eval()
        output = self.model.generate(
            input_ids=input_ids.to(device),
            attention_mask=attention_mask.to(device),
            max_new_tokens=max_new_tokens,
            do_sample=True,
            temperature=self.temperature,
            top_k=0,
            top_p=1.0,
            pad_token_id=self.pad_token_id,
            eos_token_id=self.eos_token_id,
            output_logits=True,
            return_dict_in_generate=True,
        )
        self.model.train(was_training)
        new_tokens = output.sequences[:, width:]
        logits = torch.stack(output.logits, dim=1)
        logprobs = token_logprobs(logits, new_tokens, self.temperature)
        completions = []
        for row in range(len(prompts)):
            ids = new_tokens[row].tolist()
            finished = self.eos_token_id in ids
            keep = ids.index(self.eos_token_id) + 1 if finished else len(ids)
            completions.append(Completion(ids[:keep], logprobs[row, :keep].tolist(), finished))
        return completions

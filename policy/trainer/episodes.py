"""Runs a batch of episodes in lockstep (one batched generation per turn) and records each as a
Rollout: the exact token ids the model saw, with its own tokens marked. Tool messages and the
chat template's glue are appended as tokens the model did not write."""

from __future__ import annotations

from dataclasses import dataclass, field

from .environments import Environment, Task
from .generation import Completion
from .rollout import Rollout


@dataclass
class _EpisodeState:
    task: Task
    messages: list[dict]
    token_ids: list[int]
    action_mask: list[int]
    sampler_logprobs: list[float]
    assistant_turns: list[str] = field(default_factory=list)
    invalid_tool_calls: int = 0
    truncated: bool = False
    done: bool = False

    def append(self, token_ids: list[int], generated: bool, logprobs: list[float] | None = None):
        self.token_ids += token_ids
        self.action_mask += [int(generated)] * len(token_ids)
        self.sampler_logprobs += logprobs if logprobs is not None else [0.0] * len(token_ids)


def continuation_after_turn(tokenizer, messages: list[dict], reply: dict) -> str:
    """The text the chat template puts between the end-of-turn token the model emitted and the
    start of its next turn: the template's separator, the tool message and the generation
    prompt. Taken as a difference of two renderings so any Qwen-style template works."""
    before = tokenizer.apply_chat_template(messages, tokenize=False)
    after = tokenizer.apply_chat_template(messages + [reply], tokenize=False, add_generation_prompt=True)
    end_of_turn = tokenizer.eos_token
    cut = before.rfind(end_of_turn) + len(end_of_turn)
    if not after.startswith(before[:cut]):
        raise ValueError(
            "the chat template re-renders earlier turns differently once a message is added, so a "
            "multi-turn episode cannot be kept as one token sequence; use a template that only appends"
        )
    return after[cut:]


def collect_rollouts(
    generator,
    tokenizer,
    environment: Environment,
    tasks: list[Task],
    scorer,
    max_new_tokens: int,
    max_total_tokens: int,
) -> list[Rollout]:
    """One episode per task. An episode ends when the environment has no reply, the model stops
    without ending its turn (token budget), or the sequence reaches `max_total_tokens`; it is
    submitted to `scorer` the moment it ends."""
    states = []
    for task in tasks:
        prompt_ids = tokenizer.apply_chat_template(task.messages, add_generation_prompt=True, tokenize=True)
        prompt_ids = list(prompt_ids["input_ids"] if hasattr(prompt_ids, "keys") else prompt_ids)
        states.append(_EpisodeState(task, list(task.messages), [], [], []))
        states[-1].append(prompt_ids, generated=False)
    rollouts: dict[int, Rollout] = {}
    for _turn in range(environment.max_turns):
        active = [index for index, state in enumerate(states) if not state.done]
        if not active:
            break
        completions: list[Completion] = generator.generate(
            [states[index].token_ids for index in active], max_new_tokens
        )
        for index, completion in zip(active, completions, strict=True):
            state = states[index]
            text = tokenizer.decode(completion.token_ids, skip_special_tokens=True)
            state.append(completion.token_ids, generated=True, logprobs=completion.logprobs)
            state.assistant_turns.append(text)
            state.messages.append({"role": "assistant", "content": text})
            reply = None
            if completion.finished and len(state.token_ids) < max_total_tokens:
                reply = environment.reply(state.task, state.assistant_turns)
            else:
                state.truncated = True
            if reply is not None:
                state.invalid_tool_calls += int(reply.invalid_tool_call)
                glue = continuation_after_turn(tokenizer, state.messages, reply.message)
                state.append(tokenizer(glue, add_special_tokens=False)["input_ids"], generated=False)
                state.messages.append(reply.message)
                if len(state.token_ids) >= max_total_tokens:
                    state.truncated = True
                    reply = None
            if reply is None:
                state.done = True
                rollouts[index] = _finish(state, scorer)
    for index, state in enumerate(states):
        if not state.done:  # out of turns while the environment still had a reply
            state.truncated = True
            rollouts[index] = _finish(state, scorer)
    return [rollouts[index] for index in range(len(states))]


def _finish(state: _EpisodeState, scorer) -> Rollout:
    return Rollout(
        task_id=state.task.task_id,
        token_ids=state.token_ids,
        action_mask=state.action_mask,
        sampler_logprobs=state.sampler_logprobs,
        assistant_turns=state.assistant_turns,
        invalid_tool_calls=state.invalid_tool_calls,
        truncated=state.truncated,
        reward_future=scorer.submit(state.task, state.assistant_turns),
    )

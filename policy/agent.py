"""The ReAct loop: the model replies, its tool calls run, their results come back, until it calls
`finish` or a budget ends the episode (turns, context tokens, wall clock). Every step goes to the
trajectory record; the token view (ids, which came from the model, logprobs) is kept alongside
for the trainer, and the final workspace is evaluated for the reward."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

from pytest_cudaagent import Result

from .chat import ChatTokenizer, estimate_tokens
from .engines import Engine, Generation, GenerationRequest
from .toolcalls import FORMAT_HINT, parse_tool_calls
from .tools import Toolbox, shorten_text
from .trajectory import TokenSequence, TrainingEpisode, TrajectoryWriter


@dataclass
class AgentConfig:
    max_turns: int = 200  # the paper's evaluation limit (150 in training)
    max_context_tokens: int = 131072  # the paper's 128k; the model's own limit applies if lower
    max_new_tokens: int = 8192  # per reply; less when the context has less room
    wall_clock_s: float = 7200.0
    # Near the budget, old tool output (then old replies) is shortened before anything is lost.
    shorten_at: float = 0.8
    keep_recent_messages: int = 4  # the newest messages are never shortened
    shortened_chars: int = 400
    min_new_tokens: int = 32  # with less room than this, the episode ends for "context"
    reuse_profile_result: bool = True  # final reward = last profile's when no file changed since


@dataclass
class EpisodeOutcome:
    problem: Path
    sample: int
    workspace: Path
    stop_reason: str
    turns: int
    result: Result  # the final workspace's evaluation
    training: TrainingEpisode
    trajectory: Path
    wall_s: float

    @property
    def reward(self) -> float:
        return self.result.reward


def system_prompt(toolbox: Toolbox) -> str:
    lines = ["You are an expert GPU kernel engineer. You work in a workspace directory through tools; "
             "read SKILL.md there first: it has the rules and an optimisation playbook.", "", "Tools:"]
    for spec in toolbox.specs:
        arguments = ", ".join(f"{name}{'' if name in spec.required else '?'}: {schema['type']}"
                              for name, schema in spec.parameters.items())
        lines.append(f"- {spec.name}({arguments}): {spec.description}")
    lines += ["", FORMAT_HINT, "You may make several calls in one reply; each result comes back as a "
              "tool message. Reason briefly, then act. Call finish when profile shows the goal or you "
              "cannot improve further."]
    return "\n".join(lines)


def task_prompt(toolbox: Toolbox) -> str:
    workspace = toolbox.workspace
    kernels = ("CUDA kernels in kernels/*.cu" if workspace.device == "cuda"
               else "C++ kernels in kernels/*.cpp (this is the CPU backend: no CUDA)")
    reference = (workspace.root / "model.py").read_text()
    return (f"Write model_new.py with class ModelNew, computing exactly what Model in model.py computes "
            f"using your own {kernels} and a kernels/<name>_binding.cpp for each. Goal: pass verify "
            f"and be more than 5% faster than torch.compile.\n\nmodel.py:\n```python\n{reference}\n```")


class Agent:
    def __init__(self, engine: Engine, config: AgentConfig | None = None):
        self.engine = engine
        self.config = config or AgentConfig()
        self.chat = ChatTokenizer(engine.tokenizer) if engine.tokenizer is not None else None
        limits = [self.config.max_context_tokens, engine.max_context_tokens]
        self.context_budget = min(limit for limit in limits if limit)

    def run(self, toolbox: Toolbox, writer: TrajectoryWriter, sample: int = 0) -> EpisodeOutcome:
        return _Episode(self, toolbox, writer, sample).run()


class _Episode:
    """The state of one run of the loop."""

    def __init__(self, agent: Agent, toolbox: Toolbox, writer: TrajectoryWriter, sample: int):
        self.agent, self.config, self.chat = agent, agent.config, agent.chat
        self.toolbox, self.writer, self.sample = toolbox, writer, sample
        self.workspace = toolbox.workspace
        self.messages: list[dict] = []
        self.sequences: list[TokenSequence] = []
        self.turn = 0
        self.last_profile: tuple[str, Result] | None = None  # (workspace fingerprint, Result)

    def run(self) -> EpisodeOutcome:
        started = time.monotonic()
        self.writer.event("start", problem=str(self.workspace.problem), sample=self.sample,
                          engine=self.agent.engine.name, device=self.workspace.device,
                          workspace=str(self.workspace.root), config=asdict(self.config),
                          context_budget=self.agent.context_budget)
        self._add_messages([{"role": "system", "content": system_prompt(self.toolbox)},
                            {"role": "user", "content": task_prompt(self.toolbox)}], first=True)
        stop_reason = self._loop(started + self.config.wall_clock_s)
        result = self._final_result()
        wall_s = time.monotonic() - started
        training = TrainingEpisode(self.workspace.problem.stem, self.sample, self.sequences, result.reward,
                                   stop_reason, self.turn)
        self.writer.event("end", stop_reason=stop_reason, reward=result.reward, turns=self.turn,
                          wall_s=round(wall_s, 3), result=result.to_dict(), training=training.to_dict())
        return EpisodeOutcome(self.workspace.problem, self.sample, self.workspace.root, stop_reason, self.turn,
                              result, training, self.writer.path, wall_s)

    def _loop(self, deadline: float) -> str:
        while True:
            if self.turn >= self.config.max_turns:
                return "turns"
            if time.monotonic() > deadline:
                return "wall_clock"
            room = self._room_for_reply()
            if room < self.config.min_new_tokens:
                return "context"
            request = GenerationRequest(
                self.messages, min(self.config.max_new_tokens, room),
                prompt_ids=self.sequences[-1].token_ids if self.agent.engine.takes_token_ids else None,
                problem=self.workspace.problem.stem)
            try:
                generation = self.agent.engine.generate(request)
            except Exception as error:  # an engine failure ends this episode, not the whole run
                self.writer.event("engine_error", turn=self.turn, error=f"{type(error).__name__}: {error}")
                return "engine_error"
            self.turn += 1
            if self._act(self._add_reply(generation)):
                return "finish"

    # -- context ----------------------------------------------------------------------------------

    def _used_tokens(self) -> int:
        return len(self.sequences[-1]) if self.chat else estimate_tokens(self.messages)

    def _room_for_reply(self) -> int:
        budget = self.agent.context_budget
        if self._used_tokens() > self.config.shorten_at * budget:
            shortened = self._shorten_old_messages()
            if shortened:
                self.writer.event("shortened", turn=self.turn, messages=shortened)
                if self.chat:  # the context changed: a new sequence, as the model will now see it
                    self.sequences.append(TokenSequence())
                    self.sequences[-1].append(self.chat.prompt_ids(self.messages), from_model=False)
        return budget - self._used_tokens()

    def _shorten_old_messages(self) -> list[int]:
        """Shorten old tool results first; only when none is left, old replies. The indices cut."""
        old = range(2, max(len(self.messages) - self.config.keep_recent_messages, 2))
        limit = self.config.shortened_chars
        for role in ("tool", "assistant"):
            cut = [i for i in old if self.messages[i]["role"] == role
                   and len(self.messages[i]["content"]) > limit + 100]  # not worth it below this
            for index in cut:
                message = self.messages[index]
                self.messages[index] = {**message, "content": shorten_text(message["content"], limit)}
            if cut:
                return cut
        return []

    # -- one turn ---------------------------------------------------------------------------------

    def _add_reply(self, generation: Generation) -> str:
        """Record the model's reply; the text as it goes into the conversation."""
        text = generation.text
        tokens = None
        if self.chat:
            sequence = self.sequences[-1]
            if generation.token_ids is not None:
                sequence.append(generation.token_ids, from_model=True, logprobs=generation.logprobs)
                tokens = len(generation.token_ids)
            else:  # a chat engine: the reply's tokens as this tokenizer writes them, with end of turn
                eos = self.chat.tokenizer.eos_token or ""
                text_with_end = text + (eos if eos and self.chat.turn_suffix.startswith(eos) else "")
                model_ids = self.chat.encode(text_with_end)
                sequence.append(model_ids, from_model=True)
                tokens = len(model_ids)
                text = text_with_end
            sequence.append(self.chat.turn_end_ids(text), from_model=False)
            text = _strip_turn_end(text, self.chat.turn_suffix)
        content = text
        self.messages.append({"role": "assistant", "content": content})
        self.writer.event("message", role="assistant", content=content, turn=self.turn, tokens=tokens,
                          finish_reason=generation.finish_reason)
        return content

    def _act(self, reply: str) -> bool:
        """Run the reply's tool calls; True when the model called finish."""
        parsed = parse_tool_calls(reply)
        results: list[dict] = []
        for call in parsed.calls:
            self.writer.event("tool_call", turn=self.turn, name=call.name, arguments=call.arguments)
            outcome = self.toolbox.call(call)
            result = outcome.result
            if call.name == "profile" and result is not None and result.passed:
                self.last_profile = (self.workspace.fingerprint(), result)
            self.writer.event("tool_result", turn=self.turn, name=call.name, text=outcome.text, error=outcome.error,
                              reward=result.reward if result else None,
                              result=result.to_dict() if result else None)
            if outcome.finished:
                return True
            results.append({"role": "tool", "name": call.name, "content": outcome.text})
        if parsed.errors:
            self.writer.event("parse_error", turn=self.turn, errors=parsed.errors)
            results.append({"role": "tool", "name": "tool_call_parser", "content": "\n".join(parsed.errors)})
        if not parsed.calls and not parsed.errors:
            results.append({"role": "tool", "name": "tool_call_parser",
                            "content": f"no tool call in your reply. {FORMAT_HINT} Call finish when you are done."})
        self._add_messages(results)
        return False

    def _add_messages(self, messages: list[dict], first: bool = False) -> None:
        self.messages += messages
        if self.chat:
            if first:
                self.sequences.append(TokenSequence())
                ids = self.chat.prompt_ids(self.messages)
            else:
                ids = self.chat.continuation_ids(messages)
            self.sequences[-1].append(ids, from_model=False)
        for message in messages:
            self.writer.event("message", turn=self.turn, **message)

    # -- reward -----------------------------------------------------------------------------------

    def _final_result(self) -> Result:
        # The last profile already judged these exact files: timing them again would only add noise
        # and GPU time. Any change since (a write, a command) means a fresh evaluation.
        if self.config.reuse_profile_result and self.last_profile is not None:
            fingerprint, result = self.last_profile
            if fingerprint == self.workspace.fingerprint():
                return result
        return self.toolbox.evaluate_final()


def _strip_turn_end(text: str, turn_suffix: str) -> str:
    """The reply without the end-of-turn marker the model generated (the template adds it)."""
    for length in range(len(turn_suffix), 0, -1):
        if text.endswith(turn_suffix[:length]):
            return text[: len(text) - length]
    return text

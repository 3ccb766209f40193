"""The ReAct loop: token records that match the chat template exactly, feedback on malformed or
missing tool calls, context shortening, budgets, and a random tiny model driving whole episodes."""

import json
from pathlib import Path

import pytest

from policy.agent import Agent, AgentConfig
from policy.chat import ChatTokenizer
from policy.engines import Engine, Generation, SamplingConfig, TransformersEngine
from policy.evaluation_pool import EvaluationPool
from policy.solve import SolveConfig, solve
from policy.tiny_model import build_tiny_model_and_tokenizer
from policy.toolcalls import format_tool_call
from policy.tools import Toolbox, ToolboxConfig
from policy.trajectory import TrajectoryWriter, read_events, read_training_episode
from pytest_cudaagent import EvalConfig, Result

PROBLEM = Path(__file__).parents[2] / "examples" / "problems" / "leaky_relu.py"


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_model_and_tokenizer()


class ReplayTokenEngine(Engine):
    """A token engine that 'generates' fixed replies, ending each with the end-of-turn token."""

    name = "replay"
    takes_token_ids = True

    def __init__(self, tokenizer, replies, fail_at=None):
        self.tokenizer = tokenizer
        self.replies = list(replies)
        self.prompts = []
        self.fail_at = fail_at

    def generate(self, request):
        if len(self.prompts) == self.fail_at:
            raise RuntimeError("server went away")
        self.prompts.append(list(request.prompt_ids))
        text = self.replies.pop(0) if self.replies else format_tool_call("finish", {})
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return Generation(self.tokenizer.decode(ids, skip_special_tokens=False), ids, [-0.5] * len(ids))


def run_episode(tmp_path, engine, config=None, pool=None):
    from policy.workspace import Workspace

    workspace = Workspace.create(PROBLEM, tmp_path / "ws", "cpu")
    pool = pool or EvaluationPool("cpu")
    toolbox = Toolbox(workspace, pool, ToolboxConfig(EvalConfig(device="cpu")))
    writer = TrajectoryWriter(tmp_path / "episode.jsonl")
    try:
        return Agent(engine, config or AgentConfig(max_turns=10)).run(toolbox, writer, sample=0)
    finally:
        writer.close()
        pool.close()


def test_token_record_is_exactly_the_rendered_conversation(tmp_path, tiny):
    _, tokenizer = tiny
    replies = [
        "Look first. " + format_tool_call("list_files", {"path": "kernels"}),
        "I forgot the format.",
        '<tool_call>{"name": "read_file", "arguments": {"path": </tool_call>',
        format_tool_call("write_file", {"path": "notes.txt", "content": "plan: fuse"}),
    ]
    engine = ReplayTokenEngine(tokenizer, replies)
    outcome = run_episode(tmp_path, engine)
    assert outcome.stop_reason == "finish" and outcome.turns == 5
    assert (outcome.workspace / "notes.txt").read_text() == "plan: fuse"

    events = read_events(outcome.trajectory)
    messages = [{k: e[k] for k in ("role", "content", "name") if k in e} for e in events if e["event"] == "message"]
    tool_texts = [m["content"] for m in messages if m["role"] == "tool"]
    assert tool_texts[0] == "no files" or tool_texts[0].startswith("kernels")
    assert "no tool call in your reply" in tool_texts[1]
    assert "invalid JSON" in tool_texts[2]
    [sequence] = outcome.training.sequences
    chat = ChatTokenizer(tokenizer)
    # The context the engine saw before its last reply is the template's rendering of every message so far.
    decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=False)  # noqa: E731
    assert decode(engine.prompts[-1]) == chat.render(messages[:-1], add_generation_prompt=True)
    # ... and the whole record, final reply included, is the rendering of the whole conversation.
    assert decode(sequence.token_ids) == chat.render(messages, add_generation_prompt=False)
    assert engine.prompts[-1] == sequence.token_ids[: len(engine.prompts[-1])]
    # Only the replies (and their end-of-turn tokens) are the model's, each with its logprob.
    model_ids = [t for t, m in zip(sequence.token_ids, sequence.model_mask, strict=True) if m]
    expected = []
    for reply in [*replies, format_tool_call("finish", {})]:
        expected += tokenizer.encode(reply, add_special_tokens=False) + [tokenizer.eos_token_id]
    assert model_ids == expected
    assert all((lp == -0.5) == bool(m) for lp, m in zip(sequence.logprobs, sequence.model_mask, strict=True) if lp is not None)
    assert [lp is None for lp in sequence.logprobs] == [not m for m in sequence.model_mask]
    # No model_new.py was written: the final evaluation fails without running anything.
    assert outcome.result.reward == -1 and "model_new.py" in outcome.result.error
    end = events[-1]
    assert end["event"] == "end" and end["stop_reason"] == "finish"
    assert read_training_episode(outcome.trajectory) == outcome.training


def test_old_tool_output_is_shortened_and_a_new_sequence_begins(tmp_path, tiny):
    _, tokenizer = tiny
    read_skill = format_tool_call("read_file", {"path": "SKILL.md"})
    engine = ReplayTokenEngine(tokenizer, [read_skill] * 4)
    config = AgentConfig(max_turns=6, max_context_tokens=9000, max_new_tokens=64, shorten_at=0.5,
                         keep_recent_messages=2)
    outcome = run_episode(tmp_path, engine, config)
    events = read_events(outcome.trajectory)
    shortened = [e for e in events if e["event"] == "shortened"]
    assert shortened, "the budget was crossed, so old tool output must have been cut"
    assert len(outcome.training.sequences) == 1 + len(shortened)
    # The first context after shortening is the full rendering of the shortened conversation.
    later = outcome.training.sequences[1]
    assert later.model_mask[0] == 0 and "characters left out" in tokenizer.decode(later.token_ids)
    assert all(len(p) <= 9000 for p in engine.prompts)


def test_budgets_end_the_episode_with_their_reason(tmp_path, tiny):
    _, tokenizer = tiny
    wall = run_episode(tmp_path / "wall", ReplayTokenEngine(tokenizer, []), AgentConfig(wall_clock_s=-1))
    assert (wall.stop_reason, wall.turns) == ("wall_clock", 0)
    turns = run_episode(tmp_path / "turns", ReplayTokenEngine(tokenizer, ["thinking"] * 5), AgentConfig(max_turns=2))
    assert (turns.stop_reason, turns.turns) == ("turns", 2)
    tight = run_episode(tmp_path / "context", ReplayTokenEngine(tokenizer, []), AgentConfig(max_context_tokens=50))
    assert tight.stop_reason == "context" and tight.turns == 0
    broken = run_episode(tmp_path / "engine", ReplayTokenEngine(tokenizer, ["x"], fail_at=1))
    assert broken.stop_reason == "engine_error" and broken.turns == 1
    assert "server went away" in read_events(broken.trajectory)[-2]["error"]


def test_final_reward_reuses_the_last_profile_only_for_unchanged_files(tmp_path, tiny):
    _, tokenizer = tiny

    class ProfilePool:
        """Answers profile with a passing Result and counts evaluations (the real evaluator is
        exercised end to end in test_solve_cpu.py)."""

        def __init__(self):
            self.calls = 0

        def evaluate(self, problem, candidate, config):
            self.calls += 1
            return Result(str(problem), str(candidate), status="passed", passed=True, correct=True, reward=2.0)

        def close(self):
            pass

    model_new = format_tool_call("write_file", {"path": "model_new.py", "content": "class ModelNew: pass\n"})
    same = run_episode(tmp_path / "same", ReplayTokenEngine(tokenizer, [model_new, format_tool_call("profile", {})]),
                       pool=(pool := ProfilePool()))
    assert (same.result.reward, pool.calls) == (2.0, 1)
    edit = format_tool_call("write_file", {"path": "kernels/a.cpp", "content": "int a;"})
    changed = run_episode(tmp_path / "changed", ReplayTokenEngine(
        tokenizer, [model_new, format_tool_call("profile", {}), edit]), pool=(pool := ProfilePool()))
    assert pool.calls == 2 and changed.result.reward == 2.0
    rewards = [e["reward"] for e in read_events(changed.trajectory) if e["event"] == "tool_result" and e["name"] == "profile"]
    assert rewards == [2.0]


def test_tiny_model_episodes_in_parallel_write_every_record(tmp_path, tiny):
    model, tokenizer = tiny
    engine = TransformersEngine(model, tokenizer, SamplingConfig(temperature=1.0, seed=0), max_batch=4)
    out = tmp_path / "run"
    config = SolveConfig(out, device="cpu", samples=2, parallel_episodes=2,
                         agent=AgentConfig(max_turns=3, max_new_tokens=40),
                         toolbox=ToolboxConfig(EvalConfig(device="cpu")))
    try:
        outcomes = solve([PROBLEM], engine, config)
    finally:
        engine.close()
    assert [(o.sample, o.stop_reason, o.turns, o.reward) for o in outcomes] == [(0, "turns", 3, -1.0), (1, "turns", 3, -1.0)]
    results = [Result.from_json(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(Path(r.candidate).name for r in results) == ["leaky_relu_sample_0", "leaky_relu_sample_1"]
    for outcome in outcomes:
        assert outcome.workspace == out / "candidates" / f"leaky_relu_sample_{outcome.sample}"
        training = read_training_episode(out / "trajectories" / f"leaky_relu_sample_{outcome.sample}.jsonl")
        [sequence] = training.sequences
        assert len(sequence.token_ids) == len(sequence.model_mask) == len(sequence.logprobs)
        assert 0 < sum(sequence.model_mask) <= 3 * 40
        assert all(lp is not None and lp <= 0 for lp, m in zip(sequence.logprobs, sequence.model_mask, strict=True) if m)
        assert training.reward == -1.0 and training.turns == 3
        events = read_events(out / "trajectories" / f"leaky_relu_sample_{outcome.sample}.jsonl")
        assert sum(e["event"] == "message" and e["role"] == "assistant" for e in events) == 3
        assert json.loads(json.dumps(events[0]))["config"]["max_turns"] == 3

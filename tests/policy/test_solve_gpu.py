"""On a CUDA GPU: the scripted CUDA solutions through the whole loop with real builds, and the
tiny transformers model driving episodes on the GPU (records and parsing, reward -1)."""

from pathlib import Path

import pytest

from policy.agent import AgentConfig
from policy.engines import SamplingConfig, TransformersEngine
from policy.solve import SolveConfig, solve
from policy.tiny_model import build_tiny_model_and_tokenizer
from policy.tools import ToolboxConfig
from policy.trajectory import read_events, read_training_episode
from pytest_cudaagent import EvalConfig, Result

ROOT = Path(__file__).parents[2]
PROBLEMS = [ROOT / "examples" / "problems" / name for name in ("leaky_relu.py", "scale_tanh_mean.py")]


@pytest.mark.gpu
@pytest.mark.slow
def test_scripted_cuda_solutions_pass_with_real_builds(tmp_path):
    from policy.engines import ScriptedEngine

    engine = ScriptedEngine.from_path(ROOT / "policy" / "scripts" / "cuda")
    config = SolveConfig(tmp_path, device="cuda", parallel_episodes=2, toolbox=ToolboxConfig(EvalConfig(device="cuda")))
    outcomes = solve(PROBLEMS, engine, config)
    for outcome in outcomes:
        print(outcome.problem.stem, outcome.result.summary())  # the speedups, for the record
        assert outcome.stop_reason == "finish"
        assert outcome.result.passed and outcome.result.reward >= 1, outcome.result.summary()
        assert outcome.result.kernels, "the profiler saw the candidate's kernels"
        texts = {e["name"]: e["text"] for e in read_events(outcome.trajectory) if e["event"] == "tool_result"}
        assert texts["compile"].startswith("compile: OK") and texts["verify"].startswith("verify: PASSED")
    results = [Result.from_json(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert len(results) == 2 and all(r.device == "cuda" for r in results)


@pytest.mark.gpu
def test_tiny_model_runs_episodes_on_the_gpu(tmp_path):
    model, tokenizer = build_tiny_model_and_tokenizer()
    engine = TransformersEngine(model.to("cuda"), tokenizer, SamplingConfig(temperature=1.0, seed=0))
    config = SolveConfig(tmp_path, device="cuda", samples=3, parallel_episodes=3,
                         agent=AgentConfig(max_turns=5, max_new_tokens=64),
                         toolbox=ToolboxConfig(EvalConfig(device="cuda")))
    try:
        outcomes = solve(PROBLEMS[:1], engine, config)
    finally:
        engine.close()
    assert [(o.stop_reason, o.turns, o.reward) for o in outcomes] == [("turns", 5, -1.0)] * 3
    for outcome in outcomes:
        [sequence] = read_training_episode(outcome.trajectory).sequences
        assert len(sequence.token_ids) == len(sequence.model_mask) == len(sequence.logprobs)
        assert sum(sequence.model_mask) > 0

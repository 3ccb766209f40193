"""The agent's verify tool, its final (reward) evaluation and the single-turn trainer's reward
follow the one convention their environment names, and agree on the same candidate: BatchNorm
folded with its running statistics is wrong under kernelbench and right under cuda-agent."""

import random
from pathlib import Path

import pytest

from policy.toolcalls import ToolCall
from policy.tools import Toolbox
from policy.trainer.agent_loop import AgentLoopEnvironment
from policy.trainer.cuda_single_turn import CudaSingleTurnEnvironment
from policy.trainer.rewards import evaluator_config
from policy.workspace import Workspace

CONVENTIONS = Path(__file__).parent / "conventions"
PROBLEM = CONVENTIONS / "problems" / "batchnorm.py"
FOLDED = (CONVENTIONS / "candidates" / "batchnorm_sample_1.py").read_text()
# Pure PyTorch (no kernels to build) and correctness only: the verdict is what is compared.
OPTIONS = {"policy": "permissive", "timing": False, "baselines": [], "run_timeout_s": 120}


@pytest.mark.parametrize(("convention", "correct"), [("kernelbench", False), ("cuda-agent", True)])
def test_verify_tool_final_evaluation_and_reward_agree(tmp_path, convention, correct):
    agent = AgentLoopEnvironment(str(PROBLEM), device="cpu", eval_options=OPTIONS, convention=convention)
    try:
        toolbox_config = agent.solve_config(tmp_path / "episodes", max_new_tokens=64).toolbox
        toolbox = Toolbox(Workspace.create(PROBLEM, tmp_path / "workspace", "cpu"), agent.pool, toolbox_config)
        assert not toolbox.call(ToolCall("write_file", {"path": "model_new.py", "content": FOLDED})).error
        verified = toolbox.call(ToolCall("verify", {}))
        final = toolbox.evaluate_final()
    finally:
        agent.close()
    single_turn = CudaSingleTurnEnvironment(str(PROBLEM), device="cpu", eval_options=OPTIONS, convention=convention)
    task = single_turn.sample_tasks(1, random.Random(0))[0]
    reward = single_turn.score(task, [f"```python\n{FOLDED}```"], "cpu")

    assert verified.result.convention == final.convention == convention
    assert verified.result.passed is final.passed is correct, verified.text
    assert ("PASSED" in verified.text) is correct and ("INCORRECT" in verified.text) is not correct
    assert reward == final.reward == (1.0 if correct else -1.0)


def test_the_convention_is_set_once():
    assert evaluator_config("cpu", {"trials": 2}, "cuda-agent").convention == "cuda-agent"
    assert evaluator_config("cpu", {}).convention == "kernelbench"
    with pytest.raises(ValueError, match="set it once"):
        evaluator_config("cpu", {"convention": "kernelbench"}, "cuda-agent")

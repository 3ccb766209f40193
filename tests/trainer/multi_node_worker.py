"""Run by test_multi_node.py: `policy.trainer.cli` with the cuda-single-turn environment's answers
fixed (task i answers ANSWERS[i % 3], whatever the model wrote), so that every process's rewards
are known; as one process (`python multi_node_worker.py CONFIG`) or under `accelerate launch`
as one process of several machines."""

import sys
from pathlib import Path

from experiments.reward_latency import (
    QUICK_CANDIDATE,
    QUICK_EVAL_OPTIONS,
    FixedAnswerEnvironment,
)
from policy.trainer import cli, runtime

REPO = Path(__file__).resolve().parents[2]
PROBLEM = REPO / "tests" / "data" / "problems" / "small_leaky_relu.py"


def environment(candidates_dir: Path) -> FixedAnswerEnvironment:
    correct = candidates_dir / "correct.py"
    if not correct.exists():  # the test writes it before any process starts
        correct.write_text(QUICK_CANDIDATE)
    answers = ((str(PROBLEM), str(correct)),
               (str(PROBLEM), str(REPO / "tests" / "data" / "candidates" / "zeros_output.py")),  # incorrect
               (str(PROBLEM), None))  # no code in the answer
    return FixedAnswerEnvironment(str(PROBLEM), device="cpu", eval_options=QUICK_EVAL_OPTIONS, answers=answers)


if __name__ == "__main__":
    config, candidates_dir = sys.argv[1], Path(sys.argv[2])
    runtime.build_environment = lambda kind, options: environment(candidates_dir)
    sys.exit(cli.main(["--config", config, "--no-progress"]))

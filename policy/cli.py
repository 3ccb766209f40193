"""`cudaagent solve` (entry point `solve`; `train` is policy/trainer/cli.py). `register` adds both
to a parser of this package's own: `python -m policy.cli`. Nothing heavy at module level: the
handler imports the agent when it runs."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from pytest_cudaagent.terminal import console as console_for_output

from .trainer.cli import register_train


def register(subparsers) -> None:
    register_solve(subparsers)
    register_train(subparsers)


def register_solve(subparsers) -> None:
    parser = subparsers.add_parser(
        "solve", help="run the agent over problems; write candidates, trajectories and results.jsonl",
        description="Run the kernel-writing agent on each problem (a .py file or a directory of them), "
                    "--samples episodes per problem, several at once. Writes OUT/candidates/<stem>_sample_<k>/ "
                    "(workspaces), OUT/trajectories/*.jsonl and OUT/results.jsonl "
                    "(read it with `cudaagent leaderboard OUT/results.jsonl`).")
    parser.add_argument("problems", help="a problem .py file or a directory of problem files")
    parser.add_argument("--engine", choices=("scripted", "transformers", "vllm", "openai"), default="transformers",
                        help="scripted: replay a script; transformers: local model (default); vllm: vllm.LLM; "
                             "openai: an OpenAI-compatible chat endpoint")
    parser.add_argument("--model", required=True,
                        help="scripted: a script file or a directory of <problem stem>.yaml; transformers/vllm: "
                             "a local model directory; openai: the served model's name")
    parser.add_argument("--out", required=True, type=Path, help="output directory (fresh)")
    parser.add_argument("--samples", type=int, default=1, help="episodes per problem (default 1)")
    parser.add_argument("--turns", type=int, default=200, help="turn limit per episode (default 200, as the paper's evaluation)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="kernel backend and evaluator device (default: cuda when a GPU is visible)")
    parser.add_argument("--parallel", type=int, default=4, help="episodes run at once (default 4)")
    parser.add_argument("--max-context", type=int, default=131072, help="context budget in tokens (default 131072)")
    parser.add_argument("--max-new-tokens", type=int, default=8192, help="tokens per reply at most (default 8192)")
    parser.add_argument("--wall-clock", type=float, default=7200.0, help="seconds per episode at most (default 7200)")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature; 0 is greedy (default 1)")
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling (default 1: off)")
    parser.add_argument("--top-k", type=int, default=0, help="top-k sampling (default 0: off)")
    parser.add_argument("--seed", type=int, default=None, help="sampling seed (default: none)")
    parser.add_argument("--sampling-extra", type=json.loads, default={},
                        help='engine-specific sampling options as JSON, passed through, e.g. \'{"min_p": 0.05}\'')
    parser.add_argument("--base-url", help="openai engine: the endpoint, e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY",
                        help="openai engine: the environment variable holding the API key (default OPENAI_API_KEY)")
    parser.add_argument("--tokenizer", help="a local tokenizer directory, for token records with the scripted "
                                            "or openai engine")
    parser.add_argument("--baselines", default="eager,compile",
                        help="timing baselines, comma-separated: eager, compile, max-autotune (default eager,compile)")
    parser.add_argument("--gpus", help="evaluator GPUs, comma-separated ids (default: all visible)")
    parser.add_argument("--convention", choices=("kernelbench", "cuda-agent"), default="kernelbench",
                        help="whose correctness the tools and the reward follow (default kernelbench)")
    parser.add_argument("--batch", type=int, default=8, help="transformers/vllm: replies generated per batch at most")
    parser.set_defaults(func=run_solve, path_args=("problems", "out", "tokenizer"))


def run_solve(args: argparse.Namespace) -> int:
    from pytest_cudaagent import EvalConfig
    from pytest_cudaagent.cli import require_extra
    from pytest_cudaagent.core.config import resolve_device
    from pytest_cudaagent.core.files import BadFileError
    from pytest_cudaagent.records.user_paths import command_paths

    from .agent import AgentConfig
    from .engines import EngineError, SamplingConfig, build_engine
    from .solve import SolveConfig, find_problems, outcome_table, solve
    from .tools import ToolboxConfig

    paths = command_paths(args)
    # --model is a path for the local engines (openai: the served model's name).
    if args.engine != "openai" and args.model and os.path.exists(args.model):
        args.model = paths.absolute(args.model)
    if args.engine in ("transformers", "vllm"):
        require_extra(f"solve --engine {args.engine}", "train" if args.engine == "transformers" else "vllm",
                      args.engine)
    if args.tokenizer:
        require_extra("solve --tokenizer", "train", "transformers")
    console = console_for_output(stderr=True)
    device = args.device or resolve_device("auto")
    try:
        problems = find_problems(args.problems)
        sampling = SamplingConfig(args.temperature, args.top_p, args.top_k, args.seed, args.sampling_extra)
        engine = build_engine(args.engine, args.model, sampling, device=device, base_url=args.base_url,
                              api_key_env=args.api_key_env, tokenizer_path=args.tokenizer, max_batch=args.batch)
    except (BadFileError, EngineError) as error:
        console.print(f"[red]error:[/red] {paths.shown(str(error))}", soft_wrap=True)
        return 2
    eval_config = EvalConfig(device=device, baselines=tuple(b.strip() for b in args.baselines.split(",") if b.strip()),
                             convention=args.convention)
    config = SolveConfig(
        out_dir=args.out, device=device, samples=args.samples, parallel_episodes=args.parallel,
        agent=AgentConfig(max_turns=args.turns, max_context_tokens=args.max_context,
                          max_new_tokens=args.max_new_tokens, wall_clock_s=args.wall_clock),
        toolbox=ToolboxConfig(eval_config=eval_config),
        gpus=args.gpus.split(",") if args.gpus else None)
    try:
        outcomes = solve(problems, engine, config, console=console)
    except BadFileError as error:
        console.print(f"[red]error:[/red] {paths.shown(str(error))}", soft_wrap=True)
        return 2
    finally:
        engine.close()
    console_for_output().print(outcome_table(outcomes))
    results = paths.shown(str(args.out / "results.jsonl"))
    console.print(f"results: {results}  (cudaagent leaderboard {results})")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m policy.cli")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())

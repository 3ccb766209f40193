"""`cudaagent train`: runs the configured stages (policy/trainer/configs/ has examples). The
`cudaagent` entry point `train` calls `register_train(subparsers)`, which needs nothing of the
train extra; `accelerate launch -m policy.trainer.cli --config X` runs it on several GPUs or
machines. Relative paths in the config (output_dir, model, problems, ...) are the caller's: they
resolve against the directory the command runs in, as those of the command line do."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .stage_names import STAGE_NAMES


def register_train(subparsers) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train the policy: single-turn PPO, RFT, value pretraining, multi-turn PPO",
        description="Run the stages listed in a YAML config in order; each starts from the models the "
        "previous ones wrote (OUTPUT_DIR/NN-<stage>/final/), resumes from its latest checkpoint and is "
        "skipped once done. For several GPUs: accelerate launch -m policy.trainer.cli --config X.yaml",
    )
    add_train_arguments(parser)
    parser.set_defaults(func=run_train)


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="YAML training config (see policy/trainer/configs/)")
    parser.add_argument("--stage", choices=sorted(STAGE_NAMES), default=None,
                        help="run only this stage, from whatever earlier stages have finished")
    parser.add_argument("--output-dir", default=None, help="override the config's output_dir")
    parser.add_argument("--no-resume", action="store_true",
                        help="start unfinished stages from step 0 instead of their latest checkpoint")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (logs only)")
    parser.set_defaults(path_args=("config", "output_dir"))


def run_train(args: argparse.Namespace) -> int:
    from pytest_cudaagent.cli import require_extra
    from pytest_cudaagent.records.user_paths import command_paths

    paths = command_paths(args)
    require_extra("train", "train", "accelerate", "transformers")
    from .config import TrainConfig
    from .stages import run_pipeline

    try:
        config = TrainConfig.from_yaml(args.config)
    except (FileNotFoundError, ValueError) as error:
        print(f"cudaagent train: {paths.shown(str(error))}", file=sys.stderr)
        return 2
    config.resolve_paths(Path.cwd())
    if args.output_dir:
        config.output_dir = args.output_dir
    if args.no_progress:
        config.progress = False
    summaries = run_pipeline(config, only_stage=args.stage, resume=not args.no_resume)
    for stage, summary in summaries.items():
        shown = {k: round(v, 4) for k, v in summary.items()
                 if k in ("reward_mean", "pass_rate", "kl", "explained_variance", "sft_loss", "kept")}
        print(f"{stage}: {shown}")
    print(f"models and metrics under {paths.shown(config.output_dir)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="policy.trainer.cli")
    add_train_arguments(parser)
    return run_train(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

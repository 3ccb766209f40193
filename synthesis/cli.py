"""`cudaagent synth {crawl,run,check}`: the synthesis pipeline from the command line (entry point
`synth`). Only argparse at module level: the handlers import the pipeline when they run, so
`cudaagent --help` does not load it."""

from __future__ import annotations

import argparse
import collections
import importlib
import json
import sys
from pathlib import Path

from pytest_cudaagent.terminal import console as console_for_output


def register(subparsers) -> None:
    synth = subparsers.add_parser("synth", help="synthesize filtered training tasks (crawl, run, check)")
    commands = synth.add_subparsers(dest="synth_command", required=True)
    _add_crawl(commands)
    _add_run(commands)
    _add_check(commands)


def _add_filter_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                        help="where the filters run and time tasks (default: cuda when visible)")
    parser.add_argument("--min-ms", type=float, default=1.0, help="eager runtime floor (paper: 1 ms)")
    parser.add_argument("--max-ms", type=float, default=100.0, help="eager runtime ceiling (paper: 100 ms)")
    parser.add_argument("--no-compile", action="store_true",
                        help="skip the torch.compile filter (quick local checks only)")
    # Defaults None: FilterConfig's and PoolConfig's, filled in when the command runs.
    parser.add_argument("--max-task-gib", type=float, default=None,
                        help="memory one forward may need at the scaled batch (inputs, "
                             "intermediates, outputs), per worker")
    parser.add_argument("--task-timeout", type=float, default=None,
                        help="seconds one task may take in a filter worker (then the worker is "
                             "replaced and the task dropped as timeout)")


def _filter_config(args):
    from pytest_cudaagent.core.config import resolve_device

    from .filters import FilterConfig

    device = resolve_device(args.device)
    if args.min_ms >= args.max_ms:
        raise SystemExit(f"--min-ms {args.min_ms} must be below --max-ms {args.max_ms}")
    max_task_bytes = FilterConfig.max_task_bytes if args.max_task_gib is None else int(args.max_task_gib * 2**30)
    return FilterConfig(device=device, min_ms=args.min_ms, max_ms=args.max_ms, compile=not args.no_compile,
                        max_task_bytes=max_task_bytes)


def _task_timeout(args) -> float:
    from .pool import PoolConfig

    return PoolConfig.task_timeout_s if args.task_timeout is None else args.task_timeout


def _add_crawl(commands) -> None:
    parser = commands.add_parser("crawl", help="crawl torch and transformers for seed operators")
    parser.add_argument("--out", type=Path, default=Path("catalogue.json"),
                        help="catalogue file to write (the crawl log goes next to it as crawl_log.csv)")
    parser.add_argument("--sources", default=None,
                        help="comma-separated: torch.nn, torch.nn.functional, torch, torch.special, transformers "
                             "(default: all; transformers is skipped with a note when it is not installed)")
    parser.add_argument("--transformers-models", type=int, default=None,
                        help="crawl only the first N transformers model families (default: all)")
    parser.add_argument("--filter", default=None, help="regex on operator names to crawl")
    parser.set_defaults(func=run_crawl, path_args=("out",))


def _sources() -> tuple[str, ...]:
    from .crawl import SOURCES

    return SOURCES


def run_crawl(args) -> int:
    from rich.progress import Progress
    from rich.table import Table

    from pytest_cudaagent.records.user_paths import command_paths

    from .crawl import crawl

    shown = command_paths(args).shown
    console = console_for_output(stderr=True)
    sources = tuple(s.strip() for s in (args.sources or ",".join(_sources())).split(",") if s.strip())
    unknown = set(sources) - set(_sources())
    if unknown:
        console.print(f"[red]unknown source(s) {sorted(unknown)}; choose from {', '.join(_sources())}")
        return 2
    with Progress(console=console) as progress:
        bar = progress.add_task("crawl", total=None)
        catalogue = crawl(sources, args.transformers_models, args.filter,
                          progress=lambda done, name: progress.update(bar, completed=done, description=name))
    catalogue.save(args.out)
    log_path = Path(args.out).with_name("crawl_log.csv")
    catalogue.save_log(log_path)
    table = Table(title=f"crawl: {len(catalogue.operators)} kept of {len(catalogue.log)}")
    table.add_column("reason")
    table.add_column("operators", justify="right")
    for reason, count in collections.Counter(r.reason for r in catalogue.log).most_common():
        table.add_row(reason, str(count))
    console_for_output().print(table)
    console.print(f"catalogue: {shown(str(args.out))}; crawl log: {shown(str(log_path))}")
    return 0


def _add_run(commands) -> None:
    parser = commands.add_parser("run", help="compose, filter and write N candidate tasks")
    parser.add_argument("--count", type=int, required=True, help="candidates to compose")
    parser.add_argument("--out", type=Path, required=True, help="run directory (tasks/, manifest, summary)")
    parser.add_argument("--seed", type=int, default=0, help="the composition stream (task i is fixed by seed and i)")
    parser.add_argument("--kernelbench", type=Path, default=None,
                        help="KernelBench clone or dataset files: drop near-duplicates of its problems")
    parser.add_argument("--similarity", type=float, default=0.8,
                        help="operator-sequence similarity counted as a near-duplicate")
    parser.add_argument("--workers", type=int, default=1, help="filter worker processes")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs to spread the workers over")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out")
    parser.add_argument("--stop-after", type=float, default=None, metavar="SECONDS",
                        help="propose no new candidate after this many seconds; those in flight "
                             "finish and the summary is written (--resume continues the run)")
    parser.add_argument("--catalogue", type=Path, default=None,
                        help="seed-operator catalogue (default: OUT/catalogue.json, crawled when missing)")
    parser.add_argument("--transformers-models", type=int, default=None,
                        help="when crawling: only the first N transformers model families")
    parser.add_argument("--max-ops", type=int, default=5, help="operators per task, at most")
    parser.add_argument("--dtypes", default="float32", help="comma-separated input dtypes to draw from")
    parser.add_argument("--llm-engine", default=None,
                        help="module:factory returning a rollout engine; tasks are then proposed by the LLM")
    _add_filter_options(parser)
    parser.set_defaults(func=run_run, path_args=("out", "kernelbench", "catalogue"))


def run_run(args) -> int:
    from pytest_cudaagent.records.user_paths import command_paths
    from pytest_cudaagent.system.lifetime import stop_on_sigterm

    from .compose import ComposerConfig
    from .pipeline import SynthConfig, load_or_crawl_catalogue, run_synthesis
    from .pool import PoolConfig

    shown = command_paths(args).shown
    console = console_for_output(stderr=True)
    config = SynthConfig(
        count=args.count, out_dir=args.out, seed=args.seed, kernelbench=args.kernelbench,
        similarity=args.similarity, catalogue=args.catalogue,
        transformers_models=args.transformers_models, resume=args.resume,
        stop_after_s=args.stop_after, filters=_filter_config(args),
        pool=PoolConfig(workers=args.workers, task_timeout_s=_task_timeout(args), gpus=args.gpus),
        composer=ComposerConfig(max_ops=args.max_ops, dtypes=tuple(args.dtypes.split(","))),
    )
    proposer = None
    stop_on_sigterm()
    try:
        if args.llm_engine:
            from .llm_composer import EngineAdapter, LLMComposer

            module_name, _, factory = args.llm_engine.partition(":")
            engine = getattr(importlib.import_module(module_name), factory)()
            catalogue = load_or_crawl_catalogue(config, console)
            proposer = LLMComposer(catalogue, EngineAdapter(engine), seed=args.seed)
        frame = run_synthesis(config, proposer, console)
    except (FileExistsError, FileNotFoundError, ValueError) as error:
        console.print(f"[red]{shown(str(error))}")
        return 2
    return 0 if frame["kept"].any() else 1


def _add_check(commands) -> None:
    parser = commands.add_parser("check", help="apply every filter to one problem file")
    parser.add_argument("problem", type=Path, help="a KernelBench-format problem file")
    parser.add_argument("--output", type=Path, default=None, help="write the verdict JSON here")
    parser.add_argument("--kernelbench", type=Path, default=None,
                        help="KernelBench clone or dataset files for the contamination check")
    parser.add_argument("--similarity", type=float, default=0.8)
    _add_filter_options(parser)
    parser.set_defaults(func=run_check, path_args=("problem", "output", "kernelbench"))


def run_check(args) -> int:
    from pytest_cudaagent.records.user_paths import command_paths

    from .pipeline import check_file

    shown = command_paths(args).shown
    if not args.problem.is_file():
        console_for_output(stderr=True).print(f"[red]{shown(str(args.problem))}: no such problem file")
        return 2
    verdict = check_file(args.problem, _filter_config(args), args.kernelbench, args.similarity, _task_timeout(args))
    text = json.dumps(verdict, indent=2)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text)
    print(text)
    return 0 if verdict["kept"] else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cudaagent")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())

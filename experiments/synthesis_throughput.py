"""Measures synthesis throughput: candidates kept per hour, outcomes, time per filter (README, Measured: "Synthesis").

Synthesis throughput: candidates composed, filtered and kept per hour, the outcomes, and the
time split per filter, for a synthesis run on this machine; with --summary-only, for a run
directory as its manifest stands, also after a killed run (tasks still in flight are listed with
the stage they were in). Prints markdown; `--json FILE` saves the numbers.

    python -m experiments.synthesis_throughput --count 600 --workers 14 --out /tmp/synth-bench
    python -m experiments.synthesis_throughput --out /tmp/synth-bench --summary-only
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pandas as pd

from pytest_cudaagent.system.lifetime import stop_on_sigterm
from synthesis.compose import ComposerConfig
from synthesis.filters import FilterConfig
from synthesis.manifest import Manifest
from synthesis.pipeline import SynthConfig, run_synthesis
from synthesis.pool import PoolConfig
from synthesis.report import (
    filter_time_table,
    markdown_table,
    reason_table,
    runtime_table,
    session_table,
    throughput,
    throughput_lines,
)
from synthesis.stage_log import STAGE_LOG, in_flight, read_stage_log


def environment() -> str:
    import torch

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    return f"torch {torch.__version__}, {device}, {os.cpu_count()} CPU cores"


def slowest_tasks(frame: pd.DataFrame, top: int = 8) -> pd.DataFrame:
    seconds = frame["filter_seconds"].map(lambda text: sum(json.loads(text).values()))
    table = frame.assign(seconds=seconds).nlargest(top, "seconds")
    return pd.DataFrame({
        "task": table["id"],
        "outcome": table.apply(lambda row: "kept" if row["kept"] else ",".join(row["reasons"]), axis=1),
        "seconds": table["seconds"],
        "per stage": table["filter_seconds"].map(
            lambda text: ", ".join(f"{k} {v:.1f}" for k, v in json.loads(text).items())),
        "batch": table["batch_size"],
    })


def summary(run_dir: Path) -> tuple[str, dict]:
    """The run as its manifest, sessions and stage log stand: markdown and the numbers."""
    manifest = Manifest(run_dir)
    frame, sessions = manifest.frame(), manifest.sessions()
    numbers = throughput(frame, sessions)
    flight = in_flight(read_stage_log(run_dir / STAGE_LOG), set(frame["id"]))
    sections = [
        ("Sessions", session_table(frame, sessions) if sessions else pd.DataFrame()),
        ("Outcomes (first failed filter)", reason_table(frame)),
        ("Time per filter (worker seconds)", filter_time_table(frame)),
        ("Runtime of kept tasks", runtime_table(frame)),
        ("Slowest candidates", slowest_tasks(frame) if len(frame) else pd.DataFrame()),
        ("In flight when the run stopped", flight),
    ]
    lines = [f"# Synthesis throughput: {run_dir}", "", environment(), "", *throughput_lines(numbers), ""]
    for title, table in sections:
        lines += [f"## {title}", "", markdown_table(table) if len(table) else "(none)", ""]
    numbers.update(outcomes=reason_table(frame).to_dict("records"),
                   filter_seconds=filter_time_table(frame).to_dict("records"),
                   in_flight=flight.to_dict("records"))
    return "\n".join(lines), numbers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="run directory")
    parser.add_argument("--summary-only", action="store_true",
                        help="run nothing: summarise the run directory as it stands")
    parser.add_argument("--count", type=int, default=600)
    parser.add_argument("--workers", type=int, default=14)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--min-ms", type=float, default=1.0)
    parser.add_argument("--max-ms", type=float, default=100.0)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--catalogue", type=Path, default=None)
    parser.add_argument("--kernelbench", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--resume", action="store_true", help="continue the run in --out")
    parser.add_argument("--stop-after", type=float, default=None, metavar="SECONDS",
                        help="propose no new candidate after this many seconds")
    parser.add_argument("--max-task-gib", type=float, default=FilterConfig.max_task_bytes / 2**30,
                        help="memory one forward may need at the scaled batch, per worker")
    parser.add_argument("--task-timeout", type=float, default=PoolConfig.task_timeout_s)
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = parser.parse_args()

    if not args.summary_only:
        stop_on_sigterm()
        run_synthesis(SynthConfig(
            count=args.count, out_dir=args.out, seed=args.seed, kernelbench=args.kernelbench,
            catalogue=args.catalogue, resume=args.resume, stop_after_s=args.stop_after,
            filters=FilterConfig(device=args.device, min_ms=args.min_ms, max_ms=args.max_ms,
                                 compile=not args.no_compile, max_task_bytes=int(args.max_task_gib * 2**30)),
            pool=PoolConfig(workers=args.workers, task_timeout_s=args.task_timeout),
            composer=ComposerConfig(),
        ))
    text, numbers = summary(args.out)
    print(text, flush=True)
    if args.json:
        args.json.write_text(json.dumps(numbers, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

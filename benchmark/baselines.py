"""`cudaagent baselines`: times each problem's reference eager, under torch.compile and under
max-autotune on this machine, in the evaluator's reference worker with its Timer (warm-up and
repeat budgets, L2 flushed, rotating fresh inputs), and stores the statistics as JSON keyed by
level and problem file name like KernelBench's baseline files, to compare against them.

The times also go into the evaluator's BaselineCache, so a later `cudaagent bench` with the same
timing settings reuses them instead of timing the baselines again.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from pytest_cudaagent.core.config import BASELINE_MODES, EvalConfig
from pytest_cudaagent.core.result import TimingStats
from pytest_cudaagent.system.envinfo import collect_env, device_name
from pytest_cudaagent.timing.baseline_cache import BaselineCache
from pytest_cudaagent.workers.channel import Worker, WorkerDied, WorkerFailure, WorkerTimeout
from pytest_cudaagent.workers.worker import reference_main

from .kernelbench import Problem


@dataclass
class BaselineStats:
    """KernelBench's fields (mean, std, min, max, num_trials, hardware, device) plus the median."""

    mean: float
    std: float
    min: float
    max: float
    median: float
    num_trials: int
    hardware: str
    device: str

    @classmethod
    def from_samples(cls, samples_ms: list[float], hardware: str, device: str) -> BaselineStats:
        return cls(round(statistics.fmean(samples_ms), 5),
                   round(statistics.stdev(samples_ms), 5) if len(samples_ms) > 1 else 0.0,
                   round(min(samples_ms), 5), round(max(samples_ms), 5),
                   round(statistics.median(samples_ms), 5), len(samples_ms), hardware, device)


@dataclass
class ProblemBaselines:
    problem: Problem
    stats: dict[str, BaselineStats]  # by mode
    error: str | None = None  # why the reference could not be timed


def time_problem(problem: Problem, modes: tuple[str, ...], config: EvalConfig, device: str) -> ProblemBaselines:
    """One reference worker per problem: draw the inputs once, then time each mode."""
    hardware = device_name(device)
    sets = config.timing_config.rotating_inputs
    worker = Worker(reference_main, {"problem": str(problem.path), "device": device, "config": config.to_dict()},
                    config.memory_cap_gb)
    cache = BaselineCache(config.cache_dir)
    found = ProblemBaselines(problem, {})
    try:
        configured = worker.request(("prepare", sets), config.run_timeout_s)["backend_settings"]
        for mode in modes:
            reply = worker.request(("baseline", mode, list(range(sets)), configured), config.run_timeout_s)
            found.stats[mode] = BaselineStats.from_samples(reply["samples_ms"], hardware, device)
            key = cache.key(problem.path, device, mode, config.timing_config, config.convention, configured)
            with cache.lock(key):
                cache.put(key, TimingStats.from_samples(reply["samples_ms"], reply["device_ms"]),
                          problem.path, device, mode, configured)
    except (WorkerFailure, WorkerTimeout, WorkerDied) as failure:
        found.error = f"{failure}".strip().splitlines()[-1] if str(failure).strip() else type(failure).__name__
    finally:
        worker.close()
    return found


def time_baselines(problems: list[Problem], modes: tuple[str, ...], config: EvalConfig, device: str,
                   workers: int = 1, on_done=None) -> list[ProblemBaselines]:
    """Several problems at once when `workers` > 1: compiling for one overlaps the timing of
    another, and the per-device lock keeps the timings apart."""
    def run(problem: Problem) -> ProblemBaselines:
        found = time_problem(problem, modes, config, device)
        if on_done:
            on_done(found)
        return found

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(run, problems))


def to_json_record(found: list[ProblemBaselines], device: str, config: EvalConfig,
                   previous: dict | None = None) -> dict:
    """{"meta": {...}, "<mode>": {"level1": {"<file>.py": stats}}, "errors": {...}}, merged into
    `previous` (a file from an earlier run on other problems) when given."""
    env = collect_env(device)
    record = previous or {}
    record["meta"] = {
        "hardware": device_name(device), "device": device, "torch": env.get("torch"), "cuda": env.get("cuda"),
        "driver": env.get("driver"), "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "timer": "cudaagent Timer: time-budgeted warm-up and repeats, L2 flushed between calls, "
                 "rotating fresh inputs; times in ms",
        "timing_config": asdict(config.timing_config),
    }
    for item in found:
        level, name = item.problem.level_key, item.problem.name
        for mode, stats in item.stats.items():
            record.setdefault(mode, {}).setdefault(level, {})[name] = asdict(stats)
        if item.error:
            record.setdefault("errors", {}).setdefault(level, {})[name] = item.error
        elif name in record.get("errors", {}).get(level, {}):
            del record["errors"][level][name]
    return record


def mode_of_file(path: Path) -> str:
    """KernelBench's files are one mode each, told apart by name."""
    name = path.name.lower()
    if "autotune" in name:
        return "max-autotune"
    return "compile" if "compile" in name else "eager"


def by_mode(data: dict, path: Path, mode: str | None = None) -> dict[str, dict]:
    """{mode: {level: {name: stats}}} from our format or KernelBench's single-mode one."""
    if any(key.startswith("level") for key in data):
        return {mode or mode_of_file(path): data}
    return {key: value for key, value in data.items() if key in BASELINE_MODES and (mode is None or key == mode)}


def compare(ours: dict, theirs_path: Path, mode: str | None = None) -> pd.DataFrame:
    """Per problem in both: our mean time over theirs (above 1: slower here)."""
    theirs = by_mode(json.loads(Path(theirs_path).read_text()), Path(theirs_path), mode)
    rows = []
    for their_mode, levels in theirs.items():
        for level, problems in levels.items():
            for name, their_stats in problems.items():
                our_stats = ours.get(their_mode, {}).get(level, {}).get(name)
                if our_stats is None:
                    continue
                rows.append({"mode": their_mode, "level": level, "problem": name,
                             "ours ms": our_stats["mean"], "theirs ms": their_stats["mean"],
                             "ratio": round(our_stats["mean"] / their_stats["mean"], 3)
                             if their_stats["mean"] else math.nan})
    return pd.DataFrame(rows)


def geomean_ratio(table: pd.DataFrame) -> pd.DataFrame:
    valid = table.dropna(subset=["ratio"])
    valid = valid[valid["ratio"] > 0]
    return (valid.assign(log_ratio=valid["ratio"].map(math.log)).groupby(["mode", "level"])
            .agg(problems=("ratio", "size"), geomean_ratio=("log_ratio", lambda logs: round(math.exp(logs.mean()), 3)))
            .reset_index())

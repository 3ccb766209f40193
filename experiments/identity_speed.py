"""Identity candidates' speedup over eager (issue #40): every problem's own Model as its candidate
must time 1.00x, alone, in a full batch, and by KernelBench's own timing (README, "Identity
candidates").

    python -m experiments.identity_speed make --kernelbench .kernelbench --out DIR [--max-set-mib 256 --per-level 20]
    python -m experiments.identity_speed alone --kernelbench .kernelbench --out DIR      # cudaagent bench --workers 1
    python -m experiments.identity_speed batched --kernelbench .kernelbench --out DIR    # default workers
    python -m experiments.identity_speed kernelbench --kernelbench .kernelbench --out DIR [--deadline S]
    python -m experiments.identity_speed report --out DIR [--json FILE] [--plot FILE]
    python -m experiments.identity_speed cpu --out DIR [--repeats 3] [--cpu-flush-mib 32] [--no-start-ahead]

Each GPU phase resumes where an earlier call stopped (`cudaagent bench --resume`; KernelBench's
rows are appended to DIR/kernelbench.jsonl one by one), so each fits a device call of ten
minutes. `alone` and `batched` print the exact `cudaagent bench` command they run; each has a
baseline cache of its own (DIR/cache-<mode>), so the batched run's eager times are measured in the
batch, not read from the alone run. `report` prints per level the median, 5th and 95th percentile
of the speedup and the share within 0.95-1.05, for the three side by side.

`cpu`: the bundled problems' and the test problems' identity candidates on the CPU backend,
through `cudaagent bench --device cpu --workers 1` (its batch runner), each repeat with a fresh
cache, `--reserved-cpus N` to keep cores for the timed process where the machine would not;
prints each problem's speedup and the share within 0.9-1.1 (#40's CPU target). `--cpu-flush-mib`
times with a cache flush of that size before each call (the default is none, TimingConfig.cpu_flush_bytes);
`--no-start-ahead` starts no candidate's worker while another is timed. Tests never assert on time:
this is where the CPU number comes from.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import json
import math
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console

from benchmark.batch import BatchSettings, run_batch
from benchmark.kernelbench import Problem, level_label, level_of, load_flat, load_tree, select
from benchmark.solutions import pair_solutions
from experiments.identity_set import write_identity_set
from pytest_cudaagent.core.config import EvalConfig, TimingConfig

REPO = Path(__file__).resolve().parents[1]
BAND = (0.95, 1.05)  # the GPU target: 90% of identity speedups in here, median 1.00 +- 0.02
CPU_BAND = (0.9, 1.1)
# The problems the CPU phase times: the bundled examples and the tests' own problems (those that
# are problems at all: broken_reference fails on purpose, and settings_sensitive's reference
# cannot judge anything under the default backend settings).
CPU_PROBLEM_DIRS = {"examples": REPO / "examples/problems", "data": REPO / "tests/data/problems",
                    "compat": REPO / "tests/compat/problems"}
CPU_SKIPPED = {"broken_reference.py", "settings_sensitive.py"}
METHODS = ("alone", "batched", "kernelbench")
# The pairs the device budget allows (README, "Identity candidates"): every problem whose set fits
# 256 MiB (12 of level 1, 52 of level 2, 35 of level 3), 20 per level evenly spread.
SUBSET = Path(__file__).with_name("identity_subset.json")


# ----------------------------------------------------------------------------------------------
# The set


def set_mib(problem: Path) -> float | None:
    """MiB of one input set and its outputs, sized on PyTorch's meta device (nothing allocated);
    None when the sizing fails (an operator without a meta kernel)."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location(f"sized_{abs(hash(str(problem)))}", problem)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        with torch.device("meta"):
            model = module.Model(*module.get_init_inputs())
            inputs = module.get_inputs()
            outputs = model(*inputs)
    except Exception:  # noqa: BLE001 - any failure: size unknown
        return None
    outputs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
    tensors = [t for t in [*inputs, *outputs] if isinstance(t, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in tensors) / 2**20


def spread(items: list, wanted: int | None) -> list:
    """`wanted` of `items`, evenly spaced (all of them when there are not more, or no limit)."""
    if wanted is None or wanted >= len(items):
        return list(items)
    return [items[int(index * len(items) / wanted)] for index in range(wanted)]


def selected_problems(kernelbench: Path, levels: list[str], max_set_mib: float | None,
                      per_level: int | None) -> list[tuple[Problem, float | None]]:
    chosen = []
    for level in levels:
        problems = select(load_tree(kernelbench), [level])
        sized = [(problem, set_mib(problem.path) if max_set_mib is not None else None) for problem in problems]
        if max_set_mib is not None:
            sized = [(problem, mib) for problem, mib in sized if mib is not None and mib <= max_set_mib]
        chosen += spread(sized, per_level)
    return chosen


def subset_problems(kernelbench: Path, subset: Path) -> list[tuple[Problem, float | None]]:
    """The problems a subset file names (level, KernelBench id, set MiB), from this checkout."""
    wanted = {(str(level), int(problem_id)): mib for level, problem_id, mib in json.loads(subset.read_text())["pairs"]}
    chosen = [(problem, wanted[(problem.level, problem.problem_id)]) for problem in load_tree(kernelbench)
              if (problem.level, problem.problem_id) in wanted]
    if len(chosen) != len(wanted):
        raise SystemExit(f"{subset}: {len(wanted) - len(chosen)} of its problems are not in {kernelbench}")
    return chosen


def make(args) -> int:
    out = Path(args.out)
    if args.max_set_mib is not None or args.per_level is not None or args.subset == "all":
        chosen = selected_problems(Path(args.kernelbench), _levels(args), args.max_set_mib, args.per_level)
    else:
        chosen = subset_problems(Path(args.kernelbench), Path(args.subset))
    candidates = out / "candidates"
    if candidates.exists():
        shutil.rmtree(candidates)
    written = write_identity_set([problem for problem, _ in chosen], candidates)
    selection = [{"level": problem.level, "problem_id": problem.problem_id, "problem": str(problem.path.resolve()),
                  "candidate": str((candidates / path.name).resolve()), "set_mib": mib}
                 for (problem, mib), path in zip(chosen, written, strict=True)]
    (out / "selection.json").write_text(json.dumps(selection, indent=1))
    write_pair_dirs(selection, out / "pairs")
    if args.save_subset:
        pairs = ",\n".join(f"  {json.dumps([row['level'], row['problem_id'], row['set_mib'] and round(row['set_mib'], 1)])}"
                           for row in selection)
        made_with = " ".join(["python -m experiments.identity_speed", *sys.argv[1:]])
        Path(args.save_subset).write_text(f'{{\n "made_with": {json.dumps(made_with)},\n "pairs": [\n{pairs}\n ]\n}}\n')
    levels = sorted({row["level"] for row in selection})
    counts = {level_label(level): sum(1 for row in selection if row["level"] == level) for level in levels}
    print(f"{len(written)} identity candidates in {candidates}: {counts}")
    return 0


def write_pair_dirs(selection: list[dict], pairs: Path) -> None:
    """pairs/level<N>/{problems,candidates}/, one file of each per pair under the candidate's name:
    what `--pairs PROBLEMS_DIR CANDIDATES_DIR` takes (phase_profile, eval_side_by_side: #41's
    pure-PyTorch candidates at KernelBench's sizes)."""
    if pairs.exists():
        shutil.rmtree(pairs)
    for row in selection:
        level_dir = pairs / f"level{row['level']}"
        name = Path(row["candidate"]).name
        for kind, source in (("problems", row["problem"]), ("candidates", row["candidate"])):
            (level_dir / kind).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, level_dir / kind / name)


def _levels(args) -> list[str]:
    return [level.strip() for level in args.level.split(",") if level.strip()]


# ----------------------------------------------------------------------------------------------
# Our timing: cudaagent bench, alone and batched


def bench_command(args, mode: str) -> tuple[list[str], dict[str, str]]:
    """The `cudaagent bench` command of one mode, and its environment's additions."""
    out = Path(args.out).resolve()
    command = ["cudaagent", "bench", "--kernelbench", str(Path(args.kernelbench).resolve()), "--level", args.level,
               "--candidates", str(out / "candidates"), "--device", args.device, "--policy", "calibration",
               "--baselines", "eager", "--out", str(out / mode), "--resume"]
    if mode == "alone":
        command += ["--workers", "1"]
    elif args.workers:
        command += ["--workers", str(args.workers)]
    if args.timing_rounds:
        command += ["--timing-rounds", str(args.timing_rounds)]
    return command, {"CUDAAGENT_CACHE": str(out / f"cache-{mode}")}


def run_bench(args, mode: str) -> int:
    command, env = bench_command(args, mode)
    print(" ".join(f"{key}={value}" for key, value in env.items()), " ".join(command), flush=True)
    return subprocess.call(command, env={**os.environ, **env})


# ----------------------------------------------------------------------------------------------
# KernelBench's own timing, in one process (identity candidates set no flags that could reach
# the next pair), one JSONL row per pair as it ends


def _kernelbench_rows(checkout: str, pairs: list[dict], results: str, deadline: float) -> None:
    from experiments.kernelbench_differential import (
        import_kernelbench_eval,
        kernelbench_call_arguments,
    )
    from experiments.speed_fidelity import (
        KERNELBENCH_CORRECT_TRIALS,
        KERNELBENCH_PERF_TRIALS,
    )

    evaluate = import_kernelbench_eval(Path(checkout)).eval_kernel_against_ref
    for pair in pairs:
        if time.time() > deadline:
            return
        row = {"problem": pair["problem"], "candidate": pair["candidate"], "level": pair["level"]}
        started = time.perf_counter()
        try:
            candidate_source = Path(pair["candidate"]).read_text()
            arguments = kernelbench_call_arguments(evaluate, None, candidate_source,
                                                   num_correct_trials=KERNELBENCH_CORRECT_TRIALS,
                                                   num_perf_trials=KERNELBENCH_PERF_TRIALS, measure_performance=True)
            result = evaluate(Path(pair["problem"]).read_text(), candidate_source, **arguments)
            if result is None or not result.correctness:
                metadata = getattr(result, "metadata", {}) or {}
                row["error"] = f"KernelBench's eval rejects it: {str(metadata)[:300]}"
            else:
                row.update(kernelbench_ms=result.runtime, kernelbench_eager_ms=result.ref_runtime,
                           kernelbench_speedup=result.ref_runtime / result.runtime)
        except Exception as error:  # noqa: BLE001 - one pair's failure is its row
            row["error"] = f"{type(error).__name__}: {error}"[:300]
        row["seconds"] = round(time.perf_counter() - started, 2)
        with open(results, "a") as handle:
            handle.write(json.dumps(row) + "\n")
        print(f"kernelbench {Path(pair['candidate']).name}: {row.get('kernelbench_speedup', row.get('error'))}",
              flush=True)


def run_kernelbench(args) -> int:
    from experiments.kernelbench_differential import import_kernelbench_eval

    out = Path(args.out)
    results = out / "kernelbench.jsonl"
    selection = json.loads((out / "selection.json").read_text())
    try:  # here first: a checkout that cannot be imported fails once, not once per pair
        import_kernelbench_eval(Path(args.kernelbench))
    except Exception as error:  # noqa: BLE001 - a missing module of its own (pydantic: carry the wheels, .whl)
        print(f"identity_speed kernelbench: KernelBench's eval does not import from {args.kernelbench}: "
              f"{type(error).__name__}: {error}", file=sys.stderr)
        return 2
    deadline = time.time() + args.deadline
    while True:
        done = {json.loads(line)["candidate"] for line in results.read_text().splitlines() if line.strip()} \
            if results.exists() else set()
        todo = [pair for pair in selection if pair["candidate"] not in done]
        if not todo or time.time() > deadline:
            print(f"kernelbench: {len(selection) - len(todo)} of {len(selection)} pairs done")
            return 0
        # A spawned child, started again past a pair that killed it (a CUDA fault ends a process).
        context = multiprocessing.get_context("spawn")
        child = context.Process(target=_kernelbench_rows, args=(str(Path(args.kernelbench).resolve()), todo,
                                                                str(results), deadline))
        child.start()
        child.join(max(1.0, deadline - time.time()) + 60)
        stopped = child.is_alive()  # still on a pair at the deadline: left for the next call
        if stopped:
            child.kill()
            child.join()
        after = sum(1 for line in results.read_text().splitlines() if line.strip()) if results.exists() else 0
        in_flight = after - len(done)
        if child.exitcode != 0 and not stopped and in_flight < len(todo):
            pair = todo[in_flight]  # the pair it died on (a CUDA fault ends the process)
            with open(results, "a") as handle:
                handle.write(json.dumps({"problem": pair["problem"], "candidate": pair["candidate"],
                                         "level": pair["level"],
                                         "error": f"KernelBench's process died (exit {child.exitcode})"}) + "\n")
        if stopped:
            print(f"kernelbench: stopped at the deadline; {len(todo) - in_flight} pairs left for the next call")
            return 0


# ----------------------------------------------------------------------------------------------
# The report


def bench_speedups(results: Path) -> list[dict]:
    """One row per pair of a bench run: its level, speedup vs eager (None unless passed), status
    and whether its eager baseline was flagged unstable."""
    from pytest_cudaagent.records.results_file import read_results

    rows = []
    for result in read_results(results):
        rows.append({"level": level_of(result.problem, result.candidate), "candidate": result.candidate,
                     "speedup": result.speedup_vs_eager if result.passed else None, "status": result.status,
                     "candidate_ms": result.timing["candidate"].median_ms if "candidate" in result.timing else None,
                     "eager_ms": result.timing["eager"].median_ms if "eager" in result.timing else None,
                     "unstable": any(w.rule == "unstable_baseline" for w in result.warnings),
                     "rounds": len(result.timing_rounds),
                     "rounds_ratio": statistics.median(pair["eager_ms"] / pair["candidate_ms"]
                                                       for pair in result.timing_rounds) if result.timing_rounds else None,
                     **{f"{side}_samples": [sample for round_ in result.timing_rounds
                                            for sample in round_.get(f"{side}_samples_ms", ())]
                        for side in ("candidate", "eager")}})
    return rows


# The estimators not chosen for a speedup in rounds (docs/timing.md, "Candidate and eager in
# rounds"), each read from a row.
def pooled_medians(row: dict) -> float:
    """Eager's median over the candidate's, every round's samples pooled."""
    return row["eager_ms"] / row["candidate_ms"]


def rounds_ratio(row: dict) -> float:
    """The median of the rounds' ratios (each round's eager median over its candidate median),
    the estimator tried before the lower deciles."""
    return row["rounds_ratio"]


def quantile_ratios(row: dict) -> float | None:
    """The median over the deciles q10..q90 of eager's q over the candidate's q, every round's
    samples pooled: on a host with a fast and a slow level, whatever share of calls the fast one
    takes, most deciles fall in the same level on both sides (the lower decile alone reads a fast
    level that one side met in three calls of forty and the other in two). None for rows of runs
    that kept no samples (before the eleventh session)."""
    candidate, eager = row.get("candidate_samples") or [], row.get("eager_samples") or []
    if len(candidate) < 2 or len(eager) < 2:
        return None
    return statistics.median(e / c for e, c in zip(statistics.quantiles(eager, n=10),
                                                   statistics.quantiles(candidate, n=10), strict=True))


def rows_read_by(rows: list[dict], speedup_of) -> list[dict]:
    """The rows timed in rounds with `speedup_of(row)` as their speedup in place of the lower
    deciles' ratio the Result reports: what that estimator would have read."""
    return [{**row, "speedup": speedup_of(row) if row["speedup"] else None}
            for row in rows if row.get("rounds", 0) > 1]


def kernelbench_speedups(results: Path) -> list[dict]:
    rows = []
    for line in results.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows.append({"level": str(row["level"]), "candidate": row["candidate"],
                         "speedup": row.get("kernelbench_speedup"), "status": "error" if "error" in row else "passed",
                         "candidate_ms": row.get("kernelbench_ms"), "eager_ms": row.get("kernelbench_eager_ms"),
                         "unstable": False})
    return rows


def distribution(speedups: list[float], band: tuple[float, float]) -> dict:
    """Median, 5th and 95th percentile, share within `band`, geomean."""
    if not speedups:
        return {"n": 0}
    ordered = sorted(speedups)

    def percentile(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]

    return {"n": len(ordered), "median": statistics.median(ordered), "p5": percentile(0.05), "p95": percentile(0.95),
            "within_band": sum(band[0] <= s <= band[1] for s in ordered) / len(ordered),
            "geomean": math.exp(sum(math.log(s) for s in ordered) / len(ordered))}


def summarise(rows_by_method: dict[str, list[dict]], band: tuple[float, float]) -> dict:
    """{level: {method: distribution + counts}}, with "all" over every level."""
    levels = sorted({row["level"] for rows in rows_by_method.values() for row in rows}, key=str)
    summary: dict = {}
    for level in [*levels, "all"]:
        summary[level] = {}
        for method, rows in rows_by_method.items():
            picked = [row for row in rows if level == "all" or row["level"] == level]
            speedups = [row["speedup"] for row in picked if row["speedup"]]
            summary[level][method] = {**distribution(speedups, band), "pairs": len(picked),
                                      "not_passed": sum(row["speedup"] is None for row in picked),
                                      "unstable_baseline": sum(row["unstable"] for row in picked)}
    return summary


def print_summary(summary: dict, band: tuple[float, float], console: Console) -> None:
    from rich.table import Table

    table = Table(title=f"identity candidates: speedup vs eager (target: median 1.00 +- 0.02, 90% within "
                        f"{band[0]}-{band[1]})")
    for column in ("level", "timed by", "pairs", "timed", "median", "p5", "p95", f"within {band[0]}-{band[1]}",
                   "not passed", "unstable eager"):
        table.add_column(column)
    for level, methods in summary.items():
        for method, stats in methods.items():
            if not stats["pairs"]:
                continue
            if stats["n"]:
                numbers = [f"{stats['median']:.3f}", f"{stats['p5']:.3f}", f"{stats['p95']:.3f}",
                           f"{100 * stats['within_band']:.0f}%"]
            else:
                numbers = ["-"] * 4
            table.add_row(level_label(level) if level != "all" else "all", method, str(stats["pairs"]),
                          str(stats["n"]), *numbers, str(stats["not_passed"]), str(stats["unstable_baseline"]))
    console.print(table)


def plot(rows_by_method: dict[str, list[dict]], path: Path, band: tuple[float, float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = sorted({row["level"] for rows in rows_by_method.values() for row in rows}, key=str)
    figure, axes = plt.subplots(1, len(levels), figsize=(4.5 * len(levels), 4), sharey=True, squeeze=False)
    for axis, level in zip(axes[0], levels, strict=True):
        data = [[row["speedup"] for row in rows if row["level"] == level and row["speedup"]]
                for rows in rows_by_method.values()]
        names = [name for name, values in zip(rows_by_method, data, strict=True) if values]
        data = [values for values in data if values]
        if data:
            axis.boxplot(data, whis=(5, 95), showfliers=True)
            axis.set_xticks(range(1, len(names) + 1), names)
        axis.axhspan(*band, color="tab:green", alpha=0.15)
        axis.axhline(1.0, color="tab:green", linewidth=0.8)
        axis.set_yscale("log")
        axis.set_title(level_label(level))
    axes[0][0].set_ylabel("speedup vs eager (identity: 1.00)")
    figure.suptitle("identity candidates, whiskers at the 5th and 95th percentile")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def report(args) -> int:
    out = Path(args.out)
    rows_by_method = {}
    for method in METHODS:
        source = out / ("kernelbench.jsonl" if method == "kernelbench" else f"{method}/results.jsonl")
        if source.exists():
            rows = rows_by_method[method] = (kernelbench_speedups if method == "kernelbench" else bench_speedups)(source)
            if method == "kernelbench" or not any(row.get("rounds", 0) > 1 for row in rows):
                continue
            # The rows timed in rounds again, read by each estimator not chosen.
            estimators = [("pooled medians", pooled_medians), ("rounds' ratios", rounds_ratio)]
            if any(row.get("candidate_samples") for row in rows):
                estimators.append(("quantile ratios", quantile_ratios))
            for label, speedup_of in estimators:
                rows_by_method[f"{method}, {label}"] = rows_read_by(rows, speedup_of)
    if not rows_by_method:
        print(f"identity_speed report: nothing under {out} yet (run alone, batched or kernelbench first)",
              file=sys.stderr)
        return 2
    summary = summarise(rows_by_method, BAND)
    print_summary(summary, BAND, Console(width=160))
    outliers = [(method, row) for method, rows in rows_by_method.items() for row in rows
                if row["speedup"] and not BAND[0] <= row["speedup"] <= BAND[1]]
    for method, row in sorted(outliers, key=lambda item: item[1]["speedup"])[:40]:
        print(f"outside {BAND[0]}-{BAND[1]}: {method} {Path(row['candidate']).name} {row['speedup']:.3f} "
              f"(candidate {row['candidate_ms']:.4f} ms, eager {row['eager_ms']:.4f} ms"
              f"{', eager unstable' if row['unstable'] else ''})")
    if args.plot:
        plot(rows_by_method, Path(args.plot), BAND)
    if args.json:
        without_samples = {method: [{key: value for key, value in row.items() if not key.endswith("_samples")}
                                    for row in rows] for method, rows in rows_by_method.items()}
        Path(args.json).write_text(json.dumps({"summary": summary, "rows": without_samples}, indent=1, default=str))
    return 0


# ----------------------------------------------------------------------------------------------
# The CPU backend: bundled and test problems, alone


def cpu(args) -> int:
    out = Path(args.out).resolve()
    problems_dir, candidates_dir = out / "problems", out / "candidates"
    for folder in (problems_dir, candidates_dir):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    origin = {}
    for name, directory in CPU_PROBLEM_DIRS.items():
        for problem in load_flat(directory):
            if problem.name in CPU_SKIPPED or (args.name and not fnmatch.fnmatch(problem.name, args.name)):
                continue
            copied = problems_dir / f"{name}__{problem.name}"
            shutil.copyfile(problem.path, copied)
            origin[copied.stem] = name
    written = write_identity_set(load_flat(problems_dir), candidates_dir)
    print(f"{len(written)} identity candidates of the bundled and test problems in {candidates_dir}", flush=True)
    pairs = pair_solutions(load_flat(problems_dir), candidates_dir).pairs
    # reserved_cpus has no option: set in the EvalConfig the run gets whole (--cudaagent-config).
    timing = TimingConfig() if args.reserved_cpus is None else TimingConfig(reserved_cpus=args.reserved_cpus)
    if args.cpu_flush_mib is not None:
        timing = dataclasses.replace(timing, cpu_flush_bytes=int(args.cpu_flush_mib * 2**20))
    if args.timing_rounds:
        timing = dataclasses.replace(timing, timing_rounds=args.timing_rounds)
    runs = []
    for repeat in range(args.repeats):
        results = out / f"run-{repeat}" / "results.jsonl"
        results.parent.mkdir(parents=True, exist_ok=True)
        # Each repeat with a fresh cache: its eager times are its own, measured beside its candidates
        # (named in the config: CUDAAGENT_CACHE set after it was made was read by nothing, and the
        # three repeats of 2026-11-26 shared the user's cache, one eager time per problem).
        cache = out / f"cache-{repeat}"
        shutil.rmtree(cache, ignore_errors=True)
        os.environ["CUDAAGENT_CACHE"] = str(cache)
        settings = BatchSettings(EvalConfig(device="cpu", baselines=("eager",), policy="calibration", timing_config=timing,
                                            cache_dir=cache), workers=args.workers,
                                 start_ahead=not args.no_start_ahead)
        print(f"repeat {repeat}: {len(pairs)} pairs, cudaagent bench --device cpu --policy calibration --baselines "
              f"eager --workers {args.workers}" + (f", reserved_cpus={args.reserved_cpus}" if args.reserved_cpus is not None else ""),
              flush=True)
        run_batch(pairs, results, settings, resume=True, console=Console(quiet=args.quiet))
        runs.append(bench_speedups(results) if results.exists() else [])
    table = cpu_table(runs, origin)
    _print_cpu_table(table)
    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=1))
    return 0


def cpu_table(runs: list[list[dict]], origin: dict[str, str]) -> dict:
    by_problem: dict[str, list] = {}
    for rows in runs:
        for row in rows:
            stem = Path(row["candidate"]).stem
            by_problem.setdefault(stem, []).append(row)
    problems = []
    for stem, rows in sorted(by_problem.items()):
        speedups = [row["speedup"] for row in rows if row["speedup"]]
        median = statistics.median(speedups) if speedups else None
        problems.append({"problem": stem.split("__", 1)[-1], "from": origin.get(stem, "?"), "speedups": speedups,
                         "median": median, "statuses": sorted({row["status"] for row in rows}),
                         "candidate_ms": statistics.median([r["candidate_ms"] for r in rows if r["candidate_ms"]] or [0]),
                         "eager_ms": statistics.median([r["eager_ms"] for r in rows if r["eager_ms"]] or [0]),
                         "within": median is not None and CPU_BAND[0] <= median <= CPU_BAND[1]})
    timed = [row for row in problems if row["median"] is not None]
    return {"band": CPU_BAND, "problems": problems, "timed": len(timed),
            "within": sum(row["within"] for row in timed), "load_average": os.getloadavg()}


def _print_cpu_table(table: dict) -> None:
    from rich.table import Table

    view = Table(title=f"CPU backend, identity candidates (median of repeats; target {CPU_BAND[0]}-{CPU_BAND[1]})")
    for column in ("problem", "from", "speedups", "median", "candidate ms", "eager ms", "within", "status"):
        view.add_column(column)
    for row in table["problems"]:
        view.add_row(row["problem"], row["from"], " ".join(f"{s:.2f}" for s in row["speedups"]),
                     f"{row['median']:.3f}" if row["median"] is not None else "-", f"{row['candidate_ms']:.4f}",
                     f"{row['eager_ms']:.4f}", "yes" if row["within"] else "NO", ",".join(row["statuses"]))
    Console(width=160).print(view)
    print(f"within {CPU_BAND[0]}-{CPU_BAND[1]}: {table['within']} of {table['timed']} timed "
          f"(load average {', '.join(f'{v:.1f}' for v in table['load_average'])})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.identity_speed", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("phase", choices=("make", "alone", "batched", "kernelbench", "report", "cpu"))
    parser.add_argument("--out", required=True, help="the run's directory (candidates, bench outputs, rows)")
    parser.add_argument("--kernelbench", default=".kernelbench", help="a KernelBench clone (default .kernelbench)")
    parser.add_argument("--level", default="1,2,3")
    parser.add_argument("--subset", default=str(SUBSET),
                        help="make: the problems to take, a subset file (default: the committed one, 52 pairs), "
                             "or 'all' for every problem of --level")
    parser.add_argument("--max-set-mib", type=float,
                        help="make: instead of --subset, every problem whose inputs and outputs fit this (sized on "
                             "the meta device: minutes for 250 problems)")
    parser.add_argument("--per-level", type=int, help="make: with --max-set-mib, at most this many per level, evenly spread")
    parser.add_argument("--save-subset", help="make: write what was chosen as a subset file")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--workers", type=int, help="batched: xdist workers (default: cudaagent bench's)")
    parser.add_argument("--deadline", type=float, default=540.0, help="kernelbench: stop starting pairs after this many s")
    parser.add_argument("--repeats", type=int, default=1, help="cpu: bench runs, each with a fresh cache")
    parser.add_argument("--quiet", action="store_true", help="cpu: hide the bench runs' own output")
    parser.add_argument("--name", help="cpu: only problem files whose name matches this glob")
    parser.add_argument("--reserved-cpus", type=int,
                        help="cpu: TimingConfig.reserved_cpus for the runs (default: the machine's own; none "
                             "below four cores)")
    parser.add_argument("--timing-rounds", type=int,
                        help="alone/batched/cpu: the candidate and eager timed in N alternating rounds (--timing-rounds)")
    parser.add_argument("--cpu-flush-mib", type=float, help="cpu: the cache flush before each timed call (0: none)")
    parser.add_argument("--no-start-ahead", action="store_true",
                        help="cpu: no candidate's worker started while another is timed (cudaagent bench --no-start-ahead)")
    parser.add_argument("--json", help="report/cpu: write the numbers here")
    parser.add_argument("--plot", help="report: a PNG of the distributions per level")
    args = parser.parse_args(argv)
    if args.phase == "cpu":
        args.workers = args.workers or 1
    phases = {"make": make, "alone": lambda a: run_bench(a, "alone"), "batched": lambda a: run_bench(a, "batched"),
              "kernelbench": run_kernelbench, "report": report, "cpu": cpu}
    return phases[args.phase](args)


if __name__ == "__main__":
    sys.exit(main())

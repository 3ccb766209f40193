"""Measures `cudaagent bench`'s wall time against a KernelBench-style sequential loop (README, Measured: "Harness throughput").

Benchmark: end-to-end wall time of `cudaagent bench` (this harness: parallel builds under
pytest-xdist, per-GPU timing lock, baselines once per problem) against a plain sequential loop
that builds, checks and times each candidate in one process the way KernelBench's eval does
(build, 5 correctness checks at atol=rtol=1e-2, 3 warm-ups + 100 timed calls with CUDA events,
eager and torch.compile baselines once per problem), on the same freshly generated candidates
with every cache empty. Prints the tables and the time split per candidate; `--json` saves them.

    python -m experiments.harness_throughput --device cuda --count 20 --json throughput.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmark.batch import BatchSettings, batch_device, run_batch
from benchmark.kernelbench import EXAMPLES_PROBLEMS, load_flat
from benchmark.solutions import pair_solutions
from experiments.harness_timeline import ARRIVALS_FILE, LOCK_LOG_FILE, ArrivalWatch
from experiments.throughput_templates import Variant, write_candidates
from pytest_cudaagent.core.config import EvalConfig
from pytest_cudaagent.core.result import Result

# KernelBench's eval: 5 correctness trials, then 3 warm-ups and 100 timed trials.
CHECKS, WARMUPS, TRIALS = 5, 3, 100
TOLERANCE = 1e-2
HARNESS_PHASES = ("reference", "build", "construct", "correctness", "timing", "baselines")


def fresh_cache_env(root: Path) -> dict[str, str]:
    """Every cache a run could reuse, pointed at empty directories: extension builds, the
    evaluator's baseline cache, inductor and Triton."""
    names = {"CUDAAGENT_CACHE": "cudaagent", "TORCH_EXTENSIONS_DIR": "torch_extensions",
             "TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton"}
    env = {}
    for variable, name in names.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        env[variable] = str(root / name)
    return env


# -- the sequential loop (runs in its own process: `--sequential MANIFEST OUT`) -----------------


def _time_calls_ms(fn, inputs, device: str) -> list[float]:
    import torch

    for _ in range(WARMUPS):
        fn(*inputs)
    if device == "cuda":
        torch.cuda.synchronize()
    samples = []
    for _ in range(TRIALS):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(*inputs)
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end))
        else:
            began = time.perf_counter()
            fn(*inputs)
            samples.append((time.perf_counter() - began) * 1e3)
    return samples


def sequential_eval(problem_path: Path, candidate_path: Path, device: str, seed: int = 42) -> dict:
    """KernelBench-style: import (builds), construct both models from one seed, CHECKS fresh
    inputs compared with allclose, then time the candidate. Returns the verdict and phase times."""
    import statistics

    import torch

    from pytest_cudaagent.core.files import import_file

    record = {"candidate": str(candidate_path), "verdict": "correct", "seconds": {}}
    problem = import_file(problem_path, f"throughput_problem_{problem_path.stem}")
    began = time.perf_counter()
    try:
        module = import_file(candidate_path, f"throughput_candidate_{candidate_path.stem}")
    except Exception as error:  # a build failure is a verdict, not a crash of the loop
        record.update(verdict="build_error", error=str(error)[-300:])
        return record
    finally:
        record["seconds"]["build"] = time.perf_counter() - began
    began = time.perf_counter()
    try:
        with torch.no_grad():
            init_inputs = problem.get_init_inputs()
            torch.manual_seed(seed)
            reference = problem.Model(*init_inputs).to(device)
            torch.manual_seed(seed)
            candidate = module.ModelNew(*init_inputs).to(device)
            for check in range(CHECKS):
                torch.manual_seed(seed + 1 + check)
                inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
                expected, got = reference(*inputs), candidate(*inputs)
                if got.shape != expected.shape or not torch.allclose(got, expected, atol=TOLERANCE, rtol=TOLERANCE):
                    record["verdict"] = "incorrect"
                    break
    except Exception as error:
        record.update(verdict="runtime_error", error=str(error)[-300:])
    record["seconds"]["correctness"] = time.perf_counter() - began
    if record["verdict"] == "correct":
        began = time.perf_counter()
        with torch.no_grad():
            record["candidate_ms"] = statistics.fmean(_time_calls_ms(candidate, inputs, device))
        record["seconds"]["timing"] = time.perf_counter() - began
    return record


def sequential_baselines(problem_path: Path, device: str) -> dict:
    import statistics

    import torch

    from pytest_cudaagent.core.files import import_file

    problem = import_file(problem_path, f"throughput_baseline_{problem_path.stem}")
    began = time.perf_counter()
    with torch.no_grad():
        model = problem.Model(*problem.get_init_inputs()).to(device)
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
        times = {"eager_ms": statistics.fmean(_time_calls_ms(model, inputs, device)),
                 "compile_ms": statistics.fmean(_time_calls_ms(torch.compile(model), inputs, device))}
    return {**times, "seconds": time.perf_counter() - began}


def run_sequential(manifest: Path, out: Path, device: str) -> None:
    pairs = json.loads(manifest.read_text())
    records, baselines = [], {}
    for pair in pairs:
        problem = Path(pair["problem"])
        if problem.name not in baselines:  # once per problem, as the harness's cache does
            baselines[problem.name] = sequential_baselines(problem, device)
        records.append(sequential_eval(problem, Path(pair["candidate"]), device))
    out.write_text(json.dumps({"candidates": records, "baselines": baselines}, indent=1))


# -- the comparison -----------------------------------------------------------------------------


def run_harness(pairs, work: Path, device: str, workers: int | None, console: Console,
                start_ahead: bool = True) -> tuple[float, list]:
    os.environ.update(fresh_cache_env(work / "harness-caches"))
    # The timing lock's holds and each Result's arrival: harness_timeline's input.
    lock_log = work / LOCK_LOG_FILE
    lock_log.unlink(missing_ok=True)
    os.environ["CUDAAGENT_LOCK_LOG"] = str(lock_log)
    settings = BatchSettings(EvalConfig(device=device, trials=CHECKS, baselines=("eager", "compile")), workers=workers,
                             start_ahead=start_ahead)
    results_path = work / "harness" / "results.jsonl"
    began, began_unix_ns = time.perf_counter(), time.time_ns()
    with ArrivalWatch(results_path, began) as watch:
        outcome = run_batch(pairs, results_path, settings, console=console)
    wall_s = time.perf_counter() - began
    (work / ARRIVALS_FILE).write_text(json.dumps({"began_unix_ns": began_unix_ns, "wall_s": wall_s,
                                                  "arrivals": watch.arrivals}, indent=1))
    return wall_s, outcome


def run_sequential_process(pairs, work: Path, device: str) -> tuple[float, dict]:
    manifest, out = work / "sequential-pairs.json", work / "sequential.json"
    manifest.write_text(json.dumps([{"problem": str(p.problem), "candidate": str(p.candidate)} for p in pairs]))
    env = {**os.environ, **fresh_cache_env(work / "sequential-caches"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]),
                                                       os.environ.get("PYTHONPATH")]))}
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "experiments.harness_throughput", "--sequential", str(manifest), str(out),
                    "--device", device], env=env, check=True)
    return time.perf_counter() - began, json.loads(out.read_text())


def _seconds(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def compare_runs(variants, harness_results, sequential: dict, harness_s: float, sequential_s: float,
                 workers: int, console: Console) -> dict:
    by_name = {Path(result.candidate).name: result for result in harness_results}
    seq_by_name = {Path(record["candidate"]).name: record for record in sequential["candidates"]}
    per_candidate = Table("candidate", "wrong on purpose", "harness", "sequential", "same verdict",
                          *[f"h {phase}" for phase in HARNESS_PHASES], "s build", "s check", "s time",
                          title="per candidate (h: harness phase seconds, s: sequential loop seconds)")
    rows, same = [], 0
    for variant in variants:
        result, record = by_name.get(variant.file_name), seq_by_name.get(variant.file_name, {})
        harness_ok = bool(result and result.passed)
        agree = harness_ok == (record.get("verdict") == "correct")
        same += agree
        phases = result.phase_seconds if result else {}
        row = {"candidate": variant.file_name, "wrong": variant.wrong,
               "harness_status": result.status if result else "missing", "sequential_verdict": record.get("verdict"),
               "same_verdict": agree, "harness_phase_seconds": phases, "sequential_seconds": record.get("seconds", {})}
        rows.append(row)
        per_candidate.add_row(variant.file_name, "yes" if variant.wrong else "", row["harness_status"],
                              str(record.get("verdict")), "yes" if agree else "[red]NO[/]",
                              *[_seconds(phases.get(phase)) for phase in HARNESS_PHASES],
                              *[_seconds(record.get("seconds", {}).get(phase)) for phase in ("build", "correctness", "timing")])
    totals = {phase: sum(row["harness_phase_seconds"].get(phase, 0.0) for row in rows) for phase in HARNESS_PHASES}
    seq_totals = {phase: sum(row["sequential_seconds"].get(phase, 0.0) for row in rows)
                  for phase in ("build", "correctness", "timing")}
    seq_totals["baselines"] = sum(item["seconds"] for item in sequential["baselines"].values())
    console.print(per_candidate)
    summary = Table("run", "wall s", "candidates", "correct", "workers", "build s", "correctness s",
                    "timing s", "baselines s", title="end to end")
    summary.add_row("cudaagent bench", f"{harness_s:.1f}", str(len(rows)),
                    str(sum(r.passed for r in harness_results)), str(workers), f"{totals['build']:.1f}",
                    f"{totals['correctness']:.1f}", f"{totals['timing']:.1f}", f"{totals['baselines']:.1f}")
    summary.add_row("sequential loop", f"{sequential_s:.1f}", str(len(rows)),
                    str(sum(r["verdict"] == "correct" for r in sequential["candidates"])), "1",
                    f"{seq_totals['build']:.1f}", f"{seq_totals['correctness']:.1f}", f"{seq_totals['timing']:.1f}",
                    f"{seq_totals['baselines']:.1f}")
    console.print(summary)
    console.print(f"speedup end to end: {sequential_s / harness_s:.2f}x; identical verdicts: {same}/{len(rows)} "
                  "(harness phase seconds are summed over workers running at once)", highlight=False)
    return {"harness_wall_s": harness_s, "sequential_wall_s": sequential_s, "speedup": sequential_s / harness_s,
            "identical_verdicts": same == len(rows), "workers": workers, "harness_phase_totals_s": totals,
            "sequential_phase_totals_s": seq_totals, "candidates": rows}


PHASES = ("all", "harness", "sequential", "report")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--count", type=int, default=20, help="candidates to generate (default 20)")
    parser.add_argument("--workers", type=int, help="harness xdist workers (default: cudaagent bench's)")
    parser.add_argument("--work", help="keep the generated candidates and runs here (default: a temp dir)")
    parser.add_argument("--phase", choices=PHASES, default="all",
                        help="run one half at a time in the same --work (the sequential loop over 20 cold "
                             "CUDA builds takes over ten minutes), then 'report' compares them")
    parser.add_argument("--json", help="write the tables as JSON to this file")
    parser.add_argument("--no-start-ahead", action="store_true",
                        help="the harness as `cudaagent bench --no-start-ahead` (to measure what starting each "
                             "worker's next candidate ahead gains)")
    parser.add_argument("--sequential", nargs=2, metavar=("MANIFEST", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    device = batch_device(args.device)
    if args.sequential:
        run_sequential(Path(args.sequential[0]), Path(args.sequential[1]), device)
        return 0
    if args.phase != "all" and not args.work:
        parser.error(f"--phase {args.phase} needs --work DIR, shared by the phases")
    # Wide enough for the per-candidate table when the output goes to a file.
    console = Console(width=None if sys.stdout.isatty() else 200)
    with tempfile.TemporaryDirectory(prefix="cudaagent-throughput-") as temporary:
        work = Path(args.work or temporary)
        variants = load_or_write_candidates(work, device, args.count)
        pairs = pair_solutions(load_flat(EXAMPLES_PROBLEMS), work / "candidates").pairs
        if args.phase in ("all", "harness"):
            console.print(f"{len(pairs)} fresh candidates on {device}: the harness")
            harness_s, outcome = run_harness(pairs, work, device, args.workers, console,
                                             start_ahead=not args.no_start_ahead)
            save_wall(work, "harness", harness_s, workers=outcome.workers, start_ahead=not args.no_start_ahead)
        if args.phase in ("all", "sequential"):
            console.print(f"{len(pairs)} fresh candidates on {device}: the sequential loop")
            sequential_s, _ = run_sequential_process(pairs, work, device)
            save_wall(work, "sequential", sequential_s)
        if args.phase not in ("all", "report"):
            return 0
        walls = load_walls(work)
        missing = [half for half in ("harness", "sequential") if half not in walls]
        if missing:
            console.print(f"[red]{work} has no {' or '.join(missing)} run yet: run --phase {missing[0]} first")
            return 2
        harness_results = [Result.from_json(line) for line in
                           (work / "harness" / "results.jsonl").read_text().splitlines() if line.strip()]
        sequential = json.loads((work / "sequential.json").read_text())
        report = compare_runs(variants, harness_results, sequential, walls["harness"]["wall_s"],
                              walls["sequential"]["wall_s"], walls["harness"]["workers"], console)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0 if report["identical_verdicts"] else 1


WALLS_FILE = "walls.json"


def save_wall(work: Path, half: str, wall_s: float, **extra) -> None:
    walls = load_walls(work)
    walls[half] = {"wall_s": wall_s, **extra}
    (work / WALLS_FILE).write_text(json.dumps(walls, indent=1))


def load_walls(work: Path) -> dict:
    path = work / WALLS_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def load_or_write_candidates(work: Path, device: str, count: int):
    """The same candidates for every phase: written once, their list kept next to them."""
    listing = work / "candidates.json"
    if listing.is_file():
        return [Variant(**item) for item in json.loads(listing.read_text())]
    variants = write_candidates(work / "candidates", device, count)
    listing.write_text(json.dumps([dataclasses.asdict(v) for v in variants]))
    return variants


if __name__ == "__main__":
    sys.exit(main())

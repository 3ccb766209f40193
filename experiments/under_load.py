"""Under load, the same verdict as alone (issue #38): bench runs of honest pairs, alone (`--workers
1`) and at the default worker count under each memory policy, compared pair by pair; README,
"Device memory under load", quotes its table.

    # 1. The pairs (no GPU needed; a minute): KernelBench's problems with their own Model as
    #    candidate (identity_set.py), sized on the meta device, and our own cases that are heavy
    #    on GPU memory (under_load_cases/), several identical samples each. Prints the bench
    #    commands with each one's estimated time alone.
    python -m experiments.under_load prepare --kernelbench .kernelbench --out DIR \
        [--level 1,2,3] [--max-set-gib G] [--large-samples 4]
    # 2. The runs: plain `cudaagent bench` (timing on or off; #40's identity runs serve too).
    # 3. The report: bench output directories as LABEL=DIR, the first the baseline (alone).
    python -m experiments.under_load report alone=DIR loaded=DIR [retry=DIR ...] \
        [--json FILE] [--markdown]

The report reads each DIR's results.jsonl (every row, duplicates included), the pairs its last
bench invocation planned (.bench-run/pairs.json, or pairs.json beside it) and its pytest.log (wall time, workers, memory
policy), and says per run: rows per pair, verdicts by whose fault, out-of-memory verdicts, harness
errors, retries and why, admission waits, wall time; then each run's verdicts against the
baseline's, pair by pair (the large cases' samples are byte-identical copies: a sample the
baseline did not run is matched with its problem's verdict there).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import re
import shutil
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from benchmark.kernelbench import load_tree, select
from experiments.identity_set import identity_source, write_identity_set
from pytest_cudaagent.core.result import (
    CANDIDATE_STATUSES,
    HARNESS_STATUSES,
    PROBLEM_STATUSES,
    Result,
)
from pytest_cudaagent.records.results_file import read_results

CASES = Path(__file__).resolve().parent / "under_load_cases"
# A case heavy on the host (2 GiB a set, about 46 GiB of host memory per evaluation with timing):
# two samples, so that even without admission (the retry policy) two at once fit the H100 machine.
HOST_HEAVY = {"relu_1g": 2}
GIB = 1024**3

# The estimate of a pair's time alone, from the README's H100 figures: a warm evaluation of a
# small problem with timing and the eager baseline took 4.4-8.7 s (zygote table); each set moved
# costs about a second per GiB (drawn on the GPU and copied to the host and into shared memory by
# the reference, lent, copied to the GPU and back for the candidate, its outputs compared in the
# parent at about 0.6 GB/s: leaky_relu's 16M-element outputs took 2.2 s over an evaluation).
FIXED_S = 7.0
SECONDS_PER_SET_GIB = 1.0
TRIALS, ROTATING, MIN_TIMED = 5, 3, 10  # EvalConfig's defaults: trials, rotating sets, timed calls at least
HOST_CAP_GIB = 32.0  # the reference's host-memory cap on the 125 GiB H100 machine (host_memory.py)


def set_bytes(problem: Path) -> int | None:
    """One set's inputs and outputs, sized on the meta device (None where the problem does not run there)."""
    import torch

    try:
        spec = importlib.util.spec_from_file_location(f"under_load_{problem.stem}", problem)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        with torch.device("meta"), torch.no_grad():
            inputs = list(module.get_inputs())
            outputs = module.Model(*module.get_init_inputs())(*inputs)
    except Exception:  # noqa: BLE001 - .item(), a host generator, an operator without a meta kernel
        return None
    outputs = outputs if isinstance(outputs, (tuple, list)) else [outputs]
    return sum(value.numel() * value.element_size() for value in [*inputs, *outputs] if isinstance(value, torch.Tensor))


def estimate_seconds(size: int | None, timing: bool = True) -> tuple[float, str]:
    """A pair's seconds alone, and its expected fate: "runs", or "host cap" where the sets its
    reference holds (trials and rotating ones) pass the host-memory cap, so it is killed there
    (problem_error) after drawing that much."""
    if size is None:
        return FIXED_S, "runs (size unknown)"
    set_gib = size / GIB
    held = (TRIALS + (ROTATING if timing else 0)) * set_gib
    if held > HOST_CAP_GIB:
        return FIXED_S + SECONDS_PER_SET_GIB * HOST_CAP_GIB, "host cap"
    moved = 2 * TRIALS - 1 + (ROTATING + MIN_TIMED + 2 * ROTATING if timing else 0)
    return FIXED_S + SECONDS_PER_SET_GIB * set_gib * moved, "runs"


# -- prepare ----------------------------------------------------------------------------------


def prepare(kernelbench: Path | None, levels: list[str], out: Path, max_set_gib: float | None,
            large_samples: int) -> dict:
    plan: dict = {"identity": [], "large": []}
    if kernelbench is not None:
        chosen = []
        for problem in select(load_tree(kernelbench), levels):
            size = set_bytes(problem.path)
            if max_set_gib is not None and size is not None and size > max_set_gib * GIB:
                continue
            seconds, fate = estimate_seconds(size)
            plan["identity"].append({"level": problem.level, "problem": problem.name, "set_gib": _gib(size),
                                     "estimated_s_alone": round(seconds, 1), "fate": fate})
            chosen.append(problem)
        write_identity_set(chosen, out / "identity")
    # candidates/: every sample, for the loaded runs; one/: sample 0 alone, for the run alone (the
    # samples are the same file, so their verdict alone is one).
    problems_dir, candidates_dir, one_dir = (out / "large" / name for name in ("problems", "candidates", "one"))
    for directory in (problems_dir, candidates_dir, one_dir):
        directory.mkdir(parents=True, exist_ok=True)
    for case in sorted(CASES.glob("*.py")):
        shutil.copy(case, problems_dir / case.name)
        samples = min(large_samples, HOST_HEAVY.get(case.stem, large_samples))
        for sample in range(samples):
            (candidates_dir / f"{case.stem}_sample_{sample}.py").write_text(identity_source(case.read_text()))
        shutil.copy(candidates_dir / f"{case.stem}_sample_0.py", one_dir / f"{case.stem}_sample_0.py")
        size = set_bytes(case)
        seconds, fate = estimate_seconds(size)
        plan["large"].append({"problem": case.name, "samples": samples, "set_gib": _gib(size),
                              "estimated_s_alone": round(seconds * samples, 1), "fate": fate})
    (out / "plan.json").write_text(json.dumps(plan, indent=1))
    return plan


def _gib(size: int | None) -> float | None:
    return None if size is None else round(size / GIB, 3)


def print_plan(plan: dict, out: Path, kernelbench: Path | None) -> None:
    identity = plan["identity"]
    if identity:
        by_level = Counter(row["level"] for row in identity)
        for level in sorted(by_level):
            rows = [row for row in identity if row["level"] == level]
            capped = sum(row["fate"] == "host cap" for row in rows)
            print(f"identity level {level}: {len(rows)} pairs, estimated {sum(r['estimated_s_alone'] for r in rows):.0f} s "
                  f"alone with timing; {capped} whose reference passes the {HOST_CAP_GIB:g} GiB host cap")
        print(f"  cudaagent bench --kernelbench {kernelbench} --level {','.join(sorted(by_level))} --candidates "
              f"{out / 'identity'} --policy calibration --baselines eager --workers 1 --out RUN_ALONE")
    large = plan["large"]
    alone = sum(row["estimated_s_alone"] / row["samples"] for row in large)
    print(f"large cases: {sum(row['samples'] for row in large)} pairs, estimated "
          f"{sum(row['estimated_s_alone'] for row in large):.0f} s alone with timing; one sample each {alone:.0f} s")
    print(f"  cudaagent bench --problems {out / 'large' / 'problems'} --candidates {out / 'large' / 'one'} "
          "--policy calibration --baselines eager --workers 1 --out RUN_ALONE")
    print(f"  cudaagent bench --problems {out / 'large' / 'problems'} --candidates {out / 'large' / 'candidates'} "
          "--policy calibration --baselines eager [--memory-policy retry] --out RUN_LOADED")


# -- report -----------------------------------------------------------------------------------


@dataclass
class Run:
    label: str
    directory: Path
    rows: list[Result]
    planned: list[tuple[str, str]] = field(default_factory=list)  # (problem name, candidate name)
    wall_s: float | None = None
    cut: bool = False  # stopped at its time limit: its wall time is the limit's, its pairs those finished
    workers: int | None = None
    policy: str | None = None

    @classmethod
    def read(cls, label: str, directory: Path) -> Run:
        results = directory / "results.jsonl"
        if not results.is_file():
            raise SystemExit(f"{directory}: no results.jsonl (a `cudaagent bench --out` directory)")
        run = cls(label, directory, read_results(results))
        # The bench's own, or a copy beside the results (gpu_evidence.sh brings it back so).
        manifest = next((path for path in (directory / ".bench-run" / "pairs.json", directory / "pairs.json")
                         if path.is_file()), None)
        if manifest is not None:
            run.planned = [(Path(row["problem"]).name, Path(row["candidate"]).name)
                           for row in json.loads(manifest.read_text())]
        log = directory / "pytest.log"
        if log.is_file():
            text = log.read_text(errors="replace")
            command = text.splitlines()[0] if text else ""
            walls = re.findall(r" in ([0-9.]+)s\b", text)
            run.wall_s = float(walls[-1]) if walls else None
            workers = re.search(r" -n (\d+)", command)
            run.workers = int(workers.group(1)) if workers else None
            policy = re.search(r"--cudaagent-memory-policy (\S+)", command)
            run.policy = policy.group(1) if policy else None
        timed = directory / "wall.txt"  # gpu_evidence.sh's: "seconds exit-status", for a run cut short too
        if run.wall_s is None and timed.is_file():
            seconds, _, status = timed.read_text().partition(" ")
            run.wall_s = float(seconds)
            run.cut = status.strip() == "124"
        if run.policy is None:
            policies = {row.env.get("memory", {}).get("policy") for row in run.rows} - {None}
            run.policy = ", ".join(sorted(policies)) or "none (before #38)"
        return run

    def last_rows(self) -> dict[tuple[str, str], Result]:
        return {_key(row): row for row in self.rows}


def _key(result: Result) -> tuple[str, str]:
    return Path(result.problem).name, Path(result.candidate).name


def verdict(result: Result | None) -> str:
    if result is None:
        return "no row"
    if result.status == "violation" and result.violations:
        return f"violation:{result.violations[0].rule}"
    return result.status


def out_of_memory_verdict(result: Result) -> bool:
    return result.status != "passed" and "out of memory" in (result.error or "").lower()


def run_summary(run: Run) -> dict:
    rows_per_pair = Counter(_key(row) for row in run.rows)
    last = run.last_rows()
    statuses = Counter(row.status for row in last.values())
    retried = [row.env["retried"] for row in last.values() if "retried" in row.env]
    memory = [row.env.get("memory", {}) for row in last.values()]
    waits = [note.get("waited_s", 0.0) for note in memory]
    return {
        "run": run.label, "workers": run.workers, "memory policy": run.policy, "wall s": run.wall_s, "cut": run.cut,
        "pairs": len(last), "rows": len(run.rows),
        "pairs without a row": len(set(run.planned) - set(rows_per_pair)),
        "pairs with more than one row": sum(count > 1 for count in rows_per_pair.values()),
        "passed": statuses["passed"],
        "candidate's failures": sum(statuses[status] for status in CANDIDATE_STATUSES),
        "problem's failures": sum(statuses[status] for status in PROBLEM_STATUSES),
        "harness errors": sum(statuses[status] for status in HARNESS_STATUSES),
        "out-of-memory verdicts": sum(out_of_memory_verdict(row) for row in last.values()),
        "retried for memory": sum(note["why"].startswith("out of memory") for note in retried),
        "retried for a kill": sum(not note["why"].startswith("out of memory") for note in retried),
        "waited over 1 s (pairs)": sum(wait > 1.0 for wait in waits),
        "waited s (sum)": round(sum(waits), 1),  # for room (admission) and for the gate (a retry alone)
        "sized on the meta device": sum("reference.sizes" in row.profile for row in last.values()),
        "statuses": dict(statuses),
    }


def compare(baseline: Run, run: Run) -> tuple[dict, list[dict]]:
    """Pairs of both runs with their verdicts; a pair the baseline did not run is matched with its
    problem's verdict there when every sample of that problem the baseline ran agrees."""
    before, after = baseline.last_rows(), run.last_rows()
    by_problem: dict[str, set[str]] = {}
    for (problem, _), row in before.items():
        by_problem.setdefault(problem, set()).add(verdict(row))
    same, matched_by_problem, differences = 0, 0, []
    for key, row in sorted(after.items()):
        if key in before:
            expected = verdict(before[key])
        elif len(by_problem.get(key[0], ())) == 1:
            expected = next(iter(by_problem[key[0]]))
            matched_by_problem += 1
        else:
            continue
        if verdict(row) == expected:
            same += 1
        else:
            differences.append({"run": run.label, "problem": key[0], "candidate": key[1], baseline.label: expected,
                                run.label: verdict(row), "error": (row.error or "")[:200]})
    return {"run": run.label, "against": baseline.label, "compared": same + len(differences), "same verdict": same,
            "different": len(differences), "matched by problem": matched_by_problem}, differences


def report(runs: list[Run]) -> dict:
    summaries = [run_summary(run) for run in runs]
    comparisons, differences = [], []
    for run in runs[1:]:
        summary, found = compare(runs[0], run)
        comparisons.append(summary)
        differences += found
    return {"runs": summaries, "against the baseline": comparisons, "differences": differences}


def print_report(found: dict, markdown: bool) -> None:
    import pandas as pd

    from benchmark.leaderboard import markdown_table

    runs = pd.DataFrame([{key: value for key, value in row.items() if key != "statuses"} for row in found["runs"]])
    tables = [("Runs", runs.set_index("run").T.reset_index().rename(columns={"index": "run"})),
              ("Verdicts against the baseline", pd.DataFrame(found["against the baseline"])),
              ("Pairs whose verdict differs", pd.DataFrame(found["differences"]))]
    for title, table in tables:
        if markdown:
            print(f"## {title}\n\n{markdown_table(table)}")
        else:
            print(f"== {title}")
            print(table.to_string(index=False) if not table.empty else "(none)")


def rows_of_shard(results: Path, shard_text: str) -> list[str]:
    """The lines of a results file (one unsharded bench's) whose problems shard I/N holds, as
    `cudaagent bench --shard I/N` assigns KernelBench problems (by level and file name): what that
    shard resumes from."""
    from benchmark.shards import parse_shard, problem_key, shard_of

    shard = parse_shard(shard_text)
    kept = []
    for line in results.read_text().splitlines(keepends=True):
        problem = Path(json.loads(line)["problem"])
        if shard_of(problem_key(problem.parent.name, problem.name), shard.count) == shard.index:
            kept.append(line)
    return kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.under_load", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    prepare_parser = commands.add_parser("prepare", help="write the identity set and the large cases, with estimates")
    prepare_parser.add_argument("--kernelbench", type=Path, help="a KernelBench clone (none: only the large cases)")
    prepare_parser.add_argument("--level", default="1,2,3", help="KernelBench levels (default 1,2,3)")
    prepare_parser.add_argument("--out", type=Path, required=True)
    prepare_parser.add_argument("--max-set-gib", type=float, help="only problems whose set (inputs and outputs) is at most this")
    prepare_parser.add_argument("--large-samples", type=int, default=4, help="identical samples per large case (default 4)")
    report_parser = commands.add_parser("report", help="compare bench runs pair by pair")
    report_parser.add_argument("runs", nargs="+", metavar="LABEL=DIR", help="bench output directories; the first is the baseline")
    report_parser.add_argument("--json", type=Path, help="write the report here")
    report_parser.add_argument("--markdown", action="store_true", help="print markdown tables")
    rows_parser = commands.add_parser("rows-of-shard", help="print the rows of a results file that shard I/N holds")
    rows_parser.add_argument("results", type=Path)
    rows_parser.add_argument("shard", metavar="I/N")
    args = parser.parse_args(argv)
    if args.command == "rows-of-shard":
        sys.stdout.writelines(rows_of_shard(args.results, args.shard))
        return 0
    if args.command == "prepare":
        plan = prepare(args.kernelbench, [level.strip() for level in args.level.split(",")], args.out,
                       args.max_set_gib, args.large_samples)
        print_plan(plan, args.out, args.kernelbench)
        return 0
    runs = []
    for item in args.runs:
        label, separator, directory = item.partition("=")
        if not separator:
            parser.error(f"{item}: give LABEL=DIR")
        runs.append(Run.read(label, Path(directory)))
    found = report(runs)
    print_report(found, args.markdown)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(found, indent=1))
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())

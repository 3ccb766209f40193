"""Leaderboard tables from results JSONL files: per run and level, KernelBench's fast_p and
geomean speedups over the best of k samples per problem, the reward distribution, the
environment each run was measured on, and what changed between runs. pandas in, pandas out.

Conventions (stated in the column names too):
- A problem's verdict is its best sample (best-of-k): a passing sample with the largest speedup
  vs compile (then vs eager), else the sample that got furthest.
- correct = passed (correct outputs and no violation); fast_p = correct and speedup > p.
- Geomeans: "correct" over problems solved correctly; "all" over every attempted problem,
  a problem without a correct solution counting as 1x.
- A Result flagged by a REVIEW_RULES rule counts in no number at all (one sample timed near
  zero would otherwise carry a geomean over hundreds of problems); it is listed under "Flagged
  for review" for a person to look at.
- Every other row counts in the denominators, whoever's fault it is: the candidate's, the
  problem's (`problem_error`, `nondeterministic_reference`) or ours (`harness_error`, also listed
  under "Harness errors": `--resume` evaluates those again).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from pytest_cudaagent.core.config import BASELINE_MODES
from pytest_cudaagent.core.result import HARNESS_STATUSES, PROBLEM_STATUSES
from pytest_cudaagent.records.results_file import read_results

from .kernelbench import level_label, level_of
from .shards import Run, group_runs

P_VALUES = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
# How far an evaluation got, for choosing the best failing sample.
STATUS_PROGRESS = {"passed": 8, "violation": 7, "incorrect": 6, "nondeterministic_reference": 5, "runtime_error": 4,
                   "timeout": 3, "crashed": 2, "build_error": 1, "problem_error": 0, "harness_error": -1}
# Changes smaller than this between two runs' speedups are noise, not a change.
SPEEDUP_CHANGE = 0.10
_SAMPLE = re.compile(r"_sample_(\d+)")
# Results whose time a person must confirm before it counts (Result warnings and violations by
# rule): implausible_speedup (beyond EvalConfig.plausible_speedup), timing_inconsistent (timed
# faster than its own kernels span), unstable_baseline (the baseline's time did not hold still)
# and timed_beside_other_work (a timing went ahead beside other untimed work of the run).
REVIEW_RULES = ("implausible_speedup", "timing_inconsistent", "unstable_baseline", "timed_beside_other_work")
ENV_KEYS = ("device", "gpu_name", "driver", "torch", "cuda", "python", "cpu", "cpu_count", "host")


def run_names(paths: list[Path]) -> list[str]:
    """`out/results.jsonl` is run "out"; other files are named by their stem; clashes numbered."""
    names = []
    for path in paths:
        name = path.parent.name if path.stem == "results" and path.parent.name else path.stem
        base, number = name, 2
        while name in names:
            name, number = f"{base}-{number}", number + 1
        names.append(name)
    return names


def results_frame(paths: list[str | Path], runs: list[Run] | None = None) -> pd.DataFrame:
    """One row per Result; a pair evaluated twice in one file counts once (the last). The shard
    files of one sharded run (`cudaagent bench --shard`) are one run (`runs`: shards.group_runs)."""
    paths = [Path(p) for p in paths]
    for path in paths:
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such results file (a JSONL written by `cudaagent bench`)")
    runs = group_runs(paths, run_names(paths)) if runs is None else runs
    rows = []
    for run_index, run, path in ((index, each.name, path) for index, each in enumerate(runs) for path in each.files):
        for result in read_results(path):
            candidate_ms = result.timing["candidate"].median_ms if "candidate" in result.timing else math.nan
            sample = _SAMPLE.search(Path(result.candidate).name)
            review = [rule for rule in (*result.violations, *result.warnings) if rule.rule in REVIEW_RULES]
            row = {
                "run_index": run_index, "run": run, "level": level_label(level_of(result.problem, result.candidate)),
                "problem": Path(result.problem).name, "problem_path": result.problem,
                "candidate": result.candidate, "sample": int(sample.group(1)) if sample else 0,
                "status": result.status, "passed": result.passed, "convention": result.convention,
                "fault": _fault(result.status),
                "compiled": not (result.status == "build_error"
                                 or (result.status == "timeout" and (result.error or "").startswith("build"))),
                "reward": result.reward, "lower_precision": bool(result.precision),
                "precision": "; ".join(result.precision), "candidate_ms": candidate_ms,
                "env": {key: result.env.get(key) for key in ENV_KEYS if key in result.env},
                "error": result.error or "",
                "review": ", ".join(rule.rule for rule in review),
                "review_detail": "; ".join(rule.detail for rule in review),
            }
            for mode in BASELINE_MODES:
                baseline_ms = result.timing[mode].median_ms if mode in result.timing else math.nan
                row[f"{mode}_ms"] = baseline_ms
                row[f"speedup_{mode}"] = baseline_ms / candidate_ms if result.passed and candidate_ms > 0 else math.nan
            for phase, seconds in result.phase_seconds.items():
                row[f"{phase}_s"] = seconds
            rows.append(row)
    frame = pd.DataFrame(rows)
    if frame.empty:
        raise ValueError(f"no results in {', '.join(map(str, paths))}; run `cudaagent bench` first")
    return frame.drop_duplicates(subset=["run", "problem_path", "candidate"], keep="last").reset_index(drop=True)


def _fault(status: str) -> str:
    """Whose a failed row is: the candidate's, the problem's or the harness's ("" when passed)."""
    if status == "passed":
        return ""
    if status in PROBLEM_STATUSES:
        return "problem"
    return "harness" if status in HARNESS_STATUSES else "candidate"


def best_of_k(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, level, problem): its best sample, with the sample counts."""
    ranked = frame.assign(
        _progress=frame["status"].map(STATUS_PROGRESS),
        _compile=frame["speedup_compile"].fillna(-1.0), _eager=frame["speedup_eager"].fillna(-1.0))
    ranked = ranked.sort_values(["_progress", "_compile", "_eager"], ascending=False)
    keys = ["run_index", "run", "level", "problem"]
    best = ranked.groupby(keys, sort=False).head(1).set_index(keys)
    counts = frame.groupby(keys).agg(samples=("candidate", "size"), passed_samples=("passed", "sum"))
    best = best.join(counts).reset_index()
    return best.drop(columns=["_progress", "_compile", "_eager"]).sort_values(keys).reset_index(drop=True)


def _geomean(values: pd.Series) -> float:
    values = values.dropna()
    values = values[values > 0]
    return float(math.exp(values.map(math.log).mean())) if len(values) else math.nan


def _share(mask: pd.Series) -> float:
    return round(100.0 * mask.mean(), 1) if len(mask) else math.nan


def fast_p(best: pd.DataFrame, mode: str, p: float) -> float:
    """Percent of problems solved correctly and more than p times faster than `mode`;
    NaN when `mode` was never timed in this group."""
    speedups = best[f"speedup_{mode}"]
    if p > 0 and speedups.isna().all():
        return math.nan
    return _share(best["passed"] & (speedups.fillna(0.0) > p) if p > 0 else best["passed"])


def _groups(frame: pd.DataFrame):
    """(run, level) groups, runs in the order their files were given, then one "all" group per run."""
    for (_, run), run_rows in frame.groupby(["run_index", "run"], sort=True):
        for level, group in run_rows.groupby("level", sort=True):
            yield run, level, group
        if run_rows["level"].nunique() > 1:
            yield run, "all", run_rows


def level_summary(frame: pd.DataFrame, best: pd.DataFrame, flagged: pd.DataFrame) -> pd.DataFrame:
    """Per (run, level) from the scored Results; `flagged` (those held for review) only counted."""
    rows = []
    best_groups = {(run, level): group for run, level, group in _groups(best)}
    for run, level, candidates in _groups(frame):
        problems = best_groups[(run, level)]
        per_problem_pass = candidates.groupby("problem_path")["passed"].mean()
        passed = candidates[candidates["passed"]]
        held = flagged[(flagged["run"] == run) & ((flagged["level"] == level) | (level == "all"))]
        row = {
            "run": run, "level": level, "problems": len(problems), "candidates": len(candidates),
            "compiled %": _share(problems["compiled"]),
            "pass@1 %": round(100.0 * per_problem_pass.mean(), 1),
            "correct (fast_0) %": fast_p(problems, "eager", 0.0),
        }
        for mode in ("eager", "compile"):
            row[f"fast_1 vs {mode} %"] = fast_p(problems, mode, 1.0)
        for mode in ("eager", "compile"):
            speedups = problems[f"speedup_{mode}"]
            measured = not speedups.isna().all()
            row[f"geomean vs {mode} (correct)"] = round(_geomean(speedups), 3) if measured else math.nan
            all_problems = speedups.where(problems["passed"], 1.0).fillna(1.0)
            row[f"geomean vs {mode} (all, failures=1x)"] = round(_geomean(all_problems), 3) if measured else math.nan
        row["lower precision % of passed"] = _share(passed["lower_precision"]) if len(passed) else math.nan
        row["mean reward"] = round(float(candidates["reward"].mean()), 3)
        # Last, so the earlier columns keep their places in leaderboard.csv. The problem's and our
        # own failures count as failures above; these say how many of them were not the candidates'.
        row["flagged for review"] = len(held)
        row["problem errors"] = int((candidates["fault"] == "problem").sum())
        row["harness errors"] = int((candidates["fault"] == "harness").sum())
        rows.append(row)
    return pd.DataFrame(rows)


def fast_p_table(best: pd.DataFrame, p_values=P_VALUES) -> pd.DataFrame:
    rows = []
    for run, level, problems in _groups(best):
        for mode in BASELINE_MODES:
            if mode != "eager" and problems[f"speedup_{mode}"].isna().all():
                continue
            rows.append({"run": run, "level": level, "baseline": mode,
                         **{f"fast_{p:g} %": fast_p(problems, mode, p) for p in p_values}})
    return pd.DataFrame(rows)


def reward_distribution(frame: pd.DataFrame) -> pd.DataFrame:
    """Candidates per milestone reward (-1 fail, 1 correct, 2 beats eager, 3 beats compile)."""
    rows = []
    for run, level, group in _groups(frame):
        counts = group["reward"].value_counts()
        rows.append({"run": run, "level": level,
                     **{f"reward {value:g}": int(counts.get(value, 0)) for value in (-1.0, 1.0, 2.0, 3.0)}})
    return pd.DataFrame(rows)


def problem_table(best: pd.DataFrame) -> pd.DataFrame:
    columns = {"run": "run", "level": "level", "problem": "problem", "samples": "samples",
               "passed_samples": "passed", "status": "best status", "candidate_ms": "candidate ms",
               "eager_ms": "eager ms", "compile_ms": "compile ms", "speedup_eager": "vs eager",
               "speedup_compile": "vs compile", "reward": "reward"}
    table = best[list(columns)].rename(columns=columns)
    return table.round({"candidate ms": 4, "eager ms": 4, "compile ms": 4, "vs eager": 3, "vs compile": 3})


def flagged_table(flagged: pd.DataFrame) -> pd.DataFrame:
    """The Results held out of every number, with the rule and its detail."""
    columns = {"run": "run", "level": "level", "problem": "problem", "candidate": "candidate",
               "status": "status", "review": "rule", "review_detail": "detail",
               "candidate_ms": "candidate ms", "eager_ms": "eager ms", "compile_ms": "compile ms"}
    table = flagged[list(columns)].rename(columns=columns)
    table["candidate"] = table["candidate"].map(lambda path: Path(path).name)
    return table.round({"candidate ms": 4, "eager ms": 4, "compile ms": 4}).reset_index(drop=True)


def harness_error_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows that were our errors, not a verdict on anyone: counted as failures, listed here."""
    errors = frame[frame["fault"] == "harness"]
    table = errors[["run", "level", "problem", "candidate", "error"]].copy()
    table["candidate"] = table["candidate"].map(lambda path: Path(path).name)
    return table.reset_index(drop=True)


def changes(best: pd.DataFrame) -> pd.DataFrame:
    """Problems whose verdict or speed vs compile (else eager) changed from the first run to each other run."""
    runs = list(best.sort_values("run_index")["run"].unique())
    if len(runs) < 2:
        return pd.DataFrame()
    indexed = best.drop(columns="run_index").set_index(["run", "level", "problem"])
    rows = []
    for other in runs[1:]:
        before, after = indexed.loc[runs[0]], indexed.loc[other]
        for key in before.index.union(after.index):
            old = before.loc[key] if key in before.index else None
            new = after.loc[key] if key in after.index else None
            change = _change(old, new)
            if change != "same":
                rows.append({"level": key[0], "problem": key[1], "from run": runs[0], "to run": other,
                             "before": _verdict(old), "after": _verdict(new), "change": change})
    return pd.DataFrame(rows)


def _speed(row) -> float:
    for mode in ("compile", "eager"):
        value = row[f"speedup_{mode}"]
        if not pd.isna(value):
            return float(value)
    return math.nan


def _verdict(row) -> str:
    if row is None:
        return "not run"
    speed = _speed(row)
    return row["status"] + ("" if math.isnan(speed) else f" {speed:.2f}x")


def _change(old, new) -> str:
    if old is None or new is None:
        return "added" if old is None else "removed"
    if old["passed"] != new["passed"]:
        return "fixed" if new["passed"] else "broken"
    if old["status"] != new["status"]:
        return "status changed"
    before, after = _speed(old), _speed(new)
    if math.isnan(before) or math.isnan(after):
        return "same"
    if after > before * (1 + SPEEDUP_CHANGE):
        return "faster"
    if after < before / (1 + SPEEDUP_CHANGE):
        return "slower"
    return "same"


def environment(frame: pd.DataFrame) -> pd.DataFrame:
    """Per run, each environment field's values (several when a run mixed machines)."""
    rows = []
    for run, group in frame.groupby("run", sort=False):
        row = {"run": run}
        for key in ENV_KEYS:
            values = sorted({str(env[key]) for env in group["env"] if env.get(key) is not None})
            row[key] = ", ".join(values) if values else "-"
        rows.append(row)
    return pd.DataFrame(rows)


@dataclass
class Leaderboard:
    frame: pd.DataFrame  # one row per scored Result (none flagged for review)
    best: pd.DataFrame  # one row per (run, level, problem), from the scored Results
    summary: pd.DataFrame
    fast_p: pd.DataFrame
    rewards: pd.DataFrame
    problems: pd.DataFrame
    flagged: pd.DataFrame  # the Results held for review, with rule and detail
    harness_errors: pd.DataFrame  # rows of ours (harness_error), counted as failures and listed here
    changes: pd.DataFrame
    environment: pd.DataFrame  # of every Result read
    convention: str  # whose correctness the verdicts follow, over every Result read
    # Shards of a sharded run not given, pairs of a run without a row: one line each (shards.py).
    missing: list[str] = field(default_factory=list)

    @classmethod
    def from_files(cls, paths: list[str | Path]) -> Leaderboard:
        paths = [Path(path) for path in paths]
        for path in paths:
            if not path.exists():
                raise FileNotFoundError(f"{path}: no such results file (a JSONL written by `cudaagent bench`)")
        runs = group_runs(paths, run_names(paths))
        every = results_frame(paths, runs)
        _check_conventions(every, runs)
        held = every["review"] != ""
        frame, flagged = every[~held].reset_index(drop=True), every[held]
        best = best_of_k(frame)
        return cls(frame, best, level_summary(frame, best, flagged), fast_p_table(best), reward_distribution(frame),
                   problem_table(best), flagged_table(flagged), harness_error_table(frame), changes(best),
                   environment(every), convention_line(every), [line for run in runs for line in run.missing])


def _check_conventions(frame: pd.DataFrame, runs: list[Run]) -> None:
    """A sharded run's rows follow one convention (their run files agree too: shards.py)."""
    for run in runs:
        if len(run.files) < 2:
            continue
        found = sorted(set(frame.loc[frame["run"] == run.name, "convention"]))
        if len(found) > 1:
            raise ValueError(f"the shards of run {run.name} judged by different conventions ({', '.join(found)}) "
                             "cannot be merged; rerun them with one --convention")


def markdown_table(table: pd.DataFrame) -> str:
    """A GitHub markdown table (pandas' own needs the tabulate package)."""
    if table.empty:
        return "(none)\n"
    cells = [[_cell(value) for value in row] for row in table.itertuples(index=False)]
    header = [str(column) for column in table.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join(lines) + "\n"


def _cell(value) -> str:
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:g}"
    return str(value).replace("|", "\\|")


NOTES = ("Per problem the best of its k samples counts. correct = passed (right outputs, no "
         "violation); fast_p = correct and more than p times faster than the baseline. Geomeans: "
         "'correct' over correctly solved problems, 'all' over every attempted problem with "
         "failures counted as 1x. pass@1 = mean over problems of the share of passing samples. "
         f"Results flagged {', '.join(REVIEW_RULES)} count in no number; they are listed under "
         "'Flagged for review'. Every other row counts, the problem's failures (problem_error, "
         "nondeterministic_reference) and ours (harness_error, listed under 'Harness errors'; "
         "--resume evaluates them again) as failures.")


def convention_line(frame: pd.DataFrame) -> str:
    """Whose idea of correct the verdicts follow (README, Conventions), per run when they differ."""
    per_run = frame.groupby("run", sort=False)["convention"].agg(lambda values: ", ".join(sorted(set(values))))
    if per_run.nunique() == 1:
        return f"Convention: {per_run.iloc[0]}"
    return "Conventions: " + "; ".join(f"{run}: {names}" for run, names in per_run.items())


def to_markdown(board: Leaderboard) -> str:
    sections = [("Leaderboard", board.summary), ("fast_p by baseline", board.fast_p),
                ("Reward distribution (candidates)", board.rewards),
                ("Best of k per problem", board.problems), ("Flagged for review", board.flagged),
                ("Harness errors", board.harness_errors)]
    if not board.changes.empty or board.frame["run"].nunique() > 1:
        sections.append(("Changes between runs", board.changes))
    sections.append(("Environment", board.environment))
    text = [f"# cuda-agent benchmark\n\n{board.convention}\n\n{NOTES}\n"]
    if board.missing:  # first, so nobody reads the numbers of an incomplete merge as whole
        text.append("## Missing\n\n" + "".join(f"- {line}\n" for line in board.missing))
    text += [f"## {title}\n\n{markdown_table(table)}" for title, table in sections]
    return "\n".join(text)

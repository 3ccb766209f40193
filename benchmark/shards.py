"""`cudaagent bench --shard I/N` and the merge of shard files by `cudaagent leaderboard`.

A problem's shard is a hash of its stable key (`level1/19_ReLU.py`, `examples/relu.py`: the level
and file name, never a path of one host) modulo N: the same on every host, whatever the
candidates, the other problems selected or the order they were found in. A problem's candidates
therefore stay on one host and keep sharing its reference; shards are as even as the hash makes
them (about 250/N +- sqrt(250/N) problems for KernelBench's 250).

Each run (sharded or not) writes a run file beside its results, `results.run.json`: the shard,
every selected problem's key, the pairs it was given and the settings that decide a verdict.
The leaderboard reads it to merge a run's shards into one run, to refuse shards whose settings
differ, and to name what is missing: a shard not given, a pair without a row."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

RUN_FILE_FORMAT = 1
# What decides a verdict or a number on the leaderboard: shards of one run must agree on each.
VERDICT_SETTINGS = ("device", "policy", "tolerance", "convention", "backend", "trials", "timing", "baselines",
                    "memory_policy", "run_timeout_s", "build_timeout_s")


@dataclass(frozen=True)
class Shard:
    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """"I/N" with 0 <= I < N (0-based, as SLURM_ARRAY_TASK_ID=0-<N-1> and JOB_COMPLETION_INDEX are)."""
    index, slash, count = text.partition("/")
    try:
        shard = Shard(int(index), int(count))
    except ValueError:
        shard = None
    if not slash or shard is None or shard.count < 1 or not 0 <= shard.index < shard.count:
        raise ValueError(f"--shard {text!r}: give I/N with 0 <= I < N, e.g. 0/4 ... 3/4 for four shards")
    return shard


def problem_key(level: str, file_name: str) -> str:
    """A problem's name on every host: its level and file name."""
    level = str(level)
    return f"{'level' + level if level.isdigit() else level}/{file_name}"


def shard_of(key: str, count: int) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % count


def selection_id(keys: list[str]) -> str:
    """Names a problem selection: shards of one run were given the same one."""
    return hashlib.sha256("\n".join(sorted(keys)).encode()).hexdigest()[:16]


def run_file_of(results_path: str | Path) -> Path:
    """`out/results.jsonl` -> `out/results.run.json`."""
    results_path = Path(results_path)
    return results_path.with_name(results_path.stem + ".run.json")


def write_run_file(results_path: Path, shard: Shard | None, problem_keys: list[str],
                   pairs: list[tuple[str, Path, Path]], settings: dict) -> Path:
    """`pairs`: (problem key, problem path, candidate path) of this run (this shard's only)."""
    record = {
        "format": RUN_FILE_FORMAT,
        "shard": None if shard is None else {"index": shard.index, "count": shard.count},
        "selection": selection_id(problem_keys),
        "problems": sorted(problem_keys),
        # As the rows name them (the batch hands the evaluations resolved paths).
        "pairs": [{"problem": key, "candidate": candidate.name, "key": _row_key(problem.resolve(), candidate.resolve())}
                  for key, problem, candidate in pairs],
        "settings": {name: settings.get(name) for name in VERDICT_SETTINGS},
    }
    path = run_file_of(results_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1))
    return path


def _row_key(problem, candidate) -> str:
    """A pair as the shard's own host named it: not resolved here, where those paths may not exist."""
    return f"{problem}::{candidate}"


def read_run_file(results_path: str | Path) -> dict | None:
    path = run_file_of(results_path)
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except ValueError as error:
        raise ValueError(f"{path}: unreadable run file ({error}); rerun that shard with --resume") from None
    return record if isinstance(record, dict) and record.get("format") == RUN_FILE_FORMAT else None


def shard_of_run(record: dict | None) -> Shard | None:
    if not record or not record.get("shard"):
        return None
    return Shard(int(record["shard"]["index"]), int(record["shard"]["count"]))


@dataclass
class Run:
    """One leaderboard run: a results file, or every shard file of one sharded run."""

    name: str
    files: list[Path]
    records: list[dict | None] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # lines naming what is not there


def group_runs(paths: list[Path], plain_names: list[str]) -> list[Run]:
    """Files become runs in the order given; shard files of one run (the same selection and N)
    become one run, named after the folder holding the shards' folders. Raises ValueError for
    shards that cannot be one run (settings differ, a shard given twice)."""
    runs: list[Run] = []
    sharded: dict[tuple[str, int], Run] = {}
    for path, name in zip(paths, plain_names, strict=True):
        record = read_run_file(path)
        shard = shard_of_run(record)
        if shard is None:
            runs.append(Run(name, [path], [record]))
            continue
        key = (record["selection"], shard.count)
        if key not in sharded:
            sharded[key] = Run(path.resolve().parent.parent.name or "shards", [], [])
            runs.append(sharded[key])
        sharded[key].files.append(path)
        sharded[key].records.append(record)
    for run in sharded.values():
        _check_shards(run)
    _unique_names(runs)
    for run in runs:
        run.missing = _missing(run)
    return runs


def _unique_names(runs: list[Run]) -> None:
    seen: set[str] = set()
    for run in runs:
        base, number = run.name, 2
        while run.name in seen:
            run.name, number = f"{base}-{number}", number + 1
        seen.add(run.name)


def _check_shards(run: Run) -> None:
    by_index: dict[int, Path] = {}
    for path, record in zip(run.files, run.records, strict=True):
        shard = shard_of_run(record)
        if shard.index in by_index:
            raise ValueError(f"shard {shard} is given twice: {by_index[shard.index]} and {path}; give each "
                             "shard's results once")
        by_index[shard.index] = path
    first_path, first = run.files[0], run.records[0]["settings"]
    for path, record in zip(run.files[1:], run.records[1:], strict=True):
        differ = [name for name in VERDICT_SETTINGS if record["settings"].get(name) != first.get(name)]
        if differ:
            detail = "; ".join(f"{name}: {first.get(name)!r} in {first_path}, {record['settings'].get(name)!r} "
                               f"in {path}" for name in differ)
            raise ValueError(f"shards of one run with different settings cannot be merged ({detail}); "
                             "rerun the odd shard with the others' options")


def _missing(run: Run) -> list[str]:
    """Shards of the run not given (with the problems they hold) and pairs of a given run file
    without a row in its results."""
    from pytest_cudaagent.records.results_file import read_results

    lines = []
    shards = [shard_of_run(record) for record in run.records]
    if shards and shards[0] is not None:
        count, keys = shards[0].count, run.records[0]["problems"]
        given = {shard.index for shard in shards}
        for index in range(count):
            held = [key for key in keys if shard_of(key, count) == index]
            if index not in given and held:
                shown = ", ".join(held[:5]) + (f" and {len(held) - 5} more" if len(held) > 5 else "")
                lines.append(f"{run.name}: shard {index}/{count} not given ({len(held)} problem(s): {shown})")
    for path, record in zip(run.files, run.records, strict=True):
        if not record or not path.exists():
            continue
        rows = {_row_key(result.problem, result.candidate) for result in read_results(path)}
        absent = [pair for pair in record["pairs"] if pair["key"] not in rows]
        if absent:
            shown = ", ".join(f"{pair['problem']} <- {pair['candidate']}" for pair in absent[:5])
            more = f" and {len(absent) - 5} more" if len(absent) > 5 else ""
            lines.append(f"{run.name}: {len(absent)} pair(s) of {path} have no result ({shown}{more}); "
                         "rerun its shard with --resume")
    return lines

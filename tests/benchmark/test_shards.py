"""`cudaagent bench --shard I/N` and the merge of shard files by `cudaagent leaderboard`: the split
by problem, the same leaderboard as one unsharded run, a missing shard or pair named, shards of
mixed settings refused, --resume per shard."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark.commands import shard_pairs
from benchmark.kernelbench import Problem
from benchmark.leaderboard import Leaderboard
from benchmark.shards import Shard, parse_shard, problem_key, shard_of, write_run_file
from pytest_cudaagent.records.pairing import Pair

from .bench_helpers import PROBLEM, cli_parser, fake_result, run_cli, write_candidate, write_results

REPO = Path(__file__).resolve().parents[2]
# name -> expression; with these names the 2- and 3-shard splits leave no shard empty.
EXPRESSIONS = {"relu": "torch.relu(x)", "scale": "x * 2.0", "add": "x + 1.0", "sq": "x * x"}
BENCH = ["--device", "cpu", "--no-timing", "--policy", "permissive", "--trials", "2", "--workers", "1"]


# -- the split -------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["4/4", "-1/4", "1", "a/b", "1/0", "0/-2"])
def test_a_bad_shard_is_refused_while_the_arguments_are_parsed(text, capsys):
    with pytest.raises(SystemExit) as stop:
        cli_parser().parse_args(["bench", f"--shard={text}"])
    assert stop.value.code == 2
    assert "0 <= I < N" in capsys.readouterr().err


def test_a_bad_shard_costs_no_torch_import():
    code = ("import sys\nfrom tests.benchmark.bench_helpers import cli_parser\n"
            "try:\n    cli_parser().parse_args(['bench', '--shard', '3/2'])\n"
            "except SystemExit as stop:\n    print(stop.code, 'torch' in sys.modules)\n")
    shown = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert shown.stdout.split() == ["2", "False"], shown.stderr


def test_parse_shard():
    assert parse_shard("0/1") == Shard(0, 1) and parse_shard("3/4") == Shard(3, 4) and str(Shard(2, 5)) == "2/5"


def _problems(names, level="1"):
    return [Problem(level, index + 1, Path(f"/x/level{level}/{index + 1}_{name}.py")) for index, name in enumerate(names)]


def test_the_split_is_by_problem_key_whatever_the_candidates_and_the_other_problems():
    problems = _problems([f"P{i}" for i in range(40)])
    keys = {problem.path: problem_key(problem.level, problem.name) for problem in problems}
    many = [Pair(p.path, Path(f"/c/{p.path.stem}_sample_{k}.py"), k) for p in problems for k in range(3)]
    few = many[::4]
    for count in (2, 3, 4):
        shards = [shard_pairs(many, keys, Shard(index, count)) for index in range(count)]
        # Every pair in exactly one shard, a problem's candidates all in one.
        assert sorted(map(str, (pair for shard in shards for pair in shard))) == sorted(map(str, many))
        owner = {pair.problem: index for index, shard in enumerate(shards) for pair in shard}
        assert all(owner[pair.problem] == index for index, shard in enumerate(shards) for pair in shard)
        # Fewer candidates: each problem stays where it was.
        for index in range(count):
            assert {p.problem for p in shard_pairs(few, keys, Shard(index, count))} <= {p.problem for p in shards[index]}
        assert all(shards), "40 problems leave no shard empty"
    # The key is the level and file name: another host's paths, another selection, the same shard.
    assert problem_key("1", "19_ReLU.py") == "level1/19_ReLU.py"
    assert shard_of("level1/19_ReLU.py", 4) == shard_of(problem_key("1", Path("/elsewhere/level1/19_ReLU.py").name), 4)
    assert shard_pairs(many, keys, None) == many


# -- bench --shard and the merge, on the CPU -----------------------------------------------------


@pytest.fixture(scope="module")
def problem_set(tmp_path_factory):
    root = tmp_path_factory.mktemp("shards")
    for name, expression in EXPRESSIONS.items():
        (root / "problems").mkdir(exist_ok=True)
        (root / "problems" / f"{name}.py").write_text(PROBLEM.format(expression=expression))
        write_candidate(root / "candidates" / f"{name}.py", expression)
    for name in ("relu", "sq"):  # a wrong second sample for two of them
        write_candidate(root / "candidates" / f"{name}_sample_1.py", EXPRESSIONS[name] + " + 1.0")
    return root


def bench(problem_set: Path, out: Path, *extra: str) -> int:
    return run_cli(["bench", "--problems", str(problem_set / "problems"), "--candidates",
                    str(problem_set / "candidates"), "--out", str(out), *BENCH, *extra])


@pytest.fixture(scope="module")
def runs(problem_set):
    """The set unsharded (run "bench"), as 2 shards and as 3 (each under a folder "bench" too)."""
    assert bench(problem_set, problem_set / "one" / "bench") == 0
    sharded = {}
    for count in (2, 3):
        sharded[count] = [problem_set / f"by{count}" / "bench" / f"shard-{index}" for index in range(count)]
        for index, out in enumerate(sharded[count]):
            assert bench(problem_set, out, "--shard", f"{index}/{count}") == 0
    return problem_set / "one" / "bench", sharded


def verdicts(results: list[Path]) -> dict[tuple[str, str], tuple]:
    found = {}
    for path in results:
        for line in path.read_text().splitlines():
            row = json.loads(line)
            found[(Path(row["problem"]).name, Path(row["candidate"]).name)] = (row["status"], row["passed"], row["reward"])
    return found


@pytest.mark.slow
@pytest.mark.xdist_group("shard-runs")  # one worker evaluates the module's runs once (tox: --dist loadgroup)
def test_merged_shards_give_the_unsharded_leaderboard_byte_for_byte(runs, tmp_path):
    single, sharded = runs
    assert run_cli(["leaderboard", str(single / "results.jsonl"), "--out", str(tmp_path / "single")]) == 0
    for count, outs in sharded.items():
        files = [out / "results.jsonl" for out in outs]
        # Each problem in exactly one shard; no shard empty here.
        per_shard = [{key[0] for key in verdicts([file])} for file in files]
        assert all(per_shard) and sum(map(len, per_shard)) == len(EXPRESSIONS) == len(set().union(*per_shard))
        assert verdicts(files) == verdicts([single / "results.jsonl"])
        merged = tmp_path / f"merged-{count}"
        assert run_cli(["leaderboard", *map(str, reversed(files)), "--out", str(merged)]) == 0
        for name in ("leaderboard.csv", "problems.csv"):
            assert (merged / name).read_bytes() == (tmp_path / "single" / name).read_bytes(), (count, name)
        assert "## Missing" not in (merged / "leaderboard.md").read_text()
        board = Leaderboard.from_files(files)
        assert list(board.summary["run"]) == ["bench"] and board.summary["candidates"].iloc[0] == 6


@pytest.mark.slow
@pytest.mark.xdist_group("shard-runs")  # one worker evaluates the module's runs once (tox: --dist loadgroup)
def test_a_missing_shard_is_named_and_the_merge_exits_1(runs, tmp_path, capsys):
    _, sharded = runs
    given = [str(sharded[3][index] / "results.jsonl") for index in (0, 2)]
    assert run_cli(["leaderboard", *given, "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    held = sorted(name for name in EXPRESSIONS if shard_of(f"custom/{name}.py", 3) == 1)
    assert "shard 1/3 not given" in err and all(f"custom/{name}.py" in err for name in held)
    assert "shard 1/3 not given" in (tmp_path / "leaderboard.md").read_text()
    # The problems it lacks are not counted as failures or as anything: the merge says it is partial.
    assert Leaderboard.from_files(given).summary["problems"].iloc[0] == len(EXPRESSIONS) - len(held)


@pytest.mark.slow
@pytest.mark.xdist_group("shard-runs")  # one worker evaluates the module's runs once (tox: --dist loadgroup)
def test_resume_goes_on_per_shard_and_refuses_another_shard(runs, problem_set, capsys):
    _, sharded = runs
    out = sharded[2][0]
    before = (out / "results.jsonl").read_text()
    assert bench(problem_set, out, "--shard", "0/2", "--resume") == 0
    assert "resume: skipped" in capsys.readouterr().out
    assert (out / "results.jsonl").read_text() == before
    assert bench(problem_set, out, "--shard", "1/2", "--resume") == 2
    assert "holds shard 0/2, not shard 1/2" in capsys.readouterr().err
    assert bench(problem_set, out, "--resume") == 2  # unsharded into a shard's folder


def test_an_empty_shard_writes_an_empty_file_and_its_run_file(problem_set, tmp_path):
    # Four problems over 64 shards: most shards hold none (no evaluation runs).
    keys = [f"custom/{name}.py" for name in EXPRESSIONS]
    empty = next(index for index in range(64) if all(shard_of(key, 64) != index for key in keys))
    assert bench(problem_set, tmp_path / "empty", "--shard", f"{empty}/64") == 0
    assert (tmp_path / "empty" / "results.jsonl").read_text() == ""
    record = json.loads((tmp_path / "empty" / "results.run.json").read_text())
    assert record["shard"] == {"index": empty, "count": 64} and record["pairs"] == []
    assert sorted(record["problems"]) == sorted(keys)


# -- merge rules on written results (no evaluation) ----------------------------------------------


SETTINGS = {"device": "cuda", "policy": "strict", "tolerance": "default", "convention": "kernelbench",
            "backend": "pytorch-default", "trials": 5, "timing": True, "baselines": ["eager", "compile"],
            "memory_policy": "admit", "run_timeout_s": None, "build_timeout_s": None}


def shard_file(root: Path, index: int, count: int, problems: list[str], settings=None, convention="kernelbench",
               unrun: tuple[str, ...] = ()) -> Path:
    """A shard's results and run file as `bench --shard` writes them, for problems `level1/<name>`;
    the problems in `unrun` have a pair in the run file but no row."""
    out = root / f"shard-{index}"
    results, pairs = [], []
    for name in problems:
        problem, candidate = out / "kb" / "level1" / name, out / "c" / f"{name}"
        pairs.append((f"level1/{name}", problem, candidate))
        if name not in unrun:
            result = fake_result(str(problem.resolve()), str(candidate.resolve()))
            result.convention = convention
            results.append(result)
    path = out / "results.jsonl"
    write_results(path, results) if results else (out.mkdir(parents=True, exist_ok=True), path.touch())
    keys = [f"level1/0_{n}.py" for n in range(8)]  # the whole selection, the same on every shard
    write_run_file(path, Shard(index, count), keys, pairs, {**SETTINGS, **(settings or {})})
    return path


def split(count: int) -> list[list[str]]:
    names = [f"0_{n}.py" for n in range(8)]
    return [[name for name in names if shard_of(f"level1/{name}", count) == index] for index in range(count)]


def test_shards_with_different_settings_are_refused_naming_the_setting(tmp_path, capsys):
    parts = split(2)
    files = [shard_file(tmp_path / "sweep", 0, 2, parts[0]),
             shard_file(tmp_path / "sweep", 1, 2, parts[1], settings={"policy": "permissive"})]
    assert run_cli(["leaderboard", *map(str, files)]) == 2
    err = capsys.readouterr().err
    assert "different settings" in err and "policy: 'strict'" in err and "'permissive'" in err
    files[1] = shard_file(tmp_path / "sweep", 1, 2, parts[1], settings={"tolerance": "fp32"})
    assert run_cli(["leaderboard", *map(str, files)]) == 2
    assert "tolerance" in capsys.readouterr().err
    files[1] = shard_file(tmp_path / "sweep", 1, 2, parts[1])
    assert run_cli(["leaderboard", *map(str, files)]) == 0  # the same settings: one run


def test_shards_whose_rows_follow_different_conventions_are_refused(tmp_path, capsys):
    parts = split(2)
    files = [shard_file(tmp_path / "sweep", 0, 2, parts[0]),
             shard_file(tmp_path / "sweep", 1, 2, parts[1], convention="cuda-agent")]
    assert run_cli(["leaderboard", *map(str, files)]) == 2
    assert "different conventions" in capsys.readouterr().err


def test_a_shard_given_twice_is_refused(tmp_path, capsys):
    parts = split(2)
    first = shard_file(tmp_path / "a", 0, 2, parts[0])
    again = shard_file(tmp_path / "b", 0, 2, parts[0])
    assert run_cli(["leaderboard", str(first), str(again)]) == 2
    assert "shard 0/2 is given twice" in capsys.readouterr().err


def test_pairs_without_a_row_are_named(tmp_path, capsys):
    parts = split(2)
    files = [shard_file(tmp_path / "sweep", 0, 2, parts[0], unrun=(parts[0][0],)),
             shard_file(tmp_path / "sweep", 1, 2, parts[1])]
    assert run_cli(["leaderboard", *map(str, files)]) == 1
    captured = capsys.readouterr()
    assert f"1 pair(s) of {files[0]} have no result (level1/{parts[0][0]}" in captured.err
    assert "## Missing" in captured.out  # the printed markdown says so too


def test_runs_without_run_files_are_read_as_before(tmp_path):
    path = write_results(tmp_path / "old" / "results.jsonl", [fake_result("/p/level1/1_a.py", "/c/a.py")])
    board = Leaderboard.from_files([path, path])
    assert list(board.summary["run"].unique()) == ["old", "old-2"] and board.missing == []


def test_two_sharded_runs_of_other_selections_stay_two_runs(tmp_path):
    parts = split(2)
    first = [shard_file(tmp_path / "sweep", index, 2, parts[index]) for index in range(2)]
    # Another N: another run, shown beside the first, its other shard named as missing.
    other = shard_file(tmp_path / "other", 0, 3, split(3)[0])
    board = Leaderboard.from_files([*first, other])
    assert list(board.summary["run"].unique()) == ["sweep", "other"]
    assert any(line.startswith("other: shard ") and "/3 not given" in line for line in board.missing)

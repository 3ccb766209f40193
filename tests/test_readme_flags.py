"""Every flag the README and the docs pages advertise works (#42): `cudaagent verify`, `bench`,
`leaderboard`, `baselines`, `synth`, `solve`, `train` and the pytest plugins' `--cudaagent-*`
options. The flags are read from the usage blocks of README.md and docs/*.md, so a flag
documented there is tested from then on.

- Parsing (fast): each documented flag is one its command knows, and it parses with a value of
  its kind; a bad value for a flag with choices or a number is a usage error (exit 2). The reverse
  holds too: every flag a command has is in docs/cli.md.
- Running (slow): every documented flag of verify, bench, leaderboard, baselines, `synth check`
  and the plugins is given to a real run on the CPU (a small problem and a candidate that needs no
  build) or to a dry run (`bench` with a shard that holds no pair does everything but evaluate, and
  writes its settings to results.run.json; pytest `--collect-only` for the synthesis plugin), and
  takes effect where a Result or a file shows it. No run may end in a traceback. A flag documented
  later that no planned run gives gets a run of its own. `train`, `solve`, `synth run` and
  `synth crawl` are parse-only: a real run of them takes minutes (training, model loading,
  crawling).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_cudaagent.cli import build_parser
from tests.benchmark.bench_helpers import fake_result, make_kernelbench_tree, write_results
from tests.helpers import REPO, TEST_CANDIDATES, TEST_PROBLEMS

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SUBCOMMANDS = ("verify", "bench", "leaderboard", "baselines", "synth crawl", "synth run", "synth check",
               "solve", "train")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
PLUGIN_FLAG = re.compile(r"(?<![\w-])--cudaagent-[a-z][a-z0-9-]*")
# A candidate that needs no build (the reference's own PyTorch): passes under permissive on the CPU.
PROBLEM = TEST_PROBLEMS / "small_leaky_relu.py"
CANDIDATE = TEST_CANDIDATES / "pytorch_leaky_relu.py"


# -- what the docs advertise ------------------------------------------------------------------


def _usage_lines() -> list[str]:
    """The command lines of every ```bash block, continuation lines joined to their command."""
    lines: list[str] = []
    for doc in DOCS:
        for block in re.findall(r"```bash\n(.*?)```", doc.read_text(), re.DOTALL):
            for line in block.splitlines():
                if line[:1].isspace() and lines and line.strip():
                    lines[-1] += " " + line.strip()
                else:
                    lines.append(line.strip())
    return lines


def _command_of(line: str) -> str | None:
    words = line.split()
    if len(words) < 2 or words[0] != "cudaagent":
        return None
    two = " ".join(words[1:3])
    return two if two in SUBCOMMANDS else words[1] if words[1] in SUBCOMMANDS else None


def documented_flags() -> dict[str, set[str]]:
    """command -> the flags its usage lines name (`pytest` -> the plugins' options, prose included)."""
    found: dict[str, set[str]] = {}
    for line in _usage_lines():
        command = _command_of(line)
        if command:
            found.setdefault(command, set()).update(FLAG.findall(line.split("#")[0]))
    found["pytest"] = {flag for doc in DOCS for flag in PLUGIN_FLAG.findall(doc.read_text())}
    return found


DOCUMENTED = documented_flags()


def _subparsers(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[f"{prefix}{name}"] = sub
                found.update(_subparsers(sub, f"{prefix}{name} "))
    return found


PARSERS = _subparsers(build_parser([]))


def _options(command: str) -> dict[str, argparse.Action]:
    return {option: action for action in PARSERS[command]._actions for option in action.option_strings
            if option.startswith("--") and option != "--help"}


def test_the_docs_advertise_the_commands_and_their_flags():
    # The extraction itself: a blank result would pass every test below.
    assert {"verify", "bench", "leaderboard", "baselines", "synth run", "solve", "train"} <= set(DOCUMENTED)
    assert {"--no-timing", "--json", "--output"} <= DOCUMENTED["verify"]
    assert {"--problem-id", "--shard", "--resume", "--no-start-ahead"} <= DOCUMENTED["bench"]
    assert {"--cudaagent-problem", "--cudaagent-config", "--cudaagent-synth"} <= DOCUMENTED["pytest"]


@pytest.mark.parametrize("command", sorted(set(DOCUMENTED) - {"pytest"}))
def test_every_documented_flag_is_one_the_command_knows(command):
    unknown = DOCUMENTED[command] - set(_options(command))
    assert not unknown, f"the docs advertise `cudaagent {command}` {sorted(unknown)}, which it does not have"


@pytest.mark.parametrize("command", sorted(PARSERS))
def test_every_flag_a_command_has_is_in_the_docs(command):
    if not _options(command):
        return  # `synth` alone: a group of subcommands
    missing = set(_options(command)) - DOCUMENTED.get(command, set())
    assert not missing, f"`cudaagent {command}` has {sorted(missing)}; docs/cli.md's usage block names none of them"


def _required_argv(command: str) -> list[str]:
    """Placeholders for the command's positional arguments and required options."""
    argv = command.split()
    for action in PARSERS[command]._actions:
        if not action.option_strings and not isinstance(action, argparse._SubParsersAction):
            argv.append("x.py")
        elif action.required:
            argv += [action.option_strings[0], _value_for(command, action)]
    return argv


def _value_for(command: str, action: argparse.Action) -> str | None:
    """A value `action` accepts (None for a switch)."""
    if action.nargs == 0:
        return None
    if action.choices:
        return str(next(iter(action.choices)))
    for value in ("1", "0/2", "eager", "x"):
        try:
            if action.type is None or action.type(value) is not None:
                return value
        except (ValueError, TypeError, argparse.ArgumentTypeError):
            continue
    raise AssertionError(f"no value found for {command} {action.option_strings}")


def _parse(argv: list[str]):
    return build_parser(argv).parse_args(argv)


@pytest.mark.parametrize("command, flag", sorted((c, f) for c, flags in DOCUMENTED.items() if c != "pytest"
                                                 for f in flags if f in _options(c)))
def test_every_documented_flag_parses_and_a_bad_value_is_a_usage_error(command, flag, capsys):
    action = _options(command)[flag]
    value = _value_for(command, action)
    argv = _required_argv(command) + [flag] + ([] if value is None else [value])
    args = _parse(argv)
    if value is not None:  # the value reached the flag's own setting
        expected = action.type(value) if callable(action.type) else value
        assert getattr(args, action.dest) == ([expected] if isinstance(action, argparse._AppendAction) else expected)
    else:
        assert getattr(args, action.dest) == (action.const if action.const is not None else True)
    if action.choices or action.type in (int, float):
        with pytest.raises(SystemExit) as exit_:
            _parse(_required_argv(command) + [flag, "not-a-valid-value"])
        assert exit_.value.code == 2
        assert flag in capsys.readouterr().err


def test_the_plugins_know_every_documented_option():
    run = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    unknown = {flag for flag in DOCUMENTED["pytest"] if flag not in run.stdout}
    assert not unknown, f"the docs advertise pytest {sorted(unknown)}, which no plugin adds"
    added = set(re.findall(r"(?<![\w-])--cudaagent-[a-z][a-z0-9-]*", run.stdout))
    assert not added - DOCUMENTED["pytest"], f"pytest options no docs page names: {sorted(added - DOCUMENTED['pytest'])}"


# -- real and dry runs ------------------------------------------------------------------------


def _run(argv: list[str], cwd: Path, ok: tuple[int, ...] = (0,), timeout: int = 600) -> subprocess.CompletedProcess:
    if argv[0] == "pytest":
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *argv[1:]]
    else:
        command = [sys.executable, "-m", "pytest_cudaagent.cli", *argv[1:]]
    run = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    output = run.stdout + run.stderr
    assert "Traceback" not in output, f"{' '.join(argv)} raised:\n{output[-4000:]}"
    assert run.returncode in ok, f"{' '.join(argv)}: exit {run.returncode}\n{output[-3000:]}"
    return run


def _flags_in(argv: list[str]) -> set[str]:
    return {word for word in argv if word.startswith("--")}


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A problem folder and a candidate folder of one pair, a KernelBench tree, an EvalConfig JSON."""
    root = tmp_path_factory.mktemp("flags")
    (root / "problems").mkdir()
    (root / "candidates").mkdir()
    shutil.copy(PROBLEM, root / "problems" / PROBLEM.name)
    shutil.copy(CANDIDATE, root / "candidates" / PROBLEM.name)
    make_kernelbench_tree(root / "kb")
    for number in (1, 2):
        (root / "kbcands").mkdir(exist_ok=True)
        shutil.copy(CANDIDATE, root / "kbcands" / f"level_1_problem_{number}_sample_0_kernel.py")
    (root / "config.json").write_text(json.dumps({"run_timeout_s": 240}))
    return root


def _empty_shard(problems_dir: Path) -> str:
    """--shard I/N holding none of the folder's problems: bench then does everything but evaluate."""
    from benchmark.kernelbench import load_flat
    from benchmark.shards import problem_key, shard_of

    count = 64
    taken = {shard_of(problem_key(p.level, p.name), count) for p in load_flat(problems_dir)}
    return f"{min(set(range(count)) - taken)}/{count}"


def _verify_runs(work: Path) -> list[tuple[list[str], tuple[int, ...], object]]:
    pair = [str(PROBLEM), str(CANDIDATE)]

    def untimed(run):
        result = json.loads((work / "verify.json").read_text())
        assert json.loads(run.stdout)["status"] == result["status"] == "passed", result.get("error")
        assert len(result["trials"]) == 2 and result["convention"] == "cuda-agent"
        assert not result["timing"] and result["speedup_vs_eager"] is None

    def timed(run):
        result = json.loads((work / "timed.json").read_text())
        assert result["status"] == "passed", result.get("error")
        assert set(result["timing"]) == {"candidate", "eager"}  # --baselines eager: no compile
        assert result["timing"]["candidate"]["launch_overlapped"] is False  # --count-launch

    def strict(run):
        assert "fallback_op" in run.stdout  # the default strict policy rejects PyTorch's own ops

    return [
        (["cudaagent", "verify", *pair, "--device", "cpu", "--no-timing", "--trials", "2", "--policy", "permissive",
          "--tolerance", "kernelbench-main", "--convention", "cuda-agent", "--backend", "strict-fp32",
          "--timeout", "240", "--build-timeout", "240", "--output", str(work / "verify.json"), "--json"], (0,), untimed),
        (["cudaagent", "verify", *pair, "--device", "cpu", "--trials", "1", "--policy", "permissive",
          "--baselines", "eager", "--audit-timed-calls", "--count-launch", "--output", str(work / "timed.json")],
         (0, 1), timed),
        (["cudaagent", "verify", *pair, "--device", "cpu", "--no-timing", "--trials", "1"], (1,), strict),
        # Refused (exit 2, naming what is missing) where the machine cannot sandbox fully.
        (["cudaagent", "verify", *pair, "--device", "cpu", "--no-timing", "--trials", "1", "--policy", "permissive",
          "--require-sandbox"], (0, 2), None),
        (["cudaagent", "verify", *pair, "--trials", "0"], (2,), None),
        (["cudaagent", "verify", *pair, "--baselines", "eager,nonsense"], (2,), None),
        (["cudaagent", "verify", *pair, "--timeout", "-1"], (2,), None),
    ]


def _bench_runs(work: Path) -> list[tuple[list[str], tuple[int, ...], object]]:
    problems, candidates, dry = work / "problems", work / "candidates", work / "dry"
    shard = _empty_shard(problems)
    settings = ["--device", "cpu", "--workers", "1", "--trials", "3", "--baselines", "eager",
                "--policy", "calibration", "--tolerance", "strict", "--convention", "cuda-agent",
                "--backend", "strict-fp32", "--memory-policy", "retry", "--timeout", "200", "--build-timeout", "300",
                "--no-fast-build", "--no-shared-reference", "--no-start-ahead"]

    def recorded(run):
        record = json.loads((dry / "results.run.json").read_text())
        assert record["shard"] == dict(zip(("index", "count"), map(int, shard.split("/")), strict=True)) and record["pairs"] == []
        assert record["settings"] == {
            "device": "cpu", "policy": "calibration", "tolerance": "strict", "convention": "cuda-agent",
            "backend": "strict-fp32", "trials": 3, "timing": True, "baselines": ["eager"],
            "memory_policy": "retry", "run_timeout_s": 200.0, "build_timeout_s": 300.0}
        assert (dry / "results.jsonl").read_text() == ""  # --overwrite dropped the line written before

    def selected(run):
        # `--problem-id 1-3` once raised NameError (a local name hid the id parser).
        record = json.loads((work / "kbdry" / "results.run.json").read_text())
        assert record["problems"] == ["level1/1_Tiny_relu.py", "level1/2_Tiny_scale.py"]

    def evaluated(run):
        rows = [json.loads(line) for line in (work / "real" / "results.jsonl").read_text().splitlines()]
        assert [row["status"] for row in rows] == ["passed"] and not rows[0]["timing"]
        assert "reference_shared" not in rows[0]["env"]  # --no-shared-reference
        assert (work / "real" / "leaderboard.md").is_file()

    def resumed(run):
        assert "resume: skipped 1 of 1" in run.stdout
        assert len((work / "real" / "results.jsonl").read_text().splitlines()) == 1

    dry.mkdir()
    (dry / "results.jsonl").write_text('{"a line": "to be dropped"}\n')
    tree = str(work / "kb")
    return [
        (["cudaagent", "bench", "--problems", str(problems), "--candidates", str(candidates), "--name", "small*",
          "--out", str(dry), "--shard", shard, "--overwrite", *settings, "--no-timing", "--policy", "calibration"],
         (0,), None),
        (["cudaagent", "bench", "--problems", str(problems), "--candidates", str(candidates), "--out", str(dry),
          "--shard", shard, "--overwrite", *settings], (0,), recorded),
        (["cudaagent", "bench", "--problems", str(problems), "--candidates", str(candidates), "--out", str(dry),
          "--shard", shard, "--resume", "--device", "cpu"], (0,), None),
        (["cudaagent", "bench", "--kernelbench", tree, "--level", "1", "--problem-id", "1-3",
          "--candidates", str(work / "kbcands"),
          "--device", "cpu", "--out", str(work / "kbdry"), "--shard", _tree_empty_shard(work / "kb")], (0,), selected),
        (["cudaagent", "bench", "--problems", str(problems), "--candidates", str(candidates), "--device", "cpu",
          "--out", str(dry), "--shard", shard, "--require-sandbox"], (0, 2), None),
        (["cudaagent", "bench", "--problems", str(problems), "--candidates", str(candidates), "--device", "cpu",
          "--name", "no_such_problem", "--out", str(work / "named")], (2,), None),
        (["cudaagent", "bench", "--resume", "--overwrite", "--device", "cpu", "--out", str(dry)], (2,), None),
        (["cudaagent", "bench", "--workers", "0", "--device", "cpu", "--out", str(dry)], (2,), None),
        (["cudaagent", "bench", "--shard", "3/2", "--device", "cpu", "--out", str(dry)], (2,), None),
        (["cudaagent", "bench", "--problems", str(problems), "--candidates", str(candidates), "--device", "cpu",
          "--no-timing", "--policy", "permissive", "--workers", "1", "--no-fast-build", "--no-shared-reference",
          "--no-start-ahead", "--out", str(work / "real")], (0,), evaluated),
        (["cudaagent", "bench", "--problems", str(problems), "--candidates", str(candidates), "--device", "cpu",
          "--no-timing", "--policy", "permissive", "--workers", "1", "--resume", "--out", str(work / "real")],
         (0,), resumed),
    ]


def _tree_empty_shard(tree: Path) -> str:
    """A shard of the KernelBench tree's level-1 problems 1-3 that holds none of them."""
    from benchmark.shards import problem_key, shard_of

    count = 64
    taken = {shard_of(problem_key("1", name), count) for name in ("1_Tiny_relu.py", "2_Tiny_scale.py")}
    return f"{min(set(range(count)) - taken)}/{count}"


def _other_runs(work: Path) -> list[tuple[list[str], tuple[int, ...], object]]:
    results = write_results(work / "fake" / "results.jsonl", [
        fake_result("level1/1_Tiny_relu.py", "level_1_problem_1_sample_0_kernel.py"),
        fake_result("level1/2_Tiny_scale.py", "level_1_problem_2_sample_0_kernel.py", status="incorrect")])

    def board(run):
        assert "| level" in run.stdout or "level1" in run.stdout

    def board_files(run):
        assert {"leaderboard.md", "leaderboard.csv", "report.html"} <= {p.name for p in (work / "board").iterdir()}

    def timed_baselines(run):
        stored = json.dumps(json.loads((work / "baselines.json").read_text()))
        assert "eager" in stored and "1_Tiny_relu" in stored and "2_Tiny_scale" not in stored

    def kept_or_dropped(run):
        assert json.loads((work / "synth.json").read_text())

    tree = str(work / "kb")
    return [
        (["cudaagent", "leaderboard", str(results)], (0, 1), board),
        (["cudaagent", "leaderboard", str(results), "--out", str(work / "board")], (0, 1), board_files),
        (["cudaagent", "baselines", "--kernelbench", tree, "--level", "1", "--problem-id", "1", "--name", "Tiny",
          "--modes", "eager", "--device", "cpu", "--workers", "1", "--out", str(work / "baselines.json")],
         (0,), timed_baselines),
        (["cudaagent", "baselines", "--problems", str(work / "problems"), "--modes", "eager", "--device", "cpu",
          "--out", str(work / "baselines2.json"), "--compare", str(work / "baselines.json"),
          "--compare-mode", "eager"], (0,), None),
        (["cudaagent", "baselines", "--modes", "eager,nonsense", "--device", "cpu"], (2,), None),
        (["cudaagent", "synth", "check", str(PROBLEM), "--device", "cpu", "--no-compile", "--min-ms", "0.0001",
          "--max-ms", "10000", "--max-task-gib", "1", "--task-timeout", "240", "--kernelbench", tree,
          "--similarity", "0.9", "--output", str(work / "synth.json")], (0, 1), kept_or_dropped),
    ]


def _plugin_runs(work: Path) -> list[tuple[list[str], tuple[int, ...], object]]:
    rootdir = ["--rootdir", str(work)]
    problem, candidate = work / "problems" / PROBLEM.name, work / "candidates" / PROBLEM.name

    def one_pair(run):
        assert "1 passed" in run.stdout, run.stdout[-2000:]
        row = json.loads((work / "plugin.jsonl").read_text().splitlines()[0])
        assert row["status"] == "passed" and len(row["trials"]) == 2 and row["convention"] == "cuda-agent"

    def skipped(run):  # the pair done by the run before is left out (pytest: no tests ran, exit 5)
        assert "collected 0 items" in run.stdout or "skipped" in run.stdout, run.stdout[-2000:]
        assert len((work / "plugin.jsonl").read_text().splitlines()) == 1

    def collected(run):
        assert f"cudaagent-synth::{PROBLEM.stem}" in run.stdout, run.stdout[-2000:]  # one item per file

    return [
        (["pytest", *rootdir, "--cudaagent-problem", str(problem), "--cudaagent-candidate", str(candidate),
          "--cudaagent-device", "cpu", "--cudaagent-trials", "2", "--cudaagent-no-timing",
          "--cudaagent-baselines", "eager", "--cudaagent-policy", "permissive", "--cudaagent-tolerance", "strict",
          "--cudaagent-convention", "cuda-agent", "--cudaagent-backend", "strict-fp32",
          "--cudaagent-config", str(work / "config.json"), "--cudaagent-memory-policy", "retry",
          "--cudaagent-reference-batch", "flags-test", "--cudaagent-start-ahead", "--cudaagent-fast-build",
          "--cudaagent-results", str(work / "plugin.jsonl")], (0,), one_pair),
        (["pytest", *rootdir, "--cudaagent-problems", str(work / "problems"),
          "--cudaagent-candidates", str(work / "candidates"), "--cudaagent-device", "cpu", "--cudaagent-no-timing",
          "--cudaagent-policy", "permissive", "--cudaagent-results", str(work / "plugin.jsonl"),
          "--cudaagent-resume"], (0, 5), skipped),
        # Refused where the machine cannot sandbox fully (a usage error naming what is missing).
        (["pytest", *rootdir, "--cudaagent-problem", str(PROBLEM), "--cudaagent-candidate", str(CANDIDATE),
          "--cudaagent-device", "cpu", "--cudaagent-no-timing", "--cudaagent-policy", "permissive",
          "--cudaagent-require-sandbox"], (0, 1, 4), None),
        (["pytest", *rootdir, "--collect-only", "--cudaagent-synth", str(PROBLEM),
          "--cudaagent-synth-out", str(work / "synth.jsonl"), "--cudaagent-synth-kernelbench", str(work / "kb"),
          "--cudaagent-synth-window", "0.001,1000"], (0,), collected),
    ]


RUNS = {"verify": (_verify_runs, ("verify",)), "bench": (_bench_runs, ("bench",)),
        "others": (_other_runs, ("leaderboard", "baselines", "synth check")), "pytest": (_plugin_runs, ("pytest",))}


def _own_run(command: str, flag: str, work: Path) -> tuple[list[str], tuple[int, ...], object]:
    """A run for a documented flag that no planned run gives: the command's cheapest run with it."""
    if command == "pytest":
        base = ["pytest", "--rootdir", str(work), "--collect-only", "--cudaagent-problem", str(PROBLEM),
                "--cudaagent-candidate", str(CANDIDATE)]
        return [*base, flag] + ([] if flag in _switches() else ["x"]), (0, 1, 2, 4, 5), None
    action = _options(command)[flag]
    value = _value_for(command, action)
    if command == "bench":
        base = ["cudaagent", "bench", "--problems", str(work / "problems"), "--candidates", str(work / "candidates"),
                "--device", "cpu", "--out", str(work / "own"), "--shard", _empty_shard(work / "problems")]
    elif command == "verify":
        base = ["cudaagent", "verify", str(PROBLEM), str(CANDIDATE), "--device", "cpu", "--no-timing", "--trials", "1",
                "--policy", "permissive"]
    else:
        base = ["cudaagent", *_required_argv(command)]
    return [*base, flag] + ([] if value is None else [value]), (0, 1, 2), None


def _switches() -> set[str]:
    from pytest_cudaagent import plugin

    return set(getattr(plugin, "_FLAGS", ()))


@pytest.mark.slow
@pytest.mark.parametrize("group", sorted(RUNS))
def test_every_documented_flag_runs_and_takes_effect(group, work):
    planned, commands = RUNS[group]
    runs = planned(work)
    given = set().union(*(_flags_in(argv) for argv, _, _ in runs))
    runs += [_own_run(command, flag, work) for command in commands
             for flag in sorted(DOCUMENTED.get(command, set()) - given)]
    for argv, ok, check in runs:
        run = _run(argv, cwd=work, ok=ok)
        if check is not None:
            check(run)

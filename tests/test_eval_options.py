"""The evaluator's options, declared once (pytest_cudaagent/options.py) and used by `cudaagent
verify`, `cudaagent bench` and the pytest plugin: the same option set in all three, the same
EvalConfig from the same values (command line, ini file, --cudaagent-config), bench's EvalConfig
reaching its pytest run's evaluations whole, and every bad value a usage error."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys

import pytest

from benchmark import batch, commands
from benchmark.cli import register_bench
from pytest_cudaagent import cli, plugin
from pytest_cudaagent.core.config import EvalConfig, TimingConfig
from pytest_cudaagent.core.result import Result
from pytest_cudaagent.options import EVAL_OPTIONS, OPTION_NAMES, eval_config
from tests.benchmark.bench_helpers import run_cli
from tests.helpers import CPU_CANDIDATES, TEST_PROBLEMS

SMALL_LEAKY = TEST_PROBLEMS / "small_leaky_relu.py"
LEAKY_CANDIDATE = CPU_CANDIDATES / "leaky_relu.py"

# Every evaluator option at a value other than verify's default (fast-build: on), and the
# EvalConfig that must give, written out here rather than derived from options.py.
NON_DEFAULT = {
    "device": "cpu", "trials": "3", "baselines": "eager,max-autotune", "no-timing": True, "policy": "permissive",
    "tolerance": "strict", "convention": "cuda-agent", "backend": "strict-fp32", "memory-policy": "retry",
    "require-sandbox": True, "timeout": "7", "build-timeout": "40", "audit-timed-calls": True,
    "count-launch": True, "timing-rounds": "3", "fast-build": True,
}


def expected(**changes) -> EvalConfig:
    return EvalConfig(**{**dict(
        device="cpu", trials=3, baselines=("eager", "max-autotune"), timing=False, policy="permissive",
        tolerance="strict", convention="cuda-agent", backend="strict-fp32", memory_policy="retry",
        require_sandbox=True, run_timeout_s=7.0, build_timeout_s=40.0, fast_build=True,
        timing_config=TimingConfig(audit_timed_calls=True, overlap_launch=False, timing_rounds=3)), **changes})


def flags(values: dict, prefix: str = "--") -> list[str]:
    words = []
    for name, value in values.items():
        words += [prefix + name] if value is True else [prefix + name, value]
    return words


# Each option with a value, at a bad one (a flag's only bad use: both of a contradicting pair).
BAD = [("device", "gpu"), ("trials", "0"), ("trials", "two"), ("baselines", "eager,fast"), ("policy", "lax"),
       ("tolerance", "loose"), ("convention", "mine"), ("backend", "tf32"), ("memory-policy", "greedy"),
       ("timeout", "0"), ("timeout", "soon"), ("build-timeout", "-1"), ("timing-rounds", "0"), ("timing-rounds", "many")]
CONTRADICTING = ["fast-build", "no-fast-build"]


def test_every_option_is_exercised_here():
    """A new option is added to these tests too, or this fails."""
    assert set(NON_DEFAULT) | {"no-fast-build"} == set(OPTION_NAMES)
    assert {name for name, _ in BAD} == {option.name for option in EVAL_OPTIONS if not option.is_flag}


# -- the same option set ---------------------------------------------------------------------

VERIFY_OWN = {"--help", "--output", "--json"}
BENCH_OWN = {"--help", "--kernelbench", "--problems", "--level", "--problem-id", "--name", "--candidates", "--out",
             "--shard", "--resume", "--overwrite", "--workers", "--no-shared-reference", "--no-start-ahead"}
PLUGIN_OWN = {"problem", "candidate", "problems", "candidates", "results", "resume", "config", "reference-batch",
              "start-ahead"}


def _subcommand(register, name: str) -> argparse.ArgumentParser:
    subparsers = argparse.ArgumentParser().add_subparsers()
    register(subparsers)
    return subparsers.choices[name]


def _argparse_options(parser: argparse.ArgumentParser) -> dict[str, tuple]:
    return {string: (action.choices, action.metavar, action.help, action.default) for action in parser._actions
            for string in action.option_strings if string.startswith("--")}


class _PytestParser:
    """Records what the plugin's pytest_addoption adds."""

    def __init__(self):
        self.options, self.inis = {}, set()

    def getgroup(self, *args, **kwargs):
        return self

    def addoption(self, *names, **kwargs):
        self.options.update({name: kwargs for name in names})

    def addini(self, name, *args, **kwargs):
        self.inis.add(name)


def test_verify_bench_and_the_plugin_expose_the_same_evaluator_options():
    verify = _argparse_options(_subcommand(cli.register, "verify"))
    bench = _argparse_options(_subcommand(register_bench, "bench"))
    pytest_parser = _PytestParser()
    plugin.pytest_addoption(pytest_parser)
    plugin_options = {name.removeprefix("--cudaagent-"): kwargs for name, kwargs in pytest_parser.options.items()}

    declared = {"--" + name for name in OPTION_NAMES}
    # Every evaluator flag a command has is a declared one: none is spelled out by hand beside them.
    assert set(verify) - VERIFY_OWN == declared
    assert set(bench) - BENCH_OWN == declared
    assert set(plugin_options) - PLUGIN_OWN == set(OPTION_NAMES)
    assert {f"cudaagent_{name.replace('-', '_')}" for name in OPTION_NAMES} <= pytest_parser.inis  # ini twins
    for name in declared:  # one declaration: the same choices, metavar, help and default everywhere
        assert verify[name] == bench[name], name
        pytest_kwargs = plugin_options[name.removeprefix("--")]
        assert (pytest_kwargs.get("choices"), pytest_kwargs.get("metavar"), pytest_kwargs["help"],
                pytest_kwargs["default"]) == verify[name], name


# -- the same EvalConfig from the same values ------------------------------------------------


def _verify_config(monkeypatch, words: list[str]) -> EvalConfig:
    seen = {}

    def fake_evaluate(problem, candidate, config):
        seen["config"] = config
        return Result(problem=str(problem), candidate=str(candidate), status="incorrect")

    monkeypatch.setattr(cli, "evaluate", fake_evaluate)
    assert cli.main(["verify", str(SMALL_LEAKY), str(LEAKY_CANDIDATE), "--json", *words]) == 1
    return seen["config"]


def test_verify_builds_the_config_its_flags_say(monkeypatch):
    assert _verify_config(monkeypatch, flags(NON_DEFAULT)) == expected()
    assert _verify_config(monkeypatch, []) == EvalConfig()


def test_a_plain_pytest_users_options_build_the_config_verifys_flags_do(pytester, monkeypatch):
    from_verify = _verify_config(monkeypatch, flags(NON_DEFAULT))
    from_command_line = plugin.config_from_pytest(pytester.parseconfigure(*flags(NON_DEFAULT, "--cudaagent-")))
    assert from_command_line == from_verify == expected()

    lines = [f"cudaagent_{name.replace('-', '_')} = {'true' if value is True else value}"
             for name, value in NON_DEFAULT.items()]
    pytester.makeini("[pytest]\n" + "\n".join(lines) + "\n")
    assert plugin.config_from_pytest(pytester.parseconfigure()) == expected()


def test_the_config_option_takes_a_whole_config_and_options_given_beside_it_win(pytester, tmp_path):
    whole = expected(reference_batch="run-1", timing_config=TimingConfig(reserved_cpus=3, audit_timed_calls=True,
                                                                         overlap_launch=False))
    as_json = json.dumps(whole.to_dict())
    assert plugin.config_from_pytest(pytester.parseconfigure("--cudaagent-config", as_json)) == whole
    (tmp_path / "config.json").write_text(as_json)
    from_file = pytester.parseconfigure("--cudaagent-config", str(tmp_path / "config.json"), "--cudaagent-trials", "8")
    assert plugin.config_from_pytest(from_file) == expected(reference_batch="run-1", trials=8,
                                                            timing_config=whole.timing_config)
    # Only options given decide: one left out keeps the file's value, not the option's default.
    assert plugin.config_from_pytest(from_file).policy == "permissive"


def test_the_plugin_builds_its_config_once_per_session(pytester, monkeypatch):
    loads = []
    load = plugin.load_config
    monkeypatch.setattr(plugin, "load_config", lambda text: loads.append(text) or load(text))
    config = pytester.parseconfigure("--cudaagent-config", json.dumps(expected().to_dict()))
    first = plugin.config_from_pytest(config)
    assert plugin.config_from_pytest(config) is first and len(loads) == 1


def test_bench_builds_the_config_its_flags_say_over_its_own_defaults():
    parser = _subcommand(register_bench, "bench")
    words = flags({name: value for name, value in NON_DEFAULT.items() if name != "fast-build"}) + ["--no-fast-build"]
    assert commands.bench_config(parser.parse_args(words)) == expected(fast_build=False)
    assert commands.bench_config(parser.parse_args([])) == EvalConfig(fast_build=True)  # a batch amortises the PCH


def test_a_bench_runs_evaluations_get_exactly_the_config_bench_built(tmp_path, monkeypatch):
    """A real `cudaagent bench` run (pytest under xdist, two workers) whose evaluations only write
    down the EvalConfig they got and how many times their process read the run's config."""
    records = tmp_path / "configs.jsonl"
    monkeypatch.setenv("RECORD_CONFIGS", str(records))
    monkeypatch.setattr(commands, "require_sandbox", lambda: None)  # --require-sandbox: only the setting matters
    command = batch.pytest_command
    monkeypatch.setattr(batch, "pytest_command",
                        lambda *args: [*command(*args), "-p", "tests.benchmark.record_configs"])
    words = flags({name: value for name, value in NON_DEFAULT.items() if name != "fast-build"}) + ["--no-fast-build"]
    code = run_cli(["bench", "--out", str(tmp_path / "out"), "--workers", "2", *words])
    assert code in (0, 1), (tmp_path / "out" / "pytest.log").read_text()[-3000:]
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    assert len(rows) == len(list((CPU_CANDIDATES).glob("*.py"))) and len({row["pid"] for row in rows}) == 2
    written = EvalConfig.from_dict(json.loads((tmp_path / "out" / ".bench-run" / batch.RUN_CONFIG).read_text()))
    # One candidate per bundled problem: no reference to share (batch.sharing_for), so no batch id.
    assert written.reference_batch == ""
    for row in rows:
        assert EvalConfig.from_dict(row["config"]) == expected(fast_build=False, reference_batch=written.reference_batch)
        assert row["loads"] == 1  # read once in its process, not once per pair


# -- bad values ------------------------------------------------------------------------------


def test_every_bad_value_is_a_usage_error_of_verify_before_torch_is_imported(tmp_path):
    cases = [[f"--{name}", value] for name, value in BAD] + [[f"--{name}" for name in CONTRADICTING]]
    probe = ("import sys\nfrom pytest_cudaagent.cli import main\ncodes = []\n"
             f"for words in {cases!r}:\n"
             f"    try:\n        codes.append(main(['verify', {str(SMALL_LEAKY)!r}, {str(LEAKY_CANDIDATE)!r}, *words]))\n"
             "    except SystemExit as stop:\n        codes.append(stop.code)\n"
             "print(*codes, 'torch' in sys.modules)\n")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert run.stdout.split() == ["2"] * len(cases) + ["False"], run.stdout + run.stderr
    assert "--trials must be at least 1" in run.stderr and "--timeout must be a positive number of seconds" in run.stderr
    assert "--fast-build and --no-fast-build contradict each other" in run.stderr


@pytest.mark.parametrize("words", [[f"--{name}", value] for name, value in BAD] + [[f"--{n}" for n in CONTRADICTING]])
def test_every_bad_value_is_a_usage_error_of_bench(tmp_path, monkeypatch, capsys, words):
    monkeypatch.setattr(commands, "run_batch", lambda *args, **kwargs: pytest.fail("bench ran"))
    try:
        code = run_cli(["bench", "--out", str(tmp_path / "out"), *words])
    except SystemExit as stop:  # argparse's own: a choice that is not one
        code = stop.code
    assert code == 2
    assert words[0] in capsys.readouterr().err


@pytest.mark.parametrize("words", [[f"--cudaagent-{name}", value] for name, value in BAD]
                         + [[f"--cudaagent-{n}" for n in CONTRADICTING]])
def test_every_bad_value_is_a_usage_error_of_the_plugin(pytester, words):
    with pytest.raises((pytest.UsageError, ValueError), match=words[0]):
        plugin.config_from_pytest(pytester.parseconfigure(*words))


def test_a_bad_value_ends_a_plain_pytest_run_as_a_usage_error(pytester):
    # Files of the run's own folder: its ini file is then the one pytest reads.
    shutil.copy(SMALL_LEAKY, pytester.path / "problem.py")
    shutil.copy(LEAKY_CANDIDATE, pytester.path / "candidate.py")
    pair = ["--cudaagent-problem", "problem.py", "--cudaagent-candidate", "candidate.py"]
    outcome = pytester.runpytest_subprocess(*pair, "--cudaagent-trials", "0", "-p", "no:cacheprovider")
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    outcome.stderr.fnmatch_lines(["*--cudaagent-trials must be at least 1*"])
    pytester.makeini("[pytest]\ncudaagent_timeout = -3\n")
    outcome = pytester.runpytest_subprocess(*pair, "-p", "no:cacheprovider")
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    outcome.stderr.fnmatch_lines(["*--cudaagent-timeout must be a positive number of seconds*"])


def test_eval_config_leaves_its_base_alone():
    base = EvalConfig(fast_build=True)
    built = eval_config({"count-launch": True, "trials": 2}, base)
    assert base == EvalConfig(fast_build=True) and built.timing_config.overlap_launch is False and built.trials == 2

"""The batch runner and `cudaagent bench`: worker counts, the pytest command, following the
results file, and a real run under pytest-xdist that is then resumed."""

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from benchmark.batch import (
    RUN_CONFIG,
    BatchSettings,
    default_workers,
    pytest_command,
    run_environment,
)
from benchmark.progress import ResultsTail
from experiments import start_trace as start_trace_experiment
from pytest_cudaagent.core.config import EvalConfig
from pytest_cudaagent.options import OPTION_NAMES
from pytest_cudaagent.records.results_file import append_json_line, read_results
from tests.helpers import CPU_CANDIDATES, TEST_PROBLEMS

from .bench_helpers import (
    fake_result,
    make_kernelbench_tree,
    run_cli,
    write_candidate,
    write_results,
)


def test_default_workers_leave_builds_room_beside_each_gpu_timing():
    assert default_workers("cuda", gpus=1, cpus=16) == 16  # a build per core (measured on the H100 machine)
    assert default_workers("cuda", gpus=1, cpus=64) == 16  # at most 16 per GPU
    assert default_workers("cuda", gpus=2, cpus=64) == 32
    assert default_workers("cuda", gpus=8, cpus=8) == 16  # at least two per GPU
    assert default_workers("cpu", gpus=0, cpus=2) == 1
    assert default_workers("cpu", gpus=0, cpus=32) == 2


def test_pytest_command_carries_the_settings(tmp_path, monkeypatch):
    """The run's EvalConfig goes to pytest whole, as one file (--cudaagent-config), never flag by flag."""
    config = EvalConfig(device="cpu", trials=3, baselines=("eager", "max-autotune"), timing=False,
                        policy="permissive", tolerance="strict", backend="strict-fp32")
    settings = BatchSettings(config)
    command = pytest_command(tmp_path / "pairs.json", tmp_path / "r.jsonl", tmp_path, settings, "cpu", 4)
    text = " ".join(command)
    for part in ("-n 4", f"--cudaagent-config {tmp_path / RUN_CONFIG}", "-p benchmark.pairs_plugin",
                 f"--bench-pairs {tmp_path / 'pairs.json'}", "--cudaagent-start-ahead"):  # start ahead: the default
        assert part in text
    evaluator_flags = {f"--cudaagent-{name}" for name in OPTION_NAMES} | {"--cudaagent-reference-batch"}
    assert not evaluator_flags & set(command)
    written = EvalConfig.from_dict(json.loads((tmp_path / RUN_CONFIG).read_text()))
    assert dataclasses.replace(written, reference_batch="") == config
    not_ahead = BatchSettings(config, start_ahead=False)
    assert "--cudaagent-start-ahead" not in pytest_command(tmp_path / "p", tmp_path / "r", tmp_path, not_ahead, "cpu", 1)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    disabled = " ".join(pytest_command(tmp_path / "p", tmp_path / "r", tmp_path, settings, "cpu", 1))
    assert "-p pytest_cudaagent.plugin" in disabled and "-p xdist.plugin" in disabled


def test_each_run_shares_references_under_an_id_of_its_own(tmp_path):
    """Every candidate file of a run exists before it starts, so a run is a batch
    (EvalConfig.reference_batch); a fresh id per run, none with share_reference off."""

    def batch_id(settings: BatchSettings) -> str:
        pytest_command(tmp_path / "p", tmp_path / "r", tmp_path, settings, "cpu", 1)
        return json.loads((tmp_path / RUN_CONFIG).read_text())["reference_batch"]

    first, second = batch_id(BatchSettings()), batch_id(BatchSettings())
    assert len(first) == 32 and first != second
    assert batch_id(BatchSettings(share_reference=False)) == ""


def test_references_are_shared_only_where_a_problem_has_another_candidate(tmp_path):
    from benchmark.batch import sharing_for
    from pytest_cudaagent.records.pairing import Pair

    one_each = [Pair(tmp_path / "a.py", tmp_path / "a_new.py", 0), Pair(tmp_path / "b.py", tmp_path / "b_new.py", 0)]
    assert sharing_for(one_each, BatchSettings()).share_reference is False
    repeated = one_each + [Pair(tmp_path / "a.py", tmp_path / "a_other.py", 1)]
    assert sharing_for(repeated, BatchSettings()).share_reference is True
    assert sharing_for(repeated, BatchSettings(share_reference=False)).share_reference is False


@pytest.mark.parametrize(("candidates", "shared"), [(("a",), False), (("a", "b"), True)])
def test_a_run_of_one_candidate_per_problem_keeps_no_reference(tmp_path, monkeypatch, candidates, shared):
    import sys

    from rich.console import Console

    from benchmark import batch
    from pytest_cudaagent.records.pairing import Pair

    seen = []

    def command(manifest, results_path, run_dir, settings, device, workers):
        seen.append(settings)
        return [sys.executable, "-c", "pass"]  # the run itself is not the point here
    monkeypatch.setattr(batch, "pytest_command", command)
    problem = TEST_PROBLEMS / "small_leaky_relu.py"
    pairs = [Pair(problem, tmp_path / f"{name}.py", sample) for sample, name in enumerate(candidates)]
    batch.run_batch(pairs, tmp_path / "out" / "results.jsonl", BatchSettings(EvalConfig(device="cpu")),
                    console=Console(quiet=True))
    assert [settings.share_reference for settings in seen] == [shared]


def test_results_tail_waits_for_complete_lines_and_half_lines_are_closed(tmp_path):
    path = tmp_path / "results.jsonl"
    line = fake_result("/p/a.py", "/c/a.py").to_json()
    path.write_text(line + "\n" + line[:40])
    tail = ResultsTail(path, 0)
    assert len(tail.poll()) == 1 and tail.poll() == []
    append_json_line(path, line)  # a resumed run's next line starts on a line of its own
    assert len(tail.poll()) == 1  # the cut line is skipped, the new one is read
    assert len(read_results(path)) == 2


def test_bench_usage_errors(tmp_path, capsys):
    make_kernelbench_tree(tmp_path / "kb")
    assert run_cli(["bench", "--kernelbench", str(tmp_path / "kb"), "--out", str(tmp_path / "o")]) == 2
    assert "--candidates DIR is needed" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert run_cli(["bench", "--kernelbench", str(tmp_path / "kb"), "--candidates", str(tmp_path / "empty"),
                    "--out", str(tmp_path / "o")]) == 2
    assert "level_<L>_problem_<N>_sample_<K>_kernel.py" in capsys.readouterr().err
    assert run_cli(["bench", "--kernelbench", str(tmp_path / "kb"), "--level", "7",
                    "--candidates", str(tmp_path / "empty")]) == 2
    assert "no problems left after selection" in capsys.readouterr().err


@pytest.mark.slow
def test_bench_runs_under_xdist_writes_reports_and_resumes_without_redoing_work(tmp_path, capsys):
    make_kernelbench_tree(tmp_path / "kb")
    candidates = tmp_path / "runs"
    write_candidate(candidates / "level_1_problem_1_sample_0_kernel.py", "x.clamp_min(0)")
    write_candidate(candidates / "level_2" / "level_2_problem_1_sample_0_kernel.py", "x.clamp_min(0) + 1.0")
    out = tmp_path / "out"
    arguments = ["bench", "--kernelbench", str(tmp_path / "kb"), "--candidates", str(candidates),
                 "--device", "cpu", "--out", str(out), "--workers", "2", "--policy", "permissive",
                 "--baselines", "eager", "--trials", "2"]
    assert run_cli(arguments) == 0
    first = read_results(out / "results.jsonl")
    verdicts = {Path(r.candidate).name: r.status for r in first}
    assert verdicts == {"level_1_problem_1_sample_0_kernel.py": "passed", "level_2_problem_1_sample_0_kernel.py": "passed"}
    assert all("eager" in r.timing for r in first if r.passed)
    markdown = (out / "leaderboard.md").read_text()
    assert "| out | level1 | 1 | 1 |" in markdown and "| out | level2 | 1 | 1 |" in markdown
    assert (out / "report.html").stat().st_size > 10_000 and (out / "leaderboard.csv").exists()
    assert "with 2 worker(s)" in capsys.readouterr().out

    assert run_cli(arguments) == 2  # results exist: resume or overwrite, never mix silently
    assert "--resume" in capsys.readouterr().err

    write_candidate(candidates / "level_1_problem_1_sample_1.py", "x.abs()")  # a wrong sample
    assert run_cli(arguments + ["--resume"]) == 0
    assert "skipped 2 of 3 pair(s) already done" in capsys.readouterr().out
    second = read_results(out / "results.jsonl")
    assert [r.to_dict() for r in second[:2]] == [r.to_dict() for r in first]
    assert [(Path(r.candidate).name, r.status) for r in second[2:]] == [("level_1_problem_1_sample_1.py", "incorrect")]
    manifest = json.loads((out / ".bench-run" / "pairs.json").read_text())
    assert [Path(row["candidate"]).name for row in manifest] == ["level_1_problem_1_sample_1.py"]
    assert "| out | level1 | 1 | 2 | 100 | 50 |" in (out / "leaderboard.md").read_text()  # pass@1 now 50%


def test_resume_names_a_cut_line_and_redoes_its_pair(tmp_path, monkeypatch):
    """A batch killed while writing its second Result: resume says which line it skipped and
    plans that pair again (run here up to the point where pytest would start)."""
    from rich.console import Console

    from benchmark import batch
    from pytest_cudaagent.records.pairing import Pair

    pairs = [Pair(tmp_path / f"{name}.py", tmp_path / f"{name}_c.py") for name in ("a", "b")]
    path = tmp_path / "results.jsonl"
    append_json_line(path, fake_result(str(pairs[0].problem), str(pairs[0].candidate)).to_json())
    with open(path, "a") as handle:
        handle.write(fake_result(str(pairs[1].problem), str(pairs[1].candidate)).to_json()[:50])
    planned = []

    def plan_and_stop(manifest, todo):
        planned.extend(todo)
        raise StopIteration  # before pytest would start

    monkeypatch.setattr(batch, "write_manifest", plan_and_stop)
    console = Console(record=True, width=300)
    with pytest.raises(StopIteration):
        batch.run_batch(pairs, path, BatchSettings(EvalConfig(device="cpu")), resume=True, console=console)
    assert "skipped 1 unreadable line(s) (line 2)" in console.export_text()
    assert planned == [pairs[1]]


def test_the_manifest_holds_absolute_paths_for_pairs_given_relative_to_the_caller(tmp_path, monkeypatch):
    """The run reads the manifest from its own directory: relative pairs were 'no such problem
    file' there (72 pairs of the H100 side by side ended without a result)."""
    from benchmark.pairs_plugin import read_manifest, write_manifest
    from pytest_cudaagent.records.pairing import Pair

    monkeypatch.chdir(tmp_path)
    (tmp_path / "p").mkdir()
    manifest = tmp_path / "run" / "pairs.json"
    manifest.parent.mkdir()
    write_manifest(manifest, [Pair(Path("p/a.py"), Path("c/a.py"))])
    monkeypatch.chdir(manifest.parent)
    [pair] = read_manifest(manifest)
    assert pair.problem == tmp_path / "p" / "a.py" and pair.candidate == tmp_path / "c" / "a.py"


@pytest.mark.parametrize("flag, setting", [
    ("--no-fast-build", "fast_build"),  # the precompiled torch/extension.h a batch amortises
    ("--no-start-ahead", "start_ahead"),  # a worker's next candidate built beside its current one's checks
])
def test_bench_turns_on_what_pays_over_a_batch_unless_told_not_to(tmp_path, monkeypatch, flag, setting):
    import benchmark.commands as commands
    from benchmark.batch import BatchError

    seen = []

    def batch(pairs, results_path, settings, **_):
        seen.append(getattr(settings.config if setting == "fast_build" else settings, setting))
        raise BatchError("only the settings are looked at")

    monkeypatch.setattr(commands, "run_batch", batch)
    arguments = ["bench", "--device", "cpu", "--out", str(tmp_path / "out")]
    run_cli(arguments)
    run_cli([*arguments, flag])
    assert seen == [True, False]


def test_the_device_is_found_without_importing_torch(tmp_path, monkeypatch):
    """`auto` is cuda when the driver shows a GPU and the installed torch is a CUDA build, read
    from torch's version file (importing torch takes 5.5 s on the H100 machine)."""
    from benchmark import batch

    monkeypatch.setattr(batch, "visible_gpus", lambda: [])
    assert batch.batch_device("auto") == "cpu" and batch.batch_device("cuda") == "cuda"
    monkeypatch.setattr(batch, "visible_gpus", lambda: ["0"])
    monkeypatch.setattr(batch, "torch_built_with_cuda", lambda: True)
    assert batch.batch_device("auto") == "cuda"
    monkeypatch.setattr(batch, "torch_built_with_cuda", lambda: False)
    assert batch.batch_device("auto") == "cpu"  # a CPU build of torch on a machine with a GPU


@pytest.mark.parametrize(("line", "built_with_cuda"), [("cuda: Optional[str] = '13.0'", True),
                                                        ("cuda: Optional[str] = None", False),
                                                        ("cuda = '12.8'", True)])
def test_torchs_cuda_build_is_read_from_its_version_file(tmp_path, monkeypatch, line, built_with_cuda):
    import importlib.machinery
    import importlib.util

    from benchmark import batch

    package = tmp_path / "torch"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "version.py").write_text(f"__version__ = '2.11.0'\ndebug = False\n{line}\ngit_version = 'x'\n")
    spec = importlib.machinery.ModuleSpec("torch", None, origin=str(package / "__init__.py"))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec)
    assert batch.torch_built_with_cuda() is built_with_cuda


def test_torch_that_sees_no_gpu_stops_the_run_while_it_starts(tmp_path, monkeypatch):
    """The driver shows a GPU, torch cannot use it: asked while pytest starts, and the run ends
    with a message saying what to do."""
    from benchmark import batch

    monkeypatch.setattr(batch, "visible_gpus", lambda: ["0"])
    monkeypatch.setattr(batch, "gpu_count", lambda: 0)
    started = []
    real_popen = batch.subprocess.Popen

    def popen(*args, **kwargs):
        started.append(real_popen(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(batch.subprocess, "Popen", popen)
    problem = tmp_path / "p.py"
    problem.write_text("import torch\nclass Model(torch.nn.Module):\n    pass\n"
                       "def get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n")
    candidate = write_candidate(tmp_path / "c" / "p.py", "x")
    from pytest_cudaagent.records.pairing import Pair

    with pytest.raises(batch.BatchError, match="torch sees no CUDA GPU .*install a CUDA build of torch, or use --device cpu"):
        batch.run_batch([Pair(problem, candidate)], tmp_path / "out" / "results.jsonl", BatchSettings(EvalConfig(device="cuda")))
    assert started and started[0].poll() is not None  # the pytest run it had started was ended


def test_the_processes_that_only_dispatch_never_import_torch():
    """xdist's controller and the `cudaagent` CLI's parent load the plugin, the batch runner and
    the commands without torch; `from pytest_cudaagent import evaluate` is still the function,
    even after the evaluation core was imported under its own name."""
    import subprocess
    import sys

    code = ("import sys\n"
            "import pytest_cudaagent.plugin, pytest_cudaagent.cli, benchmark.pairs_plugin, benchmark.batch, benchmark.cli\n"
            "import benchmark.commands, pytest_cudaagent.workers.reference_batch\n"
            "from pytest_cudaagent.workers import zygote\n"
            "zygote.prestart()  # the zygote imports torch in its own process\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n"
            "import pytest_cudaagent.evaluation\n"
            "from pytest_cudaagent import evaluate, ProblemError\n"
            "assert callable(evaluate) and evaluate.__module__ == 'pytest_cudaagent.evaluation', evaluate\n"
            "assert issubclass(ProblemError, Exception)\n")
    finished = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert finished.returncode == 0, finished.stderr


def test_the_memory_policy_reaches_pytest(tmp_path):
    for policy in ("admit", "retry"):
        pytest_command(tmp_path / "p", tmp_path / "r", tmp_path, BatchSettings(EvalConfig(memory_policy=policy)), "cpu", 1)
        assert json.loads((tmp_path / RUN_CONFIG).read_text())["memory_policy"] == policy


def test_resume_redoes_a_harness_error_and_nothing_else(tmp_path, monkeypatch):
    """An error of ours says nothing of its pair: resume evaluates it again; every other status,
    the problem's and the candidate's failures too, is done."""
    from rich.console import Console

    from benchmark import batch
    from pytest_cudaagent.records.pairing import Pair

    pairs = [Pair(tmp_path / f"{name}.py", tmp_path / f"{name}_c.py") for name in ("a", "b", "c", "d")]
    path = write_results(tmp_path / "results.jsonl", [
        fake_result(str(pair.problem), str(pair.candidate), status=status)
        for pair, status in zip(pairs, ("passed", "harness_error", "problem_error", "build_error"), strict=True)])
    planned = []

    def plan_and_stop(manifest, todo):
        planned.extend(todo)
        raise StopIteration  # before pytest would start

    monkeypatch.setattr(batch, "write_manifest", plan_and_stop)
    with pytest.raises(StopIteration):
        batch.run_batch(pairs, path, BatchSettings(EvalConfig(device="cpu")), resume=True, console=Console(quiet=True))
    assert planned == [pairs[1]]


@pytest.mark.slow
def test_a_pair_whose_pytest_worker_died_gets_a_harness_error_row(tmp_path, monkeypatch):
    from rich.console import Console

    from benchmark import batch
    from pytest_cudaagent.records.pairing import Pair

    problem = tmp_path / "problems" / "small_leaky_relu.py"
    problem.parent.mkdir()
    shutil.copy(TEST_PROBLEMS / "small_leaky_relu.py", problem)
    candidates = [tmp_path / "candidates" / f"small_leaky_relu_sample_{sample}.py" for sample in (0, 1)]
    candidates[0].parent.mkdir()
    for candidate in candidates:
        shutil.copy(CPU_CANDIDATES / "leaky_relu.py", candidate)
    command = batch.pytest_command
    monkeypatch.setattr(batch, "pytest_command",
                        lambda *args: [*command(*args), "-p", "tests.benchmark.dying_worker"])
    settings = BatchSettings(EvalConfig(device="cpu", timing=False, trials=1, policy="permissive"), workers=2)
    outcome = batch.run_batch([Pair(problem, candidate, sample) for sample, candidate in enumerate(candidates)],
                              tmp_path / "out" / "results.jsonl", settings, console=Console(quiet=True))
    assert outcome.pytest_exit == 1 and outcome.missing == 0
    statuses = {Path(result.candidate).name: result.status for result in read_results(tmp_path / "out" / "results.jsonl")}
    assert statuses == {"small_leaky_relu_sample_0.py": "passed", "small_leaky_relu_sample_1.py": "harness_error"}
    assert [Path(result.candidate).name for result in outcome.unreported] == ["small_leaky_relu_sample_1.py"]


def test_default_workers_count_the_cores_this_process_may_use_not_the_machines():
    """A Slurm job, a cpuset container or `taskset` gives a share of the machine: the default
    worker count follows the affinity (here one core of this machine's), not os.cpu_count()."""
    import os
    import subprocess
    import sys

    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no CPU affinity on this platform")
    script = ("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
              "from pytest_cudaagent.system.cores import usable_cores; "
              "from benchmark import batch; import inspect; "
              "print(usable_cores(), os.cpu_count(), 'usable_cores()' in inspect.getsource(batch.run_batch))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "1"
    assert out[2] == "True"  # run_batch sizes its default workers by it
    assert default_workers("cuda", gpus=1, cpus=int(out[0])) == 2


@pytest.mark.slow
def test_a_bench_without_timing_serves_its_problems_from_one_reference_process(tmp_path, monkeypatch):
    """reused_reference.py under a real `cudaagent bench --no-timing`: a worker's later problems
    are served by its first reference's process, each verdict its own, and no reference process
    outlives the run. Traced (CUDAAGENT_TRACE): every process of the run marks its start, and
    experiments/start_trace.py reads it."""
    import psutil

    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv("CUDAAGENT_TRACE", str(trace))

    make_kernelbench_tree(tmp_path / "kb")
    candidates = tmp_path / "runs"
    write_candidate(candidates / "level_1_problem_1_sample_0_kernel.py", "torch.relu(x)")
    write_candidate(candidates / "level_1_problem_2_sample_0_kernel.py", "x * 3.0")  # wrong
    write_candidate(candidates / "level_2" / "level_2_problem_1_sample_0_kernel.py", "torch.relu(x) + 1.0")
    out = tmp_path / "out"
    assert run_cli(["bench", "--kernelbench", str(tmp_path / "kb"), "--candidates", str(candidates), "--device", "cpu",
                    "--out", str(out), "--workers", "1", "--policy", "permissive", "--no-timing", "--trials", "2"]) == 0
    results = sorted(read_results(out / "results.jsonl"), key=lambda result: result.env.get("reference_reused", 0))
    assert {Path(r.candidate).name: r.status for r in results} == {
        "level_1_problem_1_sample_0_kernel.py": "passed", "level_1_problem_2_sample_0_kernel.py": "incorrect",
        "level_2_problem_1_sample_0_kernel.py": "passed"}
    assert [result.env.get("reference_reused") for result in results] == [None, 1, 2]
    (pid,) = {result.env["pids"]["reference"] for result in results}
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    marks = start_trace_experiment.read_trace(trace)
    events = {mark["event"] for mark in marks}
    assert {"bench.pytest_started", "pytest.configure", "pytest.collected", "zygote.start",
            "zygote.ready", "zygote.fork_asked", "zygote.forked", "worker.setup", "item.start",
            "evaluation.imported", "item.end"} <= events
    assert sum(mark["event"] == "item.end" for mark in marks) == 3
    assert {mark["side"] for mark in marks if mark["event"] == "worker.setup"} == {"candidate", "reference"}
    rows = start_trace_experiment.per_worker(marks, start_trace_experiment.origin(marks))
    assert list(rows) == ["gw0"] and 0 < rows["gw0"]["item"] < rows["gw0"]["item end"]


def test_the_runs_processes_keep_bytecode_under_the_cache_where_torch_has_none(tmp_path, monkeypatch):
    """bytecode_cache.py in the run's environment: on the H200 machine torch had no bytecode beside
    it and every process of a batch compiled it (4-5 s each); forced here, as it is there."""
    settings = BatchSettings(config=EvalConfig(device="cpu", cache_dir=tmp_path / "cache"))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("CUDAAGENT_BYTECODE_CACHE", "1")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")  # a bench started from inside an xdist worker
    env = run_environment(settings, tmp_path / "status")
    assert env["PYTHONPYCACHEPREFIX"] == str((tmp_path / "cache" / "bytecode").resolve())
    assert "PYTHONDONTWRITEBYTECODE" not in env
    assert "PYTEST_XDIST_WORKER" not in env  # its run's controller is no worker of the outer run
    monkeypatch.setenv("CUDAAGENT_BYTECODE_CACHE", "0")
    env = run_environment(settings, tmp_path / "status")
    assert "PYTHONPYCACHEPREFIX" not in env and env["PYTHONDONTWRITEBYTECODE"] == "1"

"""Candidates that attack what lies outside their own process (tests/adversarial/sandbox_candidates):
each must end with a verdict that names what stopped it, the evaluator's state intact and nothing
of the candidate's left running. The attack's target reaches the candidate through
CUDAAGENT_ATTACK_TARGET (the candidate's process inherits the evaluator's environment)."""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import pytest

from pytest_cudaagent import evaluate
from pytest_cudaagent.core.config import SandboxLimits, TimingConfig
from pytest_cudaagent.core.result import TimingStats
from pytest_cudaagent.timing.baseline_cache import BaselineCache
from pytest_cudaagent.workers import zygote
from pytest_cudaagent.workers.sandbox import SandboxUnavailable, require_sandbox
from tests.helpers import TEST_PROBLEMS, cpu_config

ATTACKS = Path(__file__).parent / "sandbox_candidates"
PROBLEM = TEST_PROBLEMS / "small_leaky_relu.py"


@pytest.fixture(scope="module", autouse=True)
def full_sandbox():
    try:
        return require_sandbox()
    except SandboxUnavailable as error:
        pytest.skip(f"this machine cannot sandbox fully: {error}")


def evaluation_processes() -> set[int]:
    """This process's running descendants, less multiprocessing's resource tracker (one per
    process) and the worker zygotes (one per environment, kept for the next evaluation; whatever a
    candidate leaves running would be below one of them, and is counted). A zombie has ended (its
    parent reaps it: tests/evaluator/test_reaping.py checks that none stays), and a process gone
    since the listing is gone: on a loaded machine both are seen."""
    zygotes = set(zygote.running_pids())
    running = set()
    for process in psutil.Process().children(recursive=True):
        try:
            if process.pid in zygotes or process.status() == psutil.STATUS_ZOMBIE \
                    or "resource_tracker" in " ".join(process.cmdline()):
                continue
        except psutil.NoSuchProcess:  # ZombieProcess too
            continue
        running.add(process.pid)
    return running


def left_running(before: set[int], settle_s: float = 3.0) -> set[int]:
    """The processes running now that were not before, once those that end within `settle_s` have
    ended. A zygote imports torch._dynamo and Triton after it has said it is ready and checks after
    each import, in a child it forks and reaps at once, that the import did not touch CUDA
    (zygote.AFTER_READY): such a child lives for milliseconds and may be listed. What a candidate
    leaves running (a daemon) is still there after the wait."""
    deadline = time.monotonic() + settle_s
    extra = evaluation_processes() - before
    while extra and time.monotonic() < deadline:
        time.sleep(0.05)
        extra = evaluation_processes() - before
    return extra


def attack(name: str, target, monkeypatch, **overrides):
    monkeypatch.setenv("CUDAAGENT_ATTACK_TARGET", str(target))
    config = cpu_config(policy="permissive", trials=1, **overrides)
    before = evaluation_processes()
    result = evaluate(PROBLEM, ATTACKS / f"{name}.py", config)
    assert not left_running(before), "a process of the evaluation is still running"
    assert result.env["sandbox"]["pid_ns"] and result.env["sandbox"]["landlock"]
    return result


def test_honest_candidate_passes_sandboxed():
    result = evaluate(PROBLEM, ATTACKS / "honest_torch.py", cpu_config(policy="permissive", trials=2))
    assert result.passed, result.summary()
    applied = result.env["sandbox"]
    assert applied["pid_ns"] and applied["net_ns"] and applied["private_proc"] and applied["landlock"]
    assert {"cpu", "fsize", "nofile"} <= set(applied["rlimits"]) and applied["process_limit"]


def test_baseline_cache_poisoning_is_refused(tmp_path, monkeypatch):
    cache_dir = tmp_path / "cache"
    monkeypatch.setenv("CUDAAGENT_CACHE", str(cache_dir))
    cache = BaselineCache(cache_dir)
    key = cache.key(PROBLEM, "cpu", "eager", TimingConfig(), "kernelbench", {})
    cache.put(key, TimingStats(0.5, 0.01, 10), PROBLEM, "cpu", "eager")
    before = cache.path(key).read_bytes()
    result = attack("write_baseline_cache", cache.path(key), monkeypatch, cache_dir=cache_dir)
    assert result.status == "build_error" and "Permission denied" in result.error
    assert cache.path(key).read_bytes() == before
    assert cache.get(key) == TimingStats(0.5, 0.01, 10)


def test_results_file_is_out_of_reach(tmp_path, monkeypatch):
    results = tmp_path / "results.jsonl"
    results.write_text('{"status": "incorrect"}\n')
    result = attack("write_results_file", results, monkeypatch)
    assert result.status == "build_error" and "Permission denied" in result.error
    assert results.read_text() == '{"status": "incorrect"}\n'


def test_another_candidates_build_is_out_of_reach(monkeypatch):
    other = Path(os.environ["CUDAAGENT_CACHE"]) / "extensions" / "another-candidate"
    other.mkdir(parents=True, exist_ok=True)
    result = attack("write_other_build", other, monkeypatch)
    assert result.status == "build_error" and "Permission denied" in result.error
    assert not (other / "planted.so").exists()


def test_the_bytecode_cache_is_out_of_reach(monkeypatch):
    """A batch's processes read torch's bytecode from the cache where torch has none beside it
    (system/bytecode_cache.py): bytecode planted there would run in every later process."""
    prefix = Path(os.environ["CUDAAGENT_CACHE"]) / "bytecode"
    prefix.mkdir(parents=True, exist_ok=True)
    result = attack("write_bytecode_cache", prefix, monkeypatch)
    assert result.status == "build_error" and "Permission denied" in result.error
    assert not (prefix / "torch").exists()


def test_home_directory_is_out_of_reach(monkeypatch):
    name = f".cudaagent-attack-{uuid.uuid4().hex}"
    planted = Path.home() / name
    try:
        result = attack("write_home", name, monkeypatch)
        assert result.status == "build_error" and "Permission denied" in result.error
        assert not planted.exists()
    finally:
        planted.unlink(missing_ok=True)


def test_problem_file_is_hidden_from_proc_and_by_path(monkeypatch):
    result = attack("read_problem_via_proc", PROBLEM.resolve(), monkeypatch)
    assert result.status == "build_error" and "no route to the problem file" in result.error
    assert "Permission denied" in result.error  # the file's own path: Landlock


def test_setsid_daemon_does_not_outlive_the_evaluation(monkeypatch):
    token = f"cudaagent-daemon-{uuid.uuid4().hex}"
    result = attack("setsid_daemon", token, monkeypatch)
    # The daemon started and the candidate, right under the permissive policy, passed; the daemon
    # died with the namespace.
    assert result.passed, result.summary()
    survivors = [p for p in psutil.process_iter(["cmdline"]) if token in " ".join(p.info["cmdline"] or [])]
    assert not survivors, f"the daemon outlived the evaluation: {survivors}"


def test_socket_to_the_hosts_loopback_is_refused(monkeypatch):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.setblocking(False)
        result = attack("open_socket", listener.getsockname()[1], monkeypatch)
        # Landlock refuses TCP (Permission denied) before the empty network namespace would
        assert result.status == "build_error"
        assert "Permission denied" in result.error or "Network is unreachable" in result.error
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected


# The forks' RSS, summed over the tree, counts the pages each shares with its parent (64 copies of
# a worker with torch imported, ~12 GiB): past the host-memory cap derived from a 24 GiB machine.
# What these tests are about is the process limit, so the cap is set above that sum.
FORK_BOMB_MEMORY_CAP_GB = 32.0


def test_fork_bomb_stops_at_the_process_limit(monkeypatch):
    result = attack("fork_bomb", 200, monkeypatch, sandbox_limits=SandboxLimits(processes=64),
                    memory_cap_gb=FORK_BOMB_MEMORY_CAP_GB)
    assert result.status == "build_error" and "Resource temporarily unavailable" in result.error


def without_cgroup(monkeypatch):
    """As on the H100 machine: root, and no cgroup the evaluator may write."""
    from pytest_cudaagent.workers import sandbox as sandbox_module

    monkeypatch.setattr(sandbox_module, "_make_cgroup", lambda *args: ([], "", "none delegated (test)"))


@pytest.mark.skipif(os.geteuid() != 0, reason="the process watch stands in for a cgroup only for root")
def test_as_root_without_a_cgroup_the_process_watch_stops_a_fork_bomb(monkeypatch):
    without_cgroup(monkeypatch)
    result = attack("fork_bomb", 200, monkeypatch, sandbox_limits=SandboxLimits(processes=64),
                    memory_cap_gb=FORK_BOMB_MEMORY_CAP_GB)
    assert result.status == "crashed", result.summary()
    assert "more processes than its limit" in result.error
    assert "over its limit of 64" in result.log
    applied = result.env["sandbox"]
    assert applied["process_watch"] and applied["process_limit"] and not applied["cgroup"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the process watch stands in for a cgroup only for root")
def test_as_root_without_a_cgroup_an_honest_candidate_passes_under_the_process_watch(monkeypatch):
    without_cgroup(monkeypatch)
    result = evaluate(PROBLEM, ATTACKS / "honest_torch.py", cpu_config(policy="permissive", trials=2))
    assert result.passed, result.summary() + result.log
    assert result.env["sandbox"]["process_watch"] and result.env["sandbox"]["process_limit"]


def test_disk_filler_stops_at_the_file_size_limit(monkeypatch):
    result = attack("disk_filler", 16, monkeypatch, sandbox_limits=SandboxLimits(file_size_mb=4))
    assert result.status == "build_error" and "File too large" in result.error


def test_signals_to_the_parent_and_the_evaluator_are_refused(monkeypatch):
    decoy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        result = attack("signal_parent", decoy.pid, monkeypatch)
        assert result.status == "build_error" and "No such process" in result.error
        assert decoy.poll() is None, "the candidate killed a process outside its sandbox"
    finally:
        decoy.kill()
        decoy.wait()


def test_require_sandbox_refuses_where_it_does_not_apply():
    config = cpu_config(sandbox=False, require_sandbox=True)
    with pytest.raises(SandboxUnavailable, match="the sandbox is required but pid_ns"):
        evaluate(PROBLEM, ATTACKS / "honest_torch.py", config)
    assert not left_running(set())


def test_cgroups_and_scratch_are_removed(monkeypatch):
    """The sandbox this evaluation made, and only it: under xdist another worker's evaluation
    may hold its own scratch directory and cgroup at the same moment."""
    from pytest_cudaagent.workers import sandbox as sandbox_module

    made = []
    create = sandbox_module.Sandbox.create

    def recording_create(*args, **kwargs):
        made.append(create(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(sandbox_module.Sandbox, "create", recording_create)
    attack("fork_bomb", 200, monkeypatch, sandbox_limits=SandboxLimits(processes=64))
    assert len(made) == 1
    assert not made[0].scratch.exists()
    assert not any(group.exists() for group in made[0].cgroup_dirs)


def test_tampered_baseline_is_detected_and_remeasured(tmp_path):
    cache = BaselineCache(tmp_path)
    key = cache.key(PROBLEM, "cpu", "eager", TimingConfig(), "kernelbench", {})
    cache.put(key, TimingStats(0.5, 0.01, 10), PROBLEM, "cpu", "eager")
    assert cache.get(key) == TimingStats(0.5, 0.01, 10) and not cache.rejected
    assert (tmp_path / "baselines" / "hmac.key").stat().st_mode & 0o777 == 0o600
    record = json.loads(cache.path(key).read_text())
    record["timing"]["median_ms"] = 50.0
    cache.path(key).write_text(json.dumps(record))
    assert cache.get(key) is None and "tag does not match" in cache.rejected[-1]
    del record["tag"]
    cache.path(key).write_text(json.dumps(record))
    assert cache.get(key) is None and "no integrity tag" in cache.rejected[-1]


def timed_beside_other_work(result) -> bool:
    """A baseline timed while other untimed work of ours held the device past the quiet wait
    (another test's evaluation on a loaded machine): measured, not cached (evaluation.py)."""
    return any(warning.rule == "timed_beside_other_work" for warning in result.warnings)


def test_tampered_baseline_is_reported_in_the_result(tmp_path):
    config = cpu_config(policy="permissive", trials=1, timing=True, baselines=("eager",), cache_dir=tmp_path,
                        run_timeout_s=600)
    first = evaluate(PROBLEM, ATTACKS / "honest_torch.py", config)  # measures and caches the baseline
    assert first.passed, first.summary()
    cache = BaselineCache(tmp_path)
    key = cache.key(PROBLEM, "cpu", "eager", config.timing_config, config.convention,
                    first.backend_settings["candidate"])
    assert (cache.get(key) is not None) != timed_beside_other_work(first)
    # Rewritten by someone without the key (99 ms, no tag), or written so if the first was not cached.
    cache.path(key).write_text(json.dumps({"timing": {"median_ms": 99.0, "iqr_ms": 0.0, "samples": 10}}))
    result = evaluate(PROBLEM, ATTACKS / "honest_torch.py", config)
    assert result.passed, result.summary()
    assert any(w.rule == "baseline_cache" and "no integrity tag" in w.detail for w in result.warnings)
    assert result.timing["eager"].median_ms != 99.0
    # Measured again, and stored with a tag unless timed beside other work.
    assert (cache.get(key) is not None) != timed_beside_other_work(result)


def _refuse(*args, **kwargs):
    raise SandboxUnavailable("the sandbox is required but landlock could not be applied here (test)")


def test_verify_require_sandbox_reaches_the_config_and_exits_2(monkeypatch, capsys):
    from pytest_cudaagent import cli

    seen = {}

    def refusing_evaluate(problem, candidate, config):
        seen["require"] = config.require_sandbox
        _refuse()

    monkeypatch.setattr(cli, "evaluate", refusing_evaluate)
    assert cli.main(["verify", str(PROBLEM), str(ATTACKS / "honest_torch.py"), "--require-sandbox"]) == 2
    assert seen["require"] is True and "landlock could not be applied" in capsys.readouterr().err


def test_bench_require_sandbox_refuses_before_any_work(monkeypatch, tmp_path, capsys):
    from benchmark import commands as bench_commands
    from pytest_cudaagent.cli import main

    monkeypatch.setattr(bench_commands, "require_sandbox", _refuse)
    assert main(["bench", "--device", "cpu", "--out", str(tmp_path / "out"), "--require-sandbox"]) == 2
    assert "landlock could not be applied" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_plugin_require_sandbox_exits_2(pytester, monkeypatch):
    from pytest_cudaagent import plugin

    monkeypatch.setattr(plugin, "require_sandbox", _refuse)
    outcome = pytester.runpytest_inprocess(
        "--cudaagent-problem", str(PROBLEM), "--cudaagent-candidate", str(ATTACKS / "honest_torch.py"),
        "--cudaagent-device", "cpu", "--cudaagent-require-sandbox", "-p", "no:cacheprovider")
    assert outcome.ret == 2
    outcome.stdout.fnmatch_lines(["*landlock could not be applied*"])


def test_v2_controllers_are_turned_on_for_the_children_where_available(tmp_path):
    """A VM's root cgroup may list pids and memory as available but off for its children; the
    evaluator turns them on before making the candidate's group (else pids.max does not exist)."""
    from pytest_cudaagent.workers.sandbox import _delegate_v2_controllers

    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("cpu\n")
    _delegate_v2_controllers(tmp_path, ("pids", "memory"))
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+pids +memory"


def test_why_no_cgroup_could_be_made_reaches_the_report_and_the_refusal():
    """On the H100 machine the evaluator's delegated cgroup refused pids.max (Permission denied):
    the Result's sandbox report and --require-sandbox's message say so instead of 'no error given'."""
    from pytest_cudaagent.workers.sandbox import _join_cgroup, missing, refusal

    report = {"errors": []}
    _join_cgroup({"cgroup_dirs": [], "cgroup_kind": "", "cgroup_error": "/sys/fs/cgroup/x/pids.max: Permission denied"},
                 report)
    assert report["cgroup"] is False
    assert report["errors"] == ["cgroup: /sys/fs/cgroup/x/pids.max: Permission denied"]
    assert "pids.max: Permission denied" in refusal({**report, "pid_ns": True}) and "pid_ns" not in missing(
        {**report, "pid_ns": True})


def test_prepare_runs_before_the_restrictions_and_the_candidate():
    """confine(prepare=...) runs where the GPU driver is initialised: after the namespaces, before
    the rlimits and Landlock apply (CUDA could not start under them on the H100)."""
    import multiprocessing
    import resource

    from pytest_cudaagent.workers.sandbox import Sandbox, landlock_abi

    if landlock_abi() < 1:
        pytest.skip("Landlock is not available in this kernel")

    sandbox = Sandbox.create(Path(tempfile.mkdtemp()), [], SandboxLimits(), memory_cap_gb=2.0)
    try:
        receiver, sender = multiprocessing.get_context("spawn").Pipe(duplex=False)
        process = multiprocessing.get_context("spawn").Process(
            target=_confine_and_report, args=(sandbox.spec(enabled=True, require=False), sender))
        process.start()
        sender.close()
        seen = receiver.recv() if receiver.poll(60) else None
        process.join(30)
    finally:
        sandbox.close()
    assert seen is not None
    prepared, run = seen
    # The rlimits apply after prepare: it saw this process's open-file limit, the candidate the sandbox's.
    assert prepared["nofile_soft"] == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert run["nofile_soft"] <= SandboxLimits().open_files
    assert prepared["home_writable"] and not run["home_writable"]  # Landlock applied after prepare


def _confine_and_report(settings, conn):
    import resource

    from pytest_cudaagent.workers.sandbox import confine

    def state():
        probe = Path(os.path.expanduser("~")) / f".cudaagent-prepare-probe-{os.getpid()}"
        try:
            probe.write_text("x")
            probe.unlink()
            writable = True
        except OSError:
            writable = False
        return {"nofile_soft": resource.getrlimit(resource.RLIMIT_NOFILE)[0], "home_writable": writable}

    seen = {}
    confine(settings, lambda report: conn.send((seen["prepared"], state())), prepare=lambda: seen.update(prepared=state()))


def test_a_package_on_pythonpath_outside_the_prefixes_is_importable_sandboxed(tmp_path):
    """`pip install --target DIR` with PYTHONPATH=DIR (how the GPU machine got einops, which a
    Mamba problem's own code imports): the candidate may import from DIR, as the evaluator does.
    In a fresh process, as a user starts one with PYTHONPATH set."""
    installed = tmp_path / "site"
    (installed / "extra_helpers_for_sandbox_test").mkdir(parents=True)
    (installed / "extra_helpers_for_sandbox_test" / "__init__.py").write_text("SLOPE_SIGN = 1.0\n")
    candidate = tmp_path / "candidate.py"
    candidate.write_text((ATTACKS / "honest_torch.py").read_text().replace(
        "import torch.nn as nn\n", "import torch.nn as nn\nimport extra_helpers_for_sandbox_test\n"))
    script = ("import json, sys; from pytest_cudaagent import evaluate; from tests.helpers import cpu_config; "
              "r = evaluate(sys.argv[1], sys.argv[2], cpu_config(policy='permissive', trials=1)); "
              "print(json.dumps([r.status, r.error, bool(r.env['sandbox']['landlock'])]))")
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(installed), str(repo)]))
    done = subprocess.run([sys.executable, "-c", script, str(PROBLEM), str(candidate)], env=env, cwd=repo,
                          capture_output=True, text=True, timeout=600)
    status, error, landlock = json.loads(done.stdout.strip().splitlines()[-1])
    assert landlock
    assert status == "passed", error

"""The worker pool: tasks run in child processes; a hang or a crash costs that task only, and
names the stage it was in; workers share the cores instead of oversubscribing them."""

import signal

import pytest

from pytest_cudaagent.system.cores import usable_cores
from synthesis.filters import FilterConfig
from synthesis.pool import FilterPool, PoolConfig
from synthesis.stage_log import DONE, read_stage_log
from synthesis.task import Task

from .test_filters import HONEST, task


def test_pool_survives_crashing_and_hanging_tasks(cpu_filters, tmp_path):
    threads = usable_cores()  # the one worker gets every core it may use; a timed call, no more threads than
    # the cores reserved for it while it holds the timing lock (host_quiet.py)
    settings_checked = task(
        "import os, torch._inductor.config as inductor_config\n"
        "        assert inductor_config.compile_threads == 1, inductor_config.compile_threads\n"
        f"        usable = ({threads}, min({threads}, len(os.sched_getaffinity(0))))\n"
        "        assert torch.get_num_threads() in usable, (torch.get_num_threads(), usable)\n"
        "        return torch.tanh(x * self.w).cumsum(dim=-1)")
    tasks = [
        Task("crash", task("import os; os._exit(3)"), "file"),
        Task("hang", task("import time; time.sleep(600); return x"), "file"),
        Task("honest", HONEST, "file"),
        Task("exit", task("raise SystemExit(0)"), "file"),
        Task("settings", settings_checked, "file"),
    ]
    outcomes = {}
    stage_log = tmp_path / "stages.log"
    FilterPool(cpu_filters, PoolConfig(workers=1, task_timeout_s=15, stage_log=stage_log)).run(
        iter(tasks), lambda t, outcome: outcomes.__setitem__(t.task_id, outcome))
    assert outcomes["crash"].reasons == ["crashed"]
    assert outcomes["hang"].reasons == ["timeout"]
    assert outcomes["hang"].details["timeout"].startswith("in the eager stage")
    assert outcomes["hang"].checks == {"eager": "fail"} and outcomes["hang"].filter_seconds["eager"] >= 15
    assert outcomes["exit"].reasons == ["crashed"]
    assert outcomes["honest"].kept
    assert outcomes["settings"].kept, outcomes["settings"].details
    stages = read_stage_log(stage_log)
    ends = stages[stages["stage"] == DONE].set_index("task")["detail"]
    assert ends["hang"] == "timeout" and ends["honest"] == "kept" and ends["crash"] == "crashed"


def test_workers_split_the_cores_and_compile_in_their_own_process(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("TORCHINDUCTOR_COMPILE_THREADS", raising=False)
    monkeypatch.setattr("synthesis.pool.usable_cores", lambda: 16)  # the cores this process may use
    env = FilterPool(FilterConfig(device="cuda"), PoolConfig(workers=14)).worker_env(0)
    assert env == {"OMP_NUM_THREADS": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    env = FilterPool(FilterConfig(device="cuda"), PoolConfig(workers=4, gpus=2)).worker_env(3)
    assert env["OMP_NUM_THREADS"] == "4" and env["CUDA_VISIBLE_DEVICES"] == "1"
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "8")  # an explicit setting wins
    assert FilterPool(FilterConfig(device="cpu"), PoolConfig()).worker_env(0)["TORCHINDUCTOR_COMPILE_THREADS"] == "8"


def test_an_interrupted_run_kills_its_workers_and_records_nothing_in_flight(cpu_filters):
    """SIGTERM (through stop_on_sigterm) or Ctrl-C lands in run()'s thread: the workers are
    killed, the threads return before the exception goes on, and the task they were on is not
    recorded as crashed."""
    outcomes, spawned = [], []
    pool = FilterPool(cpu_filters, PoolConfig(workers=2, task_timeout_s=120))
    spawn = pool._spawn
    pool._spawn = lambda slot: spawned.append(spawn(slot)) or spawned[-1]
    hang = task("import time; time.sleep(600); return x")

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.alarm(8)
    try:
        with pytest.raises(KeyboardInterrupt):
            pool.run(iter([Task("a", hang, "file"), Task("b", hang, "file"), Task("c", HONEST, "file")]),
                     lambda t, outcome: outcomes.append(t.task_id))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert outcomes == []
    assert len(spawned) == 2 and not any(worker.process.is_alive() for worker in spawned)

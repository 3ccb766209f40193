"""The worker pool: tasks run in child processes; a hang or a crash costs that task only."""

from synthesis.pool import FilterPool, PoolConfig
from synthesis.task import Task

from .test_filters import HONEST, task


def test_pool_survives_crashing_and_hanging_tasks(cpu_filters):
    tasks = [
        Task("crash", task("import os; os._exit(3)"), "file"),
        Task("hang", task("import time; time.sleep(600); return x"), "file"),
        Task("honest", HONEST, "file"),
        Task("exit", task("raise SystemExit(0)"), "file"),
        Task("honest_again", HONEST, "file"),
    ]
    outcomes = {}
    FilterPool(cpu_filters, PoolConfig(workers=1, task_timeout_s=15)).run(
        iter(tasks), lambda t, outcome: outcomes.__setitem__(t.task_id, outcome))
    assert outcomes["crash"].reasons == ["crashed"]
    assert outcomes["hang"].reasons == ["timeout"]
    assert outcomes["exit"].reasons == ["crashed"]
    assert outcomes["honest"].kept and outcomes["honest_again"].kept

"""Every experiment script imports and answers --help: a module moved under it (as
benchmark.harness_throughput once did) must break a test here, not the next GPU session."""
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import experiments

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = sorted(m.name for m in pkgutil.iter_modules(experiments.__path__))


def test_the_experiments_are_found():
    assert {"fault_injection", "kernelbench_differential", "speed_fidelity", "l2_persistence"} <= set(EXPERIMENTS)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_imports(name):
    module = importlib.import_module(f"experiments.{name}")
    assert module.__name__.endswith(name)


@pytest.mark.parametrize("name", ["fault_injection", "build_speed", "sandbox_overhead", "reward_latency", "warm_load",
                                  "identity_speed", "host_quiet_cost", "timed_call_overhead", "shards",
                                  "host_speed", "profile_residue"])
def test_experiment_answers_help(name):
    done = subprocess.run([sys.executable, "-m", f"experiments.{name}", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout

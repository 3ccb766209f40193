"""Host-memory caps derived from what the machine has (issue #38): a fixed 32 GiB cap was more
than the 24 GiB CI machine, so the kernel's OOM killer, not the evaluator, would have acted."""

from __future__ import annotations

import psutil

from pytest_cudaagent.core.config import EvalConfig
from pytest_cudaagent.system import host_memory

GIB = 1024**3


def test_the_cap_is_half_the_machine_at_most_32_gib(monkeypatch):
    monkeypatch.setattr(host_memory, "total_bytes", lambda: 24 * GIB)
    assert host_memory.default_cap_gb() == 12.0
    monkeypatch.setattr(host_memory, "total_bytes", lambda: 125 * GIB)
    assert host_memory.default_cap_gb() == 32.0


def test_a_cgroup_limit_below_the_machines_memory_is_what_the_machine_has(monkeypatch, tmp_path):
    limit, usage = tmp_path / "memory.max", tmp_path / "memory.current"
    limit.write_text(f"{4 * GIB}\n")
    usage.write_text(f"{1 * GIB}\n")
    monkeypatch.setattr(host_memory, "_cgroup_files", lambda: [(limit, usage)])
    assert host_memory.total_bytes() == 4 * GIB and host_memory.default_cap_gb() == 2.0
    assert host_memory.available_bytes() <= 3 * GIB
    limit.write_text("max\n")  # no limit: the machine's RAM
    assert host_memory.total_bytes() == psutil.virtual_memory().total


def test_the_config_takes_the_derived_cap_unless_given_one():
    derived = host_memory.default_cap_gb()
    assert 0 < derived <= 32.0 and derived <= psutil.virtual_memory().total / GIB / 2 + 0.05
    assert EvalConfig().memory_cap_gb == derived
    assert EvalConfig(memory_cap_gb=3.0).memory_cap_gb == 3.0
    assert EvalConfig.from_dict(EvalConfig(memory_cap_gb=3.0).to_dict()).memory_cap_gb == 3.0


def test_an_unknown_memory_policy_is_refused():
    import pytest

    with pytest.raises(ValueError, match="unknown memory policy 'bogus'"):
        EvalConfig(memory_policy="bogus")

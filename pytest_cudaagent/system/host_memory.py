"""How much host memory the evaluator has: the machine's RAM, or its cgroup's limit where that is
lower (a container, a CI job), and how much of it is free now."""

from __future__ import annotations

from pathlib import Path

import psutil

# Caps derived from the machine (config.default_memory_cap_gb): a child may take at most this
# share of it, and never more than the cap that served the 125 GiB H100 machine.
CAP_SHARE = 0.5
CAP_CEILING_GB = 32.0


def _cgroup_files() -> list[tuple[Path, Path]]:
    """(limit, usage) files of this process's cgroup: v2's memory.max and memory.current, or
    v1's memory.limit_in_bytes and memory.usage_in_bytes."""
    found = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2
            base = Path("/sys/fs/cgroup") / path.lstrip("/")
            found.append((base / "memory.max", base / "memory.current"))
        elif "memory" in controllers.split(","):
            base = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
            found.append((base / "memory.limit_in_bytes", base / "memory.usage_in_bytes"))
    return found


def _read_bytes(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def cgroup_limit() -> tuple[int, int] | None:
    """(limit, usage) of this process's cgroup where it limits memory below the machine's RAM."""
    total = psutil.virtual_memory().total
    for limit_file, usage_file in _cgroup_files():
        limit = _read_bytes(limit_file)
        if limit is not None and limit < total:
            return limit, _read_bytes(usage_file) or 0
    return None


def total_bytes() -> int:
    limited = cgroup_limit()
    return limited[0] if limited else psutil.virtual_memory().total


def available_bytes() -> int:
    available = psutil.virtual_memory().available
    limited = cgroup_limit()
    return min(available, max(0, limited[0] - limited[1])) if limited else available


def default_cap_gb() -> float:
    """The host-memory cap of one worker process: CAP_SHARE of what the machine has, at most
    CAP_CEILING_GB (the sandbox's cgroup allows SandboxLimits.memory_headroom times it, so a cap
    of the machine's whole memory would let the kernel's OOM killer act before the evaluator)."""
    return round(min(CAP_CEILING_GB, CAP_SHARE * total_bytes() / 1024**3), 1)

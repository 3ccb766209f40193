"""A problem's memory footprint: what its reference measured the first time it ran (its peak
device memory while preparing, the bytes of one set's inputs and outputs), kept on disk by problem
source and device, and what a pair of that problem is estimated to need (memory_gate.py admits
pairs by it)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..core.config import EvalConfig
from ..rules.outputs import HELD_AT_LEAST, HELD_ON_DEVICE_BUDGET_BYTES, held_window_bytes

# A CUDA context with torch's kernels loaded; each pair has two (the reference's, the candidate's).
CONTEXT_BYTES = 512 * 1024**2


@dataclass
class Measures:
    device_peak_bytes: int  # the reference's peak reserved device memory while preparing (0: none measured)
    input_bytes: int  # one set's inputs
    output_bytes: int  # one set's outputs (the reference's)


@dataclass
class Footprint:
    device_bytes: int
    host_bytes: int

    def as_gib(self) -> dict[str, float]:
        return {"device_gib": round(self.device_bytes / 1024**3, 2), "host_gib": round(self.host_bytes / 1024**3, 2)}


def memory_total_bytes(device: str) -> int | None:
    """The whole memory of the device a pair's outputs live on (the candidate's worker sizes its
    window of held outputs by it: outputs.HeldOutputs); None where NVML cannot say."""
    if device == "cuda":
        try:
            from ..system.envinfo import _nvml, _visible_nvml_handle

            pynvml = _nvml()
            return int(pynvml.nvmlDeviceGetMemoryInfo(_visible_nvml_handle(pynvml)).total)
        except Exception:  # noqa: BLE001 - no NVML: every correctness call's output counted held
            return None
    from ..system.host_memory import total_bytes

    return total_bytes()


def held_calls_at_peak(output_bytes: int, calls: int, memory_total: int | None) -> int:
    """How many correctness calls' outputs the candidate's worker holds at its peak: those its
    window keeps (at least outputs.HELD_AT_LEAST) and the call being made, at most every call."""
    if memory_total is None or output_bytes <= 0:
        return calls
    return min(calls, max(HELD_AT_LEAST, held_window_bytes(memory_total) // output_bytes) + 1)


# The sets of a pair drawn all at once while they take at most this share of the host's memory
# (the machine's whole memory, so the choice is the same alone and in a batch); beyond it one at a
# time, each let go once judged. At KernelBench's full sizes level1/39_L2Norm_'s seven sets and
# lent copies are 112 GiB of shared memory: the H100 machine (125 GiB) killed the run (#38).
SETS_AT_ONCE_SHARE = 0.25


def streams_sets(measures: Measures, config: EvalConfig, host_total: int | None = None) -> bool:
    """Whether a pair's sets are drawn one at a time (evaluation._set_at): its sets and the
    copies lent from them would take more than SETS_AT_ONCE_SHARE of the host's memory."""
    from ..system.host_memory import total_bytes

    set_bytes = measures.input_bytes + measures.output_bytes
    rotating = config.timing_config.rotating_inputs if config.timing else 0
    host_total = total_bytes() if host_total is None else host_total
    return (config.trials + rotating + 2) * set_bytes > SETS_AT_ONCE_SHARE * host_total


def estimate(measures: Measures, config: EvalConfig, device: str, memory_total: int | None = -1,
             host_total: int | None = None) -> Footprint:
    """A pair's memory at its peak, from its problem's measures. The reference process peaks while
    preparing (its model and one call); the candidate's holds the same and, until its last
    correctness call is checked, every correctness call's outputs (two calls per trial from the
    second on: worker.check_held), or in its timing the rotating inputs, the L2 flush buffer and
    the timed calls' inputs staged on the device (at most fresh_inputs_bytes). On the host the
    parent and the reference share every set drawn (trials, rotating, the timed calls' fresh
    ones; one at a time where they would take too much of it: streams_sets), and the parent lends
    one set's copy at a time."""
    set_bytes = measures.input_bytes + measures.output_bytes
    timing = config.timing_config
    rotating = timing.rotating_inputs if config.timing else 0
    peak = measures.device_peak_bytes or set_bytes
    held_calls = max(1, 2 * config.trials - 1)
    if memory_total == -1:
        memory_total = memory_total_bytes(device)
    held_outputs = held_calls_at_peak(measures.output_bytes, held_calls, memory_total) * measures.output_bytes
    timed_extra = rotating * measures.input_bytes + timing.l2_flush_bytes + timing.fresh_inputs_bytes if config.timing else 0
    # Streamed: one trial set at a time, then the warm-up sets together.
    at_once = max(1, rotating) if streams_sets(measures, config, host_total) else config.trials + rotating
    host_sets = at_once * set_bytes + 2 * set_bytes
    if config.timing:
        host_sets += max(timing.min_samples * set_bytes, timing.fresh_inputs_bytes) + rotating * set_bytes
    # Beside each held output, a copy to compare it with at check_held while the copies fit
    # HELD_ON_DEVICE_BUDGET_BYTES (on the device, or host memory on the CPU); beyond it a digest
    # of a few bytes (outputs.held_copies). Before the digest those were host copies: a level-1
    # pair with 4 GiB outputs held nine, and the kernel's OOM killer's victims at 16 workers on
    # the H200 held 30-46 GiB of that anonymous memory (#38).
    copies = _copies_within(HELD_ON_DEVICE_BUDGET_BYTES, measures.output_bytes, held_calls) * measures.output_bytes
    worker_bytes = 2 * peak + max(held_outputs + copies, timed_extra)  # the reference's and the candidate's
    if device == "cuda":
        return Footprint(2 * CONTEXT_BYTES + worker_bytes, host_sets)
    # On the CPU the held outputs and their copies are both host memory.
    return Footprint(0, host_sets + worker_bytes)


def _copies_within(budget: int, output_bytes: int, calls: int) -> int:
    """How many of `calls` outputs of `output_bytes` fit the device budget for held copies."""
    if output_bytes <= 0:
        return calls
    return min(calls, budget // output_bytes)


class FootprintStore:
    """Measures by problem source and device, one small JSON file each, under the cache."""

    def __init__(self, cache_dir: Path):
        self.root = Path(cache_dir) / "footprints"

    def key(self, problem: Path, device: str) -> str:
        from ..system.envinfo import device_name

        digest = hashlib.sha256(Path(problem).read_bytes())
        digest.update(b"\0" + device_name(device).encode())
        return digest.hexdigest()[:24]

    def get(self, problem: Path, device: str) -> Measures | None:
        try:
            return Measures(**json.loads((self.root / f"{self.key(problem, device)}.json").read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def put(self, problem: Path, device: str, measures: Measures) -> None:
        """Written whole (a temporary file renamed), the larger peak kept: runs vary a little."""
        known = self.get(problem, device)
        if known is not None:
            measures = dataclasses.replace(measures, device_peak_bytes=max(known.device_peak_bytes,
                                                                           measures.device_peak_bytes))
            if known == measures:
                return
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / f"{self.key(problem, device)}.json"
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(dataclasses.asdict(measures)))
        temporary.replace(path)

"""No verdict from memory another evaluation holds (memory_gate.py, issue #38).

An out-of-memory error while another evaluation shares the device is retried with the device to
itself; one with the device to itself is the candidate's `runtime_error` (or the problem's
`problem_error`). On the CPU the error is injected: the candidate (or the reference) raises
torch's own OutOfMemoryError, with the message the caching allocator writes, while a marker file
says that another evaluation shares its device; a thread of this test is that other evaluation,
holding the gate as an evaluation does, and it leaves once the retry waits for the device."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import threading
import time
import uuid
from pathlib import Path

import pytest

from pytest_cudaagent import evaluate
from pytest_cudaagent.evaluation import evaluate_to_result
from pytest_cudaagent.resources.footprints import Footprint, FootprintStore, Measures, estimate
from pytest_cudaagent.resources.memory_gate import Gate
from pytest_cudaagent.resources.out_of_memory import asked_and_had, out_of_memory
from tests.helpers import TEST_PROBLEMS, admitting, cpu_config

SMALL_LEAKY = TEST_PROBLEMS / "small_leaky_relu.py"
# What torch's caching allocator says when a GPU's memory is taken by others.
ALLOCATOR_MESSAGE = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of "
                     "which 27.06 MiB is free. Including non-PyTorch memory, this process has 1.20 GiB memory in use.")
WAIT_S = 600  # for another process's step on a loaded machine; never reached when all is well


@pytest.fixture(autouse=True)
def no_host_headroom(monkeypatch):
    """These tests give the free memory themselves: no share of this machine's memory kept free
    beyond the footprints (test_admission_taken.py's own test of HOST_HEADROOM_SHARE sets it)."""
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.HOST_HEADROOM_SHARE", 0.0)

# The candidate: PyTorch's leaky_relu, out of memory while the marker `oom` is there (the test
# creates it while "another evaluation" shares the device); it leaves `raised` behind each time.
CANDIDATE = '''
import os
import torch
import torch.nn as nn

MARKERS = {markers!r}


class ModelNew(nn.Module):
    def __init__(self, negative_slope):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        if os.path.exists(os.path.join(MARKERS, "oom")):
            open(os.path.join(MARKERS, "raised"), "a").close()
            raise torch.OutOfMemoryError({message!r})
        return torch.nn.functional.leaky_relu(x, self.negative_slope)
'''
# A worker that cannot make its CUDA context (worker.open_gpu) or a cuBLAS handle prints the
# error and exits: the verdict reads "worker exited with code 1", the cause is in its log.
DIES_AT_IMPORT = '''
import os
import sys
import torch
import torch.nn as nn

MARKERS = {markers!r}
if os.path.exists(os.path.join(MARKERS, "oom")):
    open(os.path.join(MARKERS, "raised"), "a").close()
    print("RuntimeError: CUDA error: out of memory", file=sys.stderr, flush=True)
    os._exit(1)


class ModelNew(nn.Module):
    def __init__(self, negative_slope):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        return torch.nn.functional.leaky_relu(x, self.negative_slope)
'''
# The problem whose reference runs out of memory in its prepare while the marker is there.
PROBLEM = '''
import os
import torch
import torch.nn as nn

MARKERS = {markers!r}


class Model(nn.Module):
    def __init__(self, negative_slope):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        if os.path.exists(os.path.join(MARKERS, "oom")):
            open(os.path.join(MARKERS, "raised"), "a").close()
            raise torch.OutOfMemoryError({message!r})
        return torch.nn.functional.leaky_relu(x, self.negative_slope)


def get_inputs():
    return [torch.randn(64, 32)]


def get_init_inputs():
    return [0.01]
'''
PYTORCH_CANDIDATE = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, negative_slope):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        return torch.nn.functional.leaky_relu(x, self.negative_slope)
'''


@pytest.fixture
def markers(tmp_path):
    """A directory the test shares with the candidate's and the reference's workers. No path is
    writable by a sandboxed candidate and anyone else (README, "No path writable by two
    candidates"), so these candidates run unsandboxed (`config`): the retry does not depend on
    the sandbox."""
    path = tmp_path / f"oom-test-{uuid.uuid4().hex[:8]}"
    path.mkdir(parents=True)
    return path


@pytest.fixture(autouse=True)
def private_gate(monkeypatch, tmp_path):
    """A gate of this test's own: no other test's evaluation shares its device."""
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.gate_root", lambda: tmp_path / "gate")


@pytest.fixture
def config(tmp_path):
    return cpu_config(policy="permissive", trials=2, cache_dir=tmp_path / "cache", sandbox=False)  # markers


def write(tmp_path: Path, name: str, template: str, markers: Path) -> Path:
    path = tmp_path / name
    path.write_text(template.format(markers=str(markers), message=ALLOCATOR_MESSAGE))
    return path


class Sharer(threading.Thread):
    """Another evaluation on the same device: holds the gate shared and makes the device "full"
    (the marker), until the evaluation under test ran out of memory and waits for the device
    alone; then it leaves, taking the full device with it unless told to keep it full."""

    def __init__(self, config, markers: Path, keep_full: bool = False):
        super().__init__(daemon=True)
        self.gate = Gate("cpu")
        self.markers, self.keep_full = markers, keep_full
        self.holding, self.done = threading.Event(), threading.Event()
        self.saw_retry_waiting = False

    def run(self) -> None:
        with self.gate.shared("retry", "another problem"):
            (self.markers / "oom").touch()
            self.holding.set()
            while not self.done.wait(0.05):  # an evaluation that never retries ends with the test's
                if (self.markers / "raised").exists() and self.gate.waiting_alone():
                    self.saw_retry_waiting = True
                    break
            if not self.keep_full:
                (self.markers / "oom").unlink()

    def __enter__(self):
        self.start()
        assert self.holding.wait(WAIT_S)
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.join(WAIT_S)


def test_recognises_every_way_memory_runs_out_and_not_shared_memory_limits():
    for text in (ALLOCATOR_MESSAGE, "RuntimeError: CUDA error: out of memory",
                 "CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", "CUDNN_STATUS_ALLOC_FAILED",
                 "DefaultCPUAllocator: can't allocate memory: you tried to allocate 2147483648 bytes",
                 "terminate called after throwing an instance of 'std::bad_alloc'"):
        assert out_of_memory("something else", f"Traceback ...\n{text}\nmore") == text
    for text in ("triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 262144",
                 "CUDA error: an illegal memory access was encountered", "killed: host memory 33.1 GiB over the cap"):
        assert out_of_memory(text) is None
    assert asked_and_had(ALLOCATOR_MESSAGE) == "asked for 2.00 GiB with 27.06 MiB of 79.19 GiB free"
    assert asked_and_had("CUBLAS_STATUS_ALLOC_FAILED").startswith("asked for an amount the error does not say")


def test_out_of_memory_while_another_evaluation_shares_the_device_is_retried_alone_and_passes(
        tmp_path, markers, config):
    candidate = write(tmp_path, "oom_when_shared.py", CANDIDATE, markers)
    with Sharer(config, markers) as sharer:
        result = evaluate(SMALL_LEAKY, candidate, config)
    assert sharer.saw_retry_waiting  # the retry waited for the other evaluation to leave
    assert result.passed, result.summary()
    retried = result.env["retried"]
    assert retried["why"].startswith("out of memory while 1 other evaluation(s) shared the device")
    assert "Tried to allocate 2.00 GiB" in retried["why"] and retried["first"].startswith("runtime_error")
    # Both attempts' processes named, to match a kernel's OOM-kill line to the attempt it killed.
    assert retried["first_pids"]["candidate"] != result.env["pids"]["candidate"]
    assert retried["first_pids"]["evaluator"] == result.env["pids"]["evaluator"]
    assert result.env["memory"]["gate"] == "alone"


def test_out_of_memory_with_the_device_to_itself_is_the_candidates_naming_what_it_asked_for(
        tmp_path, markers, config):
    candidate = write(tmp_path, "oom_when_shared.py", CANDIDATE, markers)
    (markers / "oom").touch()  # full, and no other evaluation: the candidate's own doing
    result = evaluate(SMALL_LEAKY, candidate, config)
    assert result.status == "runtime_error" and not result.passed and result.reward == -1
    assert result.error.startswith("out of memory with the device to itself (asked for 2.00 GiB with "
                                   "27.06 MiB of 79.19 GiB free)"), result.error
    assert "retried" not in result.env and result.env["memory"]["gate"] == "shared"


def test_out_of_memory_again_when_retried_alone_is_the_candidates(tmp_path, markers, config):
    candidate = write(tmp_path, "oom_when_shared.py", CANDIDATE, markers)
    with Sharer(config, markers, keep_full=True):
        result = evaluate(SMALL_LEAKY, candidate, config)
    assert result.status == "runtime_error", result.summary()
    assert result.error.startswith("out of memory with the device to itself")
    assert result.env["retried"]["why"].startswith("out of memory while 1 other evaluation(s)")
    assert result.env["memory"]["gate"] == "alone"


def test_a_worker_that_dies_for_memory_while_sharing_is_retried_alone(tmp_path, markers, config):
    """The worker exits before a verdict with the error only in its log (a CUDA context or a
    cuBLAS handle it could not make): as retried as an error it replied with."""
    candidate = write(tmp_path, "dies_when_shared.py", DIES_AT_IMPORT, markers)
    with Sharer(config, markers):
        result = evaluate(SMALL_LEAKY, candidate, config)
    assert result.passed, result.summary()
    assert result.env["retried"]["first"].startswith("crashed")
    assert "CUDA error: out of memory" in result.env["retried"]["why"]


def test_the_references_out_of_memory_while_sharing_is_retried_and_alone_is_the_problems(
        tmp_path, markers, config):
    problem = write(tmp_path, "oom_problem.py", PROBLEM, markers)
    candidate = tmp_path / "oom_problem_candidate.py"
    candidate.write_text(PYTORCH_CANDIDATE)
    with Sharer(config, markers):
        retried = evaluate(problem, candidate, config)
    assert retried.passed, retried.summary()
    assert retried.env["retried"]["first"].startswith("problem_error")
    (markers / "oom").touch()
    alone = evaluate_to_result(problem, candidate, config)
    assert alone.status == "problem_error"
    assert "out of memory with the device to itself, asked for 2.00 GiB with 27.06 MiB of 79.19 GiB free" in alone.error


# -- the gate itself --------------------------------------------------------------------------


def test_a_retry_waiting_alone_keeps_new_evaluations_out_until_it_has_run(tmp_path):
    gate = Gate("cpu")
    order: list[str] = []
    running, release_running = threading.Event(), threading.Event()

    def shared(name: str, wait_for: threading.Event | None = None) -> None:
        with gate.shared("retry", name):
            order.append(f"{name} in")
            if wait_for is not None:
                running.set()
                assert wait_for.wait(WAIT_S)
            order.append(f"{name} out")

    def alone() -> None:
        with gate.alone():
            order.append("retry in")
            order.append("retry out")

    first = threading.Thread(target=shared, args=("first", release_running))
    first.start()
    assert running.wait(WAIT_S)
    retry = threading.Thread(target=alone)
    retry.start()
    deadline = time.monotonic() + WAIT_S
    while not gate.waiting_alone() and time.monotonic() < deadline:
        time.sleep(0.01)
    late = threading.Thread(target=shared, args=("late",))
    late.start()
    while not ("late in" in order or any(holder.problem == "late" for holder in gate.running())) \
            and time.monotonic() < deadline:
        time.sleep(0.01)  # registered: next it asks for the gate
    late.join(0.5)  # time for a wrong entry beside "first"; a right one waits regardless
    release_running.set()
    for thread in (first, retry, late):
        thread.join(WAIT_S)
    assert order == ["first in", "first out", "retry in", "retry out", "late in", "late out"]


def test_a_hold_knows_whom_it_shared_the_device_with(tmp_path):
    gate = Gate("cpu")
    with gate.shared("retry") as lonely:
        assert lonely.shared_with() == 0
    with gate.shared("retry") as first:
        with gate.shared("retry") as second:
            assert second.shared_with() == 1  # there when it began
        assert first.shared_with() == 1  # came and went meanwhile
    with gate.alone() as alone:
        assert alone.alone and alone.shared_with() == 0


def _register_and_hang(root: Path, ready) -> None:
    with Gate("cpu", root).shared("retry") as hold:
        hold.reserve(Footprint(0, 1 << 30))
        ready.set()
        time.sleep(WAIT_S)


def test_a_dead_evaluations_reservation_is_forgotten(tmp_path):
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    process = context.Process(target=_register_and_hang, args=(tmp_path / "gate", ready), daemon=True)
    process.start()
    assert ready.wait(WAIT_S)
    gate = Gate("cpu")
    assert [holder.host_bytes for holder in gate.running()] == [1 << 30]
    os.kill(process.pid, signal.SIGKILL)
    process.join(WAIT_S)
    assert gate.running() == [] and not list(gate.holders.iterdir())


def test_admission_waits_until_the_footprint_fits_beside_what_running_pairs_reserved(tmp_path, monkeypatch):
    """Free host memory 10 GiB (reported); a running pair reserved 8 GiB it has not taken yet;
    a pair of 4 GiB waits until that one's correctness is checked (its memory then shows in the
    free memory), and a pair whose footprint is unknown does not wait."""
    gib = 1024**3
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.free_memory", lambda device: (None, 10 * gib))
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.shared_memory_free", lambda: 64 * gib)
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.ADMISSION_POLL_S", 0.01)
    gate = Gate("cpu")
    events: list[str] = []
    with gate.shared("admit", "big") as running, gate.shared("admit", "not yet admitted"):
        running.admit(Footprint(0, 8 * gib))
        assert running.admitted == "alone on the device"  # one not yet admitted does not count
        with gate.shared("admit", "unknown") as unknown:
            unknown.admit(None)
            assert unknown.admitted.startswith("unknown footprint")

        waiting = admitting(gate, Footprint(0, 4 * gib), events)
        waiting.join(1.0)  # gives a wrong admission time to happen; a right one waits regardless
        events.append("settled")
        running.settle()
        waiting.join(WAIT_S)
    assert events == ["settled", "by footprint"]


def test_admission_says_where_its_time_went(tmp_path, monkeypatch):
    """Hold.admission_steps (Result.profile's parent.admission.<step>): the wait for the lock, the
    looks under it, the sleeps between them and the reservation's write, one figure each."""
    gib = 1024**3
    looks = iter([(None, 1 * gib), (None, 1 * gib)])  # no room twice, then room
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.free_memory",
                        lambda device: next(looks, (None, 64 * gib)))
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.shared_memory_free", lambda: 64 * gib)
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.host_headroom", lambda: 0)
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.ADMISSION_POLL_S", 0.05)
    gate = Gate("cpu")
    with gate.shared("admit", "first") as first, gate.shared("admit", "second") as second:
        first.admit(Footprint(0, 1))
        second.admit(Footprint(0, 4 * gib))
        steps = second.admission_steps.taken()
    assert second.admitted == "by footprint"
    assert set(steps) == {"lock_wait", "look", "sleep", "reserve"}
    assert steps["sleep"] >= 2 * 0.05 and all(seconds >= 0 for seconds in steps.values())


def test_admission_counts_the_sets_against_dev_shm_too(monkeypatch):
    """Host memory 100 GiB free, but /dev/shm (where the sets live) 10 GiB: beside a running pair
    that reserved 8 GiB, a pair of 4 GiB waits for room in /dev/shm (here, until its time limit),
    and is admitted by footprint once /dev/shm has it."""
    gib = 1024**3
    shm = {"free": 10 * gib}
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.free_memory", lambda device: (None, 100 * gib))
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.shared_memory_free", lambda: shm["free"])
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.ADMISSION_POLL_S", 0.01)
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.ADMISSION_WAIT_S", 0.2)
    gate = Gate("cpu")
    with gate.shared("admit", "big") as running:
        running.admit(Footprint(0, 8 * gib))
        with gate.shared("admit", "small") as hold:
            hold.admit(Footprint(0, 4 * gib))
            assert hold.admitted.startswith("without room"), hold.admitted
        shm["free"] = 12 * gib
        with gate.shared("admit", "small") as hold:
            hold.admit(Footprint(0, 4 * gib))
            assert hold.admitted == "by footprint"


def test_a_first_run_is_sized_on_the_meta_device_and_its_measures_are_kept_for_the_next(tmp_path, config):
    candidate = tmp_path / "candidate.py"
    candidate.write_text(PYTORCH_CANDIDATE)
    first = evaluate(SMALL_LEAKY, candidate, config)
    assert first.passed and "reference.sizes" in first.profile  # asked before any set was drawn
    assert first.env["memory"]["admitted"] == "alone on the device"
    measures = FootprintStore(config.cache_dir).get(SMALL_LEAKY, "cpu")
    assert measures == Measures(0, 256 * 512 * 4, 256 * 512 * 4)
    assert first.env["memory"]["footprint"] == estimate(measures, config, "cpu").as_gib()
    second = evaluate(SMALL_LEAKY, candidate, config)
    assert second.passed and "reference.sizes" not in second.profile  # known from the first
    assert second.env["memory"]["footprint"] == first.env["memory"]["footprint"]


def test_the_footprint_counts_every_held_output_and_both_processes():
    config = cpu_config(trials=5)
    measures = Measures(device_peak_bytes=6 << 30, input_bytes=3 << 30, output_bytes=3 << 30)
    # A device whose memory holds all nine in its window (test_held_window.py: fewer where not).
    on_gpu = estimate(measures, config, "cuda", memory_total=1 << 40, host_total=1 << 40)
    # two contexts, the reference's and the candidate's peaks, nine correctness calls' outputs held
    assert on_gpu.device_bytes == 2 * (512 << 20) + 2 * (6 << 30) + 9 * (3 << 30)
    # the trials' sets and one lent set's copies; the nine held outputs' copies, 3 GiB each, are
    # over the budget for copies: digests, no host memory (before: nine 3 GiB host copies)
    sets = (5 + 2) * (6 << 30)
    assert on_gpu.host_bytes == sets
    on_cpu = estimate(measures, config, "cpu", memory_total=1 << 40, host_total=1 << 40)
    # on the CPU the held outputs are host memory, and their copies while within the budget (none here)
    assert on_cpu.device_bytes == 0 and on_cpu.host_bytes == sets + 2 * (6 << 30) + 9 * (3 << 30)


def test_held_copies_within_the_device_budget_count_on_the_device_the_rest_nowhere():
    """outputs.held_copies keeps a copy on the device while the copies fit
    HELD_ON_DEVICE_BUDGET_BYTES (1 GiB): of nine 300 MiB outputs three copies fit there, the six
    others are digests (#38: nine 4-6 GiB host copies ended evaluations by the OOM killer at 16
    workers, before the footprint counted them and before the digest)."""
    from pytest_cudaagent.rules.outputs import HELD_ON_DEVICE_BUDGET_BYTES

    config = cpu_config(trials=5)
    output = 300 << 20
    measures = Measures(device_peak_bytes=2 << 30, input_bytes=output, output_bytes=output)
    small = estimate(dataclasses.replace(measures, output_bytes=1 << 20), config, "cuda")
    on_gpu = estimate(measures, config, "cuda", memory_total=1 << 40, host_total=1 << 40)
    fitting = HELD_ON_DEVICE_BUDGET_BYTES // output
    assert fitting == 3
    assert on_gpu.device_bytes == 2 * (512 << 20) + 2 * (2 << 30) + (9 + fitting) * output
    sets = (5 + 2) * 2 * output
    assert on_gpu.host_bytes == sets
    on_cpu = estimate(measures, config, "cpu", memory_total=1 << 40, host_total=1 << 40)
    assert on_cpu.host_bytes == sets + 2 * (2 << 30) + (9 + fitting) * output  # the outputs, three copies
    assert small.host_bytes == (5 + 2) * (output + (1 << 20))  # every copy fits the device: none on the host


def test_a_pair_waiting_for_room_is_not_held_up_by_a_retry_waiting_for_it(monkeypatch):
    """A retry waits to hold the gate alone, which needs this pair's shared hold to end; were the
    waiting retry counted as running, this pair would wait for it in turn (until the admission's
    time limit, cut here to seconds)."""
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.free_memory", lambda device: (None, 1024**3))
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.ADMISSION_WAIT_S", 5.0)
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.ADMISSION_POLL_S", 0.01)
    gate = Gate("cpu")

    def retry_alone() -> None:
        with gate.alone("retry"):
            pass

    with gate.shared("admit", "waiting for room") as hold:
        retry = threading.Thread(target=retry_alone)
        retry.start()
        deadline = time.monotonic() + WAIT_S
        while not gate.waiting_alone() and time.monotonic() < deadline:
            time.sleep(0.01)
        hold.admit(Footprint(0, 8 * 1024**3))  # more than the 1 GiB free
        assert hold.admitted == "alone on the device"
    retry.join(WAIT_S)


LARGE_SETS_PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.rand(48 * 1024 * 1024)]  # 192 MiB in, 192 MiB out: five sets hold 1.9 GiB


def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("policy", ["retry", "admit"])
def test_the_references_cap_leaves_out_its_sets_whatever_the_memory_policy(tmp_path, policy):
    """The sets a reference draws sit in its process (shared memory, the harness's transport):
    its host-memory cap leaves them out once their size is known, also where nothing is admitted
    by footprint (the "retry" policy; a retry alone). level1/96_HuberLoss's reference (five 8 GiB
    sets), retried alone on an H200, was killed at the 32 GiB cap by its own sets."""
    problem = tmp_path / "large_sets.py"
    problem.write_text(LARGE_SETS_PROBLEM)
    candidate = tmp_path / "candidate.py"
    candidate.write_text(LARGE_SETS_PROBLEM.replace("class Model(", "class ModelNew("))
    config = cpu_config(policy="permissive", memory_policy=policy, memory_cap_gb=1.2,
                        cache_dir=tmp_path / "cache", timing=False)
    result = evaluate(problem, candidate, config)
    assert result.passed, result.summary()
    assert result.env["peak_rss_gib"]["reference"] > 1.2  # its sets counted beyond the cap, not in it


def test_admission_counts_what_the_other_gpus_pairs_reserved_of_the_host(tmp_path, monkeypatch):
    """Two GPUs of one host, one gate each: host memory 10 GiB free; GPU 0's pair reserved 8 GiB
    of host memory it has not taken yet; GPU 1's pair of 4 GiB, alone on its own GPU, still waits
    for the host memory, until GPU 0's pair has taken its own (#38: four GPUs' gates each
    admitting alone overcommitted the host and the kernel's OOM killer took references)."""
    gib = 1024**3
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.device_key", lambda device: device.replace(":", "-"))
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.free_memory", lambda device: (80 * gib, 10 * gib))
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.shared_memory_free", lambda: 64 * gib)
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.ADMISSION_POLL_S", 0.01)
    root = tmp_path / "gates"
    first_gpu, second_gpu = Gate("cuda:0", root=root), Gate("cuda:1", root=root)
    events: list[str] = []
    with first_gpu.shared("admit", "big") as running:
        running.admit(Footprint(0, 8 * gib))
        with second_gpu.shared("admit", "small device, no host") as light:
            light.admit(Footprint(1 * gib, 1 * gib))  # fits beside the 8 GiB: admitted at once
            events.append(light.admitted)

        waiting = admitting(second_gpu, Footprint(0, 4 * gib), events)
        waiting.join(1.0)
        events.append("settled")
        running.settle()
        waiting.join(WAIT_S)
    assert events == ["by footprint", "settled", "alone on the device"]



def test_a_pair_larger_than_its_free_device_memory_is_admitted_alone_on_it_beside_other_gpus(tmp_path, monkeypatch):
    """Four GPUs of one host: a level-1 pair whose footprint (nine held 6 GiB outputs) is more
    than its GPU's free memory fits only alone on that GPU; a pair running on another GPU, with
    host room to spare, is no reason to wait (it waited ADMISSION_WAIT_S, 900 s, before), while a
    pair sharing its own GPU still is."""
    gib = 1024**3
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.device_key", lambda device: device.replace(":", "-"))
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.free_memory", lambda device: (79 * gib, 400 * gib))
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.shared_memory_free", lambda: 250 * gib)
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.ADMISSION_POLL_S", 0.01)
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.ADMISSION_WAIT_S", 5.0)  # wrong: fails in 5 s
    root = tmp_path / "gates"
    first_gpu, second_gpu = Gate("cuda:0", root=root), Gate("cuda:1", root=root)
    giant = Footprint(103 * gib, 84 * gib)
    events: list[str] = []
    with first_gpu.shared("admit", "elsewhere") as other:
        other.admit(Footprint(2 * gib, 8 * gib))  # pending, on GPU 0
        with second_gpu.shared("admit", "giant") as alone_on_its_gpu:
            alone_on_its_gpu.admit(giant)
            assert alone_on_its_gpu.admitted == "by footprint"
        with first_gpu.shared("admit", "giant beside a pair on its own GPU") as beside:
            waiting = admitting(first_gpu, giant, events)
            waiting.join(1.0)
            events.append("the other pair ends")
            other.release()
            waiting.join(WAIT_S)
            del beside
    assert events == ["the other pair ends", "alone on the device"]



def test_small_pairs_pass_a_starving_large_one_only_while_a_large_pair_it_waits_for_runs(monkeypatch):
    """An 80 GiB GPU (79 free): giant A runs; giant B waits for it, long enough to be served
    first. Small C passes B (it takes little and is done long before A), medium D does not. Once A
    has ended and only small C stands in B's way, small E waits too (else a stream of small pairs
    would starve B): B runs when C ends, E after B."""
    gib = 1024**3
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.free_memory", lambda device: (79 * gib, 400 * gib))
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.shared_memory_free", lambda: 250 * gib)
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.ADMISSION_POLL_S", 0.01)
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.ADMISSION_FAIR_S", 0.2)
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.device_memory_by_process", lambda: {})
    gate = Gate("cuda")
    giant, small, medium = Footprint(103 * gib, 84 * gib), Footprint(2 * gib, 2 * gib), Footprint(20 * gib, 20 * gib)
    events: list[str] = []
    ends = {name: threading.Event() for name in "BCDE"}

    def pair(name: str, footprint: Footprint) -> threading.Thread:
        def run() -> None:
            with gate.shared("admit", name) as hold:
                hold.admit(footprint)
                events.append(f"{name} {hold.admitted}")
                ends[name].wait(WAIT_S)

        thread = threading.Thread(target=run, daemon=True)  # a failed check must not leave it waiting
        thread.start()
        return thread

    def until(condition) -> None:
        deadline = time.monotonic() + 60
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.01)

    with gate.shared("admit", "A") as giant_a:
        giant_a.admit(giant)
        giant_a.settle()  # what it holds is out of the free memory now
        b = pair("B", giant)
        time.sleep(0.5)  # B now waits longer than ADMISSION_FAIR_S
        c = pair("C", small)
        until(lambda: "C by footprint" in events)
        d = pair("D", medium)
        time.sleep(0.5)
        assert [e for e in events if e.startswith("D")] == []  # medium: B's room is set aside for it
    events.append("A ends")
    e = pair("E", small)
    time.sleep(0.5)
    assert events[-1] == "A ends"  # B waits for C; E (small) waits behind B
    events.append("C ends")
    ends["C"].set()
    until(lambda: any(event.startswith("B") for event in events))
    time.sleep(0.3)
    assert not any(event.startswith(("D", "E")) for event in events)  # B alone: 103 GiB is all it takes
    events.append("B ends")
    ends["B"].set()
    until(lambda: sum(event.startswith(("D", "E")) for event in events) == 2)
    for end in ends.values():
        end.set()
    for thread in (b, c, d, e):
        thread.join(WAIT_S)
    assert events[:5] == ["C by footprint", "A ends", "C ends", "B alone on the device", "B ends"]


def test_the_candidates_cgroup_grows_with_what_is_lent_and_never_shrinks(tmp_path):
    """Sandbox.lend_memory: the cgroup's limit is the cap plus what the harness lends (times the
    headroom), raised as the loans grow and never lowered (a limit below what the group holds
    makes the kernel reclaim or OOM-kill at once)."""
    from pytest_cudaagent.core.config import SandboxLimits
    from pytest_cudaagent.workers.sandbox import Sandbox

    group = tmp_path / "cgroup"
    group.mkdir()
    (group / "memory.max").write_text("1000")
    limits = SandboxLimits()
    sandbox = Sandbox(tmp_path / "scratch", tmp_path / "build", [], limits, 1000, cgroup_dirs=[group])
    sandbox.lend_memory(200)
    assert int((group / "memory.max").read_text()) == 1000 + int(200 * limits.memory_headroom)
    sandbox.lend_memory(50)
    assert int((group / "memory.max").read_text()) == 1000 + int(200 * limits.memory_headroom)
    sandbox.lend_memory(400)
    assert int((group / "memory.max").read_text()) == 1000 + int(400 * limits.memory_headroom)

"""`evaluate(problem, candidate, config) -> Result`: the one path from files to a verdict.

The parent (this process) spawns two workers: the reference's (imports the problem, draws the
inputs, computes the expected outputs, times the baselines) and the candidate's (builds and runs
the candidate). Tensors travel between them through this process; the comparison and the verdict
happen here, where the candidate's code never runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import multiprocessing
import os
import statistics
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

from .builds.build_errors import build_error_text
from .builds.fast_build import pch_dir, start_pch
from .core import tensor_trees as trees
from .core.compare import as_output_list, compare_outputs, same_values, scaled
from .core.config import EvalConfig
from .core.files import BadFileError, Candidate, check_candidate, check_problem, file_hash
from .core.result import Result, TimingStats, TrialResult, Violation
from .core.reward import milestone_reward
from .core.shared_tensors import SharedBufferPool, shared_copies
from .core.step_seconds import StepSeconds
from .resources.footprints import Footprint, FootprintStore, Measures, estimate, streams_sets
from .resources.memory_gate import Gate, Hold
from .resources.out_of_memory import asked_and_had, out_of_memory, verdict_error
from .rules import outside_view
from .rules.guards import without_call_site
from .rules.outputs import HELD_ON_DEVICE_BUDGET_BYTES
from .rules.provenance import foreign_kernels
from .rules.rules import get_policy
from .rules.static_scan import scan_candidate
from .system import proc_tree
from .system.cores import evaluating_threads
from .system.envinfo import collect_env
from .timing import host_quiet
from .timing.backend_settings import BackendSettings, diff
from .timing.baseline_cache import BaselineCache
from .timing.baseline_spread import steadiest, unstable_warning
from .timing.locks import device_lock, device_work
from .timing.timer import fresh_call_count, timing_rounds
from .workers import outside_kill, reused_reference, start_ahead
from .workers.channel import Worker, WorkerDied, WorkerFailure, WorkerTimeout
from .workers.reference_batch import KEEP_SET_BYTES, KeptReference, batch_key
from .workers.reference_batch import store as reference_store
from .workers.replies import ForbiddenReply
from .workers.sandbox import Sandbox, SandboxUnavailable, missing, refusal
from .workers.start_ahead import StartedWorker, started_worker_key
from .workers.worker import CANDIDATE_REPLY_KEYS, candidate_main, reference_main

logger = logging.getLogger(__name__)


class ProblemError(BadFileError):
    """The problem file itself fails to run: no candidate can be judged against it."""


class DeviceUnavailable(BadFileError):
    """The device asked for is not there: nobody's file is at fault."""


def evaluate(problem: str | Path, candidate: str | Path, config: EvalConfig | None = None) -> Result:
    """The pair's Result; BadFileError for a file that cannot be evaluated (ProblemError: the
    problem's reference fails). An evaluation that ran out of memory while other evaluations
    shared its device, or whose worker was killed from outside, is no verdict: it runs once more
    with the device to itself (memory_gate.py, outside_kill.py), and `Result.env["retried"]` says
    why. Only an out-of-memory error with the device to itself is the candidate's."""
    config = config or EvalConfig()
    problem_path, found, device = checked_pair(problem, candidate, config)
    try:
        with evaluating_threads():
            return _evaluate_at_the_gate(problem_path, found, config, device)
    finally:
        # Workers that outlived their join's timeout on a loaded machine, reaped now rather than
        # left as zombies of a process that may evaluate for days.
        multiprocessing.active_children()


def _evaluate_at_the_gate(problem_path: Path, found: Candidate, config: EvalConfig, device: str) -> Result:
    """The first attempt with the device shared, and the second alone where the first is no verdict."""
    gate = Gate(device)
    with gate.shared(config.memory_policy, str(problem_path)) as hold:
        first = _Attempt.run(problem_path, found, config, device, hold)
    why = first.retry_reason()
    if why is None:
        return first.outcome()
    with gate.alone(str(problem_path)) as hold:
        second = _Attempt.run(problem_path, found, config, device, hold)
    return second.outcome(retried=why, first=first)


def checked_pair(problem: str | Path, candidate: str | Path, config: EvalConfig) -> tuple[Path, Candidate, str]:
    """The problem, the candidate as found on disk, and the device they run on; BadFileError
    for a file that cannot be evaluated (ProblemError: the problem's), DeviceUnavailable for a
    GPU asked for that is not there."""
    try:
        problem_path = check_problem(problem)
    except ProblemError:
        raise
    except BadFileError as error:
        raise ProblemError(str(error)) from None
    found = check_candidate(candidate)
    device = config.resolved_device()
    if device == "cuda" and not torch.cuda.is_available():
        raise DeviceUnavailable("--device cuda asked for, but no CUDA GPU is visible; use --device cpu")
    return problem_path, found, device


@dataclasses.dataclass
class _Attempt:
    """One evaluation of a pair at the gate: its Result, or the ProblemError it ended with."""

    evaluation: Evaluation
    hold: Hold
    result: Result | None = None
    problem_error: ProblemError | None = None

    @classmethod
    def run(cls, problem: Path, candidate: Candidate, config: EvalConfig, device: str, hold: Hold) -> _Attempt:
        evaluation = Evaluation(problem, candidate, config, device)
        evaluation.memory_hold = hold
        try:
            return cls(evaluation, hold, result=evaluation.run())
        except ProblemError as error:
            return cls(evaluation, hold, problem_error=error)

    @property
    def footprint(self) -> Footprint | None:
        return self.evaluation.footprint

    def status(self) -> str:
        return self.result.status if self.result is not None else "problem_error"

    def error(self) -> str:
        return (self.result.error or "") if self.result is not None else str(self.problem_error)

    def retry_reason(self) -> str | None:
        """Why this attempt is no verdict, or None when it is one."""
        evaluation = self.evaluation
        if evaluation.out_of_memory is not None and not self.hold.alone:
            others = self.hold.shared_with()
            if others:
                return (f"out of memory while {others} other evaluation(s) shared the device: "
                        f"{evaluation.out_of_memory[:500]}")
        if evaluation.killed_from_outside:
            return "the candidate's process or a compiler of its build was killed from outside"
        if evaluation.reference_killed_from_outside:
            return "the reference's process was killed from outside"
        return None

    def outcome(self, retried: str | None = None, first: _Attempt | None = None) -> Result:
        """The Result (ProblemError raised for the problem's failure); an out-of-memory error
        here, with the device to itself or alone all along, is the candidate's or the problem's."""
        oom = self.evaluation.out_of_memory
        if self.problem_error is not None:
            message = str(self.problem_error)
            if oom is not None:
                message += f" (out of memory with the device to itself, {asked_and_had(oom)})"
            if retried:
                message += f"; retried with the device to itself after: {retried}"
            raise ProblemError(message) from None
        result = self.result
        if oom is not None and result.status in ("runtime_error", "crashed"):
            result.status, result.error = "runtime_error", verdict_error(oom, result.error)
        result.env["memory"] = self.hold_note()
        if retried and first is not None:
            result.env["retried"] = {"why": retried, "first": f"{first.status()}: {first.error()[-500:]}",
                                     "waited_alone_s": round(self.hold.waited_s, 2),
                                     # The first attempt's processes: what a kernel's OOM-kill
                                     # line names when that attempt was the one killed.
                                     "first_pids": dict(getattr(first.evaluation.result, "env", {}).get("pids") or {})}
            if first.evaluation.killed_from_outside:
                result.warnings.append(Violation(outside_kill.RULE, outside_kill.first_outcome(
                    first.status(), first.error())))
        return result

    def hold_note(self) -> dict:
        """Result.env["memory"]: how the evaluation held its device's memory."""
        footprint = self.footprint
        return {"policy": self.evaluation.config.memory_policy, "gate": "alone" if self.hold.alone else "shared",
                "admitted": self.hold.admitted, "waited_s": round(self.hold.waited_s, 2),
                "footprint": footprint.as_gib() if footprint is not None else None}


def evaluate_to_result(problem: str | Path, candidate: str | Path, config: EvalConfig | None = None) -> Result:
    """`evaluate`, with every way it can end as a Result, so that every pair of a run leaves one
    row: a file that is not a candidate (no ModelNew, a syntax error) is the candidate's
    `build_error`; a problem whose reference fails is `problem_error`; an error of ours (or of
    the machine: no GPU, no sandbox where one is required) is `harness_error`, which
    `--resume` evaluates again."""
    config = config or EvalConfig()
    device = config.device if config.device != "auto" else "unknown"
    try:
        return evaluate(problem, candidate, config)
    except ProblemError as error:
        return unjudged_result(problem, candidate, "problem_error", str(error), device)
    except (DeviceUnavailable, SandboxUnavailable) as error:
        return unjudged_result(problem, candidate, "harness_error", str(error), device)
    except BadFileError as error:
        return unjudged_result(problem, candidate, "build_error", str(error), device)
    except Exception as error:  # noqa: BLE001 - an error of ours is a row too, never a lost pair
        logger.exception("internal error evaluating %s with %s", problem, candidate)
        return unjudged_result(problem, candidate, "harness_error", f"internal error of the evaluator: "
                               f"{type(error).__name__}: {error}", device, log=traceback.format_exc())


def unjudged_result(problem: str | Path, candidate: str | Path, status: str, error: str, device: str,
                    log: str = "") -> Result:
    """The Result of a pair whose evaluation ended before a verdict on the candidate."""
    result = Result(str(problem), str(candidate), status=status, error=error.strip()[-3000:], log=log[-4000:],
                    device=device)
    with contextlib.suppress(Exception):
        result.env = collect_env(device)
    return result


class Evaluation:
    def __init__(self, problem: Path, candidate: Candidate, config: EvalConfig, device: str):
        self.problem = problem
        self.candidate = candidate
        self.config = config
        self.device = device
        self.policy = get_policy(config.policy)
        self.result = Result(str(problem), str(candidate.path), device=device, env=collect_env(device),
                             convention=config.convention)
        self.protected_hashes = candidate.protected_hashes(problem)
        self.sandbox: Sandbox | None = None
        self.reference_host_transfers: frozenset[str] = frozenset()  # worker.audited_reference
        self._workers: dict[str, Worker] = {}  # by side, kept for their request times (Result.profile)
        # The eager baseline's rounds between the candidate's (TimingConfig.timing_rounds and
        # host_bound_rounds), its replies kept for _time_baselines; None where there is no eager
        # baseline to interleave, empty where it is timed after the candidate (cached).
        self._interleaved: list[dict] | None = [] if "eager" in config.baselines else None
        self._candidate_rounds: list[list[float]] = []  # each round's timed samples (_paired_rounds)
        self._candidate_round_starts: list[list[int]] = []  # and when each of its calls began
        # Fresh sets asked of the reference ahead of the timing (_ask_fresh_sets_ahead).
        self._fresh_pending = False
        self._fresh_ahead: list[dict] = []
        # The candidate's process or a compiler of its build was killed by a signal from outside.
        self.killed_from_outside = False
        # The next pair's candidate worker, started by this evaluation (_start_next): paused while
        # this one times where no cores are reserved for timing (_next_worker_paused).
        self._started_ahead: StartedWorker | None = None
        # Trials the reference could not repeat: its reply (why: "seed" or "settings").
        self._unrepeatable: dict[int, dict] = {}
        # Shared memory lent to the candidate's worker for one correctness call at a time.
        self._lent = SharedBufferPool()
        # From the candidate worker's first message: the threads that were the harness's before its
        # code was loaded (None: not sent), and the process that serves its requests (outside_view.py).
        self._harness_threads: set[int] | None = None
        self._serving_pid = 0
        # The calibration loop's calls and step times (worker.timed_calls), for Result.env["timed_loop"].
        self._calibration_steps: dict | None = None
        # The reference's reply to "prepare" (its own, or a batch's kept one), once received.
        self._prepared: dict | None = None
        # What the candidate is built from: init inputs, the reference's state_dict, the seed.
        self._construction: tuple = ()
        # A kept reference's CPU seconds before this evaluation (Result.profile["cpu.reference"]),
        # and how many evaluations of the batch have used it, this one included.
        self._reference_cpu_before = 0.0
        self._reference_evaluations = 1
        # Problems the reference's process served before this one (reused_reference.py).
        self._reference_problems = 0
        # Its place at its device's memory gate (memory_gate.py), given by `evaluate`: told the
        # pair's footprint once the reference has prepared, and when its correctness is checked.
        self.memory_hold: Hold | None = None
        self.footprint: Footprint | None = None
        # The sets drawn one at a time, each let go once judged (footprints.streams_sets).
        self._streamed = False
        # The line of the out-of-memory error that ended the evaluation (either side), if one did.
        self.out_of_memory: str | None = None
        # The reference's process was ended by SIGKILL or SIGTERM, not by us (outside_kill.py).
        self.reference_killed_from_outside = False
        # Bytes of the correctness calls' outputs the candidate's worker keeps copies of, on its
        # device and on the host (_harness_bytes).
        self._held_copy_bytes = self._held_on_host = 0

    # -- orchestration --------------------------------------------------------------------------

    def run(self) -> Result:
        result = self.result
        cpu_started, started = time.process_time(), time.perf_counter()
        with self._profiled("parent.scan"):
            static = scan_candidate(self.candidate)
        candidate_worker = reference_worker = None
        ended = False
        try:
            # The candidate first: its build is the longest step, and on a busy GPU machine each
            # new process waits its turn for a CUDA context (the reference's can come later).
            with self._profiled("parent.spawn_candidate"):
                candidate_worker = self._spawn_candidate()
            kept = self._take_kept_reference()
            if kept is None:
                with self._profiled("parent.spawn_reference"):
                    reference_worker = self._spawn_reference()
                self._admit(reference_worker)
                # The reference computes while the candidate starts and builds; sets too large to
                # keep together come one at a time (_set_at).
                reference_worker.send(("prepare", self._set_count(), 1 if self._streamed else None))
            else:
                reference_worker = kept.worker
                self._admit(None)
            if self.config.fast_build:
                # Beside the candidate, not before it, and not waited for (fast_build.start_pch).
                start_pch(self.candidate, self.config.cache_dir, self.device)
            # Until the first phase: the static scan and both workers' starts (#21's time
            # outside the phases, with parent.close and parent.tampering).
            result.profile["parent.start"] = time.perf_counter() - started
            self._phase("sandbox", lambda: self._note_sandbox(candidate_worker.receive(self.config.build_timeout_s,
                                                                                        label="start")))
            reference = self._phase("reference", lambda: kept.prepared if kept is not None else reference_worker.receive(
                self.config.reference_timeout_s, label="prepare"), worker=reference_worker, problem_side=True)
            self._prepared = reference
            self.reference_host_transfers = frozenset(reference.get("host_transfers") or ())
            self._note_footprint(reference)
            result.backend_settings = {"configured": reference["backend_settings"]}
            self._note_stateful_reference(reference.get("stateful"))
            if self.config.timing:
                self._ask_fresh_sets_ahead(reference_worker, reference)
            built = self._phase("build", lambda: candidate_worker.receive(self.config.build_timeout_s, label="build"))
            self._start_next()  # its build beside this one's checks and timing
            # The build as the worker timed it, from its start: the parent's "build" phase is only
            # what remained of it after the sandbox's report and the reference.
            # (Sent by the candidate's process: a number or nothing, never trusted for a verdict.)
            # "cpu_s": its CPU seconds until built, its compilers included.
            for sent, label in (("seconds", "candidate.built_after"), ("cpu_s", "cpu.candidate_build")):
                if isinstance(built, dict) and isinstance(built.get(sent), (int, float)):
                    result.profile[label] = float(built[sent])
            init_inputs, state_dict = reference["init_inputs"], reference["state_dict"]
            if self.config.reference_batch:
                # Copies: the candidate could write into what it is sent, and the next candidate
                # of the batch is sent these weights too.
                init_inputs = shared_copies(init_inputs)
                state_dict = dict(zip(state_dict, shared_copies(list(state_dict.values())), strict=True))
            self._construction = (init_inputs, state_dict, reference["seed"])
            # Untimed work on the device (weights moved there, buffers precomputed): never
            # beside another evaluation's timing; held here on the worker's behalf.
            with device_work(self.device):
                constructed = self._phase("construct", lambda: candidate_worker.request(
                    ("construct", *self._construction), self.config.run_timeout_s))
            result.weights = constructed["weights"]
            if "differing" in result.weights:  # kernelbench: built without a copy (_with_reference_weights)
                result.weights["copy_needed"] = False
            self._phase("correctness", lambda: self._check_trials(candidate_worker, reference_worker))
            if self.memory_hold is not None:
                self.memory_hold.settle()
            self._confirm_static(static)
            if self._ok_so_far() and self.config.timing:
                warm_sets = [self._set_at(reference_worker, position)
                             for position in self._warm_positions()]
                self._phase("timing", lambda: self._time_candidate(candidate_worker, reference_worker, warm_sets))
                result.log = candidate_worker.log_tail()  # its log goes with it
                candidate_worker.close()  # free its GPU memory before the baselines run
                candidate_worker = None
                if self._ok_so_far():
                    self._phase("baselines", lambda: self._time_baselines(reference_worker),
                                worker=reference_worker, problem_side=True)
            self._finish_status()
            ended = True
        except _Stop:
            ended = True
            self._start_next()
        except ProblemError:
            self._prepared = None  # a reference that failed serves no one else
            raise
        finally:
            self._clean_up(candidate_worker, reference_worker, ended, cpu_started)
        result.passed = result.status == "passed"
        self._speedups()
        result.reward = milestone_reward(result, self.config.reward)
        return result

    def _clean_up(self, candidate_worker: Worker | None, reference_worker: Worker | None, ended: bool,
                  cpu_started: float) -> None:
        """`run`'s way out, however it ends: the workers' accounts into the Result, the workers and
        the sandbox closed (the reference kept for the batch's next candidate where it can serve
        it), the protected files checked, the profile rounded. `ended`: a verdict was reached."""
        result = self.result
        # Kept only after a verdict: not on the way out of an interrupt or a crash of ours.
        keep_reference = ended and self._keepable(reference_worker)
        leave_reference = ended and self._leaves_reference(reference_worker, keep_reference)
        self._note_workers()
        result.profile["cpu.parent"] = time.process_time() - cpu_started
        with self._profiled("parent.close"):
            self._close_workers_and_sandbox(candidate_worker, reference_worker, keep_reference, leave_reference)
        # No sandbox report (_note_sandbox): the candidate's worker ended before it entered one.
        result.env.setdefault("sandbox", {"enabled": self.config.sandbox, "errors": ["the worker ended before entering it"]})
        with self._profiled("parent.tampering"):
            self._check_tampering()
        result.profile = {label: round(seconds, 4) for label, seconds in result.profile.items()}

    def _note_workers(self) -> None:
        """Each side's request times, CPU seconds and start method into the Result; and a kept
        reference stops watching this evaluation's processes."""
        result = self.result
        for side, worker in self._workers.items():
            worker.also_watch = []  # a kept reference watches only for the evaluation it serves
            result.profile.update({f"{side}.{label}": seconds for label, seconds in worker.seconds.items()})
            # CPU seconds of each side's process tree (the candidate's build included) and of
            # this process: where an evaluation's compute goes, beside where its time goes.
            cpu = worker.cpu_seconds()
            if side == "reference" and cpu is not None:
                cpu -= self._reference_cpu_before  # a shared worker's earlier evaluations are theirs
            if cpu is not None:
                result.profile[f"cpu.{side}"] = cpu
            # How each worker started: forked from the zygote, or spawned (and why, if the
            # zygote could not fork it).
            result.env.setdefault("workers", {})[side] = (
                f"{worker.start_method}: {worker.start_error}" if worker.start_error else worker.start_method)
            # Which process was which, and the most host memory each was seen to hold: what a
            # kernel's OOM-kill line (a PID, its anon and shmem RSS) is matched against (#38).
            result.env.setdefault("pids", {"evaluator": os.getpid()})[side] = worker.process.pid
            result.env.setdefault("peak_rss_gib", {})[side] = round(worker.peak_rss_bytes / 1024**3, 3)

    def _close_workers_and_sandbox(self, candidate_worker: Worker | None, reference_worker: Worker | None,
                                   keep_reference: bool, leave_reference: bool = False) -> None:
        """The candidate's log tail into the Result, then both workers asked to exit and closed
        (the reference kept instead where `keep_reference`, or asked to let its problem go and
        left for this process's next one where `leave_reference`), and the sandbox closed."""
        if candidate_worker is not None:
            self.result.log = candidate_worker.log_tail()
        spared = keep_reference or leave_reference
        workers = [worker for worker in (candidate_worker, reference_worker)
                   if worker is not None and not (worker is reference_worker and spared)]
        for worker in workers:
            worker.ask_to_exit()
        if leave_reference:
            try:
                reference_worker.send(("release",))  # answered while the next evaluation starts
            except WorkerDied:
                workers.append(reference_worker)
            else:  # in the slot at once: what ends the session (or an interrupt) closes it there
                reused_reference.spare().put(reference_worker, self._reference_problems + 1)
        for worker in workers:
            worker.close()
        if self.sandbox is not None:
            self.sandbox.close()
        if keep_reference:
            self._keep_reference(reference_worker)

    def _phase(self, name: str, action, worker: Worker | None = None, problem_side: bool = False,
               record: bool = True):
        """Run `action`, turning worker failures into a verdict (or a ProblemError on the
        reference's side); `record=False` for a request made inside another phase, whose time
        belongs to that phase (it would otherwise overwrite this name's own time)."""
        started = time.perf_counter()
        try:
            return action()
        except WorkerFailure as failure:
            self.out_of_memory = out_of_memory(f"{failure.error_type}: {failure.message}")
            if problem_side:
                raise ProblemError(f"{self.problem}: the reference failed in {failure}") from None
            if failure.error_type in ("SystemExit", "KeyboardInterrupt"):
                self._fail("crashed", f"the candidate called exit during {failure.phase}: {failure.message}")
            status = "build_error" if failure.phase == "build" else "runtime_error"
            self.killed_from_outside = outside_kill.killed_from_outside(status, failure.message)
            self._fail(status, f"{failure.phase} failed: {failure.error_type}: {failure.message}")
        except ForbiddenReply as forged:  # only the candidate's replies are read this way
            self._add_violations([Violation("tampering", str(forged))])
            self._fail("violation", f"tampering: {forged}")
        except WorkerTimeout as timeout:
            if problem_side:
                raise ProblemError(f"{self.problem}: the reference timed out ({timeout})") from None
            self._fail("timeout", f"{name}: {timeout}")
        except WorkerDied as death:
            # A worker that could not make its CUDA context (worker.open_gpu) or a cuBLAS handle
            # exits with the error in its log, not in a reply.
            died = worker if problem_side else self._workers.get("candidate")
            self.out_of_memory = out_of_memory(str(death), died.log_tail() if died is not None else "")
            if problem_side:
                log = worker.log_tail(1500) if worker else ""
                self.reference_killed_from_outside = outside_kill.killed_from_outside("crashed", str(death))
                raise ProblemError(f"{self.problem}: the reference process died ({death}){self._sets_need()}\n{log}") from None
            self.killed_from_outside = outside_kill.killed_from_outside("crashed", str(death))
            self._fail("crashed", f"{name}: {death}")
        finally:
            if record:
                self.result.phase_seconds[name] = round(time.perf_counter() - started, 4)

    def _profiled(self, label: str):
        """Adds the block's seconds to Result.profile[label] (work done here in the parent)."""
        return StepSeconds(self.result.profile)(label)

    def _fail(self, status: str, error: str):
        self.result.status = status
        self.result.error = error.strip().splitlines()[-1] if status != "build_error" else build_error_text(error)
        raise _Stop

    def _set_count(self) -> int:
        rotating = self.config.timing_config.rotating_inputs if self.config.timing else 0
        return self.config.trials + rotating

    def _spawn_reference(self) -> Worker:
        """The reference's worker: the process an earlier evaluation of this process left waiting
        (reused_reference.py), sent this problem, or a new one."""
        spec = {"problem": str(self.problem), "device": self.device, "config": self.config.to_dict()}
        taken = reused_reference.spare().take() if self._reuses_references() else None
        if taken is not None:
            worker, self._reference_problems = taken
            worker.load(spec)
            self._reference_cpu_before = worker.read_cpu_seconds() or 0.0
            self.result.env["reference_reused"] = self._reference_problems  # problems it served before
        else:
            worker = Worker(reference_main, spec, self.config.memory_cap_gb)
        self._workers["reference"] = worker
        return worker

    def _reuses_references(self) -> bool:
        """Whether this evaluation takes a waiting reference worker and leaves its own for the
        next: only one that does not time (reused_reference.py says why)."""
        return reused_reference.enabled() and not self.config.timing

    def _leaves_reference(self, reference_worker: Worker | None, keep_reference: bool) -> bool:
        """Whether the reference's worker is left for this process's next problem: it prepared
        this one, nothing of the problem's side failed, and it is alive and not kept for this
        problem's next candidate."""
        return (self._reuses_references() and not keep_reference and reference_worker is not None
                and self._prepared is not None and self.out_of_memory is None
                and not self.reference_killed_from_outside and reference_worker.process.is_alive())

    # -- a reference shared by a batch (reference_batch.py) ------------------------------------

    @functools.cached_property
    def _batch_key(self) -> str:
        """Computed once (it hashes the problem file): the key a reference is taken by is the one
        it is kept under."""
        return batch_key(self.config.reference_batch, self.problem, self.device, self.config.to_dict())

    def _take_kept_reference(self) -> KeptReference | None:
        if not self.config.reference_batch:
            return None
        kept = reference_store().take(self._batch_key)
        if kept is None:
            return None
        kept.evaluations += 1
        kept.worker.seconds = {}  # this evaluation's requests only (Result.profile)
        self._reference_cpu_before = kept.worker.read_cpu_seconds() or 0.0
        self._workers["reference"] = kept.worker
        self._reference_evaluations = kept.evaluations
        self._prepared = kept.prepared  # goes back to the store even if this candidate stops early
        self.result.env["reference_shared"] = kept.evaluations
        return kept

    def _keepable(self, reference_worker: Worker | None) -> bool:
        """Whether the reference can serve the batch's next candidate: it prepared, answered
        everything asked of it (a fresh-set request still in flight is collected first), is
        alive, and its sets are small enough to keep in memory."""
        if not self.config.reference_batch or reference_worker is None or self._prepared is None:
            return False
        decided_by = (self.out_of_memory, self.reference_killed_from_outside)
        try:
            self._collect_fresh_sets(reference_worker)
        except (_Stop, BadFileError):
            # The verdict stands: what ended this late request did not decide it.
            self.out_of_memory, self.reference_killed_from_outside = decided_by
            return False
        if not reference_worker.process.is_alive():
            return False
        return not self._streamed and sum(_set_bytes(content_set) for content_set in self._prepared["sets"]) <= KEEP_SET_BYTES

    def _admit(self, reference_worker: Worker | None) -> None:
        """Room for this pair's footprint (memory_gate.Hold.admit), waited for while the
        candidate starts and builds, before the reference draws a set: the problem's measures
        from its earlier runs, else one set sized by the reference on the meta device."""
        hold = self.memory_hold
        if hold is None:
            return
        try:
            measures = FootprintStore(self.config.cache_dir).get(self.problem, self.device)
        except OSError:
            measures = None
        # Sized also where nothing is admitted by footprint (the retry alone, the "retry"
        # policy): the reference's cap leaves out its sets only when their size is known (#38:
        # level1/96_HuberLoss's reference, retried alone, killed at the cap by its own 40 GiB of sets).
        if measures is None and reference_worker is not None:
            sized = self._phase("reference", lambda: reference_worker.request(("sizes",), self.config.reference_timeout_s),
                                worker=reference_worker, problem_side=True, record=False)
            if sized["input_bytes"] is not None:
                measures = Measures(0, sized["input_bytes"], sized["output_bytes"])
        self.footprint = estimate(measures, self.config, self.device) if measures is not None else None
        self._streamed = measures is not None and reference_worker is not None and streams_sets(measures, self.config)
        if self._streamed:
            self.result.env["sets_streamed"] = True
        if measures is not None and reference_worker is not None:
            # The sets it draws live in its process, in shared memory, until the evaluation
            # ends: the harness's transport, not the problem's use of memory (#38: five level-1
            # references of 12-16 GiB sets killed at the 32 GiB cap). Counted beyond its cap.
            reference_worker.harness_bytes = self._set_count() * (measures.input_bytes + measures.output_bytes)
        # What the pair's workers hold is out of the free memory already (memory_gate.still_to_take).
        hold.note_processes([worker.process.pid for worker in self._workers.values()
                             if getattr(worker.process, "pid", None)])
        with self._profiled("parent.admission"):
            hold.admit(self.footprint)
        for step, seconds in hold.admission_steps.taken().items():
            StepSeconds(self.result.profile).add(f"parent.admission.{step}", seconds)

    def _note_footprint(self, reference: dict) -> None:
        """The problem's measures, kept for the admission of its later pairs (footprints.py), and
        this pair's footprint told to the gate now that it is known."""
        sets = reference["sets"]
        if not sets:
            return
        measures = Measures(int(reference.get("device_peak_bytes") or 0), trees.nbytes(sets[0]["inputs"]),
                            sum(_nbytes(sets[0]["outputs"])))
        with contextlib.suppress(OSError):
            FootprintStore(self.config.cache_dir).put(self.problem, self.device, measures)
        self.footprint = estimate(measures, self.config, self.device)
        if self.memory_hold is not None:
            self.memory_hold.reserve(self.footprint)

    def _keep_reference(self, worker: Worker) -> None:
        self.result.env.setdefault("reference_shared", self._reference_evaluations)
        worker.cpu_s = None  # read afresh by the next evaluation
        reference_store().keep(self._batch_key, KeptReference(worker, self._prepared, self._reference_evaluations))

    def _spawn_candidate(self) -> Worker:
        """The candidate's worker: the one started ahead for this very evaluation (start_ahead.py),
        or a new one."""
        ahead = start_ahead.state().take(self._started_worker_key)
        if ahead is not None:
            # Its sandbox, and the workspace files' hashes as they were before its code ran.
            self.sandbox, self.protected_hashes = ahead.sandbox, ahead.protected_hashes
            self.result.env["started_ahead_s"] = round(time.perf_counter() - ahead.started_at, 2)
            worker = ahead.worker
        else:
            worker, self.sandbox = start_candidate_worker(self.candidate, self.config, self.device,
                                                          profile=self.result.profile)
        self._workers["candidate"] = worker
        return worker

    @functools.cached_property
    def _started_worker_key(self) -> str:
        return started_worker_key(self.problem, self.candidate, self.device, self.config)

    def _start_next(self) -> None:
        """The next pair this process evaluates, if announced: its worker starts now (once this
        candidate has built, or has ended before its build). A start that fails is left to that
        evaluation, which starts its own and reports what goes wrong as its own."""
        try:
            started = start_ahead.state().start_announced(start_ahead_worker)
        except Exception as error:  # noqa: BLE001 - never this evaluation's verdict
            logger.warning("starting the next candidate's worker ahead failed: %s", error)
            return
        if started is not None:
            self._started_ahead = started
            # No one reads it until its evaluation: its host memory is checked while this
            # evaluation waits on its own workers (the cap where no cgroup holds it).
            for worker in self._workers.values():
                worker.also_watch = [started.worker]

    def _note_sandbox(self, report: dict) -> None:
        """The candidate worker's first message, sent before any of the candidate's code ran: what
        the sandbox applied, and the threads that are the harness's (outside_view.py)."""
        report.pop("kind")
        threads, serving = report.pop("threads", None), report.pop("pid", None)
        self._harness_threads = set(threads) if isinstance(threads, list) else None
        self._serving_pid = serving if type(serving) is int else self._workers["candidate"].process.pid
        self.result.env["sandbox"] = report
        if self.config.require_sandbox and missing(report):
            raise SandboxUnavailable(refusal(report))

    # -- correctness ----------------------------------------------------------------------------

    def _set_at(self, reference_worker: Worker, position: int) -> dict:
        """The set at `position`: prepared, or (streamed) drawn by the reference now, in order."""
        sets = self._prepared["sets"]
        while len(sets) <= position:
            with self._profiled("reference.draw_set"):
                drawn = self._phase("reference", lambda: reference_worker.request(("draw_set",), self.config.reference_timeout_s),
                                    worker=reference_worker, problem_side=True, record=False)
            sets.append(drawn["set"])
            if drawn["stateful"] and not self.result.stateful_reference:
                self._note_stateful_reference(drawn["stateful"])
        return sets[position]

    def _let_go_of_set(self, reference_worker: Worker, position: int) -> None:
        """Streamed sets: a judged trial's set is let go here and in the reference's process, so
        the host holds one set at a time (with the copies lent from it)."""
        if not self._streamed:
            return
        self._prepared["sets"][position] = None
        dropped = self._phase("reference", lambda: reference_worker.request(("drop_sets", [position]), self.config.reference_timeout_s),
                              worker=reference_worker, problem_side=True, record=False)
        self.result.env["sets_recycled"] = dropped["recycled"]  # drawn into a set's storage let go

    def _check_trials(self, worker: Worker, reference_worker: Worker) -> None:
        """Each trial's set is given to the candidate twice from the second trial on: first
        unwatched (no operator audit), while whatever it kept holds the previous trial's answer,
        then watched. Both calls are judged; the trial is the first that fails, else the watched.
        A reference that keeps state across calls was called on those sets twice as well, each
        answer kept (worker._draw_sets): each call is compared with the reference's call at the
        same position (`second`: the second call on a set)."""
        for index in range(self.config.trials):
            trial_set = self._set_at(reference_worker, index)
            unwatched, unwatched_outputs, unwatched_lent = (
                self._checked_forward(worker, index, trial_set, watched=False) if index else (None, [], []))
            trial, outputs, lent = self._checked_forward(worker, index, trial_set, watched=True, second=bool(index))
            if index == 0 and self._copy_may_help(trial):
                trial, outputs, lent = self._with_reference_weights(worker, trial_set, (trial, outputs, lent))
            judged_outputs, second = outputs, bool(index)
            if unwatched is not None and not unwatched.correct:
                unwatched.error = f"called without the operator audit: {unwatched.error}"
                trial, judged_outputs, second = unwatched, unwatched_outputs, False
            if not trial.correct and trial.error != OUTPUT_UNREADABLE \
                    and not self._reference_repeats_itself(reference_worker, index, judged_outputs, second):
                self.result.nondeterministic_trials.append(index)
            self.result.trials.append(trial)
            self._lent.give_back(unwatched_lent + lent)  # judged: the next trial's outputs go there
            del trial_set, outputs, unwatched_outputs, judged_outputs  # nothing of the set held here
            self._let_go_of_set(reference_worker, index)
        with device_work(self.device):  # compares on the device: never beside another timing
            held = worker.request(("check_held",), self.config.run_timeout_s)
        self._note_output_reuse(held["reused"])
        self.result.correct = all(trial.correct for trial in self.result.trials)

    def _copy_may_help(self, trial: TrialResult) -> bool:
        """kernelbench: the candidate as KernelBench builds it got its first trial wrong, and its
        same-seed construction left entries of the reference's names and shapes unlike the
        reference's (load_reference_weights' `differing`), which a copy would change."""
        return not trial.correct and trial.error != OUTPUT_UNREADABLE and self.result.weights.get("differing", 0) > 0

    def _with_reference_weights(self, worker: Worker, trial_set: dict, first: tuple) -> tuple:
        """The candidate built again, the reference's entries whose name and shape match copied
        in, and called on the first trial's set: kept if that is right (a candidate that creates
        its parameters in another order), else the first build is, with its verdict (a copy
        must never undo what the candidate's `__init__` computed: a constant folded into a
        parameter that keeps its name is wrong only if it is wrong as built). Either build has
        been called once when the other trials begin."""
        timeout = self.config.run_timeout_s
        with device_work(self.device):
            constructed = worker.request(("construct", *self._construction, True), timeout)
        retried = self._checked_forward(worker, 0, trial_set, watched=True)
        copy_needed = retried[0].correct
        with device_work(self.device):  # frees one build's device memory
            worker.request(("keep_build", copy_needed), timeout)
        if not copy_needed:
            self._lent.give_back(retried[2])
            return first
        self._lent.give_back(first[2])
        self.result.weights = {**constructed["weights"], "copy_needed": True}
        return retried

    def _note_stateful_reference(self, detail: str | None) -> None:
        """A reference that keeps state across calls is named in the Result, and why its timed
        calls' outputs are not compared (_time_candidate)."""
        if not detail:
            return
        self.result.stateful_reference = True
        self._add_warnings([Violation("stateful_reference", (
            f"the reference keeps state across calls: {detail}. Each correctness call of the candidate was "
            "compared with the reference's call at the same position; the timed calls' outputs are not compared "
            "(their answers depend on every call before them, and the warm-up's count is the candidate's own)"))])

    def _checked_forward(self, worker: Worker, index: int, trial_set: dict,
                         watched: bool, second: bool = False) -> tuple[TrialResult, list, list]:
        """One call on a trial's set, every check of a correctness call applied to it; its
        judgement, the outputs it was made on, and the buffers lent for them (given back once the
        outputs are no longer needed). `second`: the second call on this set, judged against
        the reference's second answer where it keeps state."""
        expected = trial_set["outputs_again"] if second and "outputs_again" in trial_set else trial_set["outputs"]
        # A private copy: tensors cross the pipe in shared memory, so what the candidate writes
        # into its inputs would otherwise also change the pristine copy kept here. Made in
        # shared memory lent for the call, as are the buffers its outputs are copied into
        # (shared_tensors.py): nothing is copied again to cross, and each buffer is faulted in once.
        with self._profiled("parent.lend"):
            candidate_inputs = [self._lent.copy_of(value) for value in trial_set["inputs"]]
            output_buffers = [self._lent.take(value) if type(value) is torch.Tensor else None for value in expected]
        # Storages, not tensors: nothing in the candidate's heap then looks like an output to
        # return (a search of it for a tensor of the output's shape found these).
        lent_storages = [None if buffer is None else buffer.untyped_storage() for buffer in output_buffers]
        worker.harness_bytes = self._harness_bytes(candidate_inputs + output_buffers, expected)
        if self.sandbox is not None:
            self.sandbox.lend_memory(worker.harness_bytes)
        # Untimed work on the device, held here on the worker's behalf (it cannot open the locks).
        with device_work(self.device):
            reply = worker.request(("forward", candidate_inputs, _nbytes(expected), trial_set["seed"], watched,
                                    lent_storages), self.config.run_timeout_s)
        self._lent.give_back(candidate_inputs)  # the call is over
        self._add_violations(reply["violations"] + reply["findings"])
        self._note_precision(reply["precision"])
        # An input comes back only if the call changed it (None: unchanged, as its worker saw);
        # tensors nested in a list, tuple or dict are inputs too (tensor_trees.py).
        for position, (before, after) in enumerate(zip(trial_set["inputs"], reply["inputs_after"], strict=True)):
            if after is not None and trees.tensors(before) and not _same_input(before, after):
                self._add_violations([Violation("input_mutation", f"forward changed input {position}")])
        outputs = reply["outputs"]
        with self._profiled("compare"):
            trial = compare_outputs(index, expected, outputs, self.config.tolerances())
        if None in outputs:
            trial.correct, trial.error = False, OUTPUT_UNREADABLE
        return trial, outputs, output_buffers

    def _sets_need(self) -> str:
        """What the problem's sets need of the host, for a reference that died: its sets are
        held in /dev/shm, and a full /dev/shm kills a process that writes there with SIGBUS."""
        footprint = self.footprint
        if footprint is None:
            return ""
        try:
            stat = os.statvfs("/dev/shm")
            shm = f", /dev/shm {stat.f_blocks * stat.f_frsize / 1024**3:.1f} GiB ({stat.f_bavail * stat.f_frsize / 1024**3:.1f} free)"
        except OSError:
            shm = ", no /dev/shm"
        return (f"; its {self._set_count()} sets and the copies lent from them need about "
                f"{footprint.host_bytes / 1024**3:.1f} GiB of host shared memory (host memory cap "
                f"{self.config.memory_cap_gb:.1f} GiB a process, not counting the sets{shm})")

    def _harness_bytes(self, lent: list, expected: list) -> int:
        """What the harness keeps in the candidate's process once this call is made, which its
        host-memory cap does not count (#38: level1/7_Matmul_with_small_K_dimension_'s own Model
        was killed at 32 GiB holding nine 4 GiB output copies of ours): the buffers lent for the
        call and the previous one (the unwatched call's, not yet given back), and the host copies
        worker.forward keeps of every correctness call's outputs until check_held (on the CPU:
        the outputs themselves, and their copies while they fit outputs.HELD_ON_DEVICE_BUDGET_BYTES;
        beyond it, and on a GPU, none on the host: a device copy or a digest).
        From the reference's sizes, never from the worker's word."""
        lent_bytes = sum(_nbytes([value for value in trees.tensors(lent) if type(value) is torch.Tensor]))  # nested too
        for nbytes in _nbytes(expected):
            copied = self._held_copy_bytes + nbytes <= HELD_ON_DEVICE_BUDGET_BYTES  # else a digest
            if copied:
                self._held_copy_bytes += nbytes
            if self.device == "cpu":  # the output itself, and its copy where it has one
                self._held_on_host += nbytes * (2 if copied else 1)
        # and the inputs' snapshot the worker takes around the call (outputs.device_snapshot)
        snapshot = trees.nbytes(lent[:len(lent) - len(expected)]) if self.device == "cpu" else 0
        return 2 * lent_bytes + snapshot + self._held_on_host

    def _reference_repeats_itself(self, reference_worker: Worker, index: int, candidate_outputs=None,
                                  second: bool = False) -> bool:
        """Asked only when the candidate disagrees: does the reference agree with itself under
        the same seed? If not, the trial cannot judge anyone. And under the run's backend
        settings, those the candidate ran under? If not, the trial cannot judge a candidate whose
        answer is the reference's under those settings; one that matches neither is wrong."""
        self._collect_fresh_sets(reference_worker)  # replies come in request order
        reply = self._phase("reference", lambda: reference_worker.request(
            ("repeats_itself", index, second), self.config.reference_timeout_s), worker=reference_worker, problem_side=True,
            record=False)
        if reply["deterministic"]:
            return True
        if reply.get("cause") == "settings":
            with self._profiled("compare"):
                as_under_settings = compare_outputs(index, reply["outputs"], list(candidate_outputs or []),
                                                    self.config.tolerances()).correct
            if not as_under_settings:
                return True  # far from the reference under either settings: the trial judges it
        self._unrepeatable[index] = {key: value for key, value in reply.items() if key != "outputs"}
        return False

    def _note_output_reuse(self, reused: list[Violation]) -> None:
        """Storage handed out and overwritten later: a caller holding results sees them change.
        The strict policy rejects it; the permissive one (KernelBench's) reports it."""
        if self.policy.reject_output_reuse:
            self._add_violations(reused)
        else:
            self._add_warnings(reused)

    # -- timing ---------------------------------------------------------------------------------

    # -- fresh sets, drawn ahead ----------------------------------------------------------------

    def _ask_fresh_sets_ahead(self, reference_worker: Worker, reference: dict) -> None:
        """The timed calls' fresh sets, drawn while the candidate builds and runs its trials. How
        many the timing will want depends on the candidate's call time, known only after its
        warm-up: this guesses from the reference's own (a candidate up to twice as fast needs no
        second draw); a faster one gets the rest drawn then, a slower one leaves some unused."""
        sets = reference["sets"]
        # Streamed sets are asked for one at a time meanwhile (a reply waiting ahead of theirs),
        # and too large to hold the fresh ones beside the trials': drawn when the timing wants them.
        if not sets or reference.get("forward_ms") is None or self._streamed:
            return
        set_bytes = _set_bytes(sets[0])
        guess = fresh_call_count(reference["forward_ms"] / 2, set_bytes, self.config.timing_config)
        reference_worker.send(("fresh_sets", guess + self._audited_count()))
        self._fresh_pending = True

    def _collect_fresh_sets(self, reference_worker: Worker) -> None:
        """Before anything else is asked of the reference, and before the candidate's warm-up
        (the reference must not share the device with the profiled and timed calls)."""
        if self._fresh_pending:
            self._fresh_pending = False
            self._fresh_ahead = self._phase("reference", lambda: reference_worker.receive(
                self.config.reference_timeout_s, label="fresh_sets"), worker=reference_worker, problem_side=True,
                record=False)["sets"]

    def _fresh_sets(self, reference_worker: Worker, count: int) -> list[dict]:
        self._collect_fresh_sets(reference_worker)
        fresh, self._fresh_ahead = self._fresh_ahead, []  # each set is handed out once
        if len(fresh) < count:
            fresh = fresh + self._phase("reference", lambda: reference_worker.request(
                ("fresh_sets", count - len(fresh)), self.config.reference_timeout_s),
                worker=reference_worker, problem_side=True, record=False)["sets"]
        return fresh[:count]

    def _audited_count(self) -> int:
        return max(1, self.config.timing_config.rotating_inputs)

    @contextlib.contextmanager
    def _timing_lock(self, who: str, worker: Worker):
        """The device's timing lock (locks.device_lock), taken here on the candidate's worker's
        behalf: a candidate that could open the lock directory could take the lock at import and
        hold every other timing of the machine (one started ahead did: the candidate being timed
        got no answer within 300 s)."""
        with device_lock(self.device, self.config.timing_config.quiet_wait_s, on_behalf_of=worker.process.pid) as hold:
            with self._next_worker_paused(who):
                yield hold
        self._note_quiet(who, hold.quiet, hold.beside)

    @contextlib.contextmanager
    def _next_worker_paused(self, who: str):
        """The next pair's candidate worker, started ahead by this evaluation (start_ahead.py),
        stopped with everything below it (its sandbox, its build's compilers) while `who` is timed,
        where no cores are reserved for the timed process (host_quiet.reserves_cores: a machine of
        fewer than four cores, or reserved_cpus 0); elsewhere it builds on the untimed cores. On
        the 2-core CPU box its start (an interpreter importing torch, the sandbox, the build)
        shared the cores with the timed calls: the identity candidate of a 16M-element leaky ReLU
        timed 0.17-0.27x of eager in three of eight runs, 1.00-1.05x in three without it (#40).
        Result.env["paused_ahead"] lists each pause (what was timed, its span on the host's
        monotonic clock, the processes stopped)."""
        started = self._started_ahead
        if started is None or host_quiet.reserves_cores(self.device, self.config.timing_config.reserved_cpus):
            yield
            return
        with proc_tree.stopped(started.worker.process.pid) as held:
            began = time.monotonic_ns()  # once every process is stopped (proc_tree.stopped waits)
            yield
            ended = time.monotonic_ns()
        if held:
            self.result.env.setdefault("paused_ahead", []).append(
                {"for": who, "span_ns": [began, ended], "processes": len(held)})

    def _time_candidate(self, worker: Worker, reference_worker: Worker, warm_sets: list[dict]) -> None:
        timing = self.config.timing_config
        self._collect_fresh_sets(reference_worker)
        with self._timing_lock("the candidate's warm-up and device time", worker):
            # Copies: the reference times its baselines on these very sets, so the candidate must
            # not get the reference's own memory to write into.
            warm = worker.request(("warm", [shared_copies(s["inputs"]) for s in warm_sets]), self.config.run_timeout_s)
        self._add_violations(warm["findings"])
        self._note_precision(warm["precision"])
        # What the first eager round is timed under, before any audit has reported them.
        self.result.backend_settings["candidate"] = warm["backend_settings"]
        self.result.kernels = warm["kernel_names"]
        set_bytes = _set_bytes(warm_sets[0])
        timed_count = fresh_call_count(warm["per_call_ms"], set_bytes, timing, warm["device_ms"])
        samples: list[float] = []
        counts = self._round_counts(timed_count, timing_rounds(warm["per_call_ms"], warm["device_ms"], timing))
        for index, count in enumerate(counts):
            # Each eager round beside its round of the candidate's, in the same hold of the lock
            # (_eager_round says why), as long as the candidate's last round took; before it in
            # even rounds, after it in odd ones (whichever side goes first in a hold meets the
            # host as the pause before left it).
            per_call_ms = statistics.median(self._candidate_rounds[-1]) if self._candidate_rounds else warm["per_call_ms"]
            eager_round = (functools.partial(self._eager_round, reference_worker, count, count * per_call_ms)
                           if len(counts) > 1 else None)
            reply, audit = self._timed_round(worker, reference_worker, warm, count, eager_round,
                                             eager_first=index % 2 == 0)
            samples += reply["samples_ms"]
            self._candidate_rounds.append(reply["samples_ms"])
            self._candidate_round_starts.append([stamp[0] for stamp in reply.get("stamps_ns", [])])
            if not self._ok_so_far():
                break  # a verdict already: no more rounds
        stats = TimingStats.from_samples(samples, warm["device_ms"], warm["launch_overlapped"])
        self.result.timing["candidate"] = stats
        # The time the speedups will divide by is the one the consistency checks hold to: a hidden
        # path taken on one call in five must not set a lower decile unchecked.
        timed_ms = stats.fast_ms if self._reads_lower_deciles() and stats.fast_ms else stats.median_ms
        if self.device == "cuda":
            self._check_kernels(warm)
            self._check_busy_time(timed_ms, warm["device_busy_ms"])
        else:
            self._check_watched_time(timed_ms, audit)

    def _reads_lower_deciles(self) -> bool:
        """Whether the speedups divide lower deciles (_speedups): the candidate was timed in
        rounds, and every timed call's output was compared. A stateful reference's timed outputs
        are not (_note_stateful_reference): there one call in five that skipped its work would set
        the decile, so its speedups keep the medians."""
        return len(self._candidate_rounds) > 1 and not self.result.stateful_reference

    def _warm_positions(self) -> list[int]:
        """The sets after the trials': the candidate's warm-up sets, on which the baselines are
        timed too."""
        return list(range(self.config.trials, self._set_count()))

    def _round_counts(self, timed_count: int, rounds: int) -> list[int]:
        """The candidate's timed calls split into `rounds` rounds (timer.timing_rounds; one where
        there is no eager baseline to interleave), each of at least min_samples // rounds calls
        and two; each eager round is timed beside its round (_eager_round)."""
        rounds = rounds if self._interleaved is not None else 1
        floor = max(2, self.config.timing_config.min_samples // rounds)
        rounds = max(1, min(rounds, timed_count // floor))
        return [timed_count // rounds + (1 if index < timed_count % rounds else 0) for index in range(rounds)]

    def _timed_round(self, worker: Worker, reference_worker: Worker, warm: dict, count: int,
                     eager_round: Callable[[], dict] | None = None, eager_first: bool = True) -> tuple[dict, dict]:
        """One round of the candidate's timed calls, with `eager_round` where given right before
        them (`eager_first`) or right after: (reply, audit). A timed request the evaluator's own
        view does not account for is timed again, on fresh sets, before it is a verdict: on the
        GPU work of other processes (another evaluation's staging, a new worker's CUDA context)
        can stall the loop around the calls (#44: 11 of 13 honest level-2 identity pairs at 16
        workers on the H200). A clock the candidate changed is caught on every attempt. The eager
        round kept is the one beside the attempt kept."""
        timing = self.config.timing_config
        eager_replies: list[dict] = []
        beside = (lambda: eager_replies.append(eager_round())) if eager_round is not None else None
        around = {"before_time": beside} if eager_first else {"after_time": beside}
        for attempt in range(1, timing.unaccounted_attempts + 1):
            reply, audit, _, _, unaccounted = self._timed_request(worker, reference_worker, warm, count, **around)
            if unaccounted is None or attempt == timing.unaccounted_attempts:
                break
            self.result.env.setdefault("timed_again", []).append(unaccounted.detail[:300])
        if unaccounted is not None:
            self._add_violations([unaccounted])
        if eager_replies:
            self._interleaved.append(eager_replies[-1])
        return reply, audit

    def _eager_round(self, reference_worker: Worker, count: int, round_ms: float) -> dict:
        """The eager baseline's round, under the settings the candidate was timed under: `count`
        calls, fewer where eager is slower, so that its round takes about the candidate's
        `round_ms` (a candidate 10x faster must not make eager's rounds take ten times as long);
        _time_baselines pools them, _paired_rounds pairs them. Run inside the candidate's hold of
        the timing lock, right before or right after its timed calls (_timed_request's
        `before_time` and `after_time`, alternating round by round), on the reserved cores: the
        H100 machine's host runs a launch-bound call at one of two speeds for a second or so at a
        time, and an eager round timed after the candidate's audit and the next round's fresh
        sets began 0.4-0.7 s after the candidate's round alone and 3-5 s after it in a batch
        (2026-11-27, twelfth session: the rounds' start times), often at the other speed. Always
        first in the hold, eager met the host as the pause before it left it: on the CPU box its
        first calls of each round ran slow (conv3x3_relu 30-33 ms, then 23-24), so the side that
        goes first alternates (docs/timing.md, "Candidate and eager in rounds")."""
        indices = self._warm_positions()
        settings = self.result.backend_settings["candidate"]
        with host_quiet.timed_hold(self.device, pid=reference_worker.process.pid):
            return self._phase("baselines", lambda: reference_worker.request(
                ("baseline", "eager", indices, settings, count, round_ms, not self._interleaved, True),
                self.config.reference_timeout_s),
                worker=reference_worker, problem_side=True, record=False)

    def _timed_request(self, worker: Worker, reference_worker: Worker, warm: dict, timed_count: int,
                       before_time: Callable[[], None] | None = None,
                       after_time: Callable[[], None] | None = None) -> tuple:
        """One timed request on fresh sets, its audit and its checks: (reply, audit, timed sets,
        audited sets, the timing_unaccounted violation or None, not yet added). `before_time`
        runs in the same hold of the timing lock, just before the candidate's timed calls;
        `after_time` just after them (once the idle watch has read the worker, before its audit)."""
        timing = self.config.timing_config
        fresh = self._fresh_sets(reference_worker, timed_count + self._audited_count())
        timed_sets, audited_sets = fresh[:timed_count], fresh[timed_count:]
        # Untimed work on the device (held on the worker's behalf): never beside another timing.
        with device_work(self.device):
            staged = worker.request(("stage", [_for_candidate(s) for s in timed_sets]), self.config.run_timeout_s)["staged"]
        with self._timing_lock("the candidate", worker):
            cost = self._loop_cost(reference_worker, bool(warm["launch_overlapped"]), bool(staged), timed_count)
            if before_time is not None:
                before_time()
            before = outside_view.snapshot(self._serving_pid)
            sent = time.perf_counter_ns()
            reply = worker.request(("time",), self.config.run_timeout_s)
            received = time.perf_counter_ns()
            after = outside_view.snapshot(self._serving_pid)
            time.sleep(timing.idle_watch_ms / 1000)  # the worker idle: what its own threads do meanwhile
            idle = outside_view.snapshot(self._serving_pid)
            if after_time is not None:
                after_time()
            audit = worker.request(("audit", [_for_candidate(s) for s in audited_sets]), self.config.run_timeout_s)
        self._add_violations(reply["violations"] + audit["findings"])
        self._note_precision(audit["precision"])
        self._note_backend_settings(audit["backend_settings"])
        unaccounted = self._account_for_timed_calls(reply, timed_count, (sent, received), before, after, cost)
        self._note_timed_loop(staged, timed_count, reply, audit, (sent, received))
        if self._harness_threads is not None:
            self._add_violations([violation for violation in [outside_view.idle_threads_violation(
                after, idle, self._harness_threads, timing.idle_watch_ms, timing.idle_thread_slack_ms)] if violation])
        if not self.result.stateful_reference:  # answers that depend on the calls before (_note_stateful_reference)
            self._check_timed_outputs("timed", timed_sets, audit["timed_outputs"])
            self._check_timed_outputs("audited", audited_sets, audit["audited_outputs"])
        return reply, audit, timed_sets, audited_sets, unaccounted

    def _loop_cost(self, reference_worker: Worker, overlap: bool, staged: bool, calls: int) -> outside_view.LoopCost | None:
        """What the timed loop costs around its calls, on the reference's worker (no candidate code
        there), timed by this process's clock; the caller holds the timing lock. None where the
        check is off."""
        timing = self.config.timing_config
        if timing.unaccounted_factor is None:
            return None
        count = max(2, min(calls, timing.loop_cost_calls))
        # On the reserved cores as the candidate's loop will be (host_quiet.py): on the untimed
        # ones, beside the run's builds, the loop would cost more than it does for the candidate.
        with host_quiet.timed_hold(self.device, pid=reference_worker.process.pid):
            sent = time.perf_counter_ns()
            measured = self._phase("reference", lambda: reference_worker.request(
                ("calibrate", overlap, staged, count), self.config.reference_timeout_s),
                worker=reference_worker, problem_side=True, record=False)
            received = time.perf_counter_ns()
        if "unmeasured" in measured:
            self._add_warnings([Violation(outside_view.UNACCOUNTED, f"not checked: {measured['unmeasured']}")])
            return None
        self._calibration_steps = {"calls": count, "steps_ms": measured.get("steps_ms")}
        if self.device == "cpu":
            return outside_view.cpu_loop_cost(measured["loop_cpu_ns"], count)
        return outside_view.wall_loop_cost((sent + measured["setup_ns"], received), measured["samples_ms"],
                                           measured["stamps_ns"], measured.get("loop_end_ns"))

    def _note_timed_loop(self, staged: bool, calls: int, reply: dict, audit: dict, window: tuple[int, int]) -> None:
        """Where the loop around the timed calls spent its time, step by step, by the candidate's
        worker and by the reference's calibration loop (Result.env["timed_loop"], one entry per
        timed request), with the worker's account of its handler (its span against this
        process's window: before_handler_ms, after_handler_ms; its thread's CPU; the garbage
        collections in it and after it): for diagnosing a timing_unaccounted verdict, never
        part of one (the candidate's worker can write anything in its own account)."""
        calibration = self._calibration_steps or {}
        entry = {"staged": staged, "calls": calls, "calibration_calls": calibration.get("calls"),
                 "candidate_steps_ms": _step_times(reply.get("steps_ms")),
                 "calibration_steps_ms": _step_times(calibration.get("steps_ms"))}
        handler = reply.get("handler")
        if isinstance(handler, dict):
            span = handler.get("span_ns")
            if isinstance(span, list) and len(span) == 2 and all(type(value) is int for value in span):
                entry["before_handler_ms"] = round((span[0] - window[0]) / 1e6, 4)
                entry["after_handler_ms"] = round((window[1] - span[1]) / 1e6, 4)
            entry["handler_cpu_ms"] = _step_times({"cpu": handler.get("cpu_ms")}).get("cpu")
            entry["handler_gc"] = _step_times(handler.get("gc"))
        after_time = audit.get("after_time")
        if isinstance(after_time, dict):
            entry["after_time"] = _step_times({key: value for key, value in after_time.items() if key != "gc"})
            entry["after_time_gc"] = _step_times(after_time.get("gc"))
        self._calibration_steps = None
        self.result.env.setdefault("timed_loop", []).append(entry)

    def _account_for_timed_calls(self, reply: dict, calls: int, window: tuple[int, int], before: outside_view.Snapshot,
                                 after: outside_view.Snapshot, cost: outside_view.LoopCost | None) -> Violation | None:
        """The worker's account of its timed calls held against this process's own view of them
        (outside_view.py): its clock readings, the time outside its samples, and the CPU of
        threads the candidate started (Result.timed_request). The time outside its samples is
        returned (the violation or None), for the caller to time again first."""
        timing = self.config.timing_config
        samples, stamps = reply["samples_ms"], reply["stamps_ns"]
        problem = outside_view.stamps_problem(window, calls, samples, stamps, self.device)
        if problem is not None:
            self._add_violations([Violation(outside_view.UNACCOUNTED, problem)])
            self._fail("violation", f"{outside_view.UNACCOUNTED}: {problem}")
        new_threads_ms, violation = 0.0, None
        if self._harness_threads is not None:
            new_threads_ms, violation = outside_view.new_threads_violation(
                before, after, self._harness_threads, sum(end - start for start, end in stamps), len(samples),
                timing.new_thread_slack_ms, timing.new_thread_slack_per_call_ms)
        found = outside_view.account(self.device, window, before, after, samples, cost or outside_view.LoopCost(0.0, 0.0),
                                     timing.unaccounted_factor or 0.0, timing.unaccounted_slack_ms)
        found.new_threads_cpu_ms = new_threads_ms
        self.result.timed_request = found.rounded()
        if violation is not None:
            self._add_violations([violation])
        return outside_view.unaccounted_violation(found, self.device) if cost is not None else None

    def _check_timed_outputs(self, label: str, fresh_sets: list[dict], outputs: list[list]) -> None:
        """Every checked call is judged on the values it produced (copied right after it)."""
        for index, (fresh, output) in enumerate(zip(fresh_sets, outputs, strict=True)):
            with self._profiled("compare"):
                verdict = judge_checked_call(f"{label} call {index} of {len(fresh_sets)}", fresh["outputs"],
                                             as_output_list(output), self.config.tolerances(),
                                             self.config.timing_config)
            if verdict is not None and verdict.rule == "numerical_difference":
                self._add_warnings([verdict])
            elif verdict is not None:
                self._add_violations([verdict])
                return

    def _check_busy_time(self, bare_median_ms: float, busy_ms: float | None) -> None:
        """GPU: bare timed calls cannot finish before their kernels have run. The bound is the
        profiled calls' busy time (union of kernel intervals), not their span: under the audit
        and the profiler a forward of many small launches has long gaps between kernels."""
        bound = self.config.timing_config.inconsistent_busy_fraction * (busy_ms or 0.0)
        if busy_ms and bare_median_ms < bound:
            self._add_violations([Violation(
                "timing_inconsistent", f"timed calls took {bare_median_ms:.4f} ms, less than the {busy_ms:.4f} ms "
                "its kernels kept the GPU busy when profiled: another code path runs when unwatched")])

    def _check_watched_time(self, bare_median_ms: float, reply: dict) -> None:
        """CPU (no profiler): bare calls against the audited calls' time, less the most the watch
        can cost for the operators and Python calls it saw in them."""
        violation = watched_time_violation(bare_median_ms, reply["audited_ms"], reply["audited_operators"],
                                           reply["audited_python_calls"], self.config.timing_config)
        if violation is not None:
            self._add_violations([violation])

    def _check_kernels(self, reply: dict) -> None:
        foreign = foreign_kernels(reply["kernel_names"], reply["own_kernel_names"], self.policy)
        for kernel in foreign:
            self._add_violations([Violation("foreign_kernel", f"kernel {kernel[:160]} is not the candidate's own")])
        own_ran = any(kernel not in foreign and not _is_allocation_kernel(kernel) for kernel in reply["kernel_names"])
        if self.policy.require_own_kernel and reply["kernel_names"] and not own_ran:
            self._add_violations([Violation("no_custom_kernel", "no kernel of the candidate's own ran in forward")])

    def _note_backend_settings(self, timed_under: dict) -> None:
        """The settings the candidate was timed under, which the baselines are timed under too;
        any it changed from the run's are named."""
        settings = self.result.backend_settings
        settings["candidate"] = timed_under
        changed = diff(BackendSettings(settings["configured"]), BackendSettings(timed_under))
        if changed:
            self._add_warnings([Violation("backend_settings_changed", "; ".join(changed)
                                          + "; the baselines are timed under them too")])

    def _time_baselines(self, worker: Worker) -> None:
        """Each baseline under the settings the candidate was timed under (cached by them,
        measured on first need), re-measured while its spread is too wide to divide by."""
        cache = BaselineCache(self.config.cache_dir)
        timing = self.config.timing_config
        # The spread bound comes from the GPU; on the CPU it is its own, or none (config.py).
        spread_bound = timing.unstable_spread if self.device == "cuda" else timing.cpu_unstable_spread
        spread_rules = dataclasses.replace(timing, unstable_spread=spread_bound or 0.0)
        indices = self._warm_positions()
        settings = self.result.backend_settings["candidate"]

        def stats_of(mode: str, replies: list[dict]) -> TimingStats:
            for reply in replies:
                if reply["backend_settings"] != settings:
                    unreached = diff(BackendSettings(settings), BackendSettings(reply["backend_settings"]))
                    self._add_warnings([Violation("backend_settings_changed", f"the {mode} baseline could not be "
                                                  f"timed under the candidate's settings: {'; '.join(unreached)}")])
                if not self._note_quiet(f"the {mode} baseline", reply.get("quiet", True), reply.get("beside", "")):
                    beside_other_work.add(mode)
            samples = [sample for reply in replies for sample in reply["samples_ms"]]
            return TimingStats.from_samples(samples, replies[0]["device_ms"], replies[0].get("launch_overlapped"))

        def measure(mode: str) -> TimingStats:
            with self._next_worker_paused(f"the {mode} baseline"):
                reply = worker.request(("baseline", mode, indices, settings), self.config.reference_timeout_s)
            return stats_of(mode, [reply])

        beside_other_work: set[str] = set()  # not cached: the next evaluation measures it again
        # A candidate whose speedups divide lower deciles (_speedups): every baseline's
        # steadiness is then judged there too (baseline_spread.relative_spread).
        in_rounds = self._reads_lower_deciles()
        for mode in self.config.baselines:
            if mode == "eager" and self._interleaved:
                # Timed in rounds between the candidate's (_eager_round): this evaluation's own,
                # neither read from the cache nor written to it.
                stats = self.result.timing[mode] = stats_of(mode, self._interleaved)
                warning = unstable_warning(mode, stats, spread_rules, in_rounds) if spread_bound is not None else None
                if warning:
                    self._add_warnings([warning])
                continue
            key = cache.key(self.problem, self.device, mode, timing, self.config.convention, settings)
            with cache.lock(key):
                stats = cache.get(key)
                self.result.warnings += [Violation("baseline_cache", reason) for reason in cache.rejected]
                cache.rejected.clear()
                if stats is None:
                    stats = (steadiest(lambda mode=mode: measure(mode), spread_rules, in_rounds)
                             if spread_bound is not None else measure(mode))
                    if mode not in beside_other_work:
                        cache.put(key, stats, self.problem, self.device, mode, settings)
            self.result.timing[mode] = stats
            warning = unstable_warning(mode, stats, spread_rules, in_rounds) if spread_bound is not None else None
            if warning:
                self._add_warnings([warning])

    # -- verdict --------------------------------------------------------------------------------

    def _add_violations(self, violations: list[Violation]) -> None:
        for violation in violations:
            if self._as_the_reference_does(violation):
                self._add_warnings([Violation(REFERENCE_HOST_TRANSFER, f"{violation.detail}, as the problem's "
                                              "own reference does in its forward")])
                continue
            if violation not in self.result.violations:
                self.result.violations.append(violation)

    def _note_quiet(self, who: str, quiet: bool, beside: str = "") -> bool:
        """A timing waits for other untimed work on the device (TimingConfig.quiet_wait_s; this
        run's or another run's on the same host: they share its devices); when that did not end
        in time the timing went ahead beside it, and the Result says whose work it was
        (locks.DeviceHold.beside) and what to do."""
        if quiet:
            return True
        self._add_warnings([Violation(
            "timed_beside_other_work", f"{who} was timed beside other untimed work still on the device after "
            f"{self.config.timing_config.quiet_wait_s:.0f} s, so its time may be too long: "
            f"{beside or 'whose work it was is not known'}")])
        return False

    def _as_the_reference_does(self, violation: Violation) -> bool:
        """A host transfer the problem's own reference makes (worker.audited_reference), where
        the policy allows PyTorch's glue: the candidate copies what the problem does (its
        reference moves a tensor attribute through the host), not a computation of its own on
        the host. The strict policy keeps every one."""
        return (violation.rule == "host_compute" and self.policy.allow_torch_compute
                and without_call_site(violation.detail) in self.reference_host_transfers)

    def _add_warnings(self, warnings: list[Violation]) -> None:
        for warning in warnings:
            if warning not in self.result.warnings:
                self.result.warnings.append(warning)

    def _note_precision(self, signs: list[str]) -> None:
        """Lower precision is always reported; the strict policy also rejects it."""
        for sign in signs:
            if sign not in self.result.precision:
                self.result.precision.append(sign)
                if self.policy.reject_lower_precision:
                    self._add_violations([Violation("lower_precision", sign)])

    def _confirm_static(self, static: list[Violation]) -> None:
        """A static finding that a run-time check confirmed is a violation; the rest warn."""
        confirmed_rules = {v.rule for v in self.result.violations}
        for finding in static:
            if finding.rule in confirmed_rules:
                self._add_violations([finding])
            elif finding not in self.result.warnings:
                self.result.warnings.append(finding)

    def _ok_so_far(self) -> bool:
        return self.result.correct and not self.result.violations

    def _finish_status(self) -> None:
        if self.result.violations:
            self.result.status = "violation"
            self.result.error = f"{self.result.violations[0].rule}: {self.result.violations[0].detail}"
        elif not self.result.correct:
            failing = next(trial for trial in self.result.trials if not trial.correct)
            if failing.index in self.result.nondeterministic_trials:
                self.result.status = "nondeterministic_reference"
                why = self._unrepeatable.get(failing.index, {})
                if why.get("cause") == "settings":
                    self.result.error = (
                        f"trial {failing.index}: {failing.error}; the reference itself, run under the run's backend "
                        f"settings ({'; '.join(why['settings'])}) as the candidate is, gives another answer than at "
                        "full fp32 (it is that sensitive to rounding), so this trial cannot judge the candidate; "
                        "--backend strict-fp32 runs both at full fp32")
                else:
                    self.result.error = (f"trial {failing.index}: {failing.error}; the reference itself gives another "
                                         "answer under the same seed, so this trial cannot judge the candidate")
            else:
                self.result.status = "incorrect"
                self.result.error = f"trial {failing.index}: {failing.error}"
        else:
            self.result.status = "passed"

    def _paired_rounds(self) -> list[dict]:
        """Each round's candidate median beside the eager round timed next to it, where
        there were several (TimingConfig.timing_rounds, host_bound_rounds). The host running a
        launch-bound call switches between two speeds (1.3-2x apart) within a fraction of a
        second on the H100 machine (docs/timing.md, "Host-bound calls"): a round's median is
        the fast or the slow one, whichever side it is. Their medians then say which speed each
        side met most; the lower deciles, over rounds that met both, say how fast each runs on
        the fast host (_speedups; how the three read on level 3's identity candidates: docs/timing.md,
        "Candidate and eager in rounds")."""
        eager_rounds = self._interleaved or []
        if len(self._candidate_rounds) < 2 or len(eager_rounds) != len(self._candidate_rounds):
            return []
        # Each round's samples too: what another estimator would read can be computed from the
        # results file, without the device (experiments/identity_speed.py's report); and when
        # each call began (ms on the host's monotonic clock after the rounds' first call), to
        # tell whether the host's speed is a matter of the moment or of the process. The
        # candidate's own are its worker's readings: for diagnosis, never in a verdict.
        starts = self._candidate_round_starts + [[]] * (len(eager_rounds) - len(self._candidate_round_starts))
        every_start = [stamp for stamps in starts for stamp in stamps] + \
            [stamp for eager in eager_rounds for stamp in eager.get("started_ns", [])]
        origin = min(every_start, default=None)

        def since_origin(stamps: list[int]) -> list[float]:
            return [round((stamp - origin) / 1e6, 3) for stamp in stamps] if origin is not None else []

        return [{"candidate_ms": statistics.median(candidate), "eager_ms": statistics.median(eager["samples_ms"]),
                 "candidate_samples_ms": [round(sample, 6) for sample in candidate],
                 "eager_samples_ms": [round(sample, 6) for sample in eager["samples_ms"]],
                 "candidate_started_ms": since_origin(started),
                 "eager_started_ms": since_origin(eager.get("started_ns", []))}
                for candidate, started, eager in zip(self._candidate_rounds, starts, eager_rounds, strict=True)]

    def _check_tampering(self) -> None:
        """Protected workspace files must equal their originals, before and after the run."""
        for path, digest in self.protected_hashes.items():
            if not path.exists() or file_hash(path) != digest:
                self.result.violations.append(Violation("tampering", f"protected file {path.name} differs from the original"))
                self.result.status = "violation"
                self.result.error = f"tampering: protected file {path.name} differs from the original"

    def _speedups(self) -> None:
        result = self.result
        candidate = result.timing.get("candidate")
        if not result.passed or candidate is None:
            return
        result.timing_rounds = self._paired_rounds()

        def over_candidate(mode: str) -> float:
            """The baseline's time over the candidate's: their medians, or where the candidate
            was timed in rounds (a host-bound call) their lower deciles, for every baseline
            alike (_paired_rounds says why; _reads_lower_deciles where not)."""
            baseline = result.timing[mode]
            if self._reads_lower_deciles() and result.timing_rounds and baseline.fast_ms and candidate.fast_ms:
                return baseline.fast_ms / candidate.fast_ms
            return baseline.median_ms / candidate.median_ms

        if "eager" in result.timing:
            result.speedup_vs_eager = over_candidate("eager")
        if "compile" in result.timing:
            result.speedup_vs_compile = over_candidate("compile")
        measured = [s for s in (result.speedup_vs_eager, result.speedup_vs_compile) if s is not None]
        best = max(measured, default=None)
        if best is not None and best > self.config.plausible_speedup:
            result.warnings.append(Violation(
                "implausible_speedup", f"{best:.1f}x exceeds the plausibility bound of "
                f"{self.config.plausible_speedup:g}x; confirm by review before trusting it"))


OUTPUT_UNREADABLE = "an output could not be read (see violations)"
# A warning, not a violation: the candidate's host transfer is one its problem's reference makes.
REFERENCE_HOST_TRANSFER = "host_transfer_as_reference"


class _Stop(Exception):
    """Ends the evaluation early; the Result already says why."""


def start_candidate_worker(candidate: Candidate, config: EvalConfig, device: str,
                           profile: dict | None = None) -> tuple[Worker, Sandbox]:
    """A candidate's worker in its own sandbox: it confines itself, reports, and builds."""
    extensions_dir = candidate.extensions_dir(config.cache_dir)
    spec = {
        "candidate": {
            # Absolute: the sandboxed worker runs in its scratch directory.
            "path": str(candidate.path.resolve()),
            "model_file": str(candidate.model_file.resolve()),
            "workspace": candidate.workspace,
        },
        "device": device,
        "config": config.to_dict(),
        "extensions_dir": str(extensions_dir.resolve()),
        # Read-only for the candidate: only prepare_pch, here in the parent, writes there.
        "pch_dir": str(pch_dir(config.cache_dir)) if config.fast_build else None,
    }
    readable = [(candidate.path if candidate.workspace else candidate.model_file).resolve()]
    if config.fast_build:  # the shared precompiled headers: read-only to the candidate
        readable.append(pch_dir(config.cache_dir).resolve())
    started = time.perf_counter()
    sandbox = Sandbox.create(extensions_dir, readable, config.sandbox_limits, config.memory_cap_gb)
    if profile is not None:
        StepSeconds(profile).add("parent.sandbox", time.perf_counter() - started)
    spec["sandbox"] = sandbox.spec(config.sandbox, config.require_sandbox)
    env = {"TORCH_EXTENSIONS_DIR": str(sandbox.build_dir), **sandbox.env()}
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"  # Triton kernels run under Triton's interpreter on the CPU
    try:
        worker = Worker(candidate_main, spec, config.memory_cap_gb, env=env,
                        runs_candidate_code=True, reply_keys=CANDIDATE_REPLY_KEYS)
    except BaseException:
        sandbox.close()
        raise
    return worker, sandbox


def start_ahead_worker(problem: Path, candidate_path: Path, config: EvalConfig) -> StartedWorker | None:
    """The announced next pair's candidate worker (start_ahead.py), or None where its evaluation
    would stop before starting one (a file that is not a problem or candidate, no GPU)."""
    try:
        problem, candidate, device = checked_pair(problem, candidate_path, config)
        # Before its code runs: what the evaluation checks its workspace files against.
        protected = candidate.protected_hashes(problem)
        key = started_worker_key(problem, candidate, device, config)
    except (BadFileError, OSError):
        return None
    worker, sandbox = start_candidate_worker(candidate, config, device)
    if config.fast_build:
        start_pch(candidate, config.cache_dir, device)
    return StartedWorker(key, worker, sandbox, protected)


def judge_checked_call(label: str, expected: list, actual: list, tolerances: dict, timing) -> Violation | None:
    """None when right. Wrong beyond a numerical difference: `timed_output` (work skipped,
    cached or changed when timed). A few elements just outside tolerance (at most
    `numerical_max_fraction` of them, all within `numerical_tolerance_factor` times it):
    `numerical_difference`, a warning, since one more trial can land there honestly."""
    check = compare_outputs(0, expected, actual, tolerances)
    if check.correct:
        return None
    loose = compare_outputs(0, expected, actual, scaled(tolerances, timing.numerical_tolerance_factor))
    few = bool(check.numel) and check.mismatches <= max(1, timing.numerical_max_fraction * check.numel)
    if loose.correct and few:
        return Violation("numerical_difference", f"{label}: {check.error}; within {timing.numerical_tolerance_factor:g}x "
                         "the tolerance, a numerical difference, not skipped work")
    return Violation("timed_output", f"{label} returned a wrong result ({check.error}): work skipped, cached or "
                     "changed when timed")


def watched_time_violation(bare_median_ms: float, audited_ms: list[float], operators: float,
                           python_calls: float, timing) -> Violation | None:
    """timing_inconsistent on the CPU: bare calls faster than `cpu_inconsistent_fraction` of the
    watched calls' time less a bound on what the watch costs (config.py says why so loose)."""
    if not audited_ms or timing.cpu_inconsistent_fraction is None:
        return None
    watched_ms = statistics.median(audited_ms)
    watch_cost_ms = operators * timing.cpu_audit_ms_per_op + python_calls * timing.cpu_audit_ms_per_call
    unwatched_work_ms = watched_ms - watch_cost_ms
    if unwatched_work_ms > 0 and bare_median_ms < timing.cpu_inconsistent_fraction * unwatched_work_ms:
        return Violation("timing_inconsistent", f"timed calls took {bare_median_ms:.4f} ms; watched calls took "
                         f"{watched_ms:.4f} ms, of which at most {watch_cost_ms:.4f} ms was the watch: another "
                         "code path runs when unwatched")
    return None


def _step_times(steps: object) -> dict[str, float] | None:
    """A worker's step times (timed_calls' steps_ms) as numbers, or None where it sent none."""
    if not isinstance(steps, dict):
        return None
    return {str(step)[:40]: round(float(ms), 4) for step, ms in list(steps.items())[:16]
            if type(ms) in (int, float) and math.isfinite(ms)}


def _for_candidate(fresh_set: dict) -> dict:
    """What the candidate gets of a fresh set: its inputs and seed, never the reference's answer."""
    return {"inputs": fresh_set["inputs"], "seed": fresh_set["seed"]}


def _set_bytes(content_set: dict) -> int:
    """Host bytes one fresh set takes: its inputs and the reference's outputs for them."""
    return trees.nbytes(content_set["inputs"]) + sum(_nbytes(content_set["outputs"]))


def _nbytes(outputs: list) -> list[int]:
    return [t.numel() * t.element_size() for t in outputs if isinstance(t, torch.Tensor)]


def _same_input(before: object, after: object) -> bool:
    """The same containers holding tensors of the same values (an input's other values are not
    judged: the candidate's changes to them stay in its own process)."""
    return trees.same_structure(before, after) and all(
        same_values(was, now) for was, now in zip(trees.tensors(before), trees.tensors(after), strict=True))


def _is_allocation_kernel(kernel: str) -> bool:
    from .rules.rules import ALLOWED_TORCH_KERNELS

    return bool(ALLOWED_TORCH_KERNELS.search(kernel))

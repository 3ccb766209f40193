"""`evaluate(problem, candidate, config) -> Result`: the one path from files to a verdict.

The parent (this process) spawns two workers: the reference's (imports the problem, draws the
inputs, computes the expected outputs, times the baselines) and the candidate's (builds and runs
the candidate). Tensors travel between them through this process; the comparison and the verdict
happen here, where the candidate's code never runs.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from .baseline_cache import BaselineCache
from .channel import Worker, WorkerDied, WorkerFailure, WorkerTimeout
from .compare import as_output_list, compare_outputs
from .config import EvalConfig
from .envinfo import collect_env
from .fast_build import pch_dir, prepare_pch
from .files import BadFileError, Candidate, check_candidate, check_problem, file_hash
from .provenance import foreign_kernels
from .result import Result, TimingStats, Violation
from .reward import milestone_reward
from .rules import get_policy
from .static_scan import scan_candidate
from .worker import candidate_main, reference_main


class ProblemError(BadFileError):
    """The problem file itself fails to run: no candidate can be judged against it."""


def evaluate(problem: str | Path, candidate: str | Path, config: EvalConfig | None = None) -> Result:
    config = config or EvalConfig()
    problem_path = check_problem(problem)
    found = check_candidate(candidate)
    device = config.resolved_device()
    if device == "cuda" and not torch.cuda.is_available():
        raise BadFileError("--device cuda asked for, but no CUDA GPU is visible; use --device cpu")
    return Evaluation(problem_path, found, config, device).run()


class Evaluation:
    def __init__(self, problem: Path, candidate: Candidate, config: EvalConfig, device: str):
        self.problem = problem
        self.candidate = candidate
        self.config = config
        self.device = device
        self.policy = get_policy(config.policy)
        self.result = Result(str(problem), str(candidate.path), device=device, env=collect_env(device))
        self.extensions_dir = candidate.extensions_dir(config.cache_dir)
        self.protected_hashes = candidate.protected_hashes(problem)

    # -- orchestration --------------------------------------------------------------------------

    def run(self) -> Result:
        result = self.result
        static = scan_candidate(self.candidate)
        candidate_worker = reference_worker = None
        try:
            reference_worker = self._spawn_reference()
            if self.config.fast_build:
                prepare_pch(self.candidate, self.config.cache_dir, self.device)
            candidate_worker = self._spawn_candidate()  # builds while the reference computes
            reference = self._phase("reference", lambda: reference_worker.request(
                ("prepare", self._set_count()), self.config.run_timeout_s), worker=reference_worker,
                problem_side=True)
            self._phase("build", lambda: candidate_worker.receive(self.config.build_timeout_s))
            self._phase("construct", lambda: candidate_worker.request(
                ("construct", reference["init_inputs"], reference["state_dict"]), self.config.run_timeout_s))
            trial_sets = reference["sets"][: self.config.trials]
            self._phase("correctness", lambda: self._check_trials(candidate_worker, trial_sets))
            self._confirm_static(static)
            if self._ok_so_far() and self.config.timing:
                timing_sets = reference["sets"][self.config.trials:]
                self._phase("timing", lambda: self._time_candidate(candidate_worker, timing_sets))
                candidate_worker.close()  # free its GPU memory before the baselines run
                candidate_worker = None
                if self._ok_so_far():
                    self._phase("baselines", lambda: self._time_baselines(reference_worker),
                                worker=reference_worker, problem_side=True)
            self._finish_status()
        except _Stop:
            pass
        finally:
            if candidate_worker is not None:
                result.log = candidate_worker.log_tail()
                candidate_worker.close()
            if reference_worker is not None:
                reference_worker.close()
            self._check_tampering()
        result.passed = result.status == "passed"
        self._speedups()
        result.reward = milestone_reward(result, self.config.reward)
        return result

    def _phase(self, name: str, action, worker: Worker | None = None, problem_side: bool = False):
        started = time.perf_counter()
        try:
            return action()
        except WorkerFailure as failure:
            if problem_side:
                raise ProblemError(f"{self.problem}: the reference failed in {failure}") from None
            if failure.error_type in ("SystemExit", "KeyboardInterrupt"):
                self._fail("crashed", f"the candidate called exit during {failure.phase}: {failure.message}")
            status = "build_error" if failure.phase == "build" else "runtime_error"
            self._fail(status, f"{failure.phase} failed: {failure.error_type}: {failure.message}")
        except WorkerTimeout as timeout:
            if problem_side:
                raise ProblemError(f"{self.problem}: the reference timed out ({timeout})") from None
            self._fail("timeout", f"{name}: {timeout}")
        except WorkerDied as death:
            if problem_side:
                log = worker.log_tail(1500) if worker else ""
                raise ProblemError(f"{self.problem}: the reference process died ({death})\n{log}") from None
            self._fail("crashed", f"{name}: {death}")
        finally:
            self.result.phase_seconds[name] = round(time.perf_counter() - started, 4)

    def _fail(self, status: str, error: str):
        self.result.status = status
        self.result.error = error.strip().splitlines()[-1] if status != "build_error" else error.strip()[:2000]
        raise _Stop

    def _set_count(self) -> int:
        rotating = self.config.timing_config.rotating_inputs if self.config.timing else 0
        return self.config.trials + rotating

    def _spawn_reference(self) -> Worker:
        spec = {"problem": str(self.problem), "device": self.device, "config": self.config.to_dict()}
        return Worker(reference_main, spec, self.config.memory_cap_gb)

    def _spawn_candidate(self) -> Worker:
        spec = {
            "candidate": {
                "path": str(self.candidate.path),
                "model_file": str(self.candidate.model_file),
                "workspace": self.candidate.workspace,
            },
            "device": self.device,
            "config": self.config.to_dict(),
            "extensions_dir": str(self.extensions_dir),
            # Read-only for the candidate: only prepare_pch, here in the parent, writes there.
            "pch_dir": str(pch_dir(self.config.cache_dir)) if self.config.fast_build else None,
        }
        env = {"TORCH_EXTENSIONS_DIR": str(self.extensions_dir)}
        if self.device == "cpu":
            env["TRITON_INTERPRET"] = "1"  # Triton kernels run under Triton's interpreter on the CPU
        return Worker(candidate_main, spec, self.config.memory_cap_gb, env=env)

    # -- correctness ----------------------------------------------------------------------------

    def _check_trials(self, worker: Worker, trial_sets: list[dict]) -> None:
        tolerances = self.config.tolerances()
        for index, trial_set in enumerate(trial_sets):
            # A private copy: tensors cross the pipe in shared memory, so what the candidate writes
            # into its inputs would otherwise also change the pristine copy kept here.
            candidate_inputs = [t.clone() if isinstance(t, torch.Tensor) else t for t in trial_set["inputs"]]
            reply = worker.request(("forward", candidate_inputs, _nbytes(trial_set["outputs"])),
                                   self.config.run_timeout_s)
            self._add_violations(reply["violations"] + reply["findings"])
            self._note_precision(reply["precision"])
            for position, (before, after) in enumerate(zip(trial_set["inputs"], reply["inputs_after"], strict=True)):
                if isinstance(before, torch.Tensor) and not _same_values(before, after):
                    self._add_violations([Violation("input_mutation", f"forward changed input {position}")])
            outputs = reply["outputs"]
            trial = compare_outputs(index, trial_set["outputs"], outputs, tolerances)
            if None in outputs:
                trial.correct, trial.error = False, "an output could not be read (see violations)"
            self.result.trials.append(trial)
        self.result.correct = all(trial.correct for trial in self.result.trials)

    # -- timing ---------------------------------------------------------------------------------

    def _time_candidate(self, worker: Worker, timing_sets: list[dict]) -> None:
        private_sets = [[t.clone() if isinstance(t, torch.Tensor) else t for t in s["inputs"]] for s in timing_sets]
        reply = worker.request(("time", private_sets), self.config.run_timeout_s)
        self._add_violations(reply["findings"])
        self._note_precision(reply["precision"])
        self.result.kernels = reply["kernel_names"]
        for label, outputs in (("timed", reply["final_outputs"]), ("audited", reply["audited_outputs"])):
            for index, (timing_set, output) in enumerate(zip(timing_sets, outputs, strict=True)):
                check = compare_outputs(index, timing_set["outputs"], as_output_list(output), self.config.tolerances())
                if not check.correct:
                    self._add_violations([Violation(
                        "timed_output", f"a {label} call returned a wrong result ({check.error}): "
                        "work skipped, cached or changed when timed")])
                    break
        stats = TimingStats.from_samples(reply["samples_ms"], reply["device_ms"], reply.get("launch_overlapped"))
        self.result.timing["candidate"] = stats
        if self.device == "cuda":
            self._check_kernels(reply)
            span = reply["device_span_ms"]
            # Bare timed calls cannot finish before the kernels they launch: faster than the
            # kernels seen while watched means another code path runs when nobody watches.
            if span and stats.median_ms < 0.8 * span:
                self._add_violations([Violation(
                    "timing_inconsistent", f"timed calls took {stats.median_ms:.4f} ms, less than the "
                    f"{span:.4f} ms its kernels span when profiled")])

    def _check_kernels(self, reply: dict) -> None:
        foreign = foreign_kernels(reply["kernel_names"], reply["own_kernel_names"], self.policy)
        for kernel in foreign:
            self._add_violations([Violation("foreign_kernel", f"kernel {kernel[:160]} is not the candidate's own")])
        own_ran = any(kernel not in foreign and not _is_allocation_kernel(kernel) for kernel in reply["kernel_names"])
        if self.policy.require_own_kernel and reply["kernel_names"] and not own_ran:
            self._add_violations([Violation("no_custom_kernel", "no kernel of the candidate's own ran in forward")])

    def _time_baselines(self, worker: Worker) -> None:
        cache = BaselineCache(self.config.cache_dir)
        indices = list(range(self.config.trials, self._set_count()))
        for mode in self.config.baselines:
            key = cache.key(self.problem, self.device, mode, self.config.timing_config)
            with cache.lock(key):
                stats = cache.get(key)
                if stats is None:
                    reply = worker.request(("baseline", mode, indices), self.config.run_timeout_s)
                    stats = TimingStats.from_samples(reply["samples_ms"], reply["device_ms"], reply.get("launch_overlapped"))
                    cache.put(key, stats, self.problem, self.device, mode)
            self.result.timing[mode] = stats

    # -- verdict --------------------------------------------------------------------------------

    def _add_violations(self, violations: list[Violation]) -> None:
        for violation in violations:
            if violation not in self.result.violations:
                self.result.violations.append(violation)

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
            self.result.status = "incorrect"
            self.result.error = f"trial {failing.index}: {failing.error}"
        else:
            self.result.status = "passed"

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
        if "eager" in result.timing:
            result.speedup_vs_eager = result.timing["eager"].median_ms / candidate.median_ms
        if "compile" in result.timing:
            result.speedup_vs_compile = result.timing["compile"].median_ms / candidate.median_ms
        measured = [s for s in (result.speedup_vs_eager, result.speedup_vs_compile) if s is not None]
        best = max(measured, default=None)
        if best is not None and best > self.config.plausible_speedup:
            result.warnings.append(Violation(
                "implausible_speedup", f"{best:.1f}x exceeds the plausibility bound of "
                f"{self.config.plausible_speedup:g}x; confirm by review before trusting it"))


class _Stop(Exception):
    """Ends the evaluation early; the Result already says why."""


def _same_values(before: torch.Tensor, after: torch.Tensor) -> bool:
    if type(after) is not torch.Tensor or after.shape != before.shape or after.dtype != before.dtype:
        return False
    if before.is_floating_point():
        return bool(((before == after) | (before.isnan() & after.isnan())).all())
    return bool(torch.equal(before, after))


def _nbytes(outputs: list) -> list[int]:
    return [t.numel() * t.element_size() for t in outputs if isinstance(t, torch.Tensor)]


def _is_allocation_kernel(kernel: str) -> bool:
    from .rules import ALLOWED_TORCH_KERNELS

    return bool(ALLOWED_TORCH_KERNELS.search(kernel))

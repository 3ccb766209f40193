"""What runs inside the two worker processes: the reference's and the candidate's.

The reference worker imports the problem, draws inputs under fresh `os.urandom` seeds, computes
the reference outputs and times the baselines. The candidate worker never imports the problem: it
builds and imports the candidate, receives weights and inputs as tensors, and returns outputs and
times. Neither decides a verdict; the parent compares.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
import time
import traceback
from pathlib import Path

from ..builds.fast_build import install as install_fast_build
from ..core.step_seconds import StepSeconds
from ..system import start_trace


def _fresh_seed() -> int:
    return int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1)


def setup_worker(spec: dict) -> None:
    from ..timing.host_quiet import reserved_in, untimed_worker
    from .channel import redirect_stdio

    redirect_stdio(spec["log_path"])
    os.environ.update(spec["env"])
    start_trace.mark("worker.setup", side="candidate" if "candidate" in spec else "reference")
    untimed_worker(reserved_in(spec))  # off the timed processes' cores until it times (host_quiet.py)
    keep_freed_memory()
    timing = (spec.get("config") or {}).get("timing_config") or {}
    if timing.get("cupti_teardown", True):  # read by Kineto when a profiler session ends
        os.environ.setdefault("TEARDOWN_CUPTI", "1")


# glibc's mallopt parameters (malloc.h), and the largest mmap threshold it takes on 64 bits.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD_MAX = 32 << 20


def keep_freed_memory() -> None:
    """Blocks up to 32 MiB come from the C library's heap and what is freed stays in it, in both
    workers (the reference's, which times the eager baseline, and the candidate's). By default
    glibc gives the heap's freed top back to the kernel past a threshold that moves with what
    the process did before, so the same forward faulted its output and temporaries in again at
    every timed call in one process and not in the other: conv3x3_relu's identity candidate
    timed 80-82 ms against eager's 64-65 on the CPU, its calls faulting 15720 pages each (#40).
    Larger blocks are mapped and unmapped alike in both. (Kept in the heap too, mallopt's
    M_MMAP_MAX 0, a 64 MiB output's calls stopped faulting its pages, but which freed block a
    call's output found then depended on each process's heap, and the bundled leaky ReLU's
    identity candidate timed 1.29x and 1.85x of eager in two runs: not taken.) A no-op where
    the C library has no mallopt (not glibc)."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)
    mallopt(_M_TRIM_THRESHOLD, (1 << 31) - 1)  # a C int: 2 GiB, past any heap top this keeps


def _cpu_seconds_with_children() -> float:
    """This process's CPU seconds (all its threads) and those of the children it has reaped: a
    build's ninja, and through it the compilers."""
    import resource

    own, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


def _reply_error(conn, phase: str, error: BaseException) -> None:
    detail = "".join(traceback.format_exception_only(type(error), error)).strip()
    # It starts with the type's (qualified) name, which the reply carries apart: without this
    # the verdict read "construct failed: RuntimeError: RuntimeError: ...".
    name, separator, rest = detail.partition(": ")
    if name.rsplit(".", 1)[-1] == type(error).__name__:
        detail = rest if separator else ""
    print(traceback.format_exc(), file=sys.stderr, flush=True)
    conn.send({"kind": "error", "phase": phase, "error_type": type(error).__name__, "message": detail[-3000:]})


def serve_requests(conn, handlers: dict, until: str | None = None) -> tuple | None:
    """Answer requests until ("exit",) or the pipe closes (None), or until the request named
    `until`, whose arguments are returned."""
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return None
        command, *args = request
        if command == "exit":
            return None
        if command == until:
            return tuple(args)
        try:
            reply = {"kind": command, **handlers[command](*args)}
            # The request's arguments freed before the reply goes, not when the next request
            # arrives: the timed sets of a "stage" request are gigabytes of shared memory, and
            # unmapping them ran in this thread after the "time" request came in, 36-355 ms
            # before its handler started, inside the evaluator's clock of it (#44: honest level-2
            # identity candidates flagged timing_unaccounted on the H200).
            del request, args
            conn.send(reply)
        except BaseException as error:  # SystemExit from candidate code included
            _reply_error(conn, command, error)
            if not isinstance(error, Exception):
                return None


class RequestServer:
    """A worker's side of the protocol (channel.py): each request ("name", *args) is answered by
    the method `handle_<name>`, its reply {"kind": name, **what the method returns}
    (serve_requests, which also answers an error as an "error" reply of that phase)."""

    HANDLER_PREFIX = "handle_"

    def __init__(self, conn):
        self.conn = conn

    @classmethod
    def requests(cls) -> list[str]:
        """The names of the requests this side answers."""
        return [name.removeprefix(cls.HANDLER_PREFIX) for name in dir(cls) if name.startswith(cls.HANDLER_PREFIX)]

    def handlers(self) -> dict:
        """Each request's name, with the bound method that answers it."""
        return {request: getattr(self, self.HANDLER_PREFIX + request) for request in self.requests()}

    def serve(self) -> None:
        serve_requests(self.conn, self.handlers())


def _to_device(values, device: str):
    """Each input on `device`, tensors nested in lists, tuples and dicts included."""
    from ..core.bus_copies import to_device
    from ..core.tensor_trees import map_tensors

    return [map_tensors(lambda tensor: to_device(tensor, device), value) for value in values]


def _pristine(values: list) -> list:
    """Private copies of a set's inputs for one more call (a model may write into its inputs),
    tensors nested in lists, tuples and dicts included."""
    from ..core.tensor_trees import map_tensors

    return [map_tensors(lambda tensor: tensor.clone(), value) for value in values]


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def _to_cpu(values):
    import torch

    return [v.detach().to("cpu", copy=True) if type(v) is torch.Tensor else v for v in values]


def same_as_recorded(recorded: list, outputs: list) -> bool:
    """Exactly the recorded answer (NaN meeting NaN), compared where the new outputs are: a
    wrong candidate has the reference rerun every failed trial, and on the GPU a 16M-element
    output then crosses the bus once, to the device, rather than to the host into fresh pages
    for a host comparison. False whenever not exactly equal: the caller then compares within
    the tolerance as before."""
    import torch

    from ..core.compare import same_values

    if len(recorded) != len(outputs):
        return False
    for want, got in zip(recorded, outputs, strict=True):
        if isinstance(want, torch.Tensor):
            try:
                if type(got) is not torch.Tensor or not same_values(want.to(got.device), got):
                    return False
            except RuntimeError:  # no room on the device for the copy: the host's way
                return False
        else:
            try:
                if type(got) is not type(want) or bool(got != want):
                    return False
            except Exception:  # a value without a plain answer to !=: the tolerance's way decides
                return False
    return True


def _input_after(now, lent):
    """An input as the call left it, for the evaluator to compare: copied into the shared buffer
    it was lent in where that has its shape and dtype (nothing new is made: a shared-memory copy
    of a 2 GiB input, a new file, was refused by the sandbox's file-size limit, "unable to resize
    file ... File too large", #38), else a copy of its own."""
    import torch

    if (type(now) is torch.Tensor and type(lent) is torch.Tensor and lent.is_shared() and lent.is_contiguous()
            and now.shape == lent.shape and now.dtype == lent.dtype):
        if now.data_ptr() != lent.data_ptr() or now.device != lent.device:
            from ..core.bus_copies import copy_across

            copy_across(lent, now.detach())
        return lent
    return _to_send([now])[0]


def _tensor_bytes(values) -> int:
    """The bytes of every tensor in `values`, nested ones included (tensor_trees.py)."""
    from ..core.tensor_trees import nbytes

    return nbytes(list(values))


def _to_send(values):
    """Host copies of what goes to the evaluator, made in shared memory (shared_tensors.py)."""
    from ..core.shared_tensors import shared_copies

    return shared_copies(values)


def tf32_switches(configured) -> set[str]:
    """TF32 (or bf16) switched on beyond the run's settings `configured` (backend_settings)."""
    from ..timing.backend_settings import capture, lower_precision_signs

    return set(lower_precision_signs(configured, capture()))


def configured_settings(config):
    """The run's backend settings, from this (fresh) process's PyTorch defaults, applied."""
    from ..timing.backend_settings import apply, capture, for_preset

    configured = for_preset(config.backend, capture())
    unreached = apply(configured)
    if unreached:
        raise RuntimeError(f"backend preset {config.backend} could not be applied: {'; '.join(unreached)}")
    return configured


def _seed_all(seed: int) -> None:
    """Python's generator and torch's, left as torch.manual_seed leaves them (the CPU's and every
    CUDA device's), by the short way where it is the same: CUDA started or absent and no other
    backend. torch.manual_seed formats a traceback of its caller for each backend it seeds
    lazily (XPU, MTIA, a CUDA not started yet): 0.4-0.6 ms a call, and the candidate's worker seeds
    before every timed call, so the device sat idle that long before each of them and not before
    the baselines' (`timed_call_overhead --steps`)."""
    import random

    import torch

    random.seed(seed)
    if _only_cpu_and_cuda() and (torch.cuda.is_initialized() or not torch.cuda.is_available()):
        torch.default_generator.manual_seed(seed)
        if torch.cuda.is_initialized():
            for generator in torch.cuda.default_generators:
                generator.manual_seed(seed)
        return
    torch.manual_seed(seed)  # also seeds every CUDA device, now or once CUDA starts


@functools.cache
def _only_cpu_and_cuda() -> bool:
    """No backend torch.manual_seed also seeds is present here but the CPU and CUDA."""
    import torch

    others = [getattr(getattr(torch, name, None), "is_available", lambda: False) for name in ("xpu", "mtia")]
    return not (torch.backends.mps.is_available() or any(available() for available in others)
                or torch._C._get_privateuse1_backend_name() != "privateuseone")


def timed_calls(timer, call_on, buffers: list, timed_inputs: list, seeds: list[int], overlap: bool, device: str,
                copies=None) -> dict:
    """One timed call per input set, each loaded into a rotating buffer, seeded, flushed and
    timed (timer.Timer.timed_call), its outputs copied right after it: into `copies`
    (timer.OutputCopies: a slab on the device when staged, on the host on the CPU), else to the
    host. The candidate's timed loop, and the same loop on the reference's worker with a call
    that does nothing, from which the evaluator learns what the loop costs around the calls
    (outside_view.LoopCost). The sets are kept: the caller drops them after its reply (a host set
    dropped inside the loop unmapped its shared memory between two timed calls, which the
    calibration's loop, over sets it keeps, never does: 3x its loads on the CPU, #44)."""
    from ..rules.outputs import inspect_outputs
    from ..timing.timer import load_content

    samples, stamps, outputs, violations = [], [], [], []
    # Where the loop's own time went, step by step (host clock, summed over the calls): reported
    # for diagnosis only (Result.env["timed_loop"]), never in a verdict, since the candidate's
    # code can rewrite anything in this process.
    steps = dict.fromkeys(LOOP_STEPS, 0)
    now = time.perf_counter_ns
    for call_index, seed in enumerate(seeds):
        began = now()
        buffer = buffers[call_index % len(buffers)]
        load_content(buffer, _to_device(timed_inputs[call_index], device))
        loaded = now()
        _seed_all(seed)
        seeded = now()
        elapsed_ms, output = timer.timed_call(call_on(buffer), overlap)
        called = now()
        samples.append(elapsed_ms)
        stamps.append(list(timer.clock.last_span_ns))
        report = inspect_outputs(output, [], device, copy_with=copies.copy if copies is not None else None)
        # Dropped before the next call, so the next call's output can take this one's memory:
        # held, the copy just made takes the previous output's freed block and every timed call
        # allocates fresh pages (page faults timed as the candidate's: an honest F.leaky_relu
        # timed 3x eager's time on the CPU, 18x sandboxed). What the C library does with a freed
        # block is set alike in both workers (keep_freed_memory).
        del output
        outputs.append(report["outputs"])
        violations += report["violations"]
        span_ns = stamps[-1][1] - stamps[-1][0]
        steps["load"] += loaded - began
        steps["seed"] += seeded - loaded
        steps["span_less_sample"] += span_ns - round(elapsed_ms * 1e6)
        steps["flush_and_checks"] += called - seeded - span_ns
        steps["copy_outputs"] += now() - called
    return {"samples_ms": samples, "stamps_ns": stamps, "outputs": outputs, "violations": violations,
            "steps_ms": {step: round(ns / 1e6, 4) for step, ns in steps.items()}}


# timed_calls' steps around each call: the next inputs loaded into a buffer, the seeds, the L2
# flush and the persisting-L2 reset and check (the call's host span left out), the part of the
# call's host span its events leave out (GPU), the outputs' checks and copies.
LOOP_STEPS = ("load", "seed", "flush_and_checks", "span_less_sample", "copy_outputs")


# ----------------------------------------------------------------------------------------------
# Reference worker


def reference_main(conn, spec: dict) -> None:
    """Serves the problem of `spec`, then, where the evaluation asks it to (reused_reference.py),
    the next problem it is sent, in the same process."""
    from . import reused_reference

    setup_worker(spec)
    state_before, modules_before = reused_reference.process_state(), set(sys.modules)
    while True:
        server = ReferenceServer(conn, spec)
        if not server.import_problem():
            return
        server.left_behind = lambda: reused_reference.left_behind(state_before, modules_before, REFERENCE_MODULE)
        loaded = serve_requests(conn, server.handlers(), until="load")
        if loaded is None:
            return
        (spec,) = loaded
        os.truncate(spec["log_path"], 0)  # the log is this problem's alone (stdio appends to it)
        setup_worker(spec)


# The problem's module in the reference's process (a reused process imports the next one under it).
REFERENCE_MODULE = "cudaagent_reference_problem"


class ReferenceServer(RequestServer):
    """The reference's worker: imports the problem, then answers sizes, prepare, draw_set,
    drop_sets, fresh_sets, repeats_itself, baseline, calibrate and release (one `handle_<request>`
    each). No candidate code runs in this process."""

    def __init__(self, conn, spec: dict):
        super().__init__(conn)
        from ..core.config import EvalConfig
        from ..core.conventions import get_convention
        from ..timing.backend_settings import apply, diff, reference_settings

        self.spec = spec
        self.config = config = EvalConfig.from_dict(spec["config"])
        self.convention = get_convention(config.convention)
        self.device = spec["device"]
        self.configured = configured = configured_settings(config)
        # The reference is the truth: its expected outputs at full fp32, no TF32 shortcuts, whatever
        # the run's settings; only the baselines are timed under those (or the candidate's).
        truth = reference_settings(configured)
        apply(truth)
        # What the run's settings allow beyond full fp32 (the candidate runs under them): what a
        # failed trial's reference is also recomputed under (repeats_itself).
        self.lowered_by_run = diff(truth, configured)
        self.problem = None
        self.model = None  # the reference's model, built by prepare
        # The eager baseline's warm-up and profile in an evaluation's first round, for its rounds
        # after it (timed_as_the_candidate): ((the called model, the set positions), per-call
        # ms, profile), or None.
        self._warmed_round: tuple | None = None
        self.sets: list[dict | None] = []  # the sets drawn: the trial sets first, then the warm-up sets (None: let go)
        self.seeds: list[int] = []  # each drawn set's seed, kept after the set is let go
        # The shared memory of sets let go (drop_sets), drawn into again: freeing a 12-16 GiB set
        # took 11-15 s of each streamed pair on the H100 machine, and fresh pages fault in slowly.
        from ..core.shared_tensors import SharedBufferPool

        self.recycled = SharedBufferPool()
        self.sets_recycled = 0  # sets drawn into recycled storages (Result.env["sets_recycled"])
        self.construction: tuple = ()  # (seed, init inputs) the model was built from (replayed)
        self.forward_ms = math.inf  # the fastest reference call while drawing sets
        # Why the reference keeps state across calls (None: it does not, as far as seen).
        self.stateful: str | None = None
        self.inputs_on_device = True  # get_inputs can make its tensors on the GPU (draw_inputs)
        # The host transfers the reference's own forward makes (its first call, audited as a
        # candidate's is): a candidate making the same one is doing what the problem does.
        self.host_transfers: list[str] | None = None
        self.steps = StepSeconds()  # prepare's steps, in its reply
        # Why this process should not serve another problem after this one ("" if it may):
        # set by reference_main (reused_reference.left_behind).
        self.left_behind = lambda: "not a reusable worker"

    def import_problem(self) -> bool:
        """The problem's module; on failure an "import" error reply, and False."""
        from ..core.files import import_file

        try:
            self.problem = import_file(self.spec["problem"], REFERENCE_MODULE)
        except BaseException as error:
            _reply_error(self.conn, "import", error)
            return False
        return True

    def run_reference(self, inputs: list, seed: int, model=None) -> list:
        """The reference's call, right after seeding: a candidate that draws the same random
        numbers (dropout masks) in the same order gets the same answer."""
        import torch

        from ..core.conventions import training_mode_hint

        _seed_all(seed)
        try:
            with torch.no_grad():
                outputs = (self.model if model is None else model)(*_to_device(inputs, self.device))
        except Exception as error:
            if self.convention.eval_mode:
                raise
            raise RuntimeError(training_mode_hint(error)) from error
        return outputs if isinstance(outputs, (tuple, list)) else [outputs]

    def audited_reference(self, inputs: list, seed: int) -> list:
        """The reference's call under the candidate's operator audit (rules/guards.py), keeping
        the host transfers it makes (level3/33_VanillaRNN copies its input into a CPU tensor
        attribute, then moves it back: its own code, given as the candidate, was host_compute)."""
        from ..rules.guards import ForwardGuard, without_call_site
        from ..rules.rules import get_policy

        guard = ForwardGuard(get_policy(self.config.policy), self.device, watch_host=False,
                             model_of=lambda: self.model)
        self.host_transfers = []
        try:
            outputs = guard(lambda: self.run_reference(inputs, seed))
        except Exception:  # noqa: BLE001 - the audit's own failure is no verdict on the problem
            return self.run_reference(inputs, seed)  # whose own error, if it has one, is raised here
        self.host_transfers = sorted({without_call_site(finding.detail) for finding in guard.findings.drain()
                                      if finding.rule == "host_compute"})
        return outputs

    def draw_sets(self, count: int, trials: int = 0) -> list[dict]:
        import torch

        from ..timing.locks import device_work

        asked = time.perf_counter()
        with device_work(self.device):  # never beside another worker's timing
            self.steps.add("sets_wait", time.perf_counter() - asked)
            sets = self._draw_sets(count, trials)
            if self.device.startswith("cuda"):
                # Sent to the host: their blocks are given back, not kept in this process's cache
                # while other evaluations need the device's memory (memory_gate.py).
                with self.steps("empty_cache"):
                    torch.cuda.empty_cache()
            return sets

    def draw_inputs(self, seed: int) -> list:
        """get_inputs() right after seeding with `seed`, its tensors made on the GPU: as KernelBench
        draws them on the host, the same distributions, but a 64 MiB randn took 0.15 s of the
        reference's process there and every one crossed the bus (the seeds are fresh, so no value
        is anyone's to reproduce). A get_inputs that needs the host (a CPU generator, NumPy) runs
        there. The same seed gives the same inputs again (inputs_at)."""
        import torch

        _seed_all(seed)
        if self.device.startswith("cuda") and self.inputs_on_device:
            try:
                with torch.device(self.device):
                    return list(self.problem.get_inputs())
            except Exception:
                self.inputs_on_device = False
                _seed_all(seed)
        return list(self.problem.get_inputs())

    def _draw_sets(self, count: int, trials: int) -> list[dict]:
        """`count` sets, each with the reference's answer (_draw_set), from the first."""
        return [self._draw_set(position, trials) for position in range(count)]

    def _draw_set(self, position: int, trials: int) -> dict:
        """The set at `position`, with the reference's answer. The first `trials` are the
        correctness trials': from the second on, the candidate is called on each twice
        (unwatched, then watched). The reference is called twice on the second set too: if it
        answers otherwise the second time it keeps state across calls (an RNN's `self.hidden`),
        and it is then called twice on every later trial set as well, each answer kept
        (`outputs_again`), so every call of the candidate meets the reference's call at the same
        position. Sets are drawn in order (prepare's, then draw_set's one at a time)."""
        from ..core.compare import compare_outputs

        seed = _fresh_seed()
        steps = self.steps
        with steps("inputs"):
            inputs = self.draw_inputs(seed)
        fresh_before, reused_before = self.recycled.fresh, self.recycled.reused
        with steps("inputs_to_host"):
            sent_inputs = self._to_send(inputs)  # before the call: a reference may change its inputs
        started = time.perf_counter()
        with steps("forward"):
            outputs = self.audited_reference(inputs, seed) if self.host_transfers is None else self.run_reference(inputs, seed)
            _synchronize(self.device)  # the call's own time, apart from the copy's
        with steps("outputs_to_host"):
            outputs = self._to_send(outputs)
        # Recycled: every tensor of the set went into a storage let go, none into fresh memory.
        self.sets_recycled += self.recycled.fresh == fresh_before and self.recycled.reused > reused_before
        self.forward_ms = min(self.forward_ms, 1000 * (time.perf_counter() - started))
        drawn = {"seed": seed, "inputs": sent_inputs, "outputs": outputs}
        if 0 < position < trials and (position == 1 or self.stateful):
            with steps("again"):
                again = self.run_reference(_pristine(sent_inputs), seed)
            if self.stateful or not same_as_recorded(outputs, again):
                again = self._to_send(again)
                check = compare_outputs(position, outputs, again, self.config.tolerances())
                if self.stateful or not check.correct:
                    if self.stateful is None:
                        self.stateful = (f"a second call on trial {position}'s inputs under the same "
                                         f"seed answered otherwise ({check.error})")
                    drawn["outputs_again"] = again
        return drawn

    def _to_send(self, values: list) -> list:
        """Host copies in shared memory (as _to_send), into the storages of sets let go where one
        of the shape and dtype is free: no process holds them any more (drop_sets)."""
        return [self.recycled.copy_of(value) for value in values]

    def inputs_at(self, position: int) -> list:
        """The inputs of the set at `position`: as drawn, or drawn again from its seed where the
        set was let go (drop_sets); draw_inputs right after the seed gives the same values."""
        kept = self.sets[position]
        if kept is not None:
            return kept["inputs"]
        return _to_send(self.draw_inputs(self.seeds[position]))

    def build_model(self, seed: int, init_inputs: list):
        """As KernelBench builds it: under no_grad, right after the seed."""
        import torch

        _seed_all(seed)
        with torch.no_grad():
            return self.problem.Model(*init_inputs)

    def placed(self, model):
        model = model.to(self.device)
        return model.eval() if self.convention.eval_mode else model

    def replayed(self, index: int, second: bool) -> list:
        """A stateful reference's answer at one call, computed again: a model built afresh as
        the first was, called on the trial sets in the order the first was (once on the first
        set, twice on each later one), up to that call."""
        seed, init_inputs = self.construction
        model = self.placed(self.build_model(seed, init_inputs))
        outputs: list = []
        for position in range(index + 1):
            calls = 2 if position == index and second else 1 if position in (0, index) else 2
            inputs = self.inputs_at(position)
            for _ in range(calls):
                outputs = self.run_reference(_pristine(inputs), self.seeds[position], model)
        return outputs

    def handle_prepare(self, set_count: int, drawn_now: int | None = None) -> dict:
        """The model built and the first `drawn_now` of the evaluation's `set_count` sets drawn
        (None: all); the others one at a time by draw_set (a problem whose sets together are
        more than the host keeps: footprints.streams_sets)."""
        import torch

        # As KernelBench: one seed before the init inputs and again right before each model is
        # built, so a candidate built after the same seed gets the same parameters.
        steps = self.steps
        with steps("gpu"):
            open_gpu(self.device)  # its context: the first use of the device would open it anyway
        construction_seed = _fresh_seed()
        with steps("model"):
            _seed_all(construction_seed)
            init_inputs = list(self.problem.get_init_inputs())
            self.construction = (construction_seed, init_inputs)  # for a replay (replayed)
            model = self.build_model(construction_seed, init_inputs)
        with steps("weights_to_host"):
            # Taken before any forward: training mode updates BatchNorm's running statistics.
            state_dict = model.state_dict()
            state_dict = dict(zip(state_dict, _to_send(list(state_dict.values())), strict=True))
        with steps("model_to_device"):
            self.model = self.placed(model)
        self.sets = self.draw_sets(set_count if drawn_now is None else min(drawn_now, set_count), self.config.trials)
        self.seeds = [drawn["seed"] for drawn in self.sets]
        return {"steps": steps.taken(), "init_inputs": _to_send(init_inputs), "state_dict": state_dict,
                "seed": construction_seed, "sets": self.sets, "backend_settings": self.configured.to_dict(),
                "forward_ms": self.forward_ms if set_count else None, "stateful": self.stateful,
                "host_transfers": self.host_transfers or [],
                # The problem's device footprint while preparing (footprints.Measures).
                "device_peak_bytes": torch.cuda.max_memory_reserved() if self.device.startswith("cuda") else 0}

    def handle_draw_set(self) -> dict:
        """The next set, with the reference's answer (after prepare's and every earlier one's)."""
        import torch

        from ..timing.locks import device_work

        with device_work(self.device):  # never beside another worker's timing
            drawn = self._draw_set(len(self.sets), self.config.trials)
            if self.device.startswith("cuda"):
                torch.cuda.empty_cache()  # as draw_sets: the device's memory back to the others
        self.sets.append(drawn)
        self.seeds.append(drawn["seed"])
        # "stateful": found at the second set's draw
        return {"set": drawn, "stateful": self.stateful, "steps": self.steps.taken()}

    def handle_drop_sets(self, positions: list[int]) -> dict:
        """Lets go of the sets at `positions` (their shared memory is freed once the evaluator
        lets go too); their seeds stay, for a stateful reference's replay (inputs_at)."""
        for position in positions:
            dropped, self.sets[position] = self.sets[position], None
            if dropped is not None:  # the evaluator let go first: drawn into again (recycled)
                self.recycled.give_back([dropped["inputs"], dropped["outputs"], dropped.get("outputs_again", [])])
        return {"recycled": self.sets_recycled}

    def handle_release(self) -> dict:
        """Lets this problem go (its model, sets and module) once its evaluation is over, and says
        whether the process can serve another (reused_reference.py); the next request is then
        ("load", spec) or ("exit",)."""
        import gc

        import torch

        self.model = self.problem = self._warmed_round = None
        self.sets, self.construction, self.recycled = [], (), None
        sys.modules.pop(REFERENCE_MODULE, None)
        gc.collect()
        why = ""
        if self.device.startswith("cuda"):
            try:
                torch.cuda.synchronize(self.device)  # an error the device kept shows here
            except Exception as error:  # noqa: BLE001 - a reason not to reuse, no failure of the evaluation
                why = f"the device reported an error: {str(error)[:300]}"
            else:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats(self.device)  # the next problem's footprint alone
        why = why or self.left_behind()
        return {"reusable": not why, "why": why}

    def handle_sizes(self) -> dict:
        """One set's input and output bytes, sized on the meta device (nothing allocated, no
        random number drawn), so the evaluation can be admitted by its footprint before the
        first set is drawn (memory_gate.py); None where the problem does not run there."""
        import torch

        problem = self.problem
        try:
            with torch.device("meta"), torch.no_grad():
                inputs = list(problem.get_inputs())
                outputs = problem.Model(*problem.get_init_inputs())(*inputs)
        except Exception:  # noqa: BLE001 - .item(), a host generator, an operator without a meta kernel
            return {"input_bytes": None, "output_bytes": None}
        outputs = outputs if isinstance(outputs, (tuple, list)) else [outputs]
        return {"input_bytes": _tensor_bytes(inputs), "output_bytes": _tensor_bytes(outputs)}

    def handle_fresh_sets(self, count: int) -> dict:
        """Input sets no call has seen, with the reference's outputs: one per timed call."""
        return {"sets": self.draw_sets(count), "steps": self.steps.taken()}

    def handle_repeats_itself(self, index: int, second: bool = False) -> dict:
        """Whether the reference gives set `index` the same answer again (`second`: the answer
        of its second call on it, where it keeps state): under the same seed, and under the
        run's backend settings (those the candidate runs under: cuDNN's TF32 by default) as at
        full fp32. A model whose answer those settings change beyond the tolerance (a BatchNorm
        over two samples turns TF32's rounding into other signs) cannot judge a candidate that
        runs PyTorch's own operators under them. A stateful reference is asked by replaying its
        calls on a model built afresh: the one it has has been called since."""
        from ..core.compare import compare_outputs
        from ..timing.backend_settings import applied
        from ..timing.locks import device_work

        config, device = self.config, self.device
        trial_set = self.sets[index]
        recorded = trial_set["outputs_again"] if second and "outputs_again" in trial_set else trial_set["outputs"]

        def answer_again() -> list:
            if self.stateful:
                return self.replayed(index, second)
            return self.run_reference(_pristine(trial_set["inputs"]), trial_set["seed"])

        with device_work(device):
            again = answer_again()
            repeated = same_as_recorded(recorded, again)
            if not repeated:
                again = _to_cpu(again)
        if not repeated:
            check = compare_outputs(index, recorded, again, config.tolerances())
            if not check.correct:
                return {"deterministic": False, "cause": "seed", "detail": check.error}
        if self.lowered_by_run:
            with applied(self.configured), device_work(device):
                under_run = answer_again()
                if same_as_recorded(recorded, under_run):
                    return {"deterministic": True, "cause": None, "detail": None}
                under_run = _to_send(under_run)
            check = compare_outputs(index, recorded, under_run, config.tolerances())
            if not check.correct:
                # Its answer under those settings: the parent sees whether the candidate's is that one.
                return {"deterministic": False, "cause": "settings", "settings": self.lowered_by_run,
                        "detail": check.error, "outputs": under_run}
        return {"deterministic": True, "cause": None, "detail": None}

    def handle_baseline(self, mode: str, set_indices: list[int], settings: dict, count: int | None = None,
                        round_ms: float | None = None, first_round: bool = True, lock_held: bool = False) -> dict:
        """`mode` timed by the candidate's loop (timed_as_the_candidate); where the evaluator asks
        for a round beside one of the candidate's (timer.timing_rounds), `count` timed calls or as
        many as fit the candidate's `round_ms` where that is fewer (never under two), warmed and
        profiled in the evaluation's first round only; else as many as fresh_call_count gives.
        With `lock_held` the evaluator holds the timing lock on this process's behalf and has
        put it on the reserved cores (the eager rounds, inside the candidate's hold): no lock is
        taken here, torch's threads are fitted to those cores, and the device's cached memory is
        given back after, for the candidate's calls that follow."""
        import torch

        from ..timing.backend_settings import BackendSettings, applied, capture
        from ..timing.locks import DeviceHold, device_lock, lock_path
        from ..timing.timer import Clock, Timer

        config, device, model = self.config, self.device, self.model
        if mode == "eager":
            fn = model
        else:
            compile_mode = "max-autotune" if mode == "max-autotune" else "default"
            fn = torch.compile(model, mode=compile_mode)
        timer = Timer(Clock(device), config.timing_config)
        hold_here = (contextlib.nullcontext(DeviceHold(lock_path(device), quiet=True)) if lock_held
                     else device_lock(device, config.timing_config.quiet_wait_s))
        for_the_evaluator = self._on_the_evaluators_hold() if lock_held else contextlib.nullcontext()
        # torch.compile reads the settings when it compiles, inside the first timed-loop call.
        with for_the_evaluator, applied(BackendSettings.from_dict(settings)), torch.no_grad(), hold_here as hold:
            timed_under = capture().to_dict()
            if first_round:
                self._warmed_round = None  # another evaluation's (a shared reference), or none
            measurement = self.timed_as_the_candidate(timer, fn, set_indices, count, round_ms)
        return {"samples_ms": measurement.samples_ms, "started_ns": measurement.started_ns, "device_ms": measurement.device_ms,
                "launch_overlapped": measurement.launch_overlapped, "backend_settings": timed_under,
                "quiet": hold.quiet, "beside": hold.beside}

    def timed_as_the_candidate(self, timer, fn, set_indices: list[int], count: int | None = None,
                               round_ms: float | None = None):
        """A baseline timed by the candidate's own loop, step for step (the candidate worker's
        warm, stage and time requests): warm-up and, on the GPU, the device-time profile on the
        warm-up sets; then as many calls as the candidate gets (timer.fresh_call_count), each
        call's inputs loaded into a buffer and seeded before it, its outputs copied into a slab
        right after it and dropped. On the GPU the calls take the warm-up sets in turn, staged on
        the device first where they fit; on the CPU each call gets inputs of its own, drawn as the
        candidate's fresh sets are: a branchy kernel called on three sets in turn has its branches
        learned by the core's predictor, and the candidate's never repeat (a 2x2 max-pool of
        24 KiB took 7 us a call on three inputs in turn and 16 us on a thousand distinct ones, the
        same copies of three contents 7 us, and its identity candidate timed 0.5x of eager).
        The work between two calls decides what the next call finds in the caches, the
        allocator and (for a launch-bound model) the host's queue, so the two sides must do the
        same. Timed by Timer.measure's loop instead (three buffers refilled each round, each
        set's last output held until the next call on it), a 4 MiB SiLU's CPU eager baseline
        was 1.17-1.41x slower than its identity candidate in six runs (0.97-1.03x in three with
        this loop), and DenseNet121's GPU eager baseline twice its bare call while the
        candidate ran at the bare call's speed (#40)."""
        from ..core.tensor_trees import nbytes, tensors
        from ..timing import gc_pause
        from ..timing.timer import (
            Measurement,
            OutputCopies,
            fresh_call_count,
            input_buffers,
            staged_on_device,
        )

        device = self.device
        chosen = [self.sets[index] for index in set_indices]
        buffers = input_buffers([_to_device(drawn["inputs"], device) for drawn in chosen])

        def call_on(buffer: list):
            return lambda: fn(*buffer)

        # A round after the first (round_ms given) is neither warmed nor profiled again, as the
        # candidate's rounds are not: its device time is the first round's, and a profile pass in
        # each of ten rounds would cost more than the rounds.
        warmed_for = (fn, tuple(set_indices))
        warmed = self._warmed_round if round_ms is not None else None
        if warmed is None or warmed[0] != warmed_for:
            per_call_ms = timer.warm_up(call_on, buffers)
            profiled = timer.profile(fn, buffers, lambda call: call(), per_call_ms)
            if round_ms is not None:
                self._warmed_round = (warmed_for, per_call_ms, profiled)
        else:
            _, per_call_ms, profiled = warmed
        overlap = timer.overlaps_launch(profiled)
        output_nbytes = [value.numel() * value.element_size() for value in tensors(chosen[0]["outputs"])]
        set_bytes = nbytes(chosen[0]["inputs"]) + sum(output_nbytes)
        if count is None:
            count = fresh_call_count(per_call_ms, set_bytes, timer.config, profiled.device_ms if profiled else None)
        elif round_ms is not None:
            count = max(2, min(count, int(round_ms / max(per_call_ms, 1e-3))))
        if device == "cpu":
            seeds = [_fresh_seed() for _ in range(count)]
            timed = [self.draw_inputs(seed) for seed in seeds]
            copies = OutputCopies(output_nbytes, count, device)
        else:
            picked = [chosen[index % len(chosen)] for index in range(count)]
            seeds = [drawn["seed"] for drawn in picked]
            staged = staged_on_device([drawn["inputs"] for drawn in picked], sum(output_nbytes), device)
            timed = staged if staged is not None else [drawn["inputs"] for drawn in picked]
            copies = OutputCopies(output_nbytes, count, device) if staged is not None else None
        with gc_pause.paused(timer.config.pause_gc):  # as the candidate's worker, from its stage to its audit
            loop = timed_calls(timer, call_on, buffers, timed, seeds, overlap, device, copies)
        measurement = Measurement(loop["samples_ms"], [], launch_overlapped=overlap,
                                  started_ns=[stamp[0] for stamp in loop["stamps_ns"]])
        if profiled is not None:
            measurement.device_ms, measurement.device_busy_ms = profiled.device_ms, profiled.busy_ms
            measurement.kernel_names = profiled.kernel_names
        return measurement

    def handle_calibrate(self, overlap: bool, staged: bool, count: int) -> dict:
        """What the candidate's timed loop costs around its calls, measured here where no
        candidate code runs: the same loop (timed_calls) over the warm-up sets, `staged` as the
        candidate's were (or not, where they do not fit here: that loop costs more), with a call
        that returns the recorded outputs and does nothing else. The evaluator holds the timing
        lock meanwhile and times this request with its own clock (outside_view.py); `setup_ns` is
        what came before the loop, `loop_cpu_ns` this thread's CPU time in the loop. Without
        device memory for it (the candidate's worker holds its staged sets meanwhile),
        `unmeasured` says so. On the CPU, with torch's threads fitted to the reserved cores the
        evaluator moved this process onto, as the candidate's are (host_quiet.fit_timed_threads)."""
        import torch

        from ..timing import gc_pause

        with self._on_the_evaluators_hold():
            try:
                return self.measure_loop(overlap, staged, count)
            except torch.OutOfMemoryError as error:
                return {"unmeasured": f"no device memory to measure the timed loop's own cost ({str(error)[:200]})"}
            finally:
                gc_pause.resume()  # paused for the loop (measure_loop)

    @contextlib.contextmanager
    def _on_the_evaluators_hold(self):
        """Around a request the evaluator times holding the timing lock on this process's behalf,
        on the reserved cores (calibrate, an eager round beside the candidate's): torch's threads
        fitted to those cores meanwhile (host_quiet.fit_timed_threads), and the device's cached
        memory (flush buffer, staged sets, copy slab) given back after, for the candidate's calls
        that follow."""
        import torch

        from ..timing.host_quiet import fit_timed_threads

        threads_before = fit_timed_threads(self.device)
        try:
            yield
        finally:
            if threads_before is not None:
                torch.set_num_threads(threads_before)
            if self.device.startswith("cuda"):
                torch.cuda.empty_cache()

    def measure_loop(self, overlap: bool, staged: bool, count: int) -> dict:
        import torch

        from ..timing import gc_pause
        from ..timing.timer import Clock, OutputCopies, Timer, input_buffers, staged_on_device

        config, device = self.config, self.device
        began = time.perf_counter_ns()
        # Collected here, inside setup_ns (left out of the loop's cost), and paused for the loop
        # (handle_calibrate resumes it), as the candidate's worker is from its stage to its audit.
        if config.timing_config.pause_gc:
            gc_pause.pause()
        warm_sets = self.sets[config.trials:]
        picked = [warm_sets[index % len(warm_sets)] for index in range(count)]
        answer = _to_device(picked[0]["outputs"], device)
        output_nbytes = [value.numel() * value.element_size() for value in answer if isinstance(value, torch.Tensor)]
        timed = staged_on_device([chosen["inputs"] for chosen in picked], sum(output_nbytes), device) if staged else None
        # Into a slab on the CPU too, as the candidate's copies are (stage).
        copies = OutputCopies(output_nbytes, count, device) if timed is not None or device == "cpu" else None
        timer = Timer(Clock(device), config.timing_config)
        timer.flush_cache()  # its pages in place, as the candidate's are after its warm-up
        buffers = input_buffers([_to_device(chosen["inputs"], device) for chosen in warm_sets])
        setup_ns = time.perf_counter_ns() - began
        loop_cpu_ns = time.thread_time_ns()
        with torch.no_grad():
            loop = timed_calls(timer, lambda buffer: lambda: answer, buffers,
                               timed if timed is not None else [chosen["inputs"] for chosen in picked],
                               [chosen["seed"] for chosen in picked], overlap, device, copies)
        return {"samples_ms": loop["samples_ms"], "stamps_ns": loop["stamps_ns"], "setup_ns": setup_ns,
                "loop_cpu_ns": time.thread_time_ns() - loop_cpu_ns, "steps_ms": loop["steps_ms"],
                "loop_end_ns": time.perf_counter_ns()}  # before the cleanup (outside_view.wall_loop_cost)


# ----------------------------------------------------------------------------------------------
# Candidate worker

# Each kind of reply the candidate's worker sends, with the keys the evaluator reads of it
# (channel.Worker refuses a reply of another kind, or without them, as forged).
CANDIDATE_REPLY_KEYS = {
    "error": frozenset({"phase", "error_type", "message"}),
    "sandbox": frozenset(),
    "built": frozenset(),
    "construct": frozenset({"weights"}),
    "keep_build": frozenset(),
    "forward": frozenset({"outputs", "violations", "inputs_after", "findings", "precision"}),
    "check_held": frozenset({"reused"}),
    "warm": frozenset({"per_call_ms", "device_ms", "device_busy_ms", "kernel_names", "own_kernel_names",
                       "launch_overlapped", "backend_settings", "findings", "precision"}),
    "stage": frozenset({"staged"}),
    "time": frozenset({"samples_ms", "stamps_ns", "violations"}),
    "audit": frozenset({"timed_outputs", "audited_outputs", "audited_ms", "audited_operators", "audited_python_calls",
                        "findings", "precision", "backend_settings"}),
}


def candidate_main(conn, spec: dict) -> None:
    setup_worker(spec)
    from .sandbox import confine, missing
    from .zygote import import_after_ready

    import_after_ready()

    def serve(report: dict) -> None:
        if spec["sandbox"]["require"] and missing(report):
            conn.send({"kind": "sandbox", **report})
        else:
            serve_candidate(conn, spec, report)

    confine(spec["sandbox"], serve, prepare=lambda: open_gpu(spec["device"]))


def _memory_of(device: str) -> int:
    """The whole memory of the device outputs live on (read before the candidate's code loads)."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    from ..system.host_memory import total_bytes

    return total_bytes()


def open_gpu(device: str) -> None:
    """Initialise CUDA and this device's context before the sandbox's restrictions apply: under
    Landlock the driver does not start (on the H100 machine cudaGetDeviceCount failed with error
    304; experiments/sandbox_layers.py shows which layer)."""
    if not device.startswith("cuda"):
        return
    import torch

    torch.cuda.init()
    torch.empty(1, device=device)  # the device's context, made before any of the candidate's code


def own_threads() -> list[int]:
    """This process's thread ids, as its own /proc lists them."""
    return sorted(int(tid) for tid in os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else []


def start_thread_pools() -> None:
    """PyTorch's intra-op threads, started now rather than by the candidate's first operator:
    threads that exist before the candidate's code is loaded are the harness's, and only the
    others are held to the rule that no thread works between timed calls (outside_view.py)."""
    import torch

    torch.ones(1 << 20).sum()


def serve_candidate(conn, spec: dict, sandbox_report: dict) -> None:
    from ..core import compare, shared_tensors

    # No thread of the harness's is started after the candidate's code is loaded: threads that
    # come later are held to be the candidate's (outside_view.py), so here shared memory is
    # faulted in and outputs compared by the serving thread alone.
    shared_tensors.POPULATE_THREADS = compare.COMPARE_THREADS = 1
    server = CandidateServer(conn, spec)
    server.announce(sandbox_report)
    if server.build():
        server.serve()


class CandidateServer(RequestServer):
    """The candidate's worker, inside the sandbox: reports the sandbox, builds the candidate, then
    answers construct, keep_build, forward, check_held, warm, stage, time and audit (one
    `handle_<request>` each)."""

    def __init__(self, conn, spec: dict):
        super().__init__(conn)
        # Imported before the candidate, so the clocks and guard references predate its code. numpy:
        # loaded now, not lazily inside a guarded forward. torch._dynamo: the first operator under a
        # TorchDispatchMode (the guard's audit) imports it (torch._compile's disable wrapper), 3.5 s
        # on the 2-core box inside the first correctness trial; here it runs while the reference
        # computes its outputs.
        from types import SimpleNamespace

        import numpy  # noqa: F401
        import torch  # noqa: F401
        import torch._dynamo  # noqa: F401

        from ..core.config import EvalConfig
        from ..core.conventions import get_convention, load_reference_weights
        from ..core.files import Candidate
        from ..rules.guards import ForwardGuard
        from ..rules.memory import poison_free_memory
        from ..rules.outputs import (
            HeldOutputs,
            device_snapshot,
            held_copies,
            held_window_bytes,
            inspect_outputs,
            unchanged,
        )
        from ..rules.provenance import own_kernel_names, precision_flags
        from ..rules.rules import get_policy
        from ..timing import gc_pause
        from ..timing.backend_settings import allows_tf32, capture
        from ..timing.host_quiet import fit_timed_threads
        from ..timing.timer import (
            Clock,
            OutputCopies,
            Timer,
            input_buffers,
            load_content,
            pages_in_place,
            staged_on_device,
        )

        # The harness's functions the requests call, bound now, before the candidate's code runs:
        # a candidate that rebinds them in their modules (adversarial correct_patches_harness_modules)
        # does not reach these.
        self.harness = SimpleNamespace(
            allows_tf32=allows_tf32, capture=capture, load_reference_weights=load_reference_weights,
            fit_timed_threads=fit_timed_threads, poison_free_memory=poison_free_memory,
            device_snapshot=device_snapshot, held_copies=held_copies, inspect_outputs=inspect_outputs,
            unchanged=unchanged, own_kernel_names=own_kernel_names,
            precision_flags=precision_flags, OutputCopies=OutputCopies, input_buffers=input_buffers,
            load_content=load_content, staged_on_device=staged_on_device, pages_in_place=pages_in_place,
            gc_pause=gc_pause.pause, gc_resume=gc_pause.resume)
        # Every collection timed, for Result.env["timed_loop"] (diagnosis only).
        self.gc_watch = gc_pause.GcWatch().install()
        self.after_time: tuple | None = None  # (clock, thread CPU, gc mark) when the time request ended
        self.spec = spec
        self.config = config = EvalConfig.from_dict(spec["config"])
        self.convention = get_convention(config.convention)
        self.device = device = spec["device"]
        # The run's settings until the candidate says otherwise; what it turns on beyond them is
        # reported, and the baselines are timed under what it left in force.
        self.configured = configured_settings(config)
        described = spec["candidate"]
        self.candidate = Candidate(Path(described["path"]), Path(described["model_file"]), described["workspace"])
        self.module = None  # the candidate's module, once built
        self.model = None  # the ModelNew the requests call
        self.first_build = None  # the first build, kept aside while the second is tried (keep_build)
        # The correctness calls' outputs, each with copies taken right after its call (check_held),
        # and the device bytes those copies hold (outputs.held_copies's "held_on_device_bytes").
        self.held_outputs = HeldOutputs(held_window_bytes(_memory_of(device)))
        self.held_budget: dict = {}
        self.output_nbytes: list[int] = []  # one call's output bytes, as the evaluator sized them
        self.buffers: list = []  # the rotating input buffers of the warm-up and timed calls
        self.overlap = False  # whether the timed calls overlap their launches (Timer.overlaps_launch)
        # Between stage, time and audit: the timed sets and seeds, the slab their outputs are copied
        # into, and the timed calls' outputs.
        self.timed: list | None = None
        self.timed_seeds: list[int] | None = None
        self.copies = None
        self.timed_outputs: list | None = None
        self.spent_sets: list | None = None  # the timed request's sets, dropped at the audit
        self.guard = ForwardGuard(get_policy(config.policy), device, model_of=lambda: self.model)
        self.clock = Clock(device)
        self.timer = Timer(self.clock, config.timing_config)
        start_thread_pools()

    def announce(self, sandbox_report: dict) -> None:
        """The first message, sent before any of the candidate's code runs, so it cannot be forged:
        what the sandbox applied, and the threads that are the harness's."""
        self.conn.send({"kind": "sandbox", **sandbox_report, "threads": own_threads()})

    def build(self) -> bool:
        """Builds and imports the candidate and sends "built"; on failure a "build" error reply,
        and False."""
        from ..core.files import build_workspace_extension, exec_file, import_file

        spec, config, candidate = self.spec, self.config, self.candidate
        try:
            started, started_cpu = time.perf_counter(), _cpu_seconds_with_children()
            install_fast_build(spec["pch_dir"] and Path(spec["pch_dir"]), split=config.split_nvcc,
                               diet=config.header_diet, lean=config.header_diet_lean)
            if candidate.workspace:
                build_workspace_extension(candidate, self.device, Path(spec["extensions_dir"]) / "workspace")
            load = exec_file if self.convention.exec_source and not candidate.workspace else import_file
            module = load(candidate.model_file, "cudaagent_candidate")
            if not hasattr(module, "ModelNew"):
                raise AttributeError(f"{candidate.model_file} defines no ModelNew")
            self.module = module
            self.conn.send({"kind": "built", "seconds": time.perf_counter() - started,
                            "cpu_s": _cpu_seconds_with_children() - started_cpu})
        except BaseException as error:
            _reply_error(self.conn, "build", error)
            return False
        return True

    def handle_construct(self, init_inputs: list, state_dict: dict, seed: int, copy: bool = False) -> dict:
        """Builds ModelNew as the reference was built: under no_grad (an in-place fold of a
        parameter in `__init__` is allowed there), right after the same seed (conventions.py).
        `copy`: the second build, with the reference's matching entries copied in; the first is
        kept aside until keep_build says which of the two the other calls use."""
        import torch

        if copy:
            self.first_build, self.model = self.model, None
        _seed_all(seed)
        with torch.no_grad():
            model = self.module.ModelNew(*init_inputs)
        weights = self.harness.load_reference_weights(model, state_dict, self.convention, copy=copy)
        model = model.to(self.device)
        self.model = model.eval() if self.convention.eval_mode else model
        return {"weights": weights}

    def handle_keep_build(self, copied: bool) -> dict:
        """After the second build's first trial: keep it (`copied`) or go back to the first."""
        first, self.first_build = self.first_build, None
        if not copied and first is not None:
            self.model = first
        del first
        return {}

    def handle_forward(self, inputs: list, output_nbytes: list[int], seed: int, watched: bool = True,
                       output_buffers: list | None = None) -> dict:
        """One correctness call; `watched=False`: without the operator audit (no dispatch mode on
        the stack), so a candidate honest only when watched shows what it does otherwise. The
        outputs' host copies go into `output_buffers`, the evaluator's storages, where they fit."""
        import torch

        harness, device, guard, model, steps = self.harness, self.device, self.guard, self.model, StepSeconds()
        with steps("inputs_to_device"):
            device_inputs = _to_device(inputs, device)
            # What they held before the call, where they are: only an input the call changed goes
            # back to the evaluator (a 64 MiB input nine times per evaluation otherwise).
            before = harness.device_snapshot(device_inputs)
        self.output_nbytes = output_nbytes
        with steps("poison"):
            harness.poison_free_memory(device, output_nbytes)
        _seed_all(seed)  # the seed the reference's call ran after
        with steps("call"), torch.no_grad():  # beside no timing: the evaluator holds the device's work lock meanwhile
            outputs = guard(lambda: model(*device_inputs)) if watched else model(*device_inputs)
            self.clock.synchronize()
        with steps("outputs_to_host"):
            report = harness.inspect_outputs(outputs, device_inputs, device, into=output_buffers)
        with steps("hold"):
            # Held (so the allocator cannot hand their memory out again) beside copies of them taken
            # now (on the device while they fit a budget, else a digest), until check_held compares
            # them after the last trial, or earlier once the held outputs pass their window (HeldOutputs).
            self.held_outputs.hold(outputs, harness.held_copies(outputs, self.held_budget))
        with steps("inputs_after"):
            # None: unchanged (the same metadata and bytes as before the call); else its copy.
            inputs_after = [None if harness.unchanged(was, now) else _input_after(now, lent)
                            for was, now, lent in zip(before, device_inputs, inputs, strict=True)]
        return {
            **report,
            "inputs_after": inputs_after,
            "steps": steps.taken(),
            "findings": guard.findings.drain(),
            "precision": sorted(guard.findings.precision | tf32_switches(self.configured)),
        }

    def handle_check_held(self) -> dict:
        """After the correctness calls: if an output handed out by one call has changed since,
        a later call wrote its answer into storage already handed out. Once, after the last call,
        rather than every held output at every call (quadratic in the calls, seconds for large
        outputs on the H100): storage reused at any call is still overwritten at the end."""
        return {"reused": self.held_outputs.check()}

    def handle_warm(self, content_sets: list) -> dict:
        """Warm-up and profiled calls on the warm-up sets; these contents never come back. The
        evaluator holds the device's timing lock meanwhile (as for stage and time)."""
        import torch

        harness, device, guard, timer, configured = self.harness, self.device, self.guard, self.timer, self.configured
        harness.fit_timed_threads(device)  # timed from now on: torch's threads fit the reserved cores (CPU)
        self.held_outputs.clear()
        self.held_budget["held_on_device_bytes"] = 0
        model = self.model
        self.buffers = buffers = harness.input_buffers([_to_device(content, device) for content in content_sets])
        with torch.no_grad():
            per_call_ms = timer.warm_up(lambda buffer: lambda: model(*buffer), buffers)
            profiled = timer.profile(model, buffers, guard, per_call_ms)
        self.overlap = timer.overlaps_launch(profiled)
        return {
            "per_call_ms": per_call_ms,
            "device_ms": profiled.device_ms if profiled else None,
            "device_busy_ms": profiled.busy_ms if profiled else None,
            "kernel_names": profiled.kernel_names if profiled else [],
            "own_kernel_names": harness.own_kernel_names(self.candidate, sys.modules),
            "launch_overlapped": self.overlap,
            # In force for the timed calls that follow: the first eager round, timed before them,
            # is timed under these (the audits report them again after each round).
            "backend_settings": harness.capture().to_dict(),
            "findings": guard.findings.drain() + timer.persistence.drain(),
            "precision": sorted(guard.findings.precision | tf32_switches(configured)
                                | harness.precision_flags(profiled.kernel_names if profiled else [],
                                                          tf32_allowed=harness.allows_tf32(configured))),
        }

    def handle_stage(self, timed_sets: list[dict]) -> dict:
        """The timed calls' inputs, each never seen before, made ready: on the GPU all on the
        device first when they fit, with memory for every call's output copies, so the calls run
        back to back as the baselines' do (timer.staged_on_device, timer.OutputCopies)."""
        harness, device = self.harness, self.device
        staged = harness.staged_on_device([fresh["inputs"] for fresh in timed_sets], sum(self.output_nbytes), device)
        if staged is None:
            harness.pages_in_place([fresh["inputs"] for fresh in timed_sets])
        self.timed = staged if staged is not None else [fresh["inputs"] for fresh in timed_sets]
        self.timed_seeds = [fresh["seed"] for fresh in timed_sets]
        # On the CPU too the copies go into that slab: a shared-memory copy per call left glibc
        # handing the next call's output fresh pages, faulted in inside its timed region (an
        # identity leaky ReLU on 256x512 at 0.05-0.2x of eager; README, "What a timed call includes").
        self.copies = (harness.OutputCopies(self.output_nbytes, len(timed_sets), device)
                       if staged is not None or device == "cpu" else None)
        if self.config.timing_config.pause_gc:
            harness.gc_pause()  # collected now, untimed; resumed at the audit (gc_pause.py)
        return {"staged": staged is not None}

    def handle_time(self) -> dict:
        """Each staged set in one timed call, its outputs copied right after it (outside the
        timed region). Nothing else in this request: the evaluator times it with its own clock."""
        import torch

        entered, entered_cpu, gc_mark = time.perf_counter_ns(), time.thread_time_ns(), self.gc_watch.mark()
        model, buffers = self.model, self.buffers
        timed_run = self.guard.light() if self.config.timing_config.audit_timed_calls else None

        def call_on(buffer: list) -> object:
            if timed_run is None:
                return lambda: model(*buffer)
            return lambda: timed_run(lambda: model(*buffer))

        timed, timed_seeds = self.timed, self.timed_seeds
        self.timed = self.timed_seeds = None
        # Dropped at the next request, once the evaluator's clock of this one has stopped
        # (timed_calls).
        self.spent_sets = timed
        looped = time.perf_counter_ns()
        with torch.no_grad():
            loop = timed_calls(self.timer, call_on, buffers, timed, timed_seeds, self.overlap, self.device, self.copies)
        self.timed_outputs = loop.pop("outputs")
        loop["steps_ms"]["before_loop"] = round((looped - entered) / 1e6, 4)
        loop["steps_ms"]["unsplit"] = round((time.perf_counter_ns() - looped) / 1e6 - sum(
            loop["steps_ms"][step] for step in LOOP_STEPS) - sum(loop["samples_ms"]), 4)
        left, left_cpu = time.perf_counter_ns(), time.thread_time_ns()
        # Diagnosis only (Result.env["timed_loop"]): this request's span by this process's clock,
        # its serving thread's CPU meanwhile, the collections that ran in it.
        loop["handler"] = {"span_ns": [entered, left], "cpu_ms": round((left_cpu - entered_cpu) / 1e6, 4),
                           "gc": self.gc_watch.since(gc_mark)}
        self.after_time = (left, left_cpu, self.gc_watch.mark())
        return loop

    def handle_audit(self, audited_sets: list[dict]) -> dict:
        """The timed calls' outputs to the evaluator, then the audited check round, as checked as
        the correctness trials, on fresh content too. Bare and audited calls cannot tell each
        other apart by content."""
        import torch

        harness, device, guard, clock, model, buffers = (self.harness, self.device, self.guard, self.clock, self.model,
                                                         self.buffers)
        after_time = None
        if self.after_time is not None:  # from the time request's end to now (diagnosis only)
            left, left_cpu, gc_mark = self.after_time
            after_time = {"ms": round((time.perf_counter_ns() - left) / 1e6, 4),
                          "cpu_ms": round((time.thread_time_ns() - left_cpu) / 1e6, 4), "gc": self.gc_watch.since(gc_mark)}
            self.after_time = None
        harness.gc_resume()
        timed_outputs, copies = self.timed_outputs, self.copies
        self.timed_outputs = self.copies = self.spent_sets = None
        if copies is not None:
            timed_outputs = [_to_send(call_copies) for call_copies in timed_outputs]
            del copies  # the slab they were views of
        audited_ms, audited_outputs, violations = [], [], []
        operators_before, calls_before = guard.findings.operators_seen, guard.findings.python_calls_seen
        with torch.no_grad():
            for call_index, fresh in enumerate(audited_sets):
                buffer = buffers[call_index % len(buffers)]
                harness.load_content(buffer, _to_device(fresh["inputs"], device))
                harness.poison_free_memory(device, self.output_nbytes)
                _seed_all(fresh["seed"])
                clock.synchronize()
                elapsed_ms, output = clock.time_call_ms(lambda buffer=buffer: guard(lambda: model(*buffer)))
                audited_ms.append(elapsed_ms)
                report = harness.inspect_outputs(output, [], device)
                audited_outputs.append(report["outputs"])
                violations += report["violations"]
        audited_count = max(len(audited_sets), 1)
        return {
            "timed_outputs": timed_outputs,
            "audited_outputs": audited_outputs,
            "audited_ms": audited_ms,
            "audited_operators": (guard.findings.operators_seen - operators_before) / audited_count,
            "audited_python_calls": (guard.findings.python_calls_seen - calls_before) / audited_count,
            "findings": guard.findings.drain() + self.timer.persistence.drain() + violations,
            "precision": sorted(guard.findings.precision | tf32_switches(self.configured)),
            "backend_settings": harness.capture().to_dict(),  # in force when it was timed
            "after_time": after_time,
        }

"""What runs inside the two worker processes: the reference's and the candidate's.

The reference worker imports the problem, draws inputs under fresh `os.urandom` seeds, computes
the reference outputs and times the baselines. The candidate worker never imports the problem: it
builds and imports the candidate, receives weights and inputs as tensors, and returns outputs and
times. Neither decides a verdict; the parent compares.
"""

from __future__ import annotations

import functools
import math
import os
import sys
import time
import traceback
from pathlib import Path

from ..builds.fast_build import install as install_fast_build


def _fresh_seed() -> int:
    return int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1)


def setup_worker(spec: dict) -> None:
    from ..timing.host_quiet import reserved_in, untimed_worker
    from .channel import redirect_stdio

    redirect_stdio(spec["log_path"])
    os.environ.update(spec["env"])
    untimed_worker(reserved_in(spec))  # off the timed processes' cores until it times (host_quiet.py)
    timing = (spec.get("config") or {}).get("timing_config") or {}
    if timing.get("cupti_teardown", True):  # read by Kineto when a profiler session ends
        os.environ.setdefault("TEARDOWN_CUPTI", "1")


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


def serve_requests(conn, handlers: dict) -> None:
    """Answer requests until ("exit",) or the pipe closes."""
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        command, *args = request
        if command == "exit":
            return
        try:
            conn.send({"kind": command, **handlers[command](*args)})
        except BaseException as error:  # SystemExit from candidate code included
            _reply_error(conn, command, error)
            if not isinstance(error, Exception):
                return


def _to_device(values, device: str):
    """Each input on `device`, tensors nested in lists, tuples and dicts included."""
    from ..core.tensor_trees import map_tensors

    return [map_tensors(lambda tensor: tensor.to(device), value) for value in values]


def _pristine(values: list) -> list:
    """Private copies of a set's inputs for one more call (a model may write into its inputs),
    tensors nested in lists, tuples and dicts included."""
    from ..core.tensor_trees import map_tensors

    return [map_tensors(lambda tensor: tensor.clone(), value) for value in values]


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
            lent.copy_(now.detach())
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
    (outside_view.LoopCost). Each set is dropped once loaded."""
    from ..rules.outputs import inspect_outputs
    from ..timing.timer import load_content

    samples, stamps, outputs, violations = [], [], [], []
    for call_index, seed in enumerate(seeds):
        buffer = buffers[call_index % len(buffers)]
        inputs, timed_inputs[call_index] = timed_inputs[call_index], None
        load_content(buffer, _to_device(inputs, device))
        del inputs
        _seed_all(seed)
        elapsed_ms, output = timer.timed_call(call_on(buffer), overlap)
        samples.append(elapsed_ms)
        stamps.append(list(timer.clock.last_span_ns))
        report = inspect_outputs(output, [], device, copy_with=copies.copy if copies is not None else None)
        # Dropped before the next call, so the next call's output can take this one's memory:
        # held, the copy just made takes the previous output's freed block and every timed call
        # allocates fresh pages (page faults timed as the candidate's: an honest F.leaky_relu
        # timed 3x eager's time on the CPU, 18x sandboxed).
        del output
        outputs.append(report["outputs"])
        violations += report["violations"]
    return {"samples_ms": samples, "stamps_ns": stamps, "outputs": outputs, "violations": violations}


# ----------------------------------------------------------------------------------------------
# Reference worker


def reference_main(conn, spec: dict) -> None:
    setup_worker(spec)
    import torch

    from ..core.compare import compare_outputs
    from ..core.config import EvalConfig
    from ..core.conventions import get_convention, training_mode_hint
    from ..core.files import import_file
    from ..timing.backend_settings import (
        BackendSettings,
        applied,
        apply,
        capture,
        diff,
        reference_settings,
    )
    from ..timing.host_quiet import fit_timed_threads
    from ..timing.locks import device_lock, device_work
    from ..timing.timer import Clock, OutputCopies, Timer, input_buffers, staged_on_device

    config = EvalConfig.from_dict(spec["config"])
    convention = get_convention(config.convention)
    device = spec["device"]
    configured = configured_settings(config)
    # The reference is the truth: its expected outputs at full fp32, no TF32 shortcuts, whatever
    # the run's settings; only the baselines are timed under those (or the candidate's).
    truth = reference_settings(configured)
    apply(truth)
    # What the run's settings allow beyond full fp32 (the candidate runs under them): what a
    # failed trial's reference is also recomputed under (repeats_itself).
    lowered_by_run = diff(truth, configured)
    try:
        problem = import_file(spec["problem"], "cudaagent_reference_problem")
    except BaseException as error:
        _reply_error(conn, "import", error)
        return
    state: dict = {}

    def run_reference(inputs: list, seed: int, model=None) -> list:
        """The reference's call, right after seeding: a candidate that draws the same random
        numbers (dropout masks) in the same order gets the same answer."""
        _seed_all(seed)
        try:
            with torch.no_grad():
                outputs = (state["model"] if model is None else model)(*_to_device(inputs, device))
        except Exception as error:
            if convention.eval_mode:
                raise
            raise RuntimeError(training_mode_hint(error)) from error
        return outputs if isinstance(outputs, (tuple, list)) else [outputs]

    def draw_sets(count: int, trials: int = 0) -> list[dict]:
        with device_work(device):  # never beside another worker's timing
            sets = _draw_sets(count, trials)
            if device.startswith("cuda"):
                # Sent to the host: their blocks are given back, not kept in this process's cache
                # while other evaluations need the device's memory (memory_gate.py).
                torch.cuda.empty_cache()
            return sets

    def draw_inputs(seed: int) -> list:
        """get_inputs() right after seeding, its tensors made on the GPU: as KernelBench draws them
        on the host, the same distributions, but a 64 MiB randn took 0.15 s of the reference's
        process there and every one crossed the bus (the seeds are fresh, so no value is anyone's
        to reproduce). A get_inputs that needs the host (a CPU generator, NumPy) runs there."""
        if device.startswith("cuda") and state.get("inputs_on_device", True):
            try:
                with torch.device(device):
                    return list(problem.get_inputs())
            except Exception:
                state["inputs_on_device"] = False
                _seed_all(seed)
        return list(problem.get_inputs())

    def _draw_sets(count: int, trials: int) -> list[dict]:
        """`count` sets, each with the reference's answer. The first `trials` are the correctness
        trials': from the second on, the candidate is called on each twice (unwatched, then
        watched). The reference is called twice on the second set too: if it answers otherwise
        the second time it keeps state across calls (an RNN's `self.hidden`), and it is then
        called twice on every later trial set as well, each answer kept (`outputs_again`), so
        every call of the candidate meets the reference's call at the same position."""
        sets = []
        for position in range(count):
            seed = _fresh_seed()
            _seed_all(seed)
            inputs = draw_inputs(seed)
            sent_inputs = _to_send(inputs)  # before the call: a reference may change its inputs
            started = time.perf_counter()
            outputs = _to_send(run_reference(inputs, seed))  # the copy waits for the device
            state["forward_ms"] = min(state.get("forward_ms", math.inf), 1000 * (time.perf_counter() - started))
            drawn = {"seed": seed, "inputs": sent_inputs, "outputs": outputs}
            if 0 < position < trials and (position == 1 or state.get("stateful")):
                again = run_reference(_pristine(sent_inputs), seed)
                if state.get("stateful") or not same_as_recorded(outputs, again):
                    again = _to_send(again)
                    check = compare_outputs(position, outputs, again, config.tolerances())
                    if state.get("stateful") or not check.correct:
                        state.setdefault("stateful", f"a second call on trial {position}'s inputs under the same "
                                                     f"seed answered otherwise ({check.error})")
                        drawn["outputs_again"] = again
            sets.append(drawn)
        return sets

    def build_model(seed: int, init_inputs: list):
        """As KernelBench builds it: under no_grad, right after the seed."""
        _seed_all(seed)
        with torch.no_grad():
            return problem.Model(*init_inputs)

    def placed(model):
        model = model.to(device)
        return model.eval() if convention.eval_mode else model

    def replayed(index: int, second: bool) -> list:
        """A stateful reference's answer at one call, computed again: a model built afresh as
        the first was, called on the trial sets in the order the first was (once on the first
        set, twice on each later one), up to that call."""
        seed, init_inputs = state["construction"]
        model = placed(build_model(seed, init_inputs))
        outputs: list = []
        for position, trial_set in enumerate(state["sets"][: index + 1]):
            calls = 2 if position == index and second else 1 if position in (0, index) else 2
            for _ in range(calls):
                outputs = run_reference(_pristine(trial_set["inputs"]), trial_set["seed"], model)
        return outputs

    def prepare(set_count: int) -> dict:
        # As KernelBench: one seed before the init inputs and again right before each model is
        # built, so a candidate built after the same seed gets the same parameters.
        construction_seed = _fresh_seed()
        _seed_all(construction_seed)
        init_inputs = list(problem.get_init_inputs())
        state["construction"] = (construction_seed, init_inputs)  # for a replay (replayed)
        model = build_model(construction_seed, init_inputs)
        # Taken before any forward: training mode updates BatchNorm's running statistics.
        state_dict = model.state_dict()
        state_dict = dict(zip(state_dict, _to_send(list(state_dict.values())), strict=True))
        state["model"] = placed(model)
        state["sets"] = draw_sets(set_count, config.trials)
        return {"init_inputs": _to_send(init_inputs), "state_dict": state_dict, "seed": construction_seed,
                "sets": state["sets"], "backend_settings": configured.to_dict(),
                "forward_ms": state["forward_ms"] if set_count else None, "stateful": state.get("stateful"),
                # The problem's device footprint while preparing (footprints.Measures).
                "device_peak_bytes": torch.cuda.max_memory_reserved() if device.startswith("cuda") else 0}

    def sizes() -> dict:
        """One set's input and output bytes, sized on the meta device (nothing allocated, no
        random number drawn), so the evaluation can be admitted by its footprint before the
        first set is drawn (memory_gate.py); None where the problem does not run there."""
        try:
            with torch.device("meta"), torch.no_grad():
                inputs = list(problem.get_inputs())
                outputs = problem.Model(*problem.get_init_inputs())(*inputs)
        except Exception:  # noqa: BLE001 - .item(), a host generator, an operator without a meta kernel
            return {"input_bytes": None, "output_bytes": None}
        outputs = outputs if isinstance(outputs, (tuple, list)) else [outputs]
        return {"input_bytes": _tensor_bytes(inputs), "output_bytes": _tensor_bytes(outputs)}

    def fresh_sets(count: int) -> dict:
        """Input sets no call has seen, with the reference's outputs: one per timed call."""
        return {"sets": draw_sets(count)}

    def repeats_itself(index: int, second: bool = False) -> dict:
        """Whether the reference gives set `index` the same answer again (`second`: the answer
        of its second call on it, where it keeps state): under the same seed, and under the
        run's backend settings (those the candidate runs under: cuDNN's TF32 by default) as at
        full fp32. A model whose answer those settings change beyond the tolerance (a BatchNorm
        over two samples turns TF32's rounding into other signs) cannot judge a candidate that
        runs PyTorch's own operators under them. A stateful reference is asked by replaying its
        calls on a model built afresh: the one it has has been called since."""
        trial_set = state["sets"][index]
        recorded = trial_set["outputs_again"] if second and "outputs_again" in trial_set else trial_set["outputs"]

        def answer_again() -> list:
            if state.get("stateful"):
                return replayed(index, second)
            return run_reference(_pristine(trial_set["inputs"]), trial_set["seed"])

        with device_work(device):
            again = answer_again()
            repeated = same_as_recorded(recorded, again)
            if not repeated:
                again = _to_cpu(again)
        if not repeated:
            check = compare_outputs(index, recorded, again, config.tolerances())
            if not check.correct:
                return {"deterministic": False, "cause": "seed", "detail": check.error}
        if lowered_by_run:
            with applied(configured), device_work(device):
                under_run = answer_again()
                if same_as_recorded(recorded, under_run):
                    return {"deterministic": True, "cause": None, "detail": None}
                under_run = _to_send(under_run)
            check = compare_outputs(index, recorded, under_run, config.tolerances())
            if not check.correct:
                # Its answer under those settings: the parent sees whether the candidate's is that one.
                return {"deterministic": False, "cause": "settings", "settings": lowered_by_run, "detail": check.error,
                        "outputs": under_run}
        return {"deterministic": True, "cause": None, "detail": None}

    def baseline(mode: str, set_indices: list[int], settings: dict) -> dict:
        model = state["model"]
        if mode == "eager":
            fn = model
        else:
            compile_mode = "max-autotune" if mode == "max-autotune" else "default"
            fn = torch.compile(model, mode=compile_mode)
        content_sets = [_to_device(state["sets"][i]["inputs"], device) for i in set_indices]
        timer = Timer(Clock(device), config.timing_config)
        # torch.compile reads the settings when it compiles, inside the first timed-loop call.
        with applied(BackendSettings.from_dict(settings)), torch.no_grad(), device_lock(device, config.timing_config.quiet_wait_s) as hold:
            timed_under = capture().to_dict()
            measurement = timer.measure(fn, content_sets)
        return {"samples_ms": measurement.samples_ms, "device_ms": measurement.device_ms,
                "launch_overlapped": measurement.launch_overlapped, "backend_settings": timed_under,
                "quiet": hold.quiet, "beside": hold.beside}

    def calibrate(overlap: bool, staged: bool, count: int) -> dict:
        """What the candidate's timed loop costs around its calls, measured here where no
        candidate code runs: the same loop (timed_calls) over the warm-up sets, `staged` as the
        candidate's were (or not, where they do not fit here: that loop costs more), with a call
        that returns the recorded outputs and does nothing else. The evaluator holds the timing
        lock meanwhile and times this request with its own clock (outside_view.py); `setup_ns` is
        what came before the loop, `loop_cpu_ns` this thread's CPU time in the loop. Without
        device memory for it (the candidate's worker holds its staged sets meanwhile),
        `unmeasured` says so. On the CPU, with torch's threads fitted to the reserved cores the
        evaluator moved this process onto, as the candidate's are (host_quiet.fit_timed_threads)."""
        threads_before = fit_timed_threads(device)
        try:
            return measure_loop(overlap, staged, count)
        except torch.OutOfMemoryError as error:
            return {"unmeasured": f"no device memory to measure the timed loop's own cost ({str(error)[:200]})"}
        finally:
            if threads_before is not None:
                torch.set_num_threads(threads_before)
            if device.startswith("cuda"):
                torch.cuda.empty_cache()  # its flush buffer and staged sets back to the device, for the candidate

    def measure_loop(overlap: bool, staged: bool, count: int) -> dict:
        began = time.perf_counter_ns()
        warm_sets = state["sets"][config.trials:]
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
                "loop_cpu_ns": time.thread_time_ns() - loop_cpu_ns}

    serve_requests(conn, {"sizes": sizes, "prepare": prepare, "fresh_sets": fresh_sets,
                          "repeats_itself": repeats_itself, "baseline": baseline, "calibrate": calibrate})


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
                       "launch_overlapped", "findings", "precision"}),
    "stage": frozenset({"staged"}),
    "time": frozenset({"samples_ms", "stamps_ns", "violations"}),
    "audit": frozenset({"timed_outputs", "audited_outputs", "audited_ms", "audited_operators", "audited_python_calls",
                        "findings", "precision", "backend_settings"}),
}


def candidate_main(conn, spec: dict) -> None:
    setup_worker(spec)
    from .sandbox import confine, missing

    def serve(report: dict) -> None:
        if spec["sandbox"]["require"] and missing(report):
            conn.send({"kind": "sandbox", **report})
        else:
            serve_candidate(conn, spec, report)

    confine(spec["sandbox"], serve, prepare=lambda: open_gpu(spec["device"]))


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
    # Imported before the candidate, so the clocks and guard references predate its code. numpy:
    # loaded now, not lazily inside a guarded forward. torch._dynamo: the first operator under a
    # TorchDispatchMode (the guard's audit) imports it (torch._compile's disable wrapper), 3.5 s
    # on the 2-core box inside the first correctness trial; here it runs while the reference
    # computes its outputs.
    import numpy  # noqa: F401
    import torch
    import torch._dynamo  # noqa: F401

    from ..core.config import EvalConfig
    from ..core.conventions import get_convention, load_reference_weights
    from ..core.files import Candidate, build_workspace_extension, exec_file, import_file
    from ..rules.guards import ForwardGuard
    from ..rules.memory import poison_free_memory
    from ..rules.outputs import (
        device_snapshot,
        held_copies,
        inspect_outputs,
        storage_changes,
        unchanged,
    )
    from ..rules.provenance import own_kernel_names, precision_flags
    from ..rules.rules import get_policy
    from ..timing.backend_settings import allows_tf32, capture
    from ..timing.host_quiet import fit_timed_threads
    from ..timing.timer import (
        Clock,
        OutputCopies,
        Timer,
        input_buffers,
        load_content,
        staged_on_device,
    )

    config = EvalConfig.from_dict(spec["config"])
    convention = get_convention(config.convention)
    device = spec["device"]
    # The run's settings until the candidate says otherwise; what it turns on beyond them is
    # reported, and the baselines are timed under what it left in force.
    configured = configured_settings(config)
    described = spec["candidate"]
    candidate = Candidate(Path(described["path"]), Path(described["model_file"]), described["workspace"])
    state: dict = {"held_outputs": []}
    guard = ForwardGuard(get_policy(config.policy), device, model_of=lambda: state.get("model"))
    clock = Clock(device)
    timer = Timer(clock, config.timing_config)
    start_thread_pools()
    # The first message, sent before any of the candidate's code runs, so it cannot be forged:
    # what the sandbox applied, and the threads that are the harness's.
    conn.send({"kind": "sandbox", **sandbox_report, "threads": own_threads()})

    try:
        started, started_cpu = time.perf_counter(), _cpu_seconds_with_children()
        install_fast_build(spec["pch_dir"] and Path(spec["pch_dir"]), split=config.split_nvcc,
                           diet=config.header_diet, lean=config.header_diet_lean)
        if candidate.workspace:
            build_workspace_extension(candidate, device, Path(spec["extensions_dir"]) / "workspace")
        load = exec_file if convention.exec_source and not candidate.workspace else import_file
        module = load(candidate.model_file, "cudaagent_candidate")
        if not hasattr(module, "ModelNew"):
            raise AttributeError(f"{candidate.model_file} defines no ModelNew")
        state["module"] = module
        conn.send({"kind": "built", "seconds": time.perf_counter() - started,
                   "cpu_s": _cpu_seconds_with_children() - started_cpu})
    except BaseException as error:
        _reply_error(conn, "build", error)
        return

    def construct(init_inputs: list, state_dict: dict, seed: int, copy: bool = False) -> dict:
        """Builds ModelNew as the reference was built: under no_grad (an in-place fold of a
        parameter in `__init__` is allowed there), right after the same seed (conventions.py).
        `copy`: the second build, with the reference's matching entries copied in; the first is
        kept aside until keep_build says which of the two the other calls use."""
        if copy:
            state["first_build"] = state.pop("model")
        _seed_all(seed)
        with torch.no_grad():
            model = state["module"].ModelNew(*init_inputs)
        weights = load_reference_weights(model, state_dict, convention, copy=copy)
        model = model.to(device)
        state["model"] = model.eval() if convention.eval_mode else model
        return {"weights": weights}

    def keep_build(copied: bool) -> dict:
        """After the second build's first trial: keep it (`copied`) or go back to the first."""
        first = state.pop("first_build", None)
        if not copied and first is not None:
            state["model"] = first
        del first
        return {}

    def forward(inputs: list, output_nbytes: list[int], seed: int, watched: bool = True,
                output_buffers: list | None = None) -> dict:
        """One correctness call; `watched=False`: without the operator audit (no dispatch mode on
        the stack), so a candidate honest only when watched shows what it does otherwise. The
        outputs' host copies go into `output_buffers`, the evaluator's storages, where they fit."""
        model = state["model"]
        device_inputs = _to_device(inputs, device)
        # What they held before the call, where they are: only an input the call changed goes
        # back to the evaluator (a 64 MiB input nine times per evaluation otherwise).
        before = device_snapshot(device_inputs)
        state["output_nbytes"] = output_nbytes
        poison_free_memory(device, output_nbytes)
        _seed_all(seed)  # the seed the reference's call ran after
        with torch.no_grad():  # beside no timing: the evaluator holds the device's work lock meanwhile
            outputs = guard(lambda: model(*device_inputs)) if watched else model(*device_inputs)
            clock.synchronize()
        report = inspect_outputs(outputs, device_inputs, device, into=output_buffers)
        # Held (so the allocator cannot hand their memory out again) beside copies of them taken
        # now, until check_held compares them once, after the last trial: on the device while
        # they fit a budget (no second trip to the host), else private host copies.
        state["held_outputs"].append((outputs, held_copies(outputs, state)))
        return {
            **report,
            # None: unchanged (the same metadata and bytes as before the call); else its copy.
            "inputs_after": [None if unchanged(was, now) else _input_after(now, lent)
                             for was, now, lent in zip(before, device_inputs, inputs, strict=True)],
            "findings": guard.findings.drain(),
            "precision": sorted(guard.findings.precision | tf32_switches(configured)),
        }

    def check_held() -> dict:
        """After the correctness calls: if an output handed out by one call has changed since,
        a later call wrote its answer into storage already handed out. Once, after the last call,
        rather than every held output at every call (quadratic in the calls, seconds for large
        outputs on the H100): storage reused at any call is still overwritten at the end."""
        return {"reused": [change for held, copies in state["held_outputs"] for change in storage_changes(held, copies)]}

    def warm(content_sets: list) -> dict:
        """Warm-up and profiled calls on the warm-up sets; these contents never come back. The
        evaluator holds the device's timing lock meanwhile (as for stage and time)."""
        fit_timed_threads(device)  # timed from now on: torch's threads fit the reserved cores (CPU)
        state["held_outputs"].clear()
        state["held_on_device_bytes"] = 0
        model = state["model"]
        state["buffers"] = buffers = input_buffers([_to_device(content, device) for content in content_sets])
        with torch.no_grad():
            per_call_ms = timer.warm_up(lambda buffer: lambda: model(*buffer), buffers)
            profiled = timer.profile(model, buffers, guard, per_call_ms)
        state["overlap"] = timer.overlaps_launch(profiled)
        return {
            "per_call_ms": per_call_ms,
            "device_ms": profiled.device_ms if profiled else None,
            "device_busy_ms": profiled.busy_ms if profiled else None,
            "kernel_names": profiled.kernel_names if profiled else [],
            "own_kernel_names": own_kernel_names(candidate, sys.modules),
            "launch_overlapped": state["overlap"],
            "findings": guard.findings.drain() + timer.persistence.drain(),
            "precision": sorted(guard.findings.precision | tf32_switches(configured)
                                | precision_flags(profiled.kernel_names if profiled else [],
                                                  tf32_allowed=allows_tf32(configured))),
        }

    def stage(timed_sets: list[dict]) -> dict:
        """The timed calls' inputs, each never seen before, made ready: on the GPU all on the
        device first when they fit, with memory for every call's output copies, so the calls run
        back to back as the baselines' do (timer.staged_on_device, timer.OutputCopies)."""
        staged = staged_on_device([fresh["inputs"] for fresh in timed_sets], sum(state["output_nbytes"]), device)
        state["timed"] = staged if staged is not None else [fresh["inputs"] for fresh in timed_sets]
        state["timed_seeds"] = [fresh["seed"] for fresh in timed_sets]
        # On the CPU too the copies go into that slab: a shared-memory copy per call left glibc
        # handing the next call's output fresh pages, faulted in inside its timed region (an
        # identity leaky ReLU on 256x512 at 0.05-0.2x of eager; README, "What a timed call includes").
        state["copies"] = (OutputCopies(state["output_nbytes"], len(timed_sets), device)
                           if staged is not None or device == "cpu" else None)
        return {"staged": staged is not None}

    def time_candidate() -> dict:
        """Each staged set in one timed call, its outputs copied right after it (outside the
        timed region). Nothing else in this request: the evaluator times it with its own clock."""
        model, buffers = state["model"], state["buffers"]
        timed_run = guard.light() if config.timing_config.audit_timed_calls else None

        def call_on(buffer: list) -> object:
            if timed_run is None:
                return lambda: model(*buffer)
            return lambda: timed_run(lambda: model(*buffer))

        with torch.no_grad():
            loop = timed_calls(timer, call_on, buffers, state.pop("timed"), state.pop("timed_seeds"), state["overlap"],
                               device, state["copies"])
        state["timed_outputs"] = loop.pop("outputs")
        return loop

    def audit(audited_sets: list[dict]) -> dict:
        """The timed calls' outputs to the evaluator, then the audited check round, as checked as
        the correctness trials, on fresh content too. Bare and audited calls cannot tell each
        other apart by content."""
        model, buffers = state["model"], state["buffers"]
        timed_outputs, copies = state.pop("timed_outputs"), state.pop("copies")
        if copies is not None:
            timed_outputs = [_to_send(call_copies) for call_copies in timed_outputs]
            del copies  # the slab they were views of
        audited_ms, audited_outputs, violations = [], [], []
        operators_before, calls_before = guard.findings.operators_seen, guard.findings.python_calls_seen
        with torch.no_grad():
            for call_index, fresh in enumerate(audited_sets):
                buffer = buffers[call_index % len(buffers)]
                load_content(buffer, _to_device(fresh["inputs"], device))
                poison_free_memory(device, state["output_nbytes"])
                _seed_all(fresh["seed"])
                clock.synchronize()
                elapsed_ms, output = clock.time_call_ms(lambda buffer=buffer: guard(lambda: model(*buffer)))
                audited_ms.append(elapsed_ms)
                report = inspect_outputs(output, [], device)
                audited_outputs.append(report["outputs"])
                violations += report["violations"]
        audited_count = max(len(audited_sets), 1)
        return {
            "timed_outputs": timed_outputs,
            "audited_outputs": audited_outputs,
            "audited_ms": audited_ms,
            "audited_operators": (guard.findings.operators_seen - operators_before) / audited_count,
            "audited_python_calls": (guard.findings.python_calls_seen - calls_before) / audited_count,
            "findings": guard.findings.drain() + timer.persistence.drain() + violations,
            "precision": sorted(guard.findings.precision | tf32_switches(configured)),
            "backend_settings": capture().to_dict(),  # in force when it was timed
        }

    serve_requests(conn, {"construct": construct, "keep_build": keep_build, "forward": forward, "check_held": check_held,
                          "warm": warm, "stage": stage, "time": time_candidate, "audit": audit})

"""What runs inside the two worker processes: the reference's and the candidate's.

The reference worker imports the problem, draws inputs under fresh `os.urandom` seeds, computes
the reference outputs and times the baselines. The candidate worker never imports the problem: it
builds and imports the candidate, receives weights and inputs as tensors, and returns outputs and
times. Neither decides a verdict; the parent compares.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path

from .fast_build import install as install_fast_build


def _fresh_seed() -> int:
    return int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1)


def setup_worker(spec: dict) -> None:
    from .channel import redirect_stdio

    redirect_stdio(spec["log_path"])
    os.environ.update(spec["env"])


def _reply_error(conn, phase: str, error: BaseException) -> None:
    detail = "".join(traceback.format_exception_only(type(error), error)).strip()
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
    import torch

    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def _to_cpu(values):
    import torch

    return [v.detach().to("cpu", copy=True) if type(v) is torch.Tensor else v for v in values]


def tf32_switches() -> set[str]:
    import torch

    signs = set()
    if torch.backends.cuda.matmul.allow_tf32 or torch.get_float32_matmul_precision() != "highest":
        signs.add("TF32 enabled for matmuls (torch.backends.cuda.matmul)")
    if torch.backends.cudnn.allow_tf32:
        signs.add("TF32 enabled for convolutions (torch.backends.cudnn)")
    return signs


def _seed_all(seed: int) -> None:
    import random

    import torch

    random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


# ----------------------------------------------------------------------------------------------
# Reference worker


def reference_main(conn, spec: dict) -> None:
    setup_worker(spec)
    import torch

    from .config import EvalConfig
    from .files import import_file
    from .locks import device_lock
    from .timer import Clock, Timer

    config = EvalConfig.from_dict(spec["config"])
    device = spec["device"]
    # The reference is the truth: full fp32, no TF32 shortcuts.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        problem = import_file(spec["problem"], "cudaagent_reference_problem")
    except BaseException as error:
        _reply_error(conn, "import", error)
        return
    state: dict = {}

    def prepare(set_count: int) -> dict:
        _seed_all(_fresh_seed())
        init_inputs = list(problem.get_init_inputs())
        _seed_all(_fresh_seed())
        model = problem.Model(*init_inputs).to(device).eval()
        state["model"] = model
        sets = []
        for _ in range(set_count):
            seed = _fresh_seed()
            _seed_all(seed)
            inputs = list(problem.get_inputs())
            with torch.no_grad():
                outputs = model(*_to_device(inputs, device))
            outputs = outputs if isinstance(outputs, (tuple, list)) else [outputs]
            sets.append({"seed": seed, "inputs": _to_cpu(inputs), "outputs": _to_cpu(outputs)})
        state["sets"] = sets
        state_dict = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        return {"init_inputs": _to_cpu(init_inputs), "state_dict": state_dict, "sets": sets}

    def baseline(mode: str, set_indices: list[int]) -> dict:
        model = state["model"]
        if mode == "eager":
            fn = model
        else:
            compile_mode = "max-autotune" if mode == "max-autotune" else "default"
            fn = torch.compile(model, mode=compile_mode)
        content_sets = [_to_device(state["sets"][i]["inputs"], device) for i in set_indices]
        timer = Timer(Clock(device), config.timing_config)
        with torch.no_grad(), device_lock(device):
            measurement = timer.measure(fn, content_sets)
        return {"samples_ms": measurement.samples_ms, "device_ms": measurement.device_ms,
                "launch_overlapped": measurement.launch_overlapped}

    serve_requests(conn, {"prepare": prepare, "baseline": baseline})


# ----------------------------------------------------------------------------------------------
# Candidate worker


def candidate_main(conn, spec: dict) -> None:
    setup_worker(spec)
    # Imported before the candidate, so the clocks and guard references predate its code.
    import numpy  # noqa: F401  (loaded now, not lazily inside a guarded forward)
    import torch

    from .config import EvalConfig
    from .files import Candidate, build_workspace_extension, import_file
    from .guards import ForwardGuard
    from .locks import device_lock
    from .memory import poison_free_memory
    from .outputs import inspect_outputs
    from .provenance import own_kernel_names, precision_flags
    from .rules import get_policy
    from .timer import Clock, Timer

    config = EvalConfig.from_dict(spec["config"])
    device = spec["device"]
    # Full fp32 until the candidate says otherwise; a candidate that turns TF32 on is reported.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    described = spec["candidate"]
    candidate = Candidate(Path(described["path"]), Path(described["model_file"]), described["workspace"])
    guard = ForwardGuard(get_policy(config.policy), device)
    clock = Clock(device)
    timer = Timer(clock, config.timing_config)
    state: dict = {}

    try:
        started = time.perf_counter()
        install_fast_build(spec["pch_dir"] and Path(spec["pch_dir"]))
        if candidate.workspace:
            build_workspace_extension(candidate, device, Path(spec["extensions_dir"]) / "workspace")
        module = import_file(candidate.model_file, "cudaagent_candidate")
        if not hasattr(module, "ModelNew"):
            raise AttributeError(f"{candidate.model_file} defines no ModelNew")
        state["module"] = module
        conn.send({"kind": "built", "seconds": time.perf_counter() - started})
    except BaseException as error:
        _reply_error(conn, "build", error)
        return

    def construct(init_inputs: list, state_dict: dict) -> dict:
        _seed_all(_fresh_seed())
        model = state["module"].ModelNew(*init_inputs)
        own = model.state_dict()
        matching = {name: tensor for name, tensor in state_dict.items() if name in own}
        model.load_state_dict(matching, strict=False)
        state["model"] = model.to(device).eval()
        return {"loaded_weights": sorted(matching)}

    def forward(inputs: list, output_nbytes: list[int]) -> dict:
        model = state["model"]
        device_inputs = _to_device(inputs, device)
        state["output_nbytes"] = output_nbytes
        poison_free_memory(device, output_nbytes)
        with torch.no_grad():
            outputs = guard(lambda: model(*device_inputs))
            clock.synchronize()
        report = inspect_outputs(outputs, device_inputs, device)
        return {
            **report,
            "inputs_after": _to_cpu(device_inputs),
            "findings": guard.findings.drain(),
            "precision": sorted(guard.findings.precision | tf32_switches()),
        }

    def time_candidate(content_sets: list) -> dict:
        model = state["model"]
        device_sets = [_to_device(content, device) for content in content_sets]
        with torch.no_grad(), device_lock(device):
            measurement = timer.measure(
                model, device_sets, audit=guard,
                before_audited_call=lambda: poison_free_memory(device, state["output_nbytes"]))
        timed = [inspect_outputs(output, [], device) for output in measurement.final_outputs]
        audited = [inspect_outputs(output, [], device) for output in measurement.audited_outputs]
        own_names = own_kernel_names(candidate, sys.modules)
        return {
            "samples_ms": measurement.samples_ms,
            "device_ms": measurement.device_ms,
            "device_span_ms": measurement.device_span_ms,
            "launch_overlapped": measurement.launch_overlapped,
            "kernel_names": measurement.kernel_names,
            "own_kernel_names": own_names,
            "final_outputs": [report["outputs"] for report in timed],
            "audited_outputs": [report["outputs"] for report in audited],
            "findings": guard.findings.drain() + [v for report in timed + audited for v in report["violations"]],
            "precision": sorted(guard.findings.precision | precision_flags(measurement.kernel_names) | tf32_switches()),
        }

    serve_requests(conn, {"construct": construct, "forward": forward, "time": time_candidate})

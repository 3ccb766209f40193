"""What the candidate's timed path adds per torch operator over the eager baseline's (#40), on a
launch-bound problem (hundreds of small operators per `forward`), where the host's work per
operator is most of the time.

    python -m experiments.timed_path_overhead [--device cpu] [--repeats 3] [--problem P.py ...]
    python -m experiments.timed_path_overhead --device cuda --problem .kernelbench/KernelBench/level3/15_DenseNet121.py

Two tables, printed with the operators per call counted once (a counting dispatch mode, outside
any timing):
- in this process, what each way of watching a call costs per operator: bare, the timed calls'
  light guard (`--audit-timed-calls`), the correctness calls' full guard, a no-op sys.setprofile
  hook. This is what a watcher left in the timed calls would add;
- through the real evaluator, each problem's identity candidate (its own Model as ModelNew)
  against its eager baseline, per variant: each policy, the light guard on every timed call
  (`audit_timed_calls`, the positive control), no sandbox, no device-time profile (on the GPU:
  no Kineto/CUPTI session and no guarded profiled calls before the timed ones), no reserved CPUs.
  `us/op` is (candidate median - eager median) / operators per call: 0 within noise where the
  candidate's timed path adds nothing per operator.
The default problems are two launch-bound shapes of level 3's outliers, small enough for the CPU: an
RNN cell unrolled over 128 steps (34_VanillaRNNHidden's loop) and a 24-layer DenseNet block on 4x4
maps (15_DenseNet121's). Tests never assert on time: the numbers come from here.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from experiments.identity_set import identity_source
from pytest_cudaagent.core.config import EvalConfig, TimingConfig

RNN_LOOP = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """A vanilla RNN cell unrolled over many steps on tiny tensors (34_VanillaRNNHidden's loop)."""

    def __init__(self, input_size: int, hidden_size: int, output_size: int):
        super(Model, self).__init__()
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
        self.h2o = nn.Linear(hidden_size, output_size)
        self.tanh = nn.Tanh()

    def forward(self, x: torch.Tensor, h0: torch.Tensor) -> torch.Tensor:
        hidden = h0
        outputs = []
        for t in range(x.size(0)):
            combined = torch.cat((x[t], hidden), dim=1)
            hidden = self.tanh(self.i2h(combined))
            outputs.append(self.h2o(hidden))
        return torch.stack(outputs, dim=0)


def get_inputs():
    return [torch.rand(128, 2, 8), torch.rand(2, 8)]


def get_init_inputs():
    return [8, 8, 4]
'''

DENSE_BLOCK = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A DenseNet block on 4x4 maps (15_DenseNet121's): BatchNorm, ReLU, conv, cat per layer."""

    def __init__(self, layers: int = 24, channels: int = 4, growth: int = 2):
        super(Model, self).__init__()
        self.layers = nn.ModuleList(
            nn.Sequential(nn.BatchNorm2d(channels + i * growth), nn.ReLU(inplace=True),
                          nn.Conv2d(channels + i * growth, growth, 3, padding=1, bias=False), nn.Dropout(0.0))
            for i in range(layers))

    def forward(self, x):
        features = [x]
        for layer in self.layers:
            features.append(layer(x))
            x = torch.cat(features, 1)
        return F.relu(x)


def get_inputs():
    return [torch.rand(1, 4, 4, 4)]


def get_init_inputs():
    return [24, 4, 2]
'''

DEFAULT_PROBLEMS = {"rnn_cell_loop": RNN_LOOP, "dense_block_tiny": DENSE_BLOCK}


def load(path: Path, name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def operators_per_call(module, device: str) -> int:
    """ATen operators one forward issues, counted by a dispatch mode (outside any timing)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        seen = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.seen += 1
            return func(*args, **(kwargs or {}))

    model = module.Model(*module.get_init_inputs()).to(device).eval()
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    with torch.no_grad():
        model(*inputs)
        with Count():
            model(*inputs)
    return Count.seen


def watcher_costs(module, device: str, calls: int) -> list[tuple[str, float]]:
    """Median ms of one forward, in this process, under each way of watching it."""
    from pytest_cudaagent.rules.guards import ForwardGuard
    from pytest_cudaagent.rules.rules import get_policy

    model = module.Model(*module.get_init_inputs()).to(device).eval()
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    guard = ForwardGuard(get_policy("calibration"), device, model_of=lambda: model)

    def profiled(call):
        sys.setprofile(lambda frame, event, arg: None)
        try:
            return call()
        finally:
            sys.setprofile(None)

    ways = [("bare (the timed calls)", lambda call: call()),
            ("light guard (--audit-timed-calls)", guard.light()),
            ("full guard (correctness calls)", guard),
            ("no-op sys.setprofile hook", profiled)]
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    rows = []
    with torch.no_grad():
        for label, run in ways:
            for _ in range(3):
                run(lambda: model(*inputs))
            samples = []
            for _ in range(calls):
                sync()
                started = time.perf_counter()
                run(lambda: model(*inputs))
                sync()
                samples.append(1000 * (time.perf_counter() - started))
            guard.findings.drain()
            rows.append((label, statistics.median(samples)))
    return rows


def variants(device: str) -> dict[str, EvalConfig]:
    timing = TimingConfig(warmup_ms=50, repeat_ms=400, min_samples=15, max_samples=60)
    base = EvalConfig(device=device, baselines=("eager",), policy="calibration", timing_config=timing, trials=3)
    return {
        "calibration": base,
        "permissive": dataclasses.replace(base, policy="permissive"),
        "strict": dataclasses.replace(base, policy="strict"),
        "calibration, guard on timed calls": dataclasses.replace(
            base, timing_config=dataclasses.replace(timing, audit_timed_calls=True)),
        "calibration, no sandbox": dataclasses.replace(base, sandbox=False),
        "calibration, no device-time profile": dataclasses.replace(
            base, timing_config=dataclasses.replace(timing, device_time=False)),
        "calibration, no reserved CPUs": dataclasses.replace(
            base, timing_config=dataclasses.replace(timing, reserved_cpus=0)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.timed_path_overhead", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--problem", action="append", type=Path, help="a problem .py (default: the two built in)")
    parser.add_argument("--repeats", type=int, default=3, help="evaluations per variant (medians of their medians)")
    parser.add_argument("--calls", type=int, default=30, help="calls per way in the in-process table")
    parser.add_argument("--only", action="append", help="run only the variants whose name contains this")
    args = parser.parse_args(argv)
    from pytest_cudaagent.evaluation import evaluate

    console = Console()
    work = Path(tempfile.mkdtemp(prefix="timed-path-"))
    problems = []
    for name, source in DEFAULT_PROBLEMS.items() if not args.problem else ():
        (work / f"{name}.py").write_text(source)
        problems.append(work / f"{name}.py")
    problems += args.problem or []
    for problem in problems:
        candidate = work / "candidates" / problem.name
        candidate.parent.mkdir(exist_ok=True)
        candidate.write_text(identity_source(problem.read_text()))
        module = load(problem, f"overhead_{problem.stem}")
        ops = operators_per_call(module, args.device)
        table = Table("how the call is watched", "median ms", "us/op over bare",
                      title=f"{problem.stem}: {ops} operators per call, in this process ({args.device})")
        rows = watcher_costs(module, args.device, args.calls)
        for label, median in rows:
            table.add_row(label, f"{median:.3f}", f"{1000 * (median - rows[0][1]) / ops:+.2f}")
        console.print(table)
        table = Table("variant", "status", "candidate ms (IQR)", "eager ms (IQR)", "speedup", "us/op",
                      title=f"{problem.stem}: identity candidate vs eager through the evaluator, "
                            f"median of {args.repeats} ({args.device})")
        for label, config in variants(args.device).items():
            if args.only and not any(part in label for part in args.only):
                continue
            runs = [evaluate(problem, candidate, config) for _ in range(args.repeats)]
            timed = [r for r in runs if r.timing.get("candidate") and r.timing.get("eager")]
            status = ",".join(sorted({r.status for r in runs}))
            if not timed:
                table.add_row(label, status, "-", "-", "-", "-")
                continue
            cand = statistics.median(r.timing["candidate"].median_ms for r in timed)
            eager = statistics.median(r.timing["eager"].median_ms for r in timed)
            cand_iqr = statistics.median(r.timing["candidate"].iqr_ms for r in timed)
            eager_iqr = statistics.median(r.timing["eager"].iqr_ms for r in timed)
            table.add_row(label, status, f"{cand:.3f} ({cand_iqr:.3f})", f"{eager:.3f} ({eager_iqr:.3f})",
                          f"{eager / cand:.2f}x", f"{1000 * (cand - eager) / ops:+.2f}")
        console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Reward latency of a batch of N fresh candidates with scorer xdist against scorer pool (and GPU utilisation while scoring), and PPO tokens/s with each scorer on 1 and 2 processes.

Candidates are fixed, not sampled: FixedAnswerEnvironment answers task i with the i-th of a list of
(problem, candidate) pairs, each made fresh (a unique comment, so no build is cached). On a GPU the
pairs are examples/problems with examples/candidates/cuda and the evaluator's defaults; with
--quick (what a CPU runs in minutes), a small leaky ReLU with a PyTorch candidate, permissive
policy, no timing. Two batches per scorer: the first pays start-up (the pool's spawned workers
import torch, as every xdist run's workers do), the second is the pool's steady state.

PPO runs go through `accelerate launch` of this module's --train entry (the trainer with the
environment swapped), timed as experiments.ppo_scaling times them (first step left out). Runs on 2
processes need 2 GPUs (or --cpu, which checks the script, not speed).

    python -m experiments.reward_latency --out out/reward-latency               # GPU(s)
    python -m experiments.reward_latency --out out/reward-latency --quick --cpu  # CPU
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from experiments.ppo_scaling import ScalingRun, launch, step_records, summarise
from policy.trainer.cuda_single_turn import CudaSingleTurnEnvironment
from policy.trainer.environments import Task

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
QUICK_PROBLEM = REPO / "tests" / "data" / "problems" / "small_leaky_relu.py"
QUICK_CANDIDATE = '''import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, negative_slope):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        return F.leaky_relu(x, self.negative_slope)
'''
# --quick: what the evaluator can do in seconds on a CPU (a PyTorch candidate is a fallback under
# the strict policy, so it is checked under the permissive one).
QUICK_EVAL_OPTIONS = {"trials": 2, "timing": False, "baselines": [], "policy": "permissive"}


@dataclass
class FixedAnswerEnvironment(CudaSingleTurnEnvironment):
    """cuda-single-turn with each episode's candidate fixed: task i answers answers[i % len], a
    (problem, candidate file or None for an answer without code) pair, whatever the model wrote."""

    answers: tuple = ()
    # A unique comment in every candidate, so the evaluator's build cache never has it.
    fresh: bool = False

    def sample_tasks(self, count: int, rng: random.Random) -> list[Task]:
        tasks = []
        for index in range(count):
            problem, candidate = self.answers[index % len(self.answers)]
            messages = [{"role": "user", "content": f"Write ModelNew for {Path(problem).name}."}]
            tasks.append(Task(f"{Path(problem).stem}-{index}", messages, {"problem": problem, "candidate": candidate}))
        return tasks

    def candidate_source(self, task: Task, assistant_turns: list[str]) -> str | None:
        if task.payload["candidate"] is None:
            return None
        source = Path(task.payload["candidate"]).read_text()
        return source + f"\n# fresh {uuid.uuid4().hex}\n" if self.fresh else source


def benchmark_answers(quick: bool, work: Path) -> tuple[list[tuple[str, str]], dict, str]:
    """(answers, eval_options, problems path) for the environment."""
    if quick:
        candidate = work / "quick_candidate.py"
        candidate.parent.mkdir(parents=True, exist_ok=True)
        candidate.write_text(QUICK_CANDIDATE)
        return [(str(QUICK_PROBLEM), str(candidate))], QUICK_EVAL_OPTIONS, str(QUICK_PROBLEM)
    problems = sorted((EXAMPLES / "problems").glob("*.py"))
    answers = [(str(p), str(EXAMPLES / "candidates" / "cuda" / p.name)) for p in problems]
    return answers, {}, str(EXAMPLES / "problems")


class GpuUtilisation:
    """Mean utilisation of every GPU (NVML), sampled every 100 ms while the block runs."""

    def __init__(self):
        self.samples: list[float] = []
        self._stop = threading.Event()

    def __enter__(self):
        import pynvml

        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]

        def sample():
            while not self._stop.wait(0.1):
                self.samples += [pynvml.nvmlDeviceGetUtilizationRates(h).gpu for h in handles]

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        import pynvml

        self._stop.set()
        self._thread.join()
        pynvml.nvmlShutdown()

    @property
    def mean(self) -> float | None:
        return sum(self.samples) / len(self.samples) if self.samples else None


def scored_so_far(futures: list, work_dir: Path) -> int:
    """Candidates scored so far: the pool's finished futures, or the lines xdist's run has written
    to its batches' results.jsonl (its futures finish only with the whole batch)."""
    done = sum(future.done() for future in futures)
    written = sum(sum(1 for line in path.read_text().splitlines() if line.strip())
                  for path in work_dir.glob("batch-*/results.jsonl")) if work_dir.is_dir() else 0
    return max(done, written)


@contextlib.contextmanager
def progress_log(path: Path, futures: list, work_dir: Path, every_s: float = 5.0):
    """A line every `every_s` seconds (seconds since the start, candidates scored so far), so a
    run cut short by its time limit still says how fast each scorer went."""
    stop, started = threading.Event(), time.perf_counter()

    def sample():
        with open(path, "a") as log:
            while not stop.wait(every_s):
                log.write(json.dumps({"seconds": round(time.perf_counter() - started, 2),
                                      "scored": scored_so_far(futures, work_dir)}) + "\n")
                log.flush()

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def time_batches(scorer_name: str, environment, count: int, devices: list[str], work: Path, gpu: bool,
                 batches: int = 2) -> list[dict]:
    """`batches` batches of `count` fresh candidates through one scorer; a row per batch, and
    `<work>/<scorer>-progress-<batch>.jsonl` while each runs."""
    from policy.trainer.rewards import build_scorer

    work.mkdir(parents=True, exist_ok=True)
    scorer = build_scorer(environment, scorer_name, devices, work / scorer_name)
    rows = []
    try:
        for batch in range(batches):
            tasks = environment.sample_tasks(count, random.Random(batch))
            monitor = GpuUtilisation() if gpu else None
            started = time.perf_counter()
            futures: list = []
            progress = progress_log(work / f"{scorer_name}-progress-{batch}.jsonl", futures, work / scorer_name)
            with monitor or contextlib.nullcontext(), progress:
                futures += [scorer.submit(task, [""]) for task in tasks]
                scorer.flush()
                rewards = [future.result() for future in futures]
            seconds = time.perf_counter() - started
            rows.append({"scorer": scorer_name, "batch": batch, "candidates": count, "workers": len(devices),
                         "seconds": seconds, "candidates_per_min": 60 * count / seconds,
                         "mean_reward": sum(rewards) / count, "failed": sum(r < 0 for r in rewards),
                         "gpu_util_pct": monitor.mean if monitor else None})
    finally:
        scorer.close()
    return rows


def ppo_run(scorer_name: str, processes: int, args, answers, eval_options, problems,
            devices: list[str]) -> tuple[ScalingRun, dict]:
    from experiments.ppo_scaling import train_config

    big = (64, 2) if args.quick else (768, 8)
    run = ScalingRun(experiment=scorer_name, name=f"{scorer_name}-{processes}", processes=processes,
                     tasks_per_step=args.ppo_batch, minibatch_size=args.ppo_batch, micro_batch_size=min(8, args.ppo_batch),
                     hidden_size=big[0], layers=big[1], steps=args.ppo_steps, max_new_tokens=8 if args.quick else 128,
                     actor_lr=1e-5, critic_lr=1e-5, kl_coef=0.05)
    config = train_config(run, args.out / "runs" / run.name, "no" if args.cpu else "bf16")
    config["stages"][0]["environment"] = {
        "kind": "cuda-single-turn", "scorer": scorer_name,
        "options": {"problems": problems, "device": "cpu" if args.cpu else "cuda", "eval_options": eval_options,
                    "answers": [list(pair) for pair in answers], "fresh": True},
    }
    if not args.cpu and args.workers and processes == 1:  # several scoring workers on the one GPU
        config["stages"][0]["environment"]["scoring_devices"] = devices
    return run, config


def train_entry(argv: list[str]) -> int:
    """The trainer's CLI with cuda-single-turn built as FixedAnswerEnvironment (for accelerate launch)."""
    import policy.trainer.runtime as runtime
    from policy.trainer.cli import main as train_main

    build = runtime.build_environment

    def build_environment(kind: str, options: dict):
        if kind != "cuda-single-turn":
            return build(kind, options)
        answers = tuple(tuple(pair) for pair in options.get("answers", ()))
        return FixedAnswerEnvironment(**{**options, "answers": answers})

    runtime.build_environment = build_environment
    return train_main(argv)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--train":
        return train_entry(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for work dirs, logs and results.json")
    parser.add_argument("--count", type=int, default=64, help="candidates per scored batch (default 64)")
    parser.add_argument("--quick", action="store_true", help="small problem, PyTorch candidate, no timing (CPU)")
    parser.add_argument("--cpu", action="store_true", help="score and train on the CPU")
    parser.add_argument("--cpu-workers", type=int, default=2, help="scoring workers with --cpu (default 2)")
    parser.add_argument("--processes", default="1,2", help="PPO process counts to run (2 needs 2 GPUs or --cpu)")
    parser.add_argument("--ppo-batch", type=int, default=64, help="PPO episodes per step per process")
    parser.add_argument("--ppo-steps", type=int, default=4, help="PPO steps per run (the first is not timed)")
    parser.add_argument("--skip", choices=("latency", "ppo"), action="append", default=[], help="leave a part out")
    parser.add_argument("--workers", type=int, help="scoring workers, spread over the GPUs (default: one per GPU)")
    parser.add_argument("--batches", type=int, default=2, help="scored batches per scorer (default 2: cold, then warm)")
    parser.add_argument("--scorers", default="xdist,pool", help="scorers to run, in order (default xdist,pool)")
    args = parser.parse_args(argv)
    args.out = args.out.resolve()

    import torch

    gpus = 0 if args.cpu else torch.cuda.device_count()
    if not args.cpu and not gpus:
        print("reward_latency: no GPU visible; use --cpu (with --quick for minutes, not hours)", file=sys.stderr)
        return 2
    devices = ["cpu"] * args.cpu_workers if args.cpu else [f"cuda:{i % gpus}" for i in range(args.workers or gpus)]
    scorers = args.scorers.split(",")
    args.out.mkdir(parents=True, exist_ok=True)  # the PPO part alone writes its launch log there first
    answers, eval_options, problems = benchmark_answers(args.quick, args.out)
    report: dict = {"machine": torch.cuda.get_device_name(0) if gpus else "cpu", "gpus": gpus, "devices": devices}

    if "latency" not in args.skip:
        environment = FixedAnswerEnvironment(problems, device="cpu" if args.cpu else "cuda", eval_options=eval_options,
                                             answers=tuple(answers), fresh=True)
        rows = []
        for scorer in scorers:  # the table so far after each scorer (a cut-short run still says something)
            rows += time_batches(scorer, environment, args.count, devices, args.out / "latency", bool(gpus), args.batches)
            print(pd.DataFrame(rows).to_string(index=False, float_format=lambda value: f"{value:.2f}"), flush=True)
        report["latency"] = rows

    if "ppo" not in args.skip:
        frames = []
        with open(args.out / "launch.log", "a") as log:
            for processes in (int(p) for p in args.processes.split(",")):
                if processes > 1 and not args.cpu and gpus < processes:
                    print(f"reward_latency: {processes} processes need {processes} GPUs, this machine has {gpus}; "
                          "skipped", file=sys.stderr)
                    continue
                for scorer in scorers:
                    run, config = ppo_run(scorer, processes, args, answers, eval_options, problems, devices)
                    try:
                        metrics = launch(run, args.out / "runs", args.cpu, log, config,
                                         entry=("-m", "experiments.reward_latency", "--train"))
                        frames.append(step_records(run, metrics))
                    except RuntimeError as error:  # the other runs still say something
                        print(f"reward_latency: {error}", file=sys.stderr)
        if frames:
            table = summarise(pd.concat(frames, ignore_index=True))
            columns = ["experiment", "processes", "episodes_per_step", "step_s", "tokens_per_s", "throughput_x",
                       "reward_first4"]
            print(table[[c for c in columns if c in table]].rename(columns={"experiment": "scorer"}).to_string(
                index=False, float_format=lambda value: f"{value:.3f}"))
            report["ppo"] = table.to_dict(orient="records")
    (args.out / "results.json").write_text(json.dumps(report, indent=2, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())

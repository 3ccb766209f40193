"""Measures PPO on one process against two data-parallel ones (README, Measured: "Trainer on 2 GPUs").

PPO on one process against two data-parallel processes (`accelerate launch --num_processes 2`),
through the real trainer (`policy.trainer.cli`), in two experiments:

* curve: the toy task (target-token) on the tiny model, the same global batch on 1 and 2
  processes (each of 2 takes half the episodes and half of each minibatch). Data parallelism
  should not change the learning: the reward, policy-loss and value-loss curves should agree
  within sampling noise.
* throughput: a ~57M-parameter random model (768 hidden, 8 layers, the tiny tokenizer's 512-token
  vocabulary) writing answers of up to 128 tokens, on 1 process and on 2 processes with the same
  episodes per process (weak scaling: about twice the episodes per second if the processes do not
  slow each other) and with the same global batch (strong scaling: the step time falls by as much
  as splitting the batch saves).

Step time is the main process's rollout + update time from metrics.jsonl, the first step left out
(allocations, autotuning). Prints a table, writes scaling.json, curves.csv, curves.png and
launch.log (every run's output) to --out; the runs themselves go to --runs.

    python -m experiments.ppo_scaling --out out/ppo-scaling            # 2 GPUs
    python -m experiments.ppo_scaling --out out/ppo-scaling --cpu --quick   # the script itself, on the CPU
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]


@dataclass
class ScalingRun:
    experiment: str  # curve | throughput
    name: str
    processes: int
    tasks_per_step: int  # per process
    minibatch_size: int  # per process
    micro_batch_size: int
    hidden_size: int
    layers: int
    steps: int
    max_new_tokens: int
    actor_lr: float
    critic_lr: float
    kl_coef: float


def planned_runs(quick: bool) -> list[ScalingRun]:
    # The curve runs repeat test_gpu.py's bf16 learning set-up at a global batch of 64.
    curve_steps, throughput_steps = (3, 2) if quick else (24, 10)
    big = (64, 2) if quick else (768, 8)
    new_tokens = 8 if quick else 128
    curve = dict(experiment="curve", hidden_size=64, layers=2, steps=curve_steps, max_new_tokens=6,
                 actor_lr=3e-3, critic_lr=1e-3, kl_coef=0.0)
    throughput = dict(experiment="throughput", hidden_size=big[0], layers=big[1], steps=throughput_steps,
                      max_new_tokens=new_tokens, actor_lr=1e-5, critic_lr=1e-5, kl_coef=0.05)
    return [
        ScalingRun(name="curve-1", processes=1, tasks_per_step=64, minibatch_size=32, micro_batch_size=16, **curve),
        ScalingRun(name="curve-2", processes=2, tasks_per_step=32, minibatch_size=16, micro_batch_size=8, **curve),
        ScalingRun(name="throughput-1", processes=1, tasks_per_step=64, minibatch_size=16, micro_batch_size=8,
                   **throughput),
        ScalingRun(name="throughput-2-weak", processes=2, tasks_per_step=64, minibatch_size=16, micro_batch_size=8,
                   **throughput),
        ScalingRun(name="throughput-2-strong", processes=2, tasks_per_step=32, minibatch_size=8, micro_batch_size=8,
                   **throughput),
    ]


def train_config(run: ScalingRun, output_dir: Path, mixed_precision: str) -> dict:
    return {
        "output_dir": str(output_dir),
        "model": "tiny",
        "tiny_model": {"hidden_size": run.hidden_size, "layers": run.layers, "seed": 0},
        "seed": 0,
        "mixed_precision": mixed_precision,
        "save_every": 10_000,  # no checkpoints inside the timed steps
        "tensorboard": False,
        "progress": False,
        "stages": [{
            "name": "ppo-single-turn",
            "environment": {"kind": "target-token"},
            "rollout": {"max_new_tokens": run.max_new_tokens, "max_total_tokens": run.max_new_tokens + 64,
                        "generation_batch_size": run.tasks_per_step},
            "ppo": {"steps": run.steps, "tasks_per_step": run.tasks_per_step, "minibatch_size": run.minibatch_size,
                    "micro_batch_size": run.micro_batch_size, "inference_batch_size": run.tasks_per_step,
                    "ppo_epochs": 2, "actor_lr": run.actor_lr, "critic_lr": run.critic_lr, "kl_coef": run.kl_coef},
        }],
    }


def launch(run: ScalingRun, work: Path, cpu: bool, log, config: dict | None = None,
           entry: tuple[str, ...] = ("-m", "policy.trainer.cli")) -> Path:
    """Runs one configuration (`config`, default train_config(run)) through `accelerate launch`
    of `entry` (a module taking --config and --no-resume); returns its metrics.jsonl."""
    run_dir = work / run.name
    config_path = work / f"{run.name}.yaml"
    work.mkdir(parents=True, exist_ok=True)
    mixed_precision = "no" if cpu else "bf16"
    threads = 1 if cpu else 8
    config_path.write_text(yaml.safe_dump(config or train_config(run, run_dir, mixed_precision)))
    command = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(run.processes),
               "--num_machines", "1", "--mixed_precision", mixed_precision, "--dynamo_backend", "no",
               "--main_process_port", "0",
               # The same host threads for every run (torchrun would give each of several
               # processes one, a single process all of them).
               "--num_cpu_threads_per_process", str(threads)]
    if run.processes > 1:
        command.append("--multi_gpu")  # with ACCELERATE_USE_CPU=1: several CPU processes over gloo
    command += [*entry, "--config", str(config_path), "--no-resume"]
    env = os.environ | {"PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    if cpu:
        env |= {"ACCELERATE_USE_CPU": "1"}
    started = time.perf_counter()
    print(f"== {run.name}: {run.processes} process(es) x {run.tasks_per_step} episodes, "
          f"{run.hidden_size} hidden x {run.layers} layers, {run.steps} steps", file=log, flush=True)
    completed = subprocess.run(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    print(f"== {run.name}: exit {completed.returncode} after {time.perf_counter() - started:.0f} s", file=log, flush=True)
    metrics = run_dir / "00-ppo-single-turn" / "metrics.jsonl"
    if completed.returncode != 0 or not metrics.exists():
        raise RuntimeError(f"{run.name} failed (exit {completed.returncode}); its output is in {log.name}")
    return metrics


def step_records(run: ScalingRun, metrics: Path) -> pd.DataFrame:
    frame = pd.read_json(metrics, lines=True)
    frame["episodes"] = frame["reward_counts"].map(lambda counts: sum(counts.values()))
    frame["step_seconds"] = frame["rollout_seconds"] + frame["update_seconds"]
    frame["tokens"] = frame["sequence_length"] * frame["episodes"]
    frame["run"], frame["experiment"], frame["processes"] = run.name, run.experiment, run.processes
    return frame[["experiment", "run", "processes", "step", "episodes", "reward_mean", "policy_loss", "value_loss",
                  "kl", "entropy", "step_seconds", "rollout_seconds", "update_seconds", "tokens"]]


def summarise(curves: pd.DataFrame) -> pd.DataFrame:
    """One row per run: throughput (first step left out) and the curve's start and end, with
    ratios to the 1-process run of the same experiment."""
    rows = []
    for run, frame in curves.groupby("run", sort=False):
        timed = frame[frame["step"] > 0] if len(frame) > 1 else frame
        seconds = timed["step_seconds"].sum()
        head, tail = frame["reward_mean"].head(4).mean(), frame["reward_mean"].tail(4).mean()
        rows.append({"experiment": frame["experiment"].iat[0], "run": run, "processes": frame["processes"].iat[0],
                     "episodes_per_step": int(frame["episodes"].iat[0]), "step_s": seconds / len(timed),
                     "episodes_per_s": timed["episodes"].sum() / seconds, "tokens_per_s": timed["tokens"].sum() / seconds,
                     "reward_first4": head, "reward_last4": tail,
                     "policy_loss_mean": frame["policy_loss"].mean(), "value_loss_last4": frame["value_loss"].tail(4).mean()})
    table = pd.DataFrame(rows)
    for _experiment, group in table.groupby("experiment"):
        base = group[group["processes"] == 1]
        if base.empty:
            continue
        base = base.iloc[0]
        table.loc[group.index, "throughput_x"] = group["tokens_per_s"] / base["tokens_per_s"]
        table.loc[group.index, "step_time_x"] = base["step_s"] / group["step_s"]
        # How far each run's reward curve is from the 1-process one, step by step.
        reference = curves[curves["run"] == base["run"]].set_index("step")["reward_mean"]
        for index, row in group.iterrows():
            mine = curves[curves["run"] == row["run"]].set_index("step")["reward_mean"]
            table.loc[index, "reward_gap_mean"] = (mine - reference).abs().mean()
    return table


def plot(curves: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for _run, frame in curves[curves["experiment"] == "curve"].groupby("run", sort=False):
        label = f"{frame['processes'].iat[0]} process(es)"
        for axis, column in zip(axes, ("reward_mean", "policy_loss", "value_loss"), strict=True):
            axis.plot(frame["step"], frame[column], marker="o", markersize=3, label=label)
            axis.set_title(column)
            axis.set_xlabel("PPO step")
    axes[0].legend()
    figure.suptitle("Same global batch (64 episodes) on 1 and 2 data-parallel processes")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for the runs, logs, table and plot")
    parser.add_argument("--cpu", action="store_true", help="CPU processes over gloo (checks the script, not speed)")
    parser.add_argument("--quick", action="store_true", help="few steps and a small model")
    parser.add_argument("--only", choices=("curve", "throughput"), help="one experiment only")
    parser.add_argument("--runs", type=Path, help="folder for the runs' models and metrics (default OUT/runs)")
    args = parser.parse_args(argv)
    if not args.cpu:
        import torch

        if torch.cuda.device_count() < 2:
            print(f"ppo_scaling needs 2 GPUs, this machine has {torch.cuda.device_count()}; "
                  "use --cpu to check the script on CPU processes", file=sys.stderr)
            return 2
    args.out.mkdir(parents=True, exist_ok=True)
    runs = [run for run in planned_runs(args.quick) if args.only in (None, run.experiment)]
    frames = []
    with open(args.out / "launch.log", "a") as log:
        for run in runs:
            try:
                frames.append(step_records(run, launch(run, args.runs or args.out / "runs", args.cpu, log)))
            except RuntimeError as error:  # the other runs still say something
                print(f"ppo_scaling: {error}", file=sys.stderr)
    if not frames:
        return 1
    curves = pd.concat(frames, ignore_index=True)
    curves.to_csv(args.out / "curves.csv", index=False)
    table = summarise(curves)
    print(table.to_string(index=False, float_format=lambda value: f"{value:.3f}"))
    for run, frame in curves[curves["experiment"] == "curve"].groupby("run", sort=False):
        print(f"{run} reward curve: {[round(value, 3) for value in frame['reward_mean']]}")
    if (curves["experiment"] == "curve").any():
        plot(curves, args.out / "curves.png")
    (args.out / "scaling.json").write_text(json.dumps(
        {"runs": [asdict(run) for run in runs], "summary": table.to_dict(orient="records")}, indent=2, default=float))
    return 0 if len(frames) == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())

#!/bin/bash
# One shard of a `cudaagent bench` sweep per Slurm array task, each on a whole node (all its GPUs);
# the merge (slurm-merge.sh) runs once every task has ended. Submit both with slurm-submit.sh:
#   SHARDS=4 KERNELBENCH=$HOME/KernelBench CANDIDATES=$HOME/candidates OUT=$PWD/sweep ./slurm-submit.sh
# or by hand: sbatch --array=0-3 slurm-bench.sh (the shard count is the array's size).
#SBATCH --job-name=cudaagent-bench
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --exclusive
#SBATCH --gpus-per-node=8
#SBATCH --time=12:00:00
#SBATCH --requeue
#SBATCH --output=cudaagent-bench-%A_%a.log
set -euo pipefail

INDEX=${SLURM_ARRAY_TASK_ID:?submit as an array job: sbatch --array=0-<N-1> slurm-bench.sh}
SHARDS=${SLURM_ARRAY_TASK_COUNT:?submit as an array job: sbatch --array=0-<N-1> slurm-bench.sh}
KERNELBENCH=${KERNELBENCH:?set KERNELBENCH to a KernelBench clone or its dataset files}
CANDIDATES=${CANDIDATES:?set CANDIDATES to the candidates directory}
OUT=${OUT:?set OUT to a directory every node can write (shared file system)}
# A virtual environment with cuda-agent installed, if cudaagent is not on PATH already.
if [ -n "${VENV:-}" ]; then source "$VENV/bin/activate"; fi

# --resume: a requeued or rerun task goes on where it stopped. Extra options in BENCH_ARGS
# (e.g. "--level 1,2 --policy strict"); every shard must get the same ones, or the merge refuses them.
# shellcheck disable=SC2086
exec cudaagent bench --kernelbench "$KERNELBENCH" --candidates "$CANDIDATES" \
    --shard "$INDEX/$SHARDS" --out "$OUT/shard-$INDEX" --resume ${BENCH_ARGS:-}

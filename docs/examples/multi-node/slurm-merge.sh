#!/bin/bash
# The merge of a slurm-bench.sh sweep: one leaderboard from every shard's results, written to
# $OUT/merged. Exits 1 (its leaderboard still written) when a shard or a pair has no result,
# and names it; rerun that array task (sbatch --array=<I> slurm-bench.sh) and this again.
#SBATCH --job-name=cudaagent-merge
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=2
#SBATCH --time=00:30:00
#SBATCH --output=cudaagent-merge-%j.log
set -euo pipefail

OUT=${OUT:?set OUT to the directory of the sweep, as for slurm-bench.sh}
if [ -n "${VENV:-}" ]; then source "$VENV/bin/activate"; fi

exec cudaagent leaderboard "$OUT"/shard-*/results.jsonl --out "$OUT/merged"

#!/bin/bash
# Submits SHARDS array tasks of slurm-bench.sh and, after all of them (whatever their exit),
# slurm-merge.sh. KERNELBENCH, CANDIDATES, OUT (and VENV, BENCH_ARGS) go along in the environment.
set -euo pipefail
SHARDS=${SHARDS:?set SHARDS, the number of nodes (shards)}
here=$(cd "$(dirname "$0")" && pwd)
job=$(sbatch --parsable --export=ALL --array="0-$((SHARDS - 1))" "$here/slurm-bench.sh")
sbatch --export=ALL --dependency="afterany:${job%%;*}" "$here/slurm-merge.sh"

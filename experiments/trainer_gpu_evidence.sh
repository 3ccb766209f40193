#!/usr/bin/env bash
# The trainer's GPU evidence (issue #7) in one run on a single-GPU machine, under 9 minutes:
#   (a) the gpu-marked trainer tests (bf16 PPO learns, the sampler agrees, the benchmark runs);
#   (b) experiments/ppo_throughput.py, ours against TRL's PPOTrainer on the ~100M-parameter model;
#   (c) multi-turn PPO in the real agent environment (policy/trainer/configs/tiny-agentic-gpu.yaml).
# Each step logs to its own file under $OUT; the key lines are printed. Offline: TRL and what it
# needs beyond the machine's own packages come as wheels in .whl/ (see policy/trainer/README.md).
#
#   bash experiments/trainer_gpu_evidence.sh            # from the repository root; OUT=DIR for the logs
#
# Knobs for a CPU dry run of this script (defaults are the GPU run): WHEELS (wheel folder),
# PPO_ARGS (extra ppo_throughput flags), AGENTIC_CONFIG, EVIDENCE_BUDGET_S (whole-run seconds).
set -u
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-out/trainer-gpu-evidence}
WHEELS=${WHEELS:-.whl}
PPO_ARGS=${PPO_ARGS:-}
AGENTIC_CONFIG=${AGENTIC_CONFIG:-policy/trainer/configs/tiny-agentic-gpu.yaml}
# 9 minutes less a margin for the machine's start-up and the copy of $OUT.
BUDGET_S=${EVIDENCE_BUDGET_S:-510}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TRL_EXPERIMENTAL_SILENCE=1
# No network there: nothing may wait on the Hugging Face hub.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1

# step NAME LIMIT_S LOG COMMAND...: runs COMMAND with its output appended to LOG, under the
# smaller of LIMIT_S and what is left of the budget (timeout signals the whole process group,
# so benchmark workers and evaluation pools go too). Returns the command's exit status.
step() {
    local name=$1 limit=$2 log=$3
    shift 3
    local left=$((BUDGET_S - SECONDS))
    ((left < limit)) && limit=$left
    if ((limit < 15)); then
        echo "== $name: not run, ${left}s left of the ${BUDGET_S}s budget" | tee -a "$log"
        return 124
    fi
    echo "== $name (limit ${limit}s): $*" | tee -a "$log"
    local started=$SECONDS rc
    timeout -k 10 "$limit" "$@" >>"$log" 2>&1
    rc=$?
    echo "== $name: exit $rc after $((SECONDS - started))s$( ((rc == 124 || rc == 137)) && echo ' (timed out)')" | tee -a "$log"
    return $rc
}

# -- set-up: the package, then TRL and its needs from the wheels ---------------------------------
SETUP_LOG=$OUT/setup.log
: >"$SETUP_LOG"
step "install cuda-agent" 90 "$SETUP_LOG" python3 -m pip install -q --no-deps --no-build-isolation -e .
# --no-deps: with no index, pip's resolver would also re-check the machine's installed packages'
# own requirements and can refuse over one it cannot fetch; the names below are all TRL lacks.
step "install TRL wheels" 60 "$SETUP_LOG" python3 -m pip install -q --no-index --no-deps --find-links "$WHEELS" \
    trl==0.29.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
# datasets needs pyarrow>=24 and xxhash; the machine's own are used when they qualify.
if ! python3 -c 'import sys, pyarrow; sys.exit(int(pyarrow.__version__.split(".")[0]) < 24)' >>"$SETUP_LOG" 2>&1; then
    step "install pyarrow wheel" 60 "$SETUP_LOG" python3 -m pip install -q --no-index --no-deps --find-links "$WHEELS" pyarrow==26.0.1
fi
if ! python3 -c 'import xxhash' >>"$SETUP_LOG" 2>&1; then
    step "install xxhash wheel" 30 "$SETUP_LOG" python3 -m pip install -q --no-index --no-deps --find-links "$WHEELS" xxhash==4.1.0
fi
python3 - >>"$SETUP_LOG" 2>&1 <<'EOF'
import importlib.metadata as metadata

import torch

gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
print(f"python3: torch {torch.__version__} ({gpu})", end="")
for name in ("transformers", "accelerate", "trl", "datasets", "pyarrow", "fsspec", "huggingface-hub"):
    try:
        print(f", {name} {metadata.version(name)}", end="")
    except metadata.PackageNotFoundError:
        print(f", {name} missing", end="")
print()
try:
    from trl.experimental.ppo import PPOTrainer  # noqa: F401
    print("trl.experimental.ppo imports")
except Exception as error:
    print(f"trl.experimental.ppo does not import: {type(error).__name__}: {error}")
EOF
grep -E '^(python3:|trl\.experimental)|^== .*exit [^0]|ERROR' "$SETUP_LOG"

# -- (a) the gpu-marked trainer tests ------------------------------------------------------------
PYTEST_LOG=$OUT/pytest_gpu.log
: >"$PYTEST_LOG"
step "(a) pytest tests/trainer -m gpu" 180 "$PYTEST_LOG" python3 -m pytest tests/trainer -m gpu -q -p no:cacheprovider -rA
grep -E '^(PASSED|FAILED|ERROR|SKIPPED)|^E  |[0-9]+ (passed|failed)|reward curve' "$PYTEST_LOG" | tail -n 25

# -- (b) PPO throughput, ours against TRL ---------------------------------------------------------
PPO_LOG=$OUT/ppo_throughput.log
: >"$PPO_LOG"
# shellcheck disable=SC2086  # PPO_ARGS holds several flags
step "(b) ppo_throughput, both implementations" 210 "$PPO_LOG" \
    python3 -m experiments.ppo_throughput --impl both --json "$OUT/ppo.json" $PPO_ARGS
sed -n '/^PPO iteration/,$p' "$PPO_LOG" | grep -v '^== '
grep -E 'Error|skipped' "$PPO_LOG" | grep -v Warning | tail -n 8

# -- (c) multi-turn PPO in the agent environment -------------------------------------------------
AGENTIC_LOG=$OUT/agentic.log
: >"$AGENTIC_LOG"
AGENTIC_DIR=/tmp/tiny-agentic-gpu
EPISODES_DIR=$(python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["stages"][0]["environment"]["options"]["work_dir"])' "$AGENTIC_CONFIG")
# Finished stages are skipped: start from nothing.
rm -rf "$AGENTIC_DIR" "$EPISODES_DIR"
step "(c) multi-turn PPO, cuda-agent environment" 150 "$AGENTIC_LOG" \
    python3 -m policy.trainer.cli --config "$AGENTIC_CONFIG" --output-dir "$AGENTIC_DIR" --no-progress
METRICS=$AGENTIC_DIR/00-ppo-multi-turn/metrics.jsonl
[ -f "$METRICS" ] && cp "$METRICS" "$OUT/agentic_metrics.jsonl"
python3 - "$METRICS" "$EPISODES_DIR" <<'EOF' 2>&1 | tee -a "$AGENTIC_LOG"
import collections
import json
import sys
from pathlib import Path

metrics, episodes = Path(sys.argv[1]), Path(sys.argv[2])
keys = ("step", "reward_mean", "reward_counts", "pass_rate", "kl", "entropy", "value_loss", "explained_variance",
        "sampler_logprob_gap", "generated_tokens", "sequence_length", "rollout_seconds", "update_seconds")
for line in metrics.read_text().splitlines() if metrics.exists() else []:
    record = json.loads(line)
    print("metrics:", json.dumps({k: round(v, 4) if isinstance(v, float) else v
                                  for k, v in record.items() if k in keys}))
ends, tools, statuses = collections.Counter(), collections.Counter(), collections.Counter()
for trajectory in sorted(episodes.glob("step-*/round-*/trajectories/*.jsonl")):
    for line in trajectory.read_text().splitlines():
        event = json.loads(line)
        if event["event"] == "tool_call":
            tools[event["name"]] += 1
        elif event["event"] == "end":
            ends[(event["stop_reason"], event["turns"])] += 1
            statuses[event["result"]["status"]] += 1
print(f"episodes: {sum(ends.values())}; (stop reason, turns): {dict(ends)}; tool calls: {dict(tools) or 'none'}; "
      f"final evaluation statuses: {dict(statuses)}")
EOF
grep -E '^ppo-multi-turn:|Traceback|Error' "$AGENTIC_LOG" | tail -n 6

echo "== done in ${SECONDS}s; logs in $OUT:" "$OUT"/*

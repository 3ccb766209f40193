#!/usr/bin/env bash
# Synthesis throughput on one GPU (issue #5): a seeded synthesis run on SYNTH_WORKERS filter
# workers that stops proposing candidates in time to end inside one 9-minute device call, then
# the summary from the run's manifest, also when the run had to be killed: candidates, kept,
# rate per hour, outcomes, time per filter, and any task still in flight with its stage.
#
#   OUT=/path/for/logs bash experiments/synthesis_gpu_evidence.sh
#
# Call it again on the same (still warm) machine to continue the same run directory (under
# /tmp, with the catalogue): the run resumes, and the summary covers every call so far.
# Logs in $OUT (5 files): setup.log (install, crawl), synth.log (the run's progress),
# monitor.log (GPU memory and utilisation, host memory and load, every 20 s), summary.md and
# summary.json.
set -u

OUT=${OUT:?set OUT to a folder for the logs}
RUN=${SYNTH_RUN:-/tmp/cudaagent-synth-evidence}
COUNT=${SYNTH_COUNT:-1500}      # more than one call gets through; later calls continue
WORKERS=${SYNTH_WORKERS:-14}    # 16 cores: one per worker, two for the parent and the system
DEVICE=${SYNTH_DEVICE:-cuda}
MAX_TASK_GIB=${SYNTH_MAX_TASK_GIB:-3}  # memory of one forward at the scaled batch, per worker
BUDGET_S=${SYNTH_BUDGET_S:-510} # the whole script, inside the call's 540 s
SUMMARY_S=40                    # kept back for the summary
DRAIN_S=90                      # for the candidates in flight when proposing stops
CATALOGUE="$RUN/catalogue.json"
mkdir -p "$OUT" "$RUN"

echo "== setup ($(date -u +%H:%M:%S))"
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/setup.log" 2>&1 \
  || echo "pip install failed (see setup.log); going on with the checkout as it is"
if [ ! -s "$CATALOGUE" ]; then
  # torch and torch.nn only (about 20 s); a crawl of every transformers model takes minutes.
  python3 -m synthesis synth crawl --out "$CATALOGUE" --transformers-models 0 >> "$OUT/setup.log" 2>&1 \
    || echo "crawl failed (see setup.log)"
fi
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"

(
  while true; do
    echo "$(date -u +%H:%M:%S) gpu $(nvidia-smi --query-gpu=memory.used,memory.total,utilization.gpu --format=csv,noheader 2>/dev/null | head -1)" \
         "| host $(free -g | awk '/Mem:/ {print $3 " GiB used of " $2}') | load $(cut -d' ' -f1-3 /proc/loadavg)"
    sleep 20
  done
) > "$OUT/monitor.log" 2>&1 &
MONITOR=$!

RUN_S=$(( BUDGET_S - SECONDS - SUMMARY_S ))
STOP_S=$(( RUN_S - DRAIN_S ))
if [ ! -s "$CATALOGUE" ]; then
  echo "no catalogue at $CATALOGUE: nothing run"
elif [ "$STOP_S" -lt 60 ]; then
  echo "only ${RUN_S} s left after setup: nothing run"
else
  echo "== run: $RUN, $COUNT candidates, $WORKERS workers, proposing for ${STOP_S} s, killed at ${RUN_S} s ($(date -u +%H:%M:%S))"
  timeout -k 10 "$RUN_S" python3 -m experiments.synthesis_throughput --out "$RUN" --resume \
    --count "$COUNT" --workers "$WORKERS" --device "$DEVICE" --catalogue "$CATALOGUE" \
    --max-task-gib "$MAX_TASK_GIB" --stop-after "$STOP_S" > "$OUT/synth.log" 2>&1
  status=$?
  case $status in
    0) echo "run ended cleanly" ;;
    124|137|143) echo "run killed at its time limit (exit $status); the summary below is from its manifest" ;;
    *) echo "run failed (exit $status); the summary below is from its manifest" ;;
  esac
  echo "-- progress (last lines of synth.log)"
  grep -E "^synth:|kept; summary|Error|error" "$OUT/synth.log" | tail -n 12
fi
kill "$MONITOR" 2>/dev/null

echo "== summary ($(date -u +%H:%M:%S), ${SECONDS} s into the script)"
timeout 60 python3 -m experiments.synthesis_throughput --out "$RUN" --summary-only \
  --json "$OUT/summary.json" > "$OUT/summary.md" 2>&1 || echo "summary failed (see summary.md)"
cat "$OUT/summary.md"
echo "== monitor (last lines)"
tail -n 6 "$OUT/monitor.log"
echo "== done in ${SECONDS} s; call again to continue $RUN"

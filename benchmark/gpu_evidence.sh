#!/usr/bin/env bash
# GPU evidence, section by section, each logged under $OUT: bash benchmark/gpu_evidence.sh SECTION...
set -u
OUT=${OUT:-out/gpu-evidence}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 1; }
# Each section's whole output goes to $OUT/<section>.log; its last lines are printed.
run_section() {
  local section=$1
  case "$section" in
    evaluator-tests) python3 -m pytest tests/gpu tests/adversarial -m gpu -q -p no:cacheprovider -rA -n ${TEST_WORKERS:-4} 2>&1 | grep -E "PASSED|FAILED|ERROR|passed|failed|Error|assert" | tail -40 ;;
    graph) python3 -m pytest tests/adversarial/test_adversarial_gpu.py -k graph -q -p no:cacheprovider 2>&1 | tail -3 ;;
    scripted) for p in leaky_relu scale_tanh_mean; do
                cudaagent solve examples/problems/$p.py --engine scripted --model policy/scripts/cuda --device cuda --out "$OUT/solve_$p" 2>&1 | tail -6
              done
              python3 -c "from policy.tiny_model import build_and_save_tiny_model; build_and_save_tiny_model('/tmp/tiny')"
              cudaagent solve examples/problems/leaky_relu.py --engine transformers --model /tmp/tiny --samples 3 --turns 5 \
                --max-new-tokens 128 --device cuda --out "$OUT/tiny" 2>&1 | tail -6
              for f in "$OUT"/tiny/trajectories/*.jsonl; do head -c 400 "$f"; echo; done ;;
    bench-resume) cudaagent bench --out "$OUT/bench" 2>&1 | grep -iE "evaluated|resume|skipp"
                  cudaagent bench --out "$OUT/bench" --resume 2>&1 | grep -iE "evaluated|resume|skipp|pair" ;;
    bench) cudaagent bench --out "$OUT/bench" 2>&1 | tail -25; cat "$OUT/bench/leaderboard.md";
           cudaagent bench --out "$OUT/bench" --resume 2>&1 | tail -4 ;;
    spread) python3 benchmark/timing_spread.py --problem examples/problems/leaky_relu.py \
              --candidate examples/candidates/cuda/leaky_relu.py --repeats 5 --ncu --json "$OUT/spread.json" 2>&1 | tail -15 ;;
    policy) python3 -m pytest tests/policy -m gpu -q -p no:cacheprovider 2>&1 | tail -3
            cudaagent solve examples/problems --engine scripted --model policy/scripts/cuda --device cuda --out "$OUT/solve" 2>&1 | tail -8
            python3 -c "from policy.tiny_model import build_and_save_tiny_model; build_and_save_tiny_model('/tmp/tiny')"
            cudaagent solve examples/problems/leaky_relu.py --engine transformers --model /tmp/tiny --samples 3 --turns 5 \
              --max-new-tokens 128 --device cuda --out "$OUT/tiny" 2>&1 | tail -5
            head -c 1500 "$(ls "$OUT"/tiny/trajectories/*.jsonl | head -1)"; echo ;;
    synthesis) python3 -m synthesis synth crawl --out /tmp/synth/catalogue.json 2>&1 | tail -3
               timeout 330 python3 benchmark/synthesis_throughput.py --count 600 --workers 12 --device cuda \
                 --catalogue /tmp/synth/catalogue.json --out /tmp/synth/run600 --json "$OUT/synth.json" 2>&1 | tail -30
               cat /tmp/synth/run600/summary.md | head -60 ;;
    trainer) python3 -m pytest tests/trainer -m gpu -q -p no:cacheprovider 2>&1 | tail -3 ;;
    spread-large) for pair in leaky_relu_64m:leaky_relu softmax_16k:softmax linear_bias_relu_4k:linear_bias_relu; do
                    python3 benchmark/timing_spread.py --problem benchmark/problems/${pair%%:*}.py \
                      --candidate examples/candidates/cuda/${pair##*:}.py --repeats 5 --ncu \
                      --json "$OUT/spread_${pair%%:*}.json" 2>&1 | tail -12
                  done ;;
    trainer-debug) python3 -m pytest tests/trainer -m gpu -x -q -p no:cacheprovider --tb=long > "$OUT/trainer.log" 2>&1
                   tail -60 "$OUT/trainer.log" ;;
    synth-profile) python3 -m synthesis synth crawl --out /tmp/synth/catalogue.json --transformers-models 0 2>&1 | tail -1
                   timeout ${SYNTH_SECONDS:-240} python3 benchmark/synthesis_throughput.py --count ${SYNTH_COUNT:-200} \
                     --workers ${SYNTH_WORKERS:-14} --device cuda --catalogue /tmp/synth/catalogue.json \
                     --out /tmp/synth/profile --json "$OUT/synth_profile.json" > "$OUT/synth_profile.log" 2>&1
                   tail -30 "$OUT/synth_profile.log"
                   python3 -c "from synthesis.manifest import Manifest; from synthesis.report import *; import sys
f = Manifest('/tmp/synth/profile').frame(); print(len(f), 'candidates', int(f['kept'].sum()), 'kept')
print(markdown_table(reason_table(f))); print(markdown_table(filter_time_table(f)))" 2>&1 | tail -40 ;;
    jitter) for pin in "" "--pin-core 3"; do
              python3 benchmark/e2e_jitter.py --problem benchmark/problems/leaky_relu_64m.py \
                --candidate examples/candidates/cuda/leaky_relu.py --processes 5 $pin
            done ;;
    spread-pairs) for pair in ${SPREAD_PAIRS:-leaky_relu_64m:leaky_relu linear_bias_relu_4k:linear_bias_relu}; do
                    python3 benchmark/timing_spread.py --problem benchmark/problems/${pair%%:*}.py \
                      --candidate examples/candidates/cuda/${pair##*:}.py --repeats 5 ${SPREAD_NCU---ncu} \
                      --json "$OUT/spread_${pair%%:*}.json"
                  done ;;
    spread-linear) python3 benchmark/timing_spread.py --problem benchmark/problems/linear_bias_relu_4k.py \
                     --candidate examples/candidates/cuda/linear_bias_relu.py --repeats 5 --ncu \
                     --json "$OUT/spread_linear_bias_relu_4k.json" ;;
    throughput-harness) python3 -m benchmark.harness_throughput --device cuda --count 20 --work /tmp/throughput \
                          --phase harness ;;
    # The sequential loop builds 20 extensions one after the other (over ten minutes): started in
    # the background, its process group outlives this call; `throughput-report` waits for it.
    throughput-sequential) mkdir -p /tmp/throughput
                           setsid nohup python3 -m benchmark.harness_throughput --device cuda --count 20 \
                             --work /tmp/throughput --phase sequential > /tmp/throughput/sequential.log 2>&1 &
                           echo $! > /tmp/throughput/sequential.pid
                           echo "sequential loop started in the background (pid $(cat /tmp/throughput/sequential.pid))" ;;
    # Waits for the background loop, at most WAIT_S seconds (default: until it ends).
    throughput-wait) waited=0
                     while kill -0 "$(cat /tmp/throughput/sequential.pid)" 2>/dev/null && [ "$waited" -lt "${WAIT_S:-100000}" ]; do
                       sleep 5; waited=$((waited + 5))
                     done
                     kill -0 "$(cat /tmp/throughput/sequential.pid)" 2>/dev/null && echo "still running after ${waited} s" || echo "sequential loop done"
                     tail -3 /tmp/throughput/sequential.log ;;
    throughput-report) python3 -m benchmark.harness_throughput --device cuda --work /tmp/throughput --phase report \
                         --json "$OUT/throughput.json" ;;
    *) echo "unknown section $section" ;;
  esac
}
for section in "$@"; do
  echo "=== $section"
  run_section "$section" > "$OUT/$section.log" 2>&1
  tail -n "${TAIL_LINES:-40}" "$OUT/$section.log"
done

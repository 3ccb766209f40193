#!/usr/bin/env bash
# GPU evidence, section by section, each logged under $OUT: bash benchmark/experiments/gpu_evidence.sh SECTION...
# The trainer's and synthesis's evidence have their own scripts (benchmark/experiments/trainer_gpu_evidence.sh,
# benchmark/experiments/synthesis_gpu_evidence.sh); the sections `trainer` and `synthesis` run them.
set -u
export OUT=${OUT:-out/gpu-evidence}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 1; }
# Each section's whole output goes to $OUT/<section>.log; its last lines are printed.
run_section() {
  local section=$1
  case "$section" in
    evaluator-tests) python3 -m pytest tests/gpu tests/adversarial -m gpu -q -p no:cacheprovider -rA -n "${TEST_WORKERS:-4}" ;;
    # Every bundled CUDA candidate through `cudaagent verify`, in parallel: builds overlap,
    # timings queue on the GPU lock.
    verify) nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
            for problem in examples/problems/*.py; do
              name=$(basename "$problem" .py)
              cudaagent verify "$problem" "examples/candidates/cuda/$name.py" --device cuda --baselines eager,compile \
                --output "$OUT/verify_$name.json" > "/tmp/verify_$name.log" 2>&1 &
            done
            wait
            cat /tmp/verify_*.log ;;
    bench) cudaagent bench --out "$OUT/bench"
           cat "$OUT/bench/leaderboard.md"
           cudaagent bench --out "$OUT/bench" --resume ;;
    # Repeatability and truth of the timer on kernels over 50 us: PROBLEM:CANDIDATE pairs, the
    # problems in benchmark/experiments/problems/, the candidates the bundled CUDA ones.
    # shellcheck disable=SC2086  # an empty SPREAD_NCU adds no argument
    spread) for pair in ${SPREAD_PAIRS:-leaky_relu_64m:leaky_relu linear_bias_relu_4k:linear_bias_relu}; do
              python3 -m benchmark.experiments.timing_spread --problem "benchmark/experiments/problems/${pair%%:*}.py" \
                --candidate "examples/candidates/cuda/${pair##*:}.py" --repeats 5 ${SPREAD_NCU---ncu} \
                --json "$OUT/spread_${pair%%:*}.json"
            done ;;
    jitter) for pin in "" "--pin-core 3"; do
              # shellcheck disable=SC2086  # an empty $pin adds no argument
              python3 -m benchmark.experiments.e2e_jitter --problem benchmark/experiments/problems/leaky_relu_64m.py \
                --candidate examples/candidates/cuda/leaky_relu.py --processes 5 $pin
            done ;;
    policy) python3 -m pytest tests/policy -m gpu -q -p no:cacheprovider
            cudaagent solve examples/problems --engine scripted --model policy/scripts/cuda --device cuda --out "$OUT/solve"
            python3 -c "from policy.tiny_model import build_and_save_tiny_model; build_and_save_tiny_model('/tmp/tiny')"
            cudaagent solve examples/problems/leaky_relu.py --engine transformers --model /tmp/tiny --samples 3 --turns 5 \
              --max-new-tokens 128 --device cuda --out "$OUT/tiny"
            head -c 1500 "$(ls "$OUT"/tiny/trajectories/*.jsonl | head -1)"; echo ;;
    trainer) bash benchmark/experiments/trainer_gpu_evidence.sh ;;
    synthesis) bash benchmark/experiments/synthesis_gpu_evidence.sh ;;
    throughput-harness) python3 -m benchmark.experiments.harness_throughput --device cuda --count 20 --work /tmp/throughput \
                          --phase harness ;;
    # The sequential loop builds 20 extensions one after the other (over ten minutes): started in
    # its own process session, it outlives this call; `throughput-wait` waits for it by its pid.
    throughput-sequential) mkdir -p /tmp/throughput
                           setsid nohup python3 -m benchmark.experiments.harness_throughput --device cuda --count 20 \
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
    throughput-report) python3 -m benchmark.experiments.harness_throughput --device cuda --work /tmp/throughput --phase report \
                         --json "$OUT/throughput.json" ;;
    *) echo "unknown section $section; sections: evaluator-tests verify bench spread jitter policy trainer synthesis" \
            "throughput-harness throughput-sequential throughput-wait throughput-report"
       return 2 ;;
  esac
}
for section in "$@"; do
  echo "=== $section"
  run_section "$section" > "$OUT/$section.log" 2>&1
  tail -n "${TAIL_LINES:-40}" "$OUT/$section.log"
done

#!/usr/bin/env bash
# The evaluator's GPU evidence in one call on the device: verify every bundled CUDA candidate
# (in parallel: builds overlap, timings queue on the GPU lock), the gpu tests, the timing spread.
set -u
OUT=${OUT:-out/gpu-check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
for problem in examples/problems/*.py; do
  name=$(basename "$problem")
  cudaagent verify "$problem" "examples/candidates/cuda/$name" --device cuda --baselines eager,compile \
    --output "$OUT/verify_${name%.py}.json" > "$OUT/verify_${name%.py}.log" 2>&1 &
done
wait
cat "$OUT"/verify_*.log

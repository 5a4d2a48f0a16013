#!/usr/bin/env bash
# One device run after GPU-path changes: the GPU tests (failures printed with their reason), the
# GPU benchmark's detaug row with device memory and both decode ceilings, and the training
# benchmark (kept batch, detaug defaults, detaug high-throughput, torchvision DataLoader).
# Usage (device machine, repo root): bash benchmarks/device_gpu_check.sh
source .ci/device_setup.sh >/dev/null 2>&1 || exit 1
DATA=/tmp/bench_data
timeout 330 python3 -m pytest -m gpu -q -rf --tb=line -p no:cacheprovider tests 2>&1 | quiet > "$OUT/gpu_tests.log"
grep -E "^FAILED|^ERROR|^E |^/.*Error|passed|failed" "$OUT/gpu_tests.log" | cut -c1-300 | tail -20
bench_data $DATA
timeout 150 python3 benchmarks/bench_gpu.py --data $DATA --keep-data --only detaug,ceiling,ceiling_mp \
  --min-seconds ${SECONDS_PER_ROW:-6} 2>&1 | quiet > "$OUT/bench_gpu.log"
grep -E "^\| " "$OUT/bench_gpu.log" | cut -c1-260
timeout 280 python3 benchmarks/bench_train.py --data $DATA --budget ${TRAIN_BUDGET:-230} 2>&1 | quiet > "$OUT/bench_train.log"
grep -E "^\| |next\(\)" "$OUT/bench_train.log" | cut -c1-260

#!/usr/bin/env bash
# Issue 11's device checks, in two calls (each under the 600 s limit of one call):
#   PART=A: the GPU tests (failures with their reason), bench_gpu's detaug row at the default
#           budget and at the high-throughput setting (8 GB), and both decode ceilings;
#   PART=C: all in one call, shortened: the GPU tests, the detaug row and the one-process
#           ceiling, a soak of SOAK_BATCHES (5,000) batches, bench_train;
#   PART=B: a soak of SOAK_BATCHES (20,000) batches at the defaults (memory at batch 1,000 and at
#           the end), then bench_train (kept batch, defaults, high-throughput, torchvision).
# Usage (device machine, repo root): PART=A bash benchmarks/device_issue11.sh
source .ci/device_setup.sh >/dev/null 2>&1 || exit 1
DATA=/tmp/bench_data
if [ "${PART:-A}" = C ]; then
  timeout 200 python3 -m pytest -m gpu -q -rf --tb=line -p no:cacheprovider tests 2>&1 | quiet > "$OUT/gpu_tests.log"
  grep -E "^FAILED|^ERROR|^E |passed|failed" "$OUT/gpu_tests.log" | cut -c1-300 | tail -12
  bench_data $DATA
  timeout 80 python3 benchmarks/bench_gpu.py --data $DATA --keep-data --only detaug,ceiling --min-seconds 5 \
    --max-seconds 8 2>&1 | quiet > "$OUT/bench_gpu.log"
  grep -E "^\| " "$OUT/bench_gpu.log" | cut -c1-330
  timeout 90 python3 benchmarks/bench_soak.py --data $DATA --batches ${SOAK_BATCHES:-5000} --max-seconds 60 2>&1 | quiet | grep -E "^\|" | cut -c1-400
  timeout 230 python3 benchmarks/bench_train.py --data $DATA --only fixed,defaults --budget 200 2>&1 | quiet > "$OUT/bench_train.log"
  grep -E "^\| |next\(\)" "$OUT/bench_train.log" | cut -c1-300
elif [ "${PART:-A}" = A ]; then
  timeout ${TEST_S:-300} python3 -m pytest -m gpu -q -rf --tb=line -p no:cacheprovider tests 2>&1 | quiet > "$OUT/gpu_tests.log"
  grep -E "^FAILED|^ERROR|^E |^/.*Error|passed|failed" "$OUT/gpu_tests.log" | cut -c1-300 | tail -20
  bench_data $DATA
  timeout 150 python3 benchmarks/bench_gpu.py --data $DATA --keep-data --only detaug,ceiling,ceiling_mp \
    --min-seconds ${SECONDS_PER_ROW:-6} 2>&1 | quiet > "$OUT/bench_gpu.log"
  grep -E "^\| " "$OUT/bench_gpu.log" | cut -c1-330
  timeout 90 python3 benchmarks/bench_gpu.py --data $DATA --keep-data --only detaug --json $OUT/bench_gpu_8gb.json \
    --min-seconds ${SECONDS_PER_ROW:-6} --pipe-kwargs '{"device_memory_budget": "8GB"}' 2>&1 | quiet > "$OUT/bench_gpu_8gb.log"
  echo "== device_memory_budget=8GB"; grep -E "^\| detaug" "$OUT/bench_gpu_8gb.log" | cut -c1-330
else
  bench_data $DATA
  timeout 200 python3 benchmarks/bench_soak.py --data $DATA --batches ${SOAK_BATCHES:-20000} --max-seconds 170 2>&1 | quiet | grep -E "^\|" | cut -c1-400
  timeout 330 python3 benchmarks/bench_train.py --data $DATA --budget ${TRAIN_BUDGET:-250} 2>&1 | quiet > "$OUT/bench_train.log"
  grep -E "^\| |next\(\)" "$OUT/bench_train.log" | cut -c1-300
fi

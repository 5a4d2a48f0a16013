#!/usr/bin/env bash
# Issue 11's "Done when" run, in two calls on one commit (each under the 600 s of one call):
#   PART=A: the GPU tests; then PAIRS (3) pairs for each setting, each pair one bench_gpu
#           invocation: the detaug row and, right after it, its ceiling (the defaults against the
#           one-process ceiling: target 1c; 8 GB against the P=3,4 ceilings: target 2); the table
#           of benchmarks/issue11_pairs.py (every pair's ratio, their median, device MB) last;
#   PART=B: a soak of SOAK_BATCHES (20,000) batches at the defaults (target 1b, and 1a in a
#           two-batch loop), then bench_train (target 4; TRAIN=0 skips it).
#   PART=C: bench_train alone, ROUNDS (1) times (a) and the detaug rows alternated.
#   TESTS=0 skips the GPU tests of PART=A; SOAK=1 runs the soak after it.
# Usage (device machine, repo root): PART=A bash benchmarks/device_issue11_final.sh
source .ci/device_setup.sh >/dev/null 2>&1 || exit 1
DATA=/tmp/bench_data
bench_data $DATA
if [ "${PART:-A}" = A ]; then
  if [ "${TESTS:-1}" = 1 ]; then
    timeout ${TEST_S:-300} python3 -m pytest -m gpu -q -rf --tb=short -p no:cacheprovider tests > "$OUT/gpu_tests.log" 2>&1
    grep -E "^FAILED|^ERROR|passed|failed" "$OUT/gpu_tests.log" | cut -c1-300 | tail -20
  fi
  args=()
  for i in $(seq ${PAIRS:-3}); do
    timeout 60 python3 benchmarks/bench_gpu.py --data $DATA --keep-data --only detaug,ceiling \
      --min-seconds ${SECONDS_PER_ROW:-6} --max-seconds 9 --json /tmp/pair_d$i.json > /tmp/pair_d$i.log 2>&1 \
      && args+=("defaults=/tmp/pair_d$i.json") || tail -3 /tmp/pair_d$i.log
    timeout 120 python3 benchmarks/bench_gpu.py --data $DATA --keep-data --only detaug,ceiling_mp \
      --ceiling-processes 3,4 --min-seconds ${SECONDS_PER_ROW:-6} --max-seconds 9 \
      --pipe-kwargs '{"device_memory_budget": "8GB"}' --json /tmp/pair_b$i.json > /tmp/pair_b$i.log 2>&1 \
      && args+=("8GB=/tmp/pair_b$i.json") || tail -3 /tmp/pair_b$i.log
  done
  cp /tmp/pair_*.json "$OUT/" 2>/dev/null
  python3 benchmarks/issue11_pairs.py "${args[@]}"
fi
if [ "${PART:-A}" = B ] || [ "${SOAK:-0}" = 1 ]; then
  timeout 200 python3 benchmarks/bench_soak.py --data $DATA --batches ${SOAK_BATCHES:-20000} --max-seconds 170 2>&1 | quiet | grep -E "^\|" | cut -c1-400
fi
if [ "${PART:-A}" = B ] && [ "${TRAIN:-1}" = 1 ] || [ "${PART:-A}" = C ]; then
  timeout 380 python3 benchmarks/bench_train.py --data $DATA --budget ${TRAIN_BUDGET:-250} \
    --rounds ${ROUNDS:-1} 2>&1 | quiet > "$OUT/bench_train.log"
  grep -E "^\| |/ \(a\)" "$OUT/bench_train.log" | cut -c1-300
fi

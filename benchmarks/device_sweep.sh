#!/usr/bin/env bash
# One device call: GPU tests, then the detaug pipeline against the decode ceiling over a few
# settings (batches per launch, GIL switch interval), a short table last.
# Usage (GPU machine, repo root): bash benchmarks/device_sweep.sh "K1 K2 ..." [extra bench args]
source .ci/device_setup.sh >/dev/null 2>&1 || exit 1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider tests 2>&1 | grep -v -E "nvjpeg2k|nvtiff|NVTIFF|nvJPEG2000|ERROR.*ext" | tail -4
DATA=/tmp/bench_data
for cfg in ${1:-"1 4"}; do
  k=${cfg%%:*}; si=${cfg#*:}; [ "$si" = "$cfg" ] && si=""
  extra=""; [ -n "$si" ] && extra="--switch-interval $si"
  timeout 120 python3 benchmarks/bench_gpu.py --only detaug --data $DATA --keep-data --min-seconds 6 \
    --batches-per-launch $k $extra $2 --json "$OUT/k${k}_${si}.json" > "$OUT/k${k}_${si}.log" 2>&1
  echo "k=$k switch=${si:-default}: $(grep -E '^\| detaug' "$OUT/k${k}_${si}.log" | head -1)"
done
timeout 120 python3 benchmarks/bench_gpu.py --only ceiling --data $DATA --keep-data > "$OUT/ceiling.log" 2>&1
grep -E "^\| nvImage" "$OUT/ceiling.log"

#!/usr/bin/env bash
# One device call: GPU tests, then the detaug pipeline over a few settings and the decode ceiling
# of the same data, one line each; ROUNDS=n repeats (ceiling first, then every setting) so that
# drifts of the machine show. Usage (GPU machine, repo root):
#   [ROUNDS=2] bash benchmarks/device_sweep.sh ["--batches-per-launch 1;--batches-per-launch 8;..."] [notests]
source .ci/device_setup.sh >/dev/null 2>&1 || exit 1
if [ "$2" != notests ]; then
  timeout 300 python3 -m pytest -m gpu -q -rf --tb=short -p no:cacheprovider tests 2>&1 \
    | quiet | tee "$OUT/gpu_tests.log" | tail -25
fi
DATA=/tmp/bench_data
bench_data $DATA
IFS=';' read -ra CFGS <<< "${1:---batches-per-launch 1;--batches-per-launch 8}"
i=0
for r in $(seq 1 "${ROUNDS:-1}"); do
  timeout 120 python3 benchmarks/bench_gpu.py --only ceiling --data $DATA --keep-data > "$OUT/ceiling$r.log" 2>&1
  echo "[round $r ceiling] $(grep -E '^\| nvImage' "$OUT/ceiling$r.log" | cut -d'|' -f3)"
  for cfg in "${CFGS[@]}"; do
    i=$((i + 1))
    timeout 120 python3 benchmarks/bench_gpu.py --only detaug --data $DATA --keep-data --min-seconds 6 \
      $cfg --json "$OUT/run$i.json" > "$OUT/run$i.log" 2>&1
    echo "[round $r: $cfg] $(grep -E '^\| detaug' "$OUT/run$i.log" | head -1 | cut -d'|' -f3,5)"
    grep -E "Traceback|Error" "$OUT/run$i.log" | head -3
  done
done

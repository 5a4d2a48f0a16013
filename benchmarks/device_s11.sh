#!/usr/bin/env bash
# For the session after 10 (device machine, repo root): what holds the 8 GB pipeline back on a
# slower host (issue 11, target 2), in one call of about 500 s:
#   the GPU tests (TESTS=0 skips them: session 10's commit e57e858 was never run on a GPU);
#   then, back to back on one machine: the 8 GB row with the decode-only P=3,4 ceilings; the
#   P=3,4 ceilings that also write each batch's outputs (--ceiling-outputs); the 8 GB row with
#   nvImageCodec's CPU threads per decoder at 8 and 16 (DETAUG_DECODE_CPU_THREADS; 4 by default;
#   the ceiling's decoders take one per core).
# Usage: bash benchmarks/device_s11.sh   (WRAP="py-spy record -o $OUT/8gb.svg --" profiles a row)
source .ci/device_setup.sh >/dev/null 2>&1 || exit 1
DATA=/tmp/bench_data
bench_data $DATA
if [ "${TESTS:-1}" = 1 ]; then
  timeout 300 python3 -m pytest -m gpu -q -rf --tb=short -p no:cacheprovider tests > "$OUT/gpu_tests.log" 2>&1
  grep -E "^FAILED|^ERROR|passed|failed" "$OUT/gpu_tests.log" | cut -c1-300 | tail -20
fi
B8='{"device_memory_budget": "8GB"}'
g() { timeout 120 ${WRAP:-} python3 benchmarks/bench_gpu.py --data $DATA --keep-data --min-seconds 6 --max-seconds 9 "$@" 2>&1 \
        | grep -E "^decode ceiling|^\[.*detaug \(GPU.*img/s|device memory \(cudaMemGetInfo" | cut -c1-220; }
echo "== 8 GB and the decode-only ceilings";  g --only detaug,ceiling_mp --ceiling-processes 3,4 --pipe-kwargs "$B8"
echo "== the ceilings that also write outputs"; g --only ceiling_mp --ceiling-processes 3,4 --ceiling-outputs
for t in 8 16; do
  echo "== 8 GB, $t CPU threads per decoder"; DETAUG_DECODE_CPU_THREADS=$t g --only detaug --pipe-kwargs "$B8"
done
echo "== 8 GB again (4 CPU threads)"; g --only detaug --pipe-kwargs "$B8"

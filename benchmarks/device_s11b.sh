#!/usr/bin/env bash
# Session 11, call 2 (device machine, repo root), about 350 s:
#   the GPU tests of the hand-out hold (test_gpu_pipeline.py);
#   what the outputs alone cost the decode (issue 11 target 2), back to back on one machine: the
#   P=3,4 decode ceiling, then with each batch's outputs written as a fill only (write32: the
#   float32 bytes any pipeline making them writes, nothing read), converted from uint8 (convert),
#   and the same in float16 (write16, convert16); the 8 GB row with float32 and float16 outputs.
# Usage: bash benchmarks/device_s11b.sh   (TESTS=0 skips the tests)
source .ci/device_setup.sh >/dev/null 2>&1 || exit 1
DATA=/tmp/bench_data
bench_data $DATA
if [ "${TESTS:-1}" = 1 ]; then
  timeout 240 python3 -m pytest -m gpu -q -rf --tb=short -p no:cacheprovider -s tests/test_gpu_pipeline.py \
    > "$OUT/gpu_tests.log" 2>&1
  grep -E "^FAILED|^ERROR|passed|failed|^held|^not held|^output slots" "$OUT/gpu_tests.log" | cut -c1-300 | tail -12
fi
B8='{"device_memory_budget": "8GB"}'
g() { timeout 150 python3 benchmarks/bench_gpu.py --data $DATA --keep-data --min-seconds 6 --max-seconds 9 "$@" 2>&1 \
        | grep -E "^decode ceiling|^\[.*detaug \(GPU.*img/s|device memory \(cudaMemGetInfo" | cut -c1-200; }
echo "== 8 GB (float32) and the decode-only ceilings"; g --only detaug,ceiling_mp --ceiling-processes 3,4 --pipe-kwargs "$B8"
for k in write32 convert write16 convert16; do
  echo "== ceilings + outputs ($k)"; g --only ceiling_mp --ceiling-processes 3,4 --ceiling-outputs $k
done
echo "== 8 GB, float16 outputs"; g --only detaug --pipe-kwargs "$B8" --dtype float16
echo "== 8 GB, float32 again"; g --only detaug --pipe-kwargs "$B8"

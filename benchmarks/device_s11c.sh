#!/usr/bin/env bash
# Session 11, call 3 (device machine, repo root), about 300 s: the two GPU tests changed since
# call 2; nvImageCodec's decode in T threads of one process (probe_decode_threads.py) beside
# the P-process ceilings of the same machine, decode-only and with outputs; the 8 GB row with
# float16 outputs.
source .ci/device_setup.sh >/dev/null 2>&1 || exit 1
DATA=/tmp/bench_data
bench_data $DATA
timeout 120 python3 -m pytest -m gpu -q -rf --tb=short -p no:cacheprovider -s tests/test_gpu_pipeline.py \
  -k "memory_stable or dropped_batch" > "$OUT/gpu_tests.log" 2>&1
grep -E "^FAILED|^E  |passed|failed|^held|^not held|^memory at" "$OUT/gpu_tests.log" | cut -c1-300 | tail -12
timeout 200 python3 benchmarks/probe_decode_threads.py $DATA --seconds 5 2>&1 | tail -12
g() { timeout 150 python3 benchmarks/bench_gpu.py --data $DATA --keep-data --min-seconds 6 --max-seconds 9 "$@" 2>&1 \
        | grep -E "^decode ceiling|^\[.*detaug \(GPU.*img/s|device memory \(cudaMemGetInfo|rror" | cut -c1-200; }
echo "== P-process ceilings, decode only"; g --only ceiling_mp --ceiling-processes 1,3,4
echo "== P-process ceilings + outputs (convert)"; g --only ceiling_mp --ceiling-processes 3,4 --ceiling-outputs
echo "== 8 GB, float16 outputs"; g --only detaug --pipe-kwargs '{"device_memory_budget": "8GB"}' --dtype float16

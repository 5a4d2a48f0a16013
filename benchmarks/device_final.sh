#!/usr/bin/env bash
# The full device run behind RESULTS.md: gpu tests (and their prints), the warp's compile-time
# settings (warp_sweep.py), the GPU benchmark with every peer in one run (BENCH_ONLY=sections
# and BENCH_RUNS=n to repeat a subset), the torchvision RetinaNet example (short). Logs go to
# $OUT. Usage (GPU machine, repo root): bash benchmarks/device_final.sh
source .ci/device_setup.sh >/dev/null 2>&1 || exit 1
DATA=/tmp/bench_data
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  timeout 300 python3 -m pytest -m gpu -q -rf --tb=short -p no:cacheprovider tests 2>&1 | quiet > "$OUT/gpu_tests.log"
  grep -E "^FAILED|passed|failed" "$OUT/gpu_tests.log" | tail -8
  timeout 150 python3 -m pytest -q -s -p no:cacheprovider tests/test_gpu_pipeline.py \
    -k "decode_close or never_wait or one_launch or memory_stable" 2>&1 | grep -E "GPU vs CPU|run\(\) times|launches per|memory at|passed|failed" | tee "$OUT/gpu_prints.log"
fi
bench_data $DATA
timeout 150 python3 benchmarks/warp_sweep.py --data $DATA 2>&1 | quiet | tee "$OUT/warp_sweep.log"
for i in $(seq 1 "${BENCH_RUNS:-1}"); do
  timeout 300 python3 benchmarks/bench_gpu.py --data $DATA --keep-data --json "$OUT/bench_gpu$i.json" \
    --min-seconds 8 --peer-seconds 10 ${BENCH_ONLY:+--only $BENCH_ONLY} 2>&1 | quiet > "$OUT/bench_gpu$i.log"
  sed -n '/^| name/,$p' "$OUT/bench_gpu$i.log"
done
if [ -z "${BENCH_ONLY:-}" ]; then
  timeout 120 python3 examples/retinanet_torchvision.py --device gpu --iters 40 2>&1 | quiet > "$OUT/retinanet_example.log"
  tail -4 "$OUT/retinanet_example.log"
fi

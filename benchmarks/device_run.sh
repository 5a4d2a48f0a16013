#!/usr/bin/env bash
# One device-machine run: install the carried wheels, run every gpu-marked test, then the
# benchmarks. Usage (on the GPU machine, from the repo root): bash benchmarks/device_run.sh [tests|bench|all]
what=${1:-all}
source .ci/device_setup.sh || exit 1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if [ "$what" = tests ] || [ "$what" = all ]; then
  timeout 400 python3 -m pytest -m gpu -q -rf --tb=short -p no:cacheprovider tests 2>&1 | tee "$OUT/gpu_tests.log" | tail -40
  timeout 200 python3 -m pytest -q -s -p no:cacheprovider tests/test_gpu_pipeline.py \
    -k "decode_close or never_wait or one_launch or memory_stable" 2>&1 | grep -E "GPU vs CPU|run\(\) times|launches per|memory at|passed|failed" | tee "$OUT/gpu_prints.log"
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  timeout 120 python3 benchmarks/bench_retinanet.py --cpu-iters 2 2>&1 | tee "$OUT/bench_retinanet.log" | tail -15
  timeout 330 python3 benchmarks/bench_gpu.py --json "$OUT/bench_gpu.json" 2>&1 | tee "$OUT/bench_gpu.log" | tail -40
fi
if [ "$what" = cpu ] || [ "$what" = all ]; then
  timeout 200 python3 benchmarks/bench_cpu.py --workers 15 --rounds 1 2>&1 | tee "$OUT/bench_cpu.log" | tail -20
fi

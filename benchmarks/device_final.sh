#!/usr/bin/env bash
# The full device run behind RESULTS.md: gpu tests, RetinaNet targets, the GPU benchmark (with
# the RetinaNet input pipeline in the same run), the CPU benchmark on 16 cores, the torchvision
# RetinaNet example for 200 iterations. Logs go to $OUT.
source .ci/device_setup.sh || exit 1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
quiet() { grep -v "nvjpeg2k\|nvTIFF\|nvtiff\|nvJPEG2000"; }
timeout 240 python3 -m pytest -m gpu -q -rf --tb=short -p no:cacheprovider tests 2>&1 | quiet > "$OUT/gpu_tests.log"
tail -4 "$OUT/gpu_tests.log"
timeout 120 python3 -m pytest -q -s -p no:cacheprovider tests/test_gpu_pipeline.py \
  -k "decode_close or never_waits or one_launch or memory_stable" 2>&1 | grep -E "GPU vs CPU|run\(\) times|launches per|memory at|passed|failed" | tee "$OUT/gpu_prints.log"
timeout 60 python3 benchmarks/bench_retinanet.py --cpu-iters 2 2>&1 | quiet | tee "$OUT/bench_retinanet.log" | tail -4
timeout 240 python3 benchmarks/bench_gpu.py --json "$OUT/bench_gpu.json" --min-seconds 8 --peer-seconds 10 2>&1 | quiet > "$OUT/bench_gpu.log"
sed -n '/^| name/,$p' "$OUT/bench_gpu.log"
timeout 150 python3 examples/retinanet_torchvision.py --device gpu --iters 200 2>&1 | quiet > "$OUT/retinanet_example.log"
tail -6 "$OUT/retinanet_example.log"
timeout 100 python3 benchmarks/bench_cpu.py --workers 15 --rounds 1 --only detaug,torchvision 2>&1 | quiet > "$OUT/bench_cpu.log"
tail -8 "$OUT/bench_cpu.log"

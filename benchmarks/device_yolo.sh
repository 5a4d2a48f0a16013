#!/usr/bin/env bash
# Issue 29's YOLO-style row: the multi-sample ops' GPU tests, then detaug (GPU; CPU at 2 and 15
# host workers; partners 'epoch' and 'batch') beside Ultralytics 8.4's loader with 2 and 15
# workers, same recipe, same 1,024 images, one run.
# Ultralytics is AGPL: it travels as a wheel for this run only, never a dependency of detaug.
# Its loader needs nothing the device image lacks (torch, torchvision, opencv, pillow, pyyaml,
# requests are there; polars, ultralytics-thop and ultralytics-platform are imported only by its
# trainer, profiler and platform client), so one pure-Python wheel (1.4 MB) is the whole set:
#   pip download --no-deps -d .whl ultralytics==8.4.190      (here, before the run)
# Usage (device machine, repo root): bash benchmarks/device_yolo.sh
source .ci/device_setup.sh >/dev/null 2>&1 || exit 1
export YOLO_OFFLINE=1  # no DNS probe at import (the device has no network)
DATA=/tmp/bench_data
timeout 240 python3 -m pytest -m gpu -q -rf --tb=short -p no:cacheprovider \
  tests/test_mosaic_pipeline.py 2>&1 | quiet > "$OUT/gpu_mosaic_tests.log"
grep -E "^FAILED|^ERROR|^E |passed|failed" "$OUT/gpu_mosaic_tests.log" | cut -c1-300 | tail -20
bench_data $DATA
timeout 330 python3 benchmarks/bench_yolo.py --data $DATA --workers 2,15 --batches ${BATCHES:-12} \
  2>&1 | quiet > "$OUT/bench_yolo.log"
grep -E "^\| |FAILED|Error" "$OUT/bench_yolo.log" | cut -c1-260

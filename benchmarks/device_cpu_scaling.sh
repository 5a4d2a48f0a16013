#!/usr/bin/env bash
# Issue 12's table in one device run: bench_cpu.py at N = 2, 4, 8, 15 (detaug with its host stage
# in N worker processes, albumentations and torchvision v2 in DataLoaders of N workers), and
# detaug's host stage in N threads of one process (DETAUG_HOST_PROCESSES=0, the old shape) beside
# it; before that the GPU tests and the host-worker tests. Carry .whl with albumentations' wheels:
#   bash ../shared/tools/device-wheels.sh albumentations==2.0.8 albucore==0.0.24 pydantic==2.14.3 \
#     pydantic-core==2.50.4 annotated-types typing-inspection simsimd stringzilla
# Usage (device machine, repo root): SKIP_TESTS=0 NS="2 4 8 15" bash benchmarks/device_cpu_scaling.sh
source .ci/device_setup.sh >/dev/null 2>&1 || exit 1
DATA=/tmp/bench_data
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  timeout 300 python3 -m pytest -m gpu -q -rf --tb=short -p no:cacheprovider tests 2>&1 | quiet > "$OUT/gpu_tests.log"
  grep -E "^FAILED|^ERROR|passed|failed" "$OUT/gpu_tests.log" | tail -12
  timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_host_workers.py 2>&1 | tail -2
fi
bench_data $DATA
for n in ${NS:-2 4 8 15}; do
  timeout 200 python3 benchmarks/bench_cpu.py --workers $n --rounds 1 --min-seconds ${SECONDS_PER_ROW:-8} \
    --epochs 1 --data $DATA > "$OUT/cpu_$n.log" 2>&1
  DETAUG_HOST_PROCESSES=0 timeout 100 python3 benchmarks/bench_cpu.py --workers $n --rounds 1 \
    --min-seconds ${SECONDS_PER_ROW:-8} --epochs 1 --data $DATA --only detaug > "$OUT/cpu_threads_$n.log" 2>&1
  echo "== N=$n"
  grep -E "^\| (engine|detaug|albu|torchvision)" "$OUT/cpu_$n.log"
  grep -E "^\| detaug" "$OUT/cpu_threads_$n.log" | sed 's/^| detaug/| detaug threads (old shape)/'
done

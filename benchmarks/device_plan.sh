#!/usr/bin/env bash
# Session 7 (issue 11): planning ahead in host worker processes. One call (~5 min):
# the plan-ahead GPU tests and the GPU pipeline tests, then bench_gpu's detaug row planned
# (defaults: 2 GB), planned in threads (host_processes=0), not planned (DETAUG_PLAN_AHEAD=0),
# and at 8 GB, with the one-process and P-process decode ceilings.
# Usage (device machine, repo root): bash benchmarks/device_plan.sh   [TESTS=0 to skip the tests]
source .ci/device_setup.sh >/dev/null 2>&1 || exit 1
DATA=/tmp/bench_data
row() {  # name, extra bench_gpu args...
  local name=$1; shift
  timeout ${ROW_S:-60} python3 benchmarks/bench_gpu.py --data $DATA --keep-data --only detaug --min-seconds ${SECONDS_PER_ROW:-5} \
    --max-seconds 8 --json $OUT/$name.json "$@" 2>&1 | quiet > "$OUT/$name.log"
  echo "== $name"; grep -E "^\| detaug" "$OUT/$name.log" | cut -c1-330; grep -E "Error|error" "$OUT/$name.log" | head -3
}
if [ "${TESTS:-1}" = 1 ]; then
  timeout ${TEST_S:-260} python3 -m pytest -m gpu -q -rf --tb=short -p no:cacheprovider ${TEST_FILES:-tests/test_plan_ahead_gpu.py tests/test_gpu_pipeline.py} 2>&1 | quiet > "$OUT/gpu_tests.log"
  grep -E "^FAILED|^ERROR|^E  |passed|failed" "$OUT/gpu_tests.log" | cut -c1-300 | head -30
fi
bench_data $DATA
timeout 100 python3 benchmarks/bench_gpu.py --data $DATA --keep-data --only ceiling,ceiling_mp --min-seconds 4 --max-seconds 6 \
  --ceiling-processes 1,2,3,4 2>&1 | quiet > "$OUT/ceiling.log"
echo "== ceilings"; grep -E "^\| " "$OUT/ceiling.log" | grep -v detaug | cut -c1-200
row planned
row threads --pipe-kwargs '{"host_processes": 0}'
DETAUG_PLAN_AHEAD=0 row unplanned
row big8 --pipe-kwargs '{"device_memory_budget": "8GB"}'
[ -n "$EXTRA_ROWS" ] && eval "$EXTRA_ROWS"
true

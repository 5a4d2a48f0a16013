#!/usr/bin/env bash
# Session 8, issue 11 (decode straight into the decode processes' rings). One call:
#   PROBE=1: benchmarks/probe_into.py (decode into ring slots against decode + copy, 1-2 threads);
#   TESTS=1: all GPU tests (TEST_FILES to narrow);
#   then both decode ceilings and bench_gpu's detaug row at the defaults, with 1 decoder
#   thread per process, and at 8 GB (each decode thread's time per phase printed); EXTRA_ROWS is
#   eval'd last (row NAME [bench_gpu args], with env settings in front).
# Usage (device machine, repo root): bash benchmarks/device_s8.sh
source .ci/device_setup.sh >/dev/null 2>&1 || exit 1
DATA=/tmp/bench_data
bench_data $DATA
row() {  # name, extra bench_gpu args...
  local name=$1; shift
  timeout ${ROW_S:-60} python3 benchmarks/bench_gpu.py --data $DATA --keep-data --only detaug --min-seconds ${SECONDS_PER_ROW:-6} \
    --max-seconds 9 --json $OUT/$name.json "$@" 2>&1 | quiet > "$OUT/$name.log"
  echo "== $name"; grep -E "^\| detaug" "$OUT/$name.log" | cut -c1-330
  grep -E "Error|error|decode thread" "$OUT/$name.log" | cut -c1-250 | head -6
}
if [ "${PROBE:-1}" = 1 ]; then
  timeout 150 python3 benchmarks/probe_into.py $DATA 2>&1 | quiet > "$OUT/probe_into.log"
  echo "== probe_into"; grep -v "^\s*$" "$OUT/probe_into.log" | cut -c1-300 | tail -14
fi
if [ "${TESTS:-1}" = 1 ]; then
  timeout ${TEST_S:-300} python3 -m pytest -m gpu -q -rf --tb=short -p no:cacheprovider ${TEST_FILES:-tests} 2>&1 | quiet > "$OUT/gpu_tests.log"
  grep -E "^FAILED|^ERROR|^E  |passed|failed" "$OUT/gpu_tests.log" | cut -c1-300 | head -30
fi
timeout 100 python3 benchmarks/bench_gpu.py --data $DATA --keep-data --only ceiling,ceiling_mp --min-seconds 5 --max-seconds 7 \
  --ceiling-processes 1,2,3,4 2>&1 | quiet > "$OUT/ceiling.log"
echo "== ceilings"; grep -E "^\| " "$OUT/ceiling.log" | grep -v detaug | cut -c1-120
export DETAUG_DECODE_PROFILE=1
row defaults
DETAUG_DECODE_THREADS=1 row threads1
row big8 --pipe-kwargs '{"device_memory_budget": "8GB"}'
[ -n "$EXTRA_ROWS" ] && eval "$EXTRA_ROWS"
true

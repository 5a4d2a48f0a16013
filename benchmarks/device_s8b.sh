#!/usr/bin/env bash
# Session 8, issue 11: where the GPU pipeline's time goes. One call:
#   TESTS=1: the decode-process GPU tests (TEST_FILES);
#   both decode ceilings; bench_gpu's detaug row at the defaults (2 GB: one output slot), at
#   2.4 GB (two output slots), and at 8 GB under py-spy (--gil: which threads of the pipeline's
#   process hold the GIL; carry its wheel in .whl), folded stacks to $OUT/spy_*.txt; ROWS replaces
#   these rows (eval'd). Each row prints its decode threads' phases and its launch profile.
# Usage (device machine, repo root): bash benchmarks/device_s8b.sh
source .ci/device_setup.sh >/dev/null 2>&1 || exit 1
DATA=/tmp/bench_data
bench_data $DATA
SPY=/tmp/site/bin/py-spy
row() {  # name, extra bench_gpu args...
  local name=$1; shift
  timeout ${ROW_S:-60} ${WRAP:-} python3 benchmarks/bench_gpu.py --data $DATA --keep-data --only detaug --min-seconds ${SECONDS_PER_ROW:-6} \
    --max-seconds 9 --json /tmp/$name.json "$@" > "/tmp/$name.log" 2>&1
  echo "== $name"; grep -E "^\| detaug" "/tmp/$name.log" | cut -c1-330
  grep -E "Error|error|decode thread|py-spy|launch profile" "/tmp/$name.log" | grep -v -E "nvjpeg2k|nvtiff|nvTIFF|NVTIFF|nvJPEG2000" | cut -c1-600 | head -10
}
if [ "${TESTS:-1}" = 1 ]; then
  timeout ${TEST_S:-300} python3 -m pytest -m gpu -q -rf --tb=short -p no:cacheprovider ${TEST_FILES:-tests} 2>&1 | quiet > "$OUT/gpu_tests.log"
  grep -E "^FAILED|^ERROR|^E  |passed|failed" "$OUT/gpu_tests.log" | cut -c1-300 | head -40
fi
timeout 100 python3 benchmarks/bench_gpu.py --data $DATA --keep-data --only ceiling,ceiling_mp --min-seconds 5 --max-seconds 7 \
  --ceiling-processes ${CEIL_P:-1,2,3,4} 2>&1 | quiet > "/tmp/ceiling.log"
echo "== ceilings"; grep -E "^\| " "/tmp/ceiling.log" | grep -v detaug | cut -c1-60; cp /tmp/ceiling.log $OUT/
export DETAUG_DECODE_PROFILE=1 DETAUG_LAUNCH_PROFILE=1
if [ -n "$ROWS" ]; then eval "$ROWS"; else
row defaults
row b24 --pipe-kwargs '{"device_memory_budget": "2.4GB"}'
row big8 --pipe-kwargs '{"device_memory_budget": "8GB"}'
WRAP="$SPY record --gil -r 250 -f raw -o $OUT/spy_big8.txt --" row spy_big8 --pipe-kwargs '{"device_memory_budget": "8GB"}'
WRAP="$SPY record --gil -r 250 -f raw -o $OUT/spy_defaults.txt --" row spy_defaults
fi
[ -n "$EXTRA_ROWS" ] && eval "$EXTRA_ROWS"
true

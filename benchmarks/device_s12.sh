#!/usr/bin/env bash
# Session 12, call 2 (device machine, repo root), about 540 s:
#   `pytest -m gpu tests` (the hold's device-side waits: commit after 90aff84);
#   issue 11's pairs (device_issue11_final.sh PART=A with TESTS=0: the defaults against the
#   one-process ceiling, 8 GB against the P=3,4 ceilings, three pairs each);
#   target 2's bound: the P=3,4 decode ceiling, then the same processes running detaug's own fused
#   warp of each decoded batch after it (--ceiling-outputs warp: stage b in the decode process,
#   no pipeline around it), then the decode-only ceiling again.
# Usage: bash benchmarks/device_s12.sh   (TESTS=0 skips the tests, PAIRS=0 the pairs)
source .ci/device_setup.sh >/dev/null 2>&1 || exit 1
DATA=/tmp/bench_data
bench_data $DATA
if [ "${TESTS:-1}" = 1 ]; then
  timeout 280 python3 -m pytest -m gpu -q -rf --tb=short -p no:cacheprovider -s tests > "$OUT/gpu_tests.log" 2>&1
  grep -E "^FAILED|^ERROR|passed|failed|^held|^not held|^run\(\) times" "$OUT/gpu_tests.log" | cut -c1-300 | tail -14
fi
if [ "${PAIRS:-3}" != 0 ]; then
  PART=A TESTS=0 bash benchmarks/device_issue11_final.sh 2>&1 | grep -E "^\|" | cut -c1-400
fi
g() { timeout 150 python3 benchmarks/bench_gpu.py --data $DATA --keep-data --min-seconds 6 --max-seconds 9 "$@" 2>&1 \
        | grep -E "decode ceiling.*img/s summed|Error" | cut -c1-160; }
echo "== decode-only ceilings"; g --only ceiling_mp --ceiling-processes 3,4
echo "== ceilings + detaug's warp of each batch"; g --only ceiling_mp --ceiling-processes 3,4 --ceiling-outputs warp
echo "== decode-only ceilings again"; g --only ceiling_mp --ceiling-processes 3,4

#!/usr/bin/env bash
# Session 12, call 3 (device machine, repo root), about 500 s: the GPU tests of test_skip_external
# three times alone (call 2's full run died of a segmentation fault in one of them, in a garbage
# collection inside a new thread's start-up), then `pytest -m gpu tests`, then issue 11's soak at
# the defaults (device_issue11_final.sh PART=B TRAIN=0).
source .ci/device_setup.sh >/dev/null 2>&1 || exit 1
for i in 1 2 3; do
  timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_skip_external.py > "$OUT/skip_$i.log" 2>&1
  echo "skip_external run $i: rc=$? $(grep -E 'passed|failed|Segmentation' "$OUT/skip_$i.log" | tail -1)"
done
timeout 300 python3 -m pytest -m gpu -q -rf --tb=short -p no:cacheprovider -s tests > "$OUT/gpu_tests.log" 2>&1
echo "pytest -m gpu tests: rc=$?"
grep -E "^FAILED|^ERROR|passed|failed|Segmentation|^held|^not held|^run\(\) times" "$OUT/gpu_tests.log" | cut -c1-300 | tail -14
PART=B TRAIN=0 bash benchmarks/device_issue11_final.sh 2>&1 | grep -E "^\|" | cut -c1-400

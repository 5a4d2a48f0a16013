#!/usr/bin/env bash
# One device run for a change: the GPU tests, then the GPU benchmark's detaug and RetinaNet rows
# for a base tree and this tree, alternated (base, head, base, head: the machines drift), on the
# same data and with the same harness: this tree's bench_gpu.py is copied into the base (it puts
# its own tree first on sys.path, so each run imports its tree's detaug). The base is a
# `git archive` of the commit to compare against, unpacked in $BASE (ignored by git, carried):
#   mkdir -p .ab_base && git archive <commit> detaug benchmarks .ci | tar -x -C .ab_base
# Usage (GPU machine, repo root): BASE=.ab_base ROUNDS=2 bash benchmarks/device_ab.sh
source .ci/device_setup.sh >/dev/null 2>&1 || exit 1
DATA=/tmp/bench_data
BASE=${BASE:-.ab_base}
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  timeout 330 python3 -m pytest -m gpu -q -rf --tb=short -p no:cacheprovider tests 2>&1 | quiet > "$OUT/gpu_tests.log"
  grep -E "^FAILED|^ERROR|passed|failed" "$OUT/gpu_tests.log" | tail -12
fi
bench_data $DATA
cp benchmarks/bench_gpu.py "$BASE/benchmarks/bench_gpu.py"
[ -e "$BASE/examples" ] || ln -s "$PWD/examples" "$BASE/examples"
for r in $(seq 1 "${ROUNDS:-2}"); do
  for tree in "$BASE" .; do
    name=$([ "$tree" = . ] && echo head || echo base)
    timeout 150 python3 "$tree/benchmarks/bench_gpu.py" --data $DATA --keep-data --only detaug,retinanet \
      --min-seconds "${SECONDS_PER_ROW:-6}" --json "$OUT/ab_${name}_$r.json" 2>&1 | quiet > "$OUT/ab_${name}_$r.log"
    echo "== $name round $r"
    grep -E "^\| (detaug|name)" "$OUT/ab_${name}_$r.log" | head -4
  done
done

#!/usr/bin/env bash
# Session 8, issue 11: the decode-into-ring probe (benchmarks/probe_into.py), then PART=A of
# device_issue11.sh (all GPU tests; bench_gpu's detaug row at the defaults and 8 GB, with both
# decode ceilings). Usage (device machine, repo root): bash benchmarks/device_s8.sh
source .ci/device_setup.sh >/dev/null 2>&1 || exit 1
DATA=/tmp/bench_data
bench_data $DATA
if [ "${PROBE:-1}" = 1 ]; then
  timeout 150 python3 benchmarks/probe_into.py $DATA 2>&1 | quiet > "$OUT/probe_into.log"
  echo "== probe_into"; grep -v "^\s*$" "$OUT/probe_into.log" | cut -c1-300 | tail -25
fi
PART=A bash benchmarks/device_issue11.sh

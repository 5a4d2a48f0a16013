#!/usr/bin/env bash
# Issue 11 probe: a decode process's device memory stage by stage and T decode threads in one
# process (probe_memory.py), then the detaug row at a few settings with its device memory.
# Usage (device machine, repo root): bash benchmarks/device_mem_probe.sh
source .ci/device_setup.sh >/dev/null 2>&1 || exit 1
DATA=/tmp/bench_data
bench_data $DATA
timeout 120 python3 benchmarks/probe_memory.py $DATA --threads ${PROBE_THREADS:-1,2,3} --seconds 4 2>&1 | quiet | grep -E "^\|"
row() {  # $1: label, $2: JSON Pipeline kwargs, rest: bench_gpu flags
  local label=$1 kw=$2; shift 2
  timeout 100 python3 benchmarks/bench_gpu.py --data $DATA --keep-data --only detaug --min-seconds 4 \
    --max-seconds 6 --pipe-kwargs "$kw" "$@" 2>&1 | quiet > "$OUT/bench_$label.log"
  echo "== $label $kw $*"; grep -E "^\| detaug" "$OUT/bench_$label.log" | head -1 | cut -c1-240
}
eval "${ROWS:-row defaults '{}'}"
timeout 100 python3 benchmarks/bench_gpu.py --data $DATA --keep-data --only ceiling,ceiling_mp 2>&1 | quiet | grep -E "^\| " | cut -c1-200

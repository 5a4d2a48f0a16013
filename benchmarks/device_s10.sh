#!/usr/bin/env bash
# Session 10's experiments (device machine, repo root):
#   PART=probe: would stage b in the decode processes win back what the pipeline's own CUDA
#               context takes from them? probe_decode_gap's detaug loop (3 processes x 2 threads),
#               alone, with the launch's output work in each decode process ("+ stage b"), and
#               beside the same work in a process of its own (--load gpu:375); alternated
#   PART=train: bench_train's 8 GB row with 1 and with 4 batches a launch, with where the
#               pipeline's device memory is (cupy's pool, output slots): the 4-batch overrun
source .ci/device_setup.sh >/dev/null 2>&1 || exit 1
DATA=/tmp/bench_data
bench_data $DATA
if [ "${PART:-probe}" = probe ]; then
  V="ceiling,as detaug 2 threads,as detaug 2 threads + stage b,as detaug 2 threads,as detaug 2 threads + stage b"
  timeout 300 python3 benchmarks/probe_decode_gap.py $DATA --procs 3 --seconds ${SECONDS_PER_ROW:-6} --variants "$V" 2>&1 | quiet | grep "^|"
  timeout 120 python3 benchmarks/probe_decode_gap.py $DATA --procs 3 --seconds ${SECONDS_PER_ROW:-6} --variants "as detaug 2 threads" --load gpu:375 2>&1 | quiet | grep "^| as"
fi
if [ "${PART:-probe}" = train ] || [ -n "$ALSO_TRAIN" ]; then
  timeout 200 python3 benchmarks/bench_train.py --data $DATA --budget 150 --only high-throughput,bpl4 \
    --config bpl4=device_memory_budget=8GB,batches_per_launch=4 2>&1 | quiet > "$OUT/bench_train_s10.log"
  grep -E "^\| |pipeline memory" "$OUT/bench_train_s10.log" | cut -c1-400
fi

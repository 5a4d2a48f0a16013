#!/usr/bin/env bash
# The device runs behind benchmarks/RESULTS.md, in named parts (GPU machine, repository root):
#
#   bash benchmarks/device.sh PART [PART ...]
#
#   tests   the GPU tests (`pytest -m gpu tests`): failures with their reason, the summary line
#   gpu     bench_gpu.py with every section (GPU_ONLY: a subset, e.g. detaug,dali): detaug, its
#           RetinaNet input, the decode ceilings, the peers (torchvision v2 on the GPU and in a CPU
#           DataLoader, kornia, DALI 2.4 at each of DALI_CONFIGS when carried as for startup), the
#           fused warp alone (GPU_ONLY=detaug,dali: about 130 s)
#   pairs   PAIRS (3) pairs per setting, each one bench_gpu invocation (detaug, then its ceiling):
#           the defaults against the one-process ceiling, 8 GB against the P=3,4 ceilings; then
#           the table of ratios and their medians (python benchmarks/gpu_ceilings.py NAME=JSON ...)
#   train   bench_train.py: a ResNet-50 + FPN RetinaNet step fed by a kept batch, by detaug at its
#           defaults and high-throughput settings, and by a torchvision DataLoader
#   soak    bench_memory.py soak: SOAK_BATCHES (20,000) batches at the defaults; rate and memory after a mark
#   cpu     bench_cpu.py at N = NS ("2 4 8 15") workers: detaug's host stage in N processes and in
#           N threads, albumentations and torchvision v2 in DataLoaders of N workers (carry
#           albumentations' wheels in .whl for its rows)
#   yolo    the YOLO-style recipe (bench_yolo.py): detaug on the GPU and on the CPU at WORKERS
#           ("2,15") host workers, partners 'epoch' and 'batch', beside Ultralytics 8.4's loader
#           with the same workers, same recipe and data, one run. Ultralytics is AGPL: it travels
#           as one wheel for this run only (`pip download --no-deps -d .whl ultralytics==8.4.190`
#           here; its loader needs nothing else the device image lacks), never a dependency
#   memory  bench_memory.py: device memory part by part (a context, decoders, rings, outputs in
#           flight, the hold) and the settings that could reach DALI's 1,366 MB, img/s beside each
#           (about 120 s at SECONDS_PER_ROW=6). MEMORY_ONLY picks bench_memory's parts
#           (contexts,pipelines); MEMORY_ONLY=seg: the seg recipe's memory split, pipeline against
#           torch adapter (masks, polygons, boxes; each run alone and through DetaugIterator list
#           targets; SEG_IMAGES in /tmp/seg_data, as seg), about 120 s (estimated, not yet timed)
#   timeline  time to first batch from fresh processes (bench_startup.py --timeline): the benchmark
#           pipeline on the GPU (device='mixed') and the CPU, RUNS (5) each with the start-up order
#           on and off (DETAUG_EARLY_START=0), alternated, after one warm-up; medians and phases
#   ddp     two GPUs (kind nvidia-h100-x2): the DDP GPU tests, examples/retinanet_ddp.py under
#           torchrun on 2 ranks and on 1, bench_ddp.py (the pipeline alone) on 2 ranks and on 1
#   startup bench_startup.py: steady img/s, CPU s per image of the process tree and device memory
#           of DALI 2.4 at each of DALI_CONFIGS (its wheel installed in /tmp/site with nvimgcodec:
#           one pip call) and of detaug's GPU pipeline, then time to first batch from fresh
#           processes (STARTUP_PROCS (3) per engine, alternated; warm: a second pipeline in the same
#           process) of detaug and the best DALI configuration; detaug's CPU pipeline against a
#           DataLoader + albumentations (wheels in .whl) at STARTUP_WORKERS ("2,8") workers;
#           about 250 s with the 6 default configurations. DALI's wheel (199 MB) is more than a
#           call carries (64 MiB): its cp312 files as one xz tar (137 MB) with its pure-Python
#           needs, split in 40 MiB parts, each carried by a call of its own while the machine
#           stays warm and copied to /tmp, then joined and unpacked into /tmp/site
#   firstdecode  the first launches decoded in the pipeline's process (runtime/gpu/early_decode.py):
#           bench_startup.py --timeline on the GPU, RUNS (3) fresh processes with it on and off
#           (DETAUG_EARLY_DECODE=0), alternated, then 2 memory runs each (device memory after the
#           first batch and after 40); its GPU tests and those of the decode processes, the
#           start-up and planning ahead; about 120 s
#   seg     the instance-segmentation recipe (bench_gpu.py --seg): SEG_IMAGES (512) COCO-like JPEGs
#           with polygons in /tmp/seg_data, large-scale jitter of 1024 + flip, masks rasterised at the
#           output, batch 16: detaug GPU with masks, polygons only, boxes only (the cost's split),
#           torchvision v2 in a DataLoader of 15 workers; its GPU tests first; about 150 s
#   multinode  two GPUs (kind nvidia-h100-x2): two machines simulated on one host, as
#           docs/training.md's multi-machine lines: two torchrun launches (--nnodes=2, c10d
#           rendezvous on localhost), one GPU each through CUDA_VISIBLE_DEVICES=0 / =1 (LOCAL_RANK
#           0 on both), each in its own directory. examples/retinanet_ddp.py (NCCL, RetinaNet at
#           MN_SIZE 320, MN_ARGS to change) trains 7 steps with a checkpoint at step 5, then
#           resumes from each machine's copy; bench_ddp.py --check prints per rank its
#           machine, shard, steps and first records, and checks disjoint shards and the resume
#
# Each part fits in one 600 s device call; logs and JSON go to $OUT. Knobs: SECONDS_PER_ROW (6),
# PAIRS (3), SOAK_BATCHES (20000), TRAIN_BUDGET (250), NS ("2 4 8 15"), ITERS (100), TEST_S (300),
# WORKERS ("2,15"), BATCHES (8; yolo), MIN_SECONDS (15; yolo), STARTUP_PROCS (3), STARTUP_SECONDS (8),
# STARTUP_WORKERS ("2,8"), SEG_IMAGES (512; seg, memory), MEMORY_ONLY (memory), DALI_CONFIGS (gpu_peers.DALI_CONFIGS; startup, gpu), GPU_ONLY (gpu),
# RUNS (5; timeline), MN_SIZE (320), MN_ARGS, MN_TIMEOUT (80 s a launch; multinode).
# Data: 1,024 COCO-like JPEGs (bench_gpu.make_dataset) in /tmp/bench_data, made once.
set -u
source .ci/device_setup.sh >/dev/null 2>&1 || { echo "device setup failed"; exit 1; }
DATA=/tmp/bench_data
[ $# -gt 0 ] || { sed -n '2,65p' "$0"; exit 2; }

part_tests() {
  timeout "${TEST_S:-300}" python3 -m pytest -m gpu -q -rf --tb=short -p no:cacheprovider tests \
    2>&1 | quiet > "$OUT/gpu_tests.log"
  echo "pytest -m gpu tests: rc=${PIPESTATUS[0]}"
  grep -E "^FAILED|^ERROR|passed|failed|Segmentation" "$OUT/gpu_tests.log" | cut -c1-300 | tail -20
}

part_gpu() {
  export LD_LIBRARY_PATH=/tmp/site/nvidia/nvimgcodec:${LD_LIBRARY_PATH:-}  # DALI's rows (as startup)
  bench_data $DATA
  local only=() cfg=()
  [ -n "${GPU_ONLY:-}" ] && only=(--only "$GPU_ONLY")
  [ -n "${DALI_CONFIGS:-}" ] && cfg=(--dali-configs "$DALI_CONFIGS")
  timeout 560 python3 benchmarks/bench_gpu.py --data $DATA --keep-data --json "$OUT/bench_gpu.json" \
    --min-seconds 8 --peer-seconds 10 --budget 500 ${only[@]+"${only[@]}"} ${cfg[@]+"${cfg[@]}"} 2>&1 | quiet \
    > "$OUT/bench_gpu.log"
  sed -n '/^| name/,$p' "$OUT/bench_gpu.log"
}

part_pairs() {
  bench_data $DATA
  local args=() i
  for i in $(seq "${PAIRS:-3}"); do
    timeout 60 python3 benchmarks/bench_gpu.py --data $DATA --keep-data --only detaug,ceiling \
      --min-seconds "${SECONDS_PER_ROW:-6}" --max-seconds 9 --json "$OUT/pair_defaults$i.json" \
      > "$OUT/pair_defaults$i.log" 2>&1 && args+=("defaults=$OUT/pair_defaults$i.json") \
      || tail -3 "$OUT/pair_defaults$i.log"
    timeout 120 python3 benchmarks/bench_gpu.py --data $DATA --keep-data --only detaug,ceiling_mp \
      --ceiling-processes 3,4 --min-seconds "${SECONDS_PER_ROW:-6}" --max-seconds 9 \
      --pipe-kwargs '{"device_memory_budget": "8GB"}' --json "$OUT/pair_8GB$i.json" \
      > "$OUT/pair_8GB$i.log" 2>&1 && args+=("8GB=$OUT/pair_8GB$i.json") || tail -3 "$OUT/pair_8GB$i.log"
  done
  python3 benchmarks/gpu_ceilings.py "${args[@]}"
}

part_train() {
  bench_data $DATA
  timeout 560 python3 benchmarks/bench_train.py --data $DATA --budget "${TRAIN_BUDGET:-250}" \
    2>&1 | quiet > "$OUT/bench_train.log"
  grep -E "^\| |/ \(a\)|next\(\)" "$OUT/bench_train.log" | cut -c1-300
}

part_soak() {
  bench_data $DATA
  timeout 200 python3 benchmarks/bench_memory.py soak --data $DATA --batches "${SOAK_BATCHES:-20000}" \
    --max-seconds 170 2>&1 | quiet | grep -E "^\|" | cut -c1-400
}

part_cpu() {
  bench_data $DATA
  local n
  for n in ${NS:-2 4 8 15}; do
    timeout 200 python3 benchmarks/bench_cpu.py --workers "$n" --rounds 1 --epochs 1 \
      --min-seconds "${SECONDS_PER_ROW:-8}" --data $DATA > "$OUT/cpu_$n.log" 2>&1
    DETAUG_HOST_PROCESSES=0 timeout 100 python3 benchmarks/bench_cpu.py --workers "$n" --rounds 1 \
      --epochs 1 --min-seconds "${SECONDS_PER_ROW:-8}" --data $DATA --only detaug \
      > "$OUT/cpu_threads_$n.log" 2>&1
    echo "== N=$n"
    grep -E "^\| (engine|detaug|albu|torchvision)" "$OUT/cpu_$n.log"
    grep -E "^\| detaug" "$OUT/cpu_threads_$n.log" | sed 's/^| detaug/| detaug, host stage in threads/'
  done
}

part_yolo() {
  export YOLO_OFFLINE=1  # no DNS probe at import (the device has no network)
  bench_data $DATA
  # each row: warm-up (its prefetch depth + 3 batches), then >= MIN_SECONDS and >= BATCHES
  # timed (at most 40 s); 8 rows come to about 300 s. The launch profile: where a GPU launch's
  # time goes (decode vs the device thread's ops from mosaic on), one line per pipeline
  DETAUG_LAUNCH_PROFILE=1 timeout 560 python3 benchmarks/bench_yolo.py --data $DATA \
    --workers "${WORKERS:-2,15}" --batches "${BATCHES:-8}" --min-seconds "${MIN_SECONDS:-15}" \
    --max-seconds 40 2>&1 | quiet > "$OUT/bench_yolo.log"
  grep -E "^\| |FAILED|INVALID|Error|launch profile|img/s" "$OUT/bench_yolo.log" | cut -c1-300
}

part_memory() {
  local only=${MEMORY_ONLY:-contexts,pipelines}
  [ "$only" = seg ] || bench_data $DATA
  timeout 450 python3 benchmarks/bench_memory.py --data $DATA --seconds "${SECONDS_PER_ROW:-6}" \
    --only "$only" --seg-images "${SEG_IMAGES:-512}" --json "$OUT/bench_memory.json" 2>&1 | quiet \
    | grep -E "^\||^img/s against|^the adapter's share" | cut -c1-500
}

part_timeline() {
  bench_data $DATA
  timeout 280 python3 benchmarks/bench_startup.py --timeline --data $DATA --devices mixed,cpu \
    --procs "${RUNS:-5}" --off --json "$OUT/startup_timeline.json" 2>&1 | quiet | grep -v "^\["
}

part_ddp() {
  nvidia-smi -L
  timeout 220 python3 -m pytest -q -rf --tb=short -p no:cacheprovider tests/runtime/test_ddp_pipeline.py \
    tests/runtime/test_ddp_spawn.py 2>&1 | quiet | tail -15
  local n
  for n in 2 1; do
    echo "== torchrun --nproc_per_node=$n examples/retinanet_ddp.py --iters ${ITERS:-100}"
    timeout 150 python3 -m torch.distributed.run --nproc_per_node=$n examples/retinanet_ddp.py \
      --iters "${ITERS:-100}" --report 25 2>&1 | quiet | grep -v -i warn | tail -12
  done
  bench_data $DATA
  for n in 2 1; do
    timeout 120 python3 -m torch.distributed.run --nproc_per_node=$n benchmarks/bench_ddp.py \
      --data $DATA --seconds 15 2>&1 | quiet | grep -E "^\|" | cut -c1-400
  done
}

part_startup() {
  # DALI finds nvImageCodec's library (carried in .whl) only beside itself or on this path
  export LD_LIBRARY_PATH=/tmp/site/nvidia/nvimgcodec:${LD_LIBRARY_PATH:-}
  python3 -c "import nvidia.dali, albumentations" 2>&1 | tail -1
  bench_data $DATA
  local cfg=()
  [ -n "${DALI_CONFIGS:-}" ] && cfg=(--dali-configs "$DALI_CONFIGS")
  timeout 400 python3 benchmarks/bench_startup.py --data $DATA --procs "${STARTUP_PROCS:-3}" \
    --seconds "${STARTUP_SECONDS:-8}" --workers "${STARTUP_WORKERS:-2,8}" ${cfg[@]+"${cfg[@]}"} \
    --json "$OUT/bench_startup.json" 2>&1 | quiet > "$OUT/bench_startup.log"
  grep -E "^\||^detaug |^###|FAILED|^bench_startup" "$OUT/bench_startup.log" | cut -c1-400
}

part_firstdecode() {
  bench_data $DATA
  timeout 250 python3 benchmarks/bench_startup.py --timeline --data $DATA --devices mixed \
    --procs "${RUNS:-3}" --env DETAUG_EARLY_DECODE=0 --memory-runs 2 \
    --json "$OUT/firstdecode_timeline.json" 2>&1 | quiet | grep -v "^\["
  timeout "${TEST_S:-200}" python3 -m pytest -m gpu -q -rf --tb=short -p no:cacheprovider \
    tests/runtime/test_early_decode.py tests/runtime/test_startup.py tests/runtime/test_decode_proc.py \
    tests/runtime/test_plan_ahead.py 2>&1 | quiet > "$OUT/firstdecode_tests.log"
  echo "GPU tests: rc=${PIPESTATUS[0]}"
  grep -E "^FAILED|^ERROR|passed|failed|Segmentation" "$OUT/firstdecode_tests.log" | cut -c1-300 | tail -20
}

part_seg() {
  timeout 150 python3 -m pytest -m gpu -q -rf --tb=short -p no:cacheprovider -k mask \
    tests/kernels/test_polygon_masks.py tests/ops/test_instance_masks.py tests/ops/test_output_rules.py \
    tests/frontends/test_torch_masks_gpu.py tests/frontends/test_torch_instance_targets_gpu.py \
    2>&1 | quiet | tail -6
  timeout 400 python3 benchmarks/bench_gpu.py --seg --data /tmp/seg_data --keep-data \
    --num-images "${SEG_IMAGES:-512}" --min-seconds 10 --max-seconds 20 --peer-seconds 15 \
    2>&1 | quiet > "$OUT/bench_seg.log"
  grep -E "^\||FAILED" "$OUT/bench_seg.log" | cut -c1-300
}

part_multinode() {
  nvidia-smi -L
  local d=/tmp/multinode ex=$PWD/examples/retinanet_ddp.py tag n port
  rm -rf $d && mkdir -p $d/machine0 $d/machine1
  # shellcheck disable=SC2206
  local args=(${MN_ARGS:---size ${MN_SIZE:-320} --batch-size 8 --threads 2} --iters 7 --report 7)
  for tag in full resumed; do
    port=$((29400 + RANDOM % 2000))
    local extra=(--save 'ck-{step}.pt' --save-every 5 --trace 'full-{rank}.json')
    [ $tag = resumed ] && extra=(--resume ck-5.pt --trace 'resumed-{rank}.json')
    echo "== $tag: torchrun --nnodes=2 --node_rank=0|1 --nproc_per_node=1 --rdzv_backend=c10d" \
      "--rdzv_endpoint=localhost:$port examples/retinanet_ddp.py ${args[*]} ${extra[*]}"
    SECONDS=0
    for n in 0 1; do
      (cd $d/machine$n && CUDA_VISIBLE_DEVICES=$n timeout "${MN_TIMEOUT:-80}" python3 -m \
        torch.distributed.run --nnodes=2 --node_rank=$n --nproc_per_node=1 --rdzv_backend=c10d \
        --rdzv_endpoint=localhost:$port "$ex" "${args[@]}" "${extra[@]}" \
        > "$OUT/multinode_${tag}_machine$n.log" 2>&1; echo "machine$n: rc=$?" \
        >> "$OUT/multinode_${tag}_machine$n.log") &
    done
    wait
    echo "   ($SECONDS s)"
    for n in 0 1; do
      quiet < "$OUT/multinode_${tag}_machine$n.log" | grep -E "^rank|^step|rc=|Error" | cut -c1-200
    done
  done
  python3 benchmarks/bench_ddp.py --check $d/machine0 $d/machine1 --records 40 --resumed-from 5
}

for part in "$@"; do
  if ! declare -F "part_$part" >/dev/null; then
    echo "unknown part '$part': choose from tests gpu pairs train soak cpu yolo memory timeline ddp startup firstdecode seg multinode"; exit 2
  fi
  echo "##### $part"
  "part_$part"
done

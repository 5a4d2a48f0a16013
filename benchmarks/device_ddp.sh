#!/usr/bin/env bash
# Issue 17 on two GPUs (kind nvidia-h200-x2): the DDP GPU tests, then examples/retinanet_ddp.py
# under torchrun on 2 ranks and on 1 rank (img/s of each), NCCL, each rank's GPU pipeline on its
# own GPU. Usage (device machine, repo root): bash benchmarks/device_ddp.sh
source .ci/device_setup.sh >/dev/null 2>&1 || exit 1
nvidia-smi -L
timeout 220 python3 -m pytest -q -rf --tb=short -p no:cacheprovider tests/test_ddp_gpu.py tests/test_ddp_spawn.py 2>&1 | quiet | tail -15
for n in 2 1; do
  echo "== torchrun --nproc_per_node=$n examples/retinanet_ddp.py --iters ${ITERS:-100}"
  timeout 150 python3 -m torch.distributed.run --nproc_per_node=$n examples/retinanet_ddp.py \
    --iters ${ITERS:-100} --report 25 2>&1 | quiet | grep -v -i warn | tail -12
done
# the pipeline alone on 2 ranks and on 1 (bench_gpu's pipeline, 1,024 images, batch 32 a rank)
if [ -n "${BENCH:-1}" ]; then
  bench_data /tmp/bench_data
  for n in 2 1; do
    timeout 120 python3 -m torch.distributed.run --nproc_per_node=$n benchmarks/bench_ddp.py \
      --data /tmp/bench_data --seconds ${SECONDS_DDP:-15} 2>&1 | quiet | grep -E "^\|" | cut -c1-400
  done
fi

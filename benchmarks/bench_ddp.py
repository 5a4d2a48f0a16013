"""Issue 17: the GPU pipeline's throughput on N ranks against 1, each rank (torchrun, NCCL) with
its own bench_gpu pipeline on its own GPU (``device_id`` from LOCAL_RANK), sharded by
``DetaugIterator``, across short epochs: 1,024 images at batch 32 are 32 batches an epoch on one
rank and 16 on each of two, so epoch ends (where the next epoch's launches must already be in
flight) come every 16 batches.

    torchrun --nproc_per_node=N benchmarks/bench_ddp.py --data DIR [--batch-size 32] [--seconds 15]

Each rank: ``--warmup`` batches, a barrier, then batches for ``--seconds`` (the GPU synchronised
at the end), another barrier. Rank 0 prints one markdown row: ranks, img/s summed over the ranks
(images of all ranks over the longest rank's time), steps per epoch of each rank, epochs crossed.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gpu as bg  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--threads", type=int, default=4)
    args = ap.parse_args(argv)
    import torch
    import torch.distributed as dist

    from detaug.adapters.torch import DetaugIterator

    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    pipe = bg.make_det_pipe(args.data, "mixed", batch_size=args.batch_size, num_threads=args.threads,
                            seed=0)
    it = DetaugIterator(pipe, output_map=("images", "boxes"), auto_reset=True)
    steps = {}

    def step():
        try:
            b = next(it)
        except StopIteration:  # an epoch ended (auto_reset): the next epoch's first batch
            b = next(it)
        e = pipe.state_dict()["epoch"]
        steps[e] = steps.get(e, 0) + 1
        return b["images"].shape[0]

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    dist.barrier()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < args.seconds:
        n += step()
    torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    total = torch.tensor([float(n)], device="cuda")
    longest = torch.tensor([secs], device="cuda")
    dist.all_reduce(total)
    dist.all_reduce(longest, op=dist.ReduceOp.MAX)
    per_epoch = sorted(set(v for k, v in steps.items() if k not in (min(steps), max(steps))))
    gathered = [None] * world
    dist.all_gather_object(gathered, (rank, str(pipe.device_id), per_epoch, len(steps), pipe.shard_size()))
    if rank == 0:
        print("| ranks | img/s (all ranks) | per rank | seconds | rank: device, steps per full epoch, "
              "epochs touched, shard size |")
        print("|---:|---:|---:|---:|---|")
        desc = "; ".join(f"{r}: cuda:{d}, {s}, {ne}, {sz}" for r, d, s, ne, sz in gathered)
        print(f"| {world} | {total.item() / longest.item():,.0f} | "
              f"{total.item() / longest.item() / world:,.0f} | {longest.item():.1f} | {desc} |", flush=True)
    dist.barrier()
    it = None
    pipe.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

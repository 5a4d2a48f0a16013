"""The GPU pipeline's throughput on N ranks against 1, each rank (torchrun, NCCL) with
its own bench_gpu pipeline on its own GPU (``device_id`` from LOCAL_RANK), sharded by
``DetaugIterator``, across short epochs: 1,024 images at batch 32 are 32 batches an epoch on one
rank and 16 on each of two, so epoch ends (where the next epoch's launches must already be in
flight) come every 16 batches.

    torchrun --nproc_per_node=N benchmarks/bench_ddp.py --data DIR [--batch-size 32] [--seconds 15]

Each rank: ``--warmup`` batches, a barrier, then batches for ``--seconds`` (the GPU synchronised
at the end), another barrier. Rank 0 prints one markdown row: ranks, img/s summed over the ranks
(images of all ranks over the longest rank's time), steps per epoch of each rank, epochs crossed.

    python benchmarks/bench_ddp.py --check DIR [DIR ...] --records 40 --resumed-from 5

``--check``: the checks of a two-machine run of examples/retinanet_ddp.py (device.sh part
multinode; tests/frontends/test_multinode.py makes the same ones on the CPU), from the ranks' ``--trace``
files: one line per rank, then the shards' disjointness and cover per epoch, and the resumed
steps against the uninterrupted run's; exit status 1 when a check fails. Each DIR is one
machine's working directory, holding ``full-<rank>.json`` (the uninterrupted run) and
``resumed-<rank>.json`` (the run resumed at step ``--resumed-from``). No GPU, torch or detaug.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------------------- --check: two machines
def load(dirs, stem):
    """global rank -> (machine directory, trace) of ``stem-<rank>.json`` files."""
    got = {}
    for d in dirs:
        for f in sorted(glob.glob(os.path.join(d, f"{stem}-*.json"))):
            t = json.load(open(f))
            got[t["rank"]] = (os.path.basename(os.path.normpath(d)), t)
    return got


def epoch_records(trace, epoch):
    """The distinct records a rank read in ``epoch`` (a filled last batch repeats some)."""
    return {r for s in trace if s["epoch"] == epoch for r in s["records"]}


def check_multinode(args) -> int:
    """The two-machine checks (``--check``): 0 when every one holds, else 1."""
    full, resumed = load(args.dirs, "full"), load(args.dirs, "resumed")
    ok = True

    def check(name, good, detail=""):
        nonlocal ok
        ok &= bool(good)
        print(f"{'ok  ' if good else 'FAIL'} {name}{': ' + detail if detail else ''}")

    print("| rank | machine | local rank | shard | steps/epoch | steps | first records "
          "| resumed steps = uninterrupted |")
    print("|---|---|---|---|---|---|---|---|")
    for r in sorted(full):
        machine, t = full[r]
        mine = resumed.get(r, (None, {"trace": None}))[1]["trace"]
        same = mine == t["trace"][args.resumed_from:]
        print(f"| {r} | {machine} | {t['local_rank']} | {t['shard']['shard_id']}/"
              f"{t['shard']['num_shards']} | {t['steps_per_epoch']} | {len(t['trace'])} | "
              f"{' '.join(t['trace'][0]['records'][:3]) if t['trace'] else '-'} | "
              f"{'yes' if same else 'NO'} ({len(mine or [])} steps) |")
    world = {t["world"] for _, t in full.values()}
    check("a trace from every rank", len(world) == 1 and sorted(full) == list(range(world.pop())),
          f"ranks {sorted(full)}")
    check("ranks on different machines", len({m for m, _ in full.values()}) == len(full))
    check("LOCAL_RANK 0 everywhere", all(t["local_rank"] == 0 for _, t in full.values()))
    check("shard = global rank", all(t["shard"]["shard_id"] == r for r, (_, t) in full.items()))
    steps = {(t["steps_per_epoch"], len(t["trace"])) for _, t in full.values()}
    check("equal steps per rank", len(steps) == 1, str(sorted(steps)))
    epochs = sorted({s["epoch"] for _, t in full.values() for s in t["trace"]})
    per_epoch = full[0][1]["steps_per_epoch"] if 0 in full else 0
    for e in epochs:
        parts = [epoch_records(t["trace"], e) for _, t in full.values()]
        whole = sum(1 for _, t in full.values() for s in t["trace"] if s["epoch"] == e) == \
            per_epoch * len(full)
        if not whole:
            continue  # the run stopped inside this epoch
        overlap = set.intersection(*parts) if len(parts) > 1 else set()
        check(f"epoch {e}: shards disjoint and covering the data set",
              not overlap and len(set.union(*parts)) == args.records,
              f"{[len(p) for p in parts]} records a rank, {len(overlap)} shared, "
              f"{len(set.union(*parts))} of {args.records} covered")
    check("resume: every rank's steps are the uninterrupted run's",
          sorted(resumed) == sorted(full) and all(
              resumed[r][1]["trace"] == full[r][1]["trace"][args.resumed_from:] for r in full),
          f"{sum(len(t['trace']) for _, t in resumed.values())} resumed steps in all")
    return 0 if ok else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", help="bench_gpu.make_dataset's folder (the throughput run)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--check", nargs="+", metavar="DIR",
                    help="the two-machine checks of these machines' directories (no run)")
    ap.add_argument("--records", type=int, help="--check: records in the data set")
    ap.add_argument("--resumed-from", type=int, help="--check: the checkpoint's step")
    args = ap.parse_args(argv)
    if args.check:
        if args.records is None or args.resumed_from is None:
            ap.error("--check needs --records and --resumed-from")
        args.dirs = args.check
        return check_multinode(args)
    if not args.data:
        ap.error("--data is required (or --check DIR ...)")
    import bench_gpu as bg
    import torch
    import torch.distributed as dist

    from detaug.adapters.torch import DetaugIterator

    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    free0 = torch.cuda.mem_get_info(local)[0]  # this rank's GPU, its context made (set_device, NCCL)
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
    mb = (free0 - torch.cuda.mem_get_info(local)[0]) / 1e6  # cudaMemGetInfo: every process on it
    dist.all_gather_object(gathered, (rank, str(pipe.device_id), per_epoch, len(steps),
                                      pipe.shard_size(), mb))
    if rank == 0:
        print("| ranks | img/s (all ranks) | per rank | seconds | rank: device, steps per full epoch, "
              "epochs touched, shard size, device MB |")
        print("|---:|---:|---:|---:|---|")
        desc = "; ".join(f"{r}: cuda:{d}, {s}, {ne}, {sz}, {m:,.0f} MB"
                         for r, d, s, ne, sz, m in gathered)
        print(f"| {world} | {total.item() / longest.item():,.0f} | "
              f"{total.item() / longest.item() / world:,.0f} | {longest.item():.1f} | {desc} |", flush=True)
    dist.barrier()
    it = None
    pipe.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())

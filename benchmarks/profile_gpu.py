"""Where the host time of the GPU pipeline goes: the bench_gpu pipeline run batch by batch in one
thread (run_batch) under cProfile, on the GPU machine. Prints the top functions by own time and a
per-op breakdown. Usage: python benchmarks/profile_gpu.py [--batches 40] [--decode-processes N] [--data DIR]"""
import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gpu  # noqa: E402  (data generation)

from detaug import pipeline as P  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--decode-processes", type=int, default=0,
                    help="-1: the pipeline's default (decode processes from the memory budget)")
    ap.add_argument("--data", default=None)
    args = ap.parse_args()
    root = args.data or tempfile.mkdtemp(prefix="detaug_prof_")
    if not os.path.exists(os.path.join(root, "annotations.json")):
        bench_gpu.make_dataset(root, 1024, os.cpu_count())

    pipe = bench_gpu.make_det_pipe(root, "mixed", batch_size=64, num_threads=16, device_id=0, seed=0,
                                   decode_processes=None if args.decode_processes < 0
                                   else args.decode_processes)
    pipe.build()
    for i in range(3):
        pipe.run_batch(i)
    # per-op wall time, measured in the one thread that runs everything
    per_op = defaultdict(float)
    orig = P.Pipeline._run_ops

    def timed_ops(self, ctx, ops):
        for op in ops:
            t = time.perf_counter()
            orig(self, ctx, [op])
            per_op[op.schema.name] += time.perf_counter() - t

    P.Pipeline._run_ops = timed_ops
    import cupy as cp

    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    for i in range(args.batches):
        pipe.run_batch(i % len(pipe))
    prof.disable()
    cp.cuda.runtime.deviceSynchronize()
    dt = time.perf_counter() - t0
    print(f"{args.batches} batches of 64 in one thread: {dt / args.batches * 1e3:.2f} ms/batch "
          f"({args.batches * 64 / dt:.0f} img/s)")
    for name, s in sorted(per_op.items(), key=lambda kv: -kv[1]):
        print(f"  {name:24s} {s / args.batches * 1e3:7.2f} ms/batch")
    pstats.Stats(prof).sort_stats("tottime").print_stats(30)
    pstats.Stats(prof).sort_stats("cumulative").print_stats("detaug", 40)
    os._exit(0)


if __name__ == "__main__":
    main()

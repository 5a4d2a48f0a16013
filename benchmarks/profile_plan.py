"""What planning a launch ahead costs (detaug/plan_ahead.py), on the GPU machine: the bench_gpu
pipeline's ``_plan_launch`` run in this one thread (no other load), for launches of 1 and 4
batches of 64: ms per launch, ms per 64 images, the plan's pickled size and the time to pickle
it; then the top functions under cProfile, by own time.

    python benchmarks/profile_plan.py --data /tmp/bench_data [--launches 40]
"""
import argparse
import cProfile
import os
import pickle
import pstats
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gpu  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--launches", type=int, default=40)
    args = ap.parse_args()
    rows = []
    for k in (1, 4):
        pipe = bench_gpu.make_det_pipe(args.data, "mixed", batch_size=64, num_threads=1, device_id=0,
                                       seed=0, decode_processes=1, host_processes=0,
                                       batches_per_launch=k)
        pipe.build()
        assert pipe.plan_ahead, "the benchmark pipeline should plan ahead"
        keys = [(0, (b * k) % (len(pipe) - k), k) for b in range(args.launches)]
        prepared = [pipe._prepare(key) for key in keys]
        for key, p in zip(keys[:3], prepared[:3]):  # warm-up
            pipe._plan_launch(key, p, None)
        t0 = time.perf_counter()
        plans = [pipe._plan_launch(key, p, None) for key, p in zip(keys, prepared)]
        plan_ms = (time.perf_counter() - t0) * 1e3 / len(keys)
        t0 = time.perf_counter()
        blobs = [pickle.dumps(p, protocol=5) for p in plans]
        pickle_ms = (time.perf_counter() - t0) * 1e3 / len(keys)
        rows.append((k, plan_ms, plan_ms / k, sum(map(len, blobs)) / len(blobs) / 1e3, pickle_ms))
        if k == 1:
            prof = cProfile.Profile()
            prof.enable()
            for key, p in zip(keys, prepared):
                pipe._plan_launch(key, p, None)
            prof.disable()
            print(f"cProfile of {len(keys)} launches of 1 batch (own time):")
            pstats.Stats(prof).sort_stats("tottime").print_stats(22)
        pipe.close()
    print("| batches per launch | ms per launch | ms per 64 images | pickled plan KB | pickle ms |")
    print("|---:|---:|---:|---:|---:|")
    for k, ms, per, kb, pk in rows:
        print(f"| {k} | {ms:.2f} | {per:.2f} | {kb:.0f} | {pk:.2f} |")


if __name__ == "__main__":
    main()

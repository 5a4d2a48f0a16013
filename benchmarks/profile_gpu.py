"""Where the host time of the GPU pipeline goes: the bench_gpu pipeline run batch by batch in one
thread (run_batch) under cProfile, on the GPU machine. Prints the top functions by own time and a
per-op breakdown. Usage: python benchmarks/profile_gpu.py [--batches 40]"""
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

from detaug import fn, pipeline_def  # noqa: E402
from detaug import pipeline as P  # noqa: E402


@pipeline_def
def det_pipe(file_root, annotations_file):
    """The issue-4 benchmark pipeline (as bench_gpu's), shared by the profiling scripts."""
    enc, boxes = fn.readers.coco(file_root=file_root, annotations_file=annotations_file, random_shuffle=True)
    img = fn.decoders.image(enc, device="mixed")
    img, boxes = fn.random_iou_crop(img, boxes)
    img, boxes = fn.flip(img, boxes, horizontal=fn.random.coin_flip())
    img, boxes = fn.resize(img, boxes, size=(640, 640))
    boxes = fn.prune_boxes(boxes, min_size=1)
    img = fn.normalize(img, mean=[124, 116, 104], std=[58, 57, 57], output_layout="CHW")
    return img, fn.pad_boxes(boxes, max_boxes=64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=40)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="detaug_prof_")
    bench_gpu.make_dataset(root, 1024, os.cpu_count())

    pipe = det_pipe(os.path.join(root, "images"), os.path.join(root, "annotations.json"),
                    batch_size=64, num_threads=16, device_id=0, seed=0, decode_processes=0)
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
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    pstats.Stats(prof).sort_stats("cumulative").print_stats("detaug", 45)
    os._exit(0)


if __name__ == "__main__":
    main()

"""RetinaNet target encoding: a batch of 64 images of 640x640 (76,725 anchors each), 20 random
boxes per image, 80 classes. GPU (one kernel launch per batch, cupy events over 50 iterations
after warm-up) against keras-retinanet's per-image NumPy generator code. Without a GPU only
the NumPy line is printed.

    python benchmarks/bench_retinanet.py [--batch 64] [--boxes 20] [--iters 50] [--cpu-iters 3]
"""
import argparse
import time

import numpy as np

from detaug.targets import retinanet as rn


def make_batch(rng, batch, boxes_per_image, hw, num_classes):
    n = batch * boxes_per_image
    xy = rng.uniform(0, [hw[1] * 0.9, hw[0] * 0.9], (n, 2))
    wh = rng.uniform(8, [hw[1] * 0.5, hw[0] * 0.5], (n, 2))
    boxes = np.concatenate([xy, np.minimum(xy + wh, [hw[1], hw[0]])], 1).astype(np.float32)
    labels = rng.integers(0, num_classes, n)
    offsets = np.arange(batch + 1, dtype=np.int64) * boxes_per_image
    return boxes, labels, offsets


def time_numpy(enc, boxes, labels, offsets, iters):
    rn.encode_targets_plain_numpy(enc.anchors, boxes[:1], labels[:1], np.asarray([0, 1]), enc.num_classes)
    start = time.perf_counter()
    for _ in range(iters):
        rn.encode_targets_plain_numpy(enc.anchors, boxes, labels, offsets, enc.num_classes, canvas=enc.image_size)
    return (time.perf_counter() - start) / iters * 1e3


def time_gpu(enc, boxes, labels, offsets, iters):
    """(ms per batch, device MB), or None without cupy or a device. Device MB: the drop of
    cudaMemGetInfo's free bytes (whole device) from before the inputs' upload, this process's
    context made first, to after the timed calls (cupy's pool holding what the calls took)."""
    from detaug.core.backend import gpu_available

    if not gpu_available():
        return None
    import cupy as cp

    cp.cuda.runtime.free(0)  # the context made before the first reading
    free0 = cp.cuda.runtime.memGetInfo()[0]
    d_boxes, d_labels = cp.asarray(boxes), cp.asarray(labels, dtype=cp.int32)
    d_offsets = cp.asarray(offsets)  # device offsets: no host-to-device copy in the timed loop
    for _ in range(5):
        enc(d_boxes, d_labels, d_offsets)
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(iters):
        enc(d_boxes, d_labels, d_offsets)
    stop.record()
    stop.synchronize()
    return (cp.cuda.get_elapsed_time(start, stop) / iters,
            (free0 - cp.cuda.runtime.memGetInfo()[0]) / 1e6)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--boxes", type=int, default=20)
    parser.add_argument("--classes", type=int, default=80)
    parser.add_argument("--size", type=int, default=640)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--cpu-iters", type=int, default=3)
    args = parser.parse_args()
    hw = (args.size, args.size)
    enc = rn.RetinaNetEncoder(args.classes, hw)
    boxes, labels, offsets = make_batch(np.random.default_rng(0), args.batch, args.boxes, hw, args.classes)
    print(f"RetinaNet targets: batch {args.batch}, {hw[0]}x{hw[1]} ({enc.num_anchors} anchors), "
          f"{args.boxes} boxes/image, {args.classes} classes")
    cpu_ms = time_numpy(enc, boxes, labels, offsets, args.cpu_iters)
    print(f"{'path':<32}{'ms/batch':>12}{'img/s':>12}")
    print(f"{'numpy, per image (keras-style)':<32}{cpu_ms:>12.2f}{args.batch / cpu_ms * 1e3:>12.0f}")
    gpu = time_gpu(enc, boxes, labels, offsets, args.iters)
    if gpu is None:
        print("(no cupy / CUDA device: GPU path not timed)")
        return
    gpu_ms, mb = gpu
    print(f"{'cupy, one launch per batch':<32}{gpu_ms:>12.3f}{args.batch / gpu_ms * 1e3:>12.0f}"
          f"  (device memory {mb:,.0f} MB)")
    print(f"GPU / NumPy speed-up: {cpu_ms / gpu_ms:.0f}x (target: under 2 ms per batch of 64)")


if __name__ == "__main__":
    main()

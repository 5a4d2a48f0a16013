"""sha256 of the first N batches of the benchmark pipelines on the CPU, fixed seed: what a change
that must not move a value (a refactor) compares between two trees.

    PYTHONPATH=<tree>:<tree>/benchmarks python benchmarks/hash_batches.py --data /tmp/hash_data \
        [--batches 4] [--gpu] [--cpu-warp reference]

Pipelines: bench_gpu.py's detection pipeline (make_det_pipe, device='cpu') and its RetinaNet
variant; bench_yolo.py's YOLO recipe on the CPU with partners 'batch', 'epoch' and 'pool' (its
decode cache on); and a chain of the colour, pixel and erasing ops (each with its random draws)
that the benchmark pipelines do not use. One line per pipeline: its name and the hex digest of every output array of every batch
(values, shapes and dtypes), in order.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _np(a):
    """A host copy of a NumPy or cupy array."""
    return a.get() if hasattr(a, "get") and not isinstance(a, dict) else np.asarray(a)


def _arrays(v):
    """The host arrays of one output value, in a fixed order."""
    if type(v).__name__ == "ImageBatch":  # (a cupy array has .data too: its pointer)
        d = v.data
        return [_np(a) for a in d] if isinstance(d, (list, tuple)) else [_np(d)]
    if isinstance(v, dict) or hasattr(v, "keys"):  # PaddedBoxes: its dense arrays
        return [_np(v[k]) for k in sorted(v)]
    if hasattr(v, "per_sample"):  # BoxBatch: per sample a dict {'boxes', 'labels', <fields>}
        return [_np(s[k]) for s in v.per_sample() for k in sorted(s)]
    return [_np(v)]


def digest(pipe, batches: int) -> str:
    h = hashlib.sha256()
    for _ in range(batches):
        for v in pipe.run():
            for a in _arrays(v):
                h.update(str((a.shape, a.dtype.str)).encode())
                h.update(np.ascontiguousarray(a).tobytes())
    pipe.close()
    return h.hexdigest()


def ops_pipe(root, batch, gpu=False):
    """The colour, pixel and erasing ops the benchmark pipelines leave out, in one chain (on the
    GPU: decoded there, JPEG compression, a CPU-only op, left out)."""
    from detaug import fn, pipeline_def

    @pipeline_def(batch_size=batch, num_threads=2, seed=7, device_id=0 if gpu else None)
    def chain():
        enc, boxes = fn.readers.coco(file_root=os.path.join(root, "images"),
                                     annotations_file=os.path.join(root, "annotations.json"),
                                     random_shuffle=True)
        img = fn.decoders.image(enc, device="mixed" if gpu else "cpu")
        img, boxes = fn.zoom_out(img, boxes, ratio=(1.0, 1.5))
        img, boxes = fn.resize(img, boxes, size=(160, 192))
        img = fn.photometric_distort(img)
        img = fn.grayscale(img, p=0.3)
        img = fn.gaussian_blur(img, sigma_range=(0.1, 2.0), probability=0.5)
        img = fn.noise(img, std=(0.0, 12.0), probability=0.7)
        img = fn.noise(img, mode="salt_and_pepper", amount=(0.0, 0.05))
        img = fn.noise.gaussian(img, stddev=fn.random.uniform(range=(0, 5)))
        img = fn.noise.salt_and_pepper(img, prob=0.01)
        img = fn.noise.shot(img, factor=fn.random.uniform(range=(5, 30)))
        img = fn.jitter(img, nDegree=3)
        img = fn.brightness_contrast(img, brightness=fn.random.uniform(range=(0.8, 1.2)))
        img = fn.hsv(img, hue=fn.random.uniform(range=(-10, 10)))
        img = fn.color_twist(img, saturation=fn.random.uniform(range=(0.5, 1.5)))
        img = fn.brightness(img, brightness=1.1)
        img = fn.contrast(img, contrast=0.9)
        if not gpu:
            img = fn.jpeg_compression(img, quality=(30, 90), probability=0.5)
        img, boxes = fn.random_erasing(img, boxes, probability=0.7)
        return img, fn.pad_boxes(boxes, max_boxes=32)

    return chain()


def geometry_pipe(root, batch, gpu=False):
    """The random geometric recipes the benchmark pipelines leave out, one branch each."""
    from detaug import fn, pipeline_def

    @pipeline_def(batch_size=batch, num_threads=2, seed=11, device_id=0 if gpu else None)
    def branches():
        enc, boxes = fn.readers.coco(file_root=os.path.join(root, "images"),
                                     annotations_file=os.path.join(root, "annotations.json"),
                                     random_shuffle=True)
        img = fn.decoders.image(enc, device="mixed" if gpu else "cpu")
        a, ab = fn.random_resized_crop(img, boxes, size=(96, 128))
        b, bb = fn.scale_jitter(img, boxes, size=(128, 128), scale_range=(0.3, 1.7))
        c, cb = fn.random_shortest_size(img, boxes, min_size=(64, 80, 96), max_size=160)
        d, db = fn.perspective(img, boxes, distortion_scale=0.4, p=0.8)
        d, db = fn.resize(d, db, size=(100, 100))
        return a, fn.pad_boxes(ab), b, fn.pad_boxes(bb), c, fn.pad_boxes(cb), d, fn.pad_boxes(db)

    return branches()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="/tmp/hash_data")
    ap.add_argument("--images", type=int, default=48)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--only", default="", help="comma-separated pipeline names")
    ap.add_argument("--gpu", action="store_true", help="the same pipelines on the GPU (decoded "
                                                      "there: device='mixed', device_id=0)")
    ap.add_argument("--cpu-warp", default=None, help="backend.set_cpu_warp first ('reference': "
                                                      "the NumPy twins instead of OpenCV)")
    args = ap.parse_args(argv)
    if args.cpu_warp:
        from detaug.core import backend

        backend.set_cpu_warp(args.cpu_warp)
    import bench_gpu
    import bench_yolo

    bench_gpu.make_dataset(args.data, args.images, 2)
    bs, gpu = args.batch_size, args.gpu
    dec, dev, did = ("mixed", "gpu", 0) if gpu else ("cpu", "cpu", None)
    made = {
        "det": lambda: bench_gpu.make_det_pipe(args.data, dec, batch_size=bs, num_threads=2,
                                               seed=0, device_id=did),
        "retinanet": lambda: bench_gpu.make_det_pipe(args.data, dec, retinanet=True, size=320,
                                                     batch_size=bs, num_threads=2, seed=0,
                                                     device_id=did),
        "yolo_batch": lambda: bench_yolo.detaug_pipe(args.data, 320, bs, dev, 2, "batch", 0.5),
        "yolo_epoch": lambda: bench_yolo.detaug_pipe(args.data, 320, bs, dev, 2, "epoch", 0.5),
        "yolo_pool": lambda: bench_yolo.detaug_pipe(args.data, 320, bs, dev, 2, "pool", 0.5),
        "ops": lambda: ops_pipe(args.data, bs, gpu),
        "geometry": lambda: geometry_pipe(args.data, bs, gpu),
    }
    only = [n for n in args.only.split(",") if n] or list(made)
    for name in only:
        print(f"{name} {digest(made[name](), args.batches)}", flush=True)


if __name__ == "__main__":
    main()

"""Where the time of the GPU pipeline goes when it runs as in bench_gpu (all its threads): per op,
the wall time and the CPU time of the thread that ran it, per 64 images, plus the decoder call
on its own and the process's CPU time. Usage (GPU machine):
python benchmarks/profile_threads.py [--batches-per-launch K] [--seconds 6] [--data DIR]"""
import argparse
import collections
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gpu  # noqa: E402  (data generation)

from detaug import pipeline as P  # noqa: E402
from detaug.ops import gpu_decode, sources  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches-per-launch", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--prefetch", type=int, default=3)
    ap.add_argument("--device-workers", type=int, default=None)
    ap.add_argument("--decode-processes", type=int, default=0,
                    help="0 (default): decode in the device threads, where the per-op times show it")
    ap.add_argument("--data", default=None)
    ap.add_argument("--retinanet", action="store_true",
                    help="the RetinaNet input pipeline (+rotate, +targets) instead of issue 4's")
    args = ap.parse_args()
    root = args.data or tempfile.mkdtemp(prefix="detaug_prof_")
    if not os.path.exists(os.path.join(root, "annotations.json")):
        bench_gpu.make_dataset(root, 1024, os.cpu_count())

    pipe = bench_gpu.make_det_pipe(root, "mixed", retinanet=args.retinanet, batch_size=64, num_threads=os.cpu_count(),
                                   device_id=0, seed=0, prefetch_queue_depth=args.prefetch,
                                   device_workers=args.device_workers,
                                   batches_per_launch=args.batches_per_launch,
                                   decode_processes=args.decode_processes)
    lock = threading.Lock()
    acc = collections.defaultdict(lambda: [0.0, 0.0, 0])

    def add(name, w, c):
        with lock:
            a = acc[name]
            a[0] += w
            a[1] += c
            a[2] += 1

    orig = P.Pipeline._run_ops

    def timed_ops(self, ctx, ops):
        for op in ops:
            t, c = time.perf_counter(), time.thread_time()
            orig(self, ctx, [op])
            add(op.schema.name, time.perf_counter() - t, time.thread_time() - c)

    def wrap(mod, name, label):
        f = getattr(mod, name)

        def g(*a, **k):
            t, c = time.perf_counter(), time.thread_time()
            try:
                return f(*a, **k)
            finally:
                add(label, time.perf_counter() - t, time.thread_time() - c)
        setattr(mod, name, g)

    P.Pipeline._run_ops = timed_ops
    wrap(sources, "read_files", "  (read_files)")
    dec_orig = gpu_decode._decoder

    def dec(dev):
        d = dec_orig(dev)

        class Timed:
            def decode(self, *a, **k):
                t, c = time.perf_counter(), time.thread_time()
                try:
                    return d.decode(*a, **k)
                finally:
                    add("  (nvimgcodec decode call)", time.perf_counter() - t, time.thread_time() - c)
        return Timed()
    gpu_decode._decoder = dec
    import cupy as cp

    for _ in range(2 * args.batches_per_launch + 3):  # warm-up (kernels compiled)
        try:
            pipe.run()
        except StopIteration:
            pipe.reset()
    cp.cuda.runtime.deviceSynchronize()
    acc.clear()
    n, t0, c0 = 0, time.perf_counter(), os.times()
    while time.perf_counter() - t0 < args.seconds:
        try:
            out = pipe.run()
        except StopIteration:
            pipe.reset()
            continue
        n += out[0].batch_size
    cp.cuda.runtime.deviceSynchronize()
    secs, c1 = time.perf_counter() - t0, os.times()
    pipe.close()
    per = 64.0 / n * 1e3
    print(f"k={args.batches_per_launch} prefetch={args.prefetch}: {n / secs:.0f} img/s, "
          f"{secs / n * 64e3:.2f} ms wall per 64 images, process CPU "
          f"{((c1.user + c1.system) - (c0.user + c0.system)) * per:.2f} ms per 64 images")
    print(f"{'op':32s} {'wall ms/64':>10s} {'cpu ms/64':>10s} {'calls':>6s}")
    for name, (w, c, k) in sorted(acc.items(), key=lambda kv: -kv[1][0]):
        print(f"{name:32s} {w * per:10.2f} {c * per:10.2f} {k:6d}")
    os._exit(0)


if __name__ == "__main__":
    main()

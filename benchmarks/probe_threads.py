"""Probe, on the GPU machine: does nvImageCodec's decode release the GIL (aggregate img/s with 1,
2, 4 threads, each with its own decoder), and what does reading 64 cached files cost?"""
import concurrent.futures as cf
import glob
import os
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gpu  # noqa: E402

root = tempfile.mkdtemp(prefix="detaug_probe_")
bench_gpu.make_dataset(root, 1024, os.cpu_count())
files = sorted(glob.glob(os.path.join(root, "images", "*.jpg")))
blobs = [np.fromfile(f, np.uint8) for f in files]
from nvidia import nvimgcodec  # noqa: E402
import cupy as cp  # noqa: E402

spec = getattr(nvimgcodec.ColorSpec, "SRGB", None) or nvimgcodec.ColorSpec.RGB
params = nvimgcodec.DecodeParams(apply_exif_orientation=False, color_spec=spec, allow_any_depth=False)


decoders = [nvimgcodec.Decoder(device_id=0) for _ in range(4)]
streams = [cp.cuda.Stream(non_blocking=True) for _ in range(4)]


def worker(n_batches, k):
    dec, s = decoders[k], streams[k]
    for i in range(n_batches):
        lo = ((i * 7 + k * 3) % 16) * 64
        dec.decode(blobs[lo:lo + 64], params=params, cuda_stream=s.ptr)
    s.synchronize()


for k in range(4):
    worker(3, k)
for threads in (1, 2, 4):
    t = time.perf_counter()
    ts = [threading.Thread(target=worker, args=(24, k)) for k in range(threads)]
    [x.start() for x in ts]
    [x.join() for x in ts]
    dt = time.perf_counter() - t
    print(f"decode, {threads} thread(s): {threads * 24 * 64 / dt:8.0f} img/s aggregate "
          f"(cpu {time.process_time():.1f} s so far)")

def read(p):
    with open(p, "rb") as f:
        return f.read()

import mmap


def read_mmap(p):
    with open(p, "rb") as f:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def read_os(p):
    fd = os.open(p, os.O_RDONLY)
    try:
        return os.read(fd, 1 << 22)
    finally:
        os.close(fd)


for name, fn in (("mmap", read_mmap), ("os.read", read_os), ("np.fromfile", lambda p: np.fromfile(p, np.uint8))):
    t = time.perf_counter()
    for i in range(16):
        [fn(p) for p in files[i * 64:(i + 1) * 64]]
    print(f"read 64 files with {name}, 1 thread: {(time.perf_counter() - t) / 16 * 1e3:.2f} ms per batch")
for threads in (1, 4, 16):
    pool = cf.ThreadPoolExecutor(threads)
    t = time.perf_counter()
    for i in range(16):
        list(pool.map(read, files[i * 64:(i + 1) * 64]))
    print(f"read 64 files, {threads} threads: {(time.perf_counter() - t) / 16 * 1e3:.2f} ms per batch")
os._exit(0)

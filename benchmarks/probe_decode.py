"""Probe, on the GPU machine: the wall and calling-thread CPU time of nvImageCodec's batched decode
per 64 images, alone and beside other work: 1-2 decoding threads (own decoder and stream each),
with and without a Python thread that keeps the GIL busy (pure-Python loop). Tells whether the
decode needs the GIL (slows under a GIL-busy thread). Usage: python probe_decode.py [DATA]"""
import glob
import os
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gpu  # noqa: E402

root = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="detaug_probe_")
if not os.path.exists(os.path.join(root, "annotations.json")):
    bench_gpu.make_dataset(root, 1024, os.cpu_count())
files = sorted(glob.glob(os.path.join(root, "images", "*.jpg")))
arrays = [np.fromfile(f, np.uint8) for f in files]
from nvidia import nvimgcodec  # noqa: E402
import cupy as cp  # noqa: E402

t = time.perf_counter()
streams_in = [nvimgcodec.CodeStream(a) for a in arrays]
print(f"CodeStream(numpy array): {(time.perf_counter() - t) / len(arrays) * 1e6:.1f} us per image")
inputs = {"numpy": arrays, "bytes": [a.tobytes() for a in arrays], "codestream": streams_in}
blobs = arrays

from detaug.ops.gpu_decode import decode_params  # noqa: E402

params = decode_params("RGB")
decoders = [nvimgcodec.Decoder(device_id=0) for _ in range(3)]
streams = [cp.cuda.Stream(non_blocking=True) for _ in range(3)]
stats = {}


def worker(n_batches, k, bs=64):
    dec, s = decoders[k], streams[k]
    keep = []
    w = c = 0.0
    for i in range(n_batches):
        lo = ((i * 7 + k * 3) % (1024 // bs)) * bs
        t, tc = time.perf_counter(), time.thread_time()
        keep.append(dec.decode(blobs[lo:lo + bs], params=params, cuda_stream=s.ptr))
        w += time.perf_counter() - t
        c += time.thread_time() - tc
        if len(keep) > 4:
            keep.pop(0)
    s.synchronize()
    stats[k] = (w, c, n_batches * bs)


stop = threading.Event()


def gil_hog():
    x = 0
    while not stop.is_set():
        for i in range(1000):
            x += i


for k in range(3):
    worker(3, k)
runs = [(1, None, "numpy"), (1, None, "bytes"), (1, None, "codestream"), (2, None, "codestream"),
        (1, gil_hog, "numpy"), (1, gil_hog, "bytes"), (1, gil_hog, "codestream"),
        (1, "switch1e-4", "numpy"), (1, "switch1e-4", "codestream"), (1, "bs128", "numpy")]
for threads, extra, MODE in runs:
    blobs = inputs[MODE]
    if extra == "switch1e-4":
        sys.setswitchinterval(1e-4)
        extra = gil_hog
        tag = "hog, switch 1e-4"
    else:
        sys.setswitchinterval(0.005)
        tag = None
    stats.clear()
    stop.clear()
    bg = threading.Thread(target=extra) if callable(extra) else None
    if bg:
        bg.start()
    bs = 128 if extra == "bs128" else 64
    t = time.perf_counter()
    nb = 3 if extra is gil_hog else 24 * 64 // bs
    ts = [threading.Thread(target=worker, args=(nb, k, bs)) for k in range(threads)]
    [x.start() for x in ts]
    [x.join() for x in ts]
    dt = time.perf_counter() - t
    stop.set()
    if bg:
        bg.join()
    n = sum(v[2] for v in stats.values())
    w = sum(v[0] for v in stats.values()) / n * 64e3
    c = sum(v[1] for v in stats.values()) / n * 64e3
    name = tag or (extra if isinstance(extra, str) else (extra.__name__ if extra else "-"))
    print(f"decode {MODE:10s} {threads} thread(s), beside {name:16s}: {n / dt:7.0f} img/s aggregate; per 64 images "
          f"in the call: wall {w:5.2f} ms, thread CPU {c:5.2f} ms")

"""What a decode process does before its first decode, step by step, in a fresh process (GPU):
the imports a spawned decode process makes (detaug's package, cupy, nvImageCodec), its CUDA
context, its decoders' first calls (``ops.gpu_decode.warm_up``: nvJPEG and the hardware decoder
set up), then 64 of the data set's images decoded twice. The steps of
``detaug.runtime.gpu.decode_worker._worker``, timed one after another (RESULTS.md, "Time to first
batch": the bound of a decode process's start).

    python benchmarks/decode_start_probe.py [DATA]   # DATA: a folder with images/*.jpg
"""
import glob
import os
import sys
import time

DATA = sys.argv[1] if len(sys.argv) > 1 else "/tmp/bench_data"
T0 = time.perf_counter()
_last = [T0]


def lap(name):
    now = time.perf_counter()
    print(f"{name:40s} {now - _last[0]:7.3f} s  (at {now - T0:6.3f})", flush=True)
    _last[0] = now


import detaug.runtime.gpu.decode_worker  # noqa: E402,F401  (what a spawned decode process imports first)
lap("import detaug...decode_proc")
import cupy as cp  # noqa: E402
lap("import cupy")
cp.cuda.Device(0).use(); cp.cuda.runtime.free(0)
lap("CUDA context")
cp.cuda.runtime.deviceSetLimit(0, 0)
from nvidia import nvimgcodec  # noqa: E402
lap("import nvimgcodec")
from detaug.ops.gpu_decode import warm_up  # noqa: E402
lap("import detaug.ops.gpu_decode")
d = nvimgcodec.Decoder(device_id=0, max_num_cpu_threads=4)
lap("nvimgcodec.Decoder()")
warm_up(d, 0)
lap("warm_up (first call, CHUNK tiny)")
d2 = nvimgcodec.Decoder(device_id=0, max_num_cpu_threads=4)
lap("a second Decoder()")
warm_up(d2, 0)
lap("its warm_up")
files = sorted(glob.glob(os.path.join(DATA, "images", "*.jpg")))[:64]
data = [open(f, "rb").read() for f in files]
lap("read 64 files")
s = cp.cuda.Stream(non_blocking=True)
out = d.decode([nvimgcodec.CodeStream(b) for b in data], cuda_stream=s.ptr); s.synchronize()
lap("decode 64 real images (1st)")
out = d.decode([nvimgcodec.CodeStream(b) for b in data], cuda_stream=s.ptr); s.synchronize()
lap("decode 64 real images (2nd)")

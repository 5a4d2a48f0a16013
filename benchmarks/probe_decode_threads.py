"""Probe, on the GPU machine (issue 11, target 2): nvImageCodec's batched decode in T threads of
ONE process (one CUDA context), each with its own decoder and stream, against the same in P
processes (bench_gpu's P-process ceiling, run in the same call by the device script).

Why: kernels of different processes (CUDA contexts) never run at once on the GPU (it time-slices
between them), so the output work of detaug's pipeline process holds up the decode processes'
own kernels, wherever it runs (session 10: 13-18 %). Within one context, kernels of different
streams run concurrently. If T threads of one process decode as fast as P processes, a decode
in threads could overlap the outputs instead of taking turns with them.

Variants, each for T = 1..4 threads, img/s summed over the threads:
  decode        : ceiling_work's loop (batches of 64 of the preloaded bytes, results kept 8 calls)
  + outputs     : after each decode, one kernel writes the batch's float32 CHW 640x640 outputs
                  from uint8 (bench_gpu's "convert") on a second stream of the thread, ordered
                  after the decode by an event (the next decode does not wait for it)
It also prints, per variant, the share of wall time the threads spent inside decode() (if
decode() held the GIL, T threads could not beat one).

Usage: python benchmarks/probe_decode_threads.py [DATA] [--seconds 5] [--threads 1,2,3,4]
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def worker(k, arrays, seconds, outputs, barrier, result):
    import bench_gpu
    import cupy as cp

    from detaug.ops.gpu_decode import decode_params

    nvimgcodec = bench_gpu.import_nvimgcodec()
    cp.cuda.Device(0).use()
    dec = nvimgcodec.Decoder(device_id=0)
    params = decode_params("RGB")
    s = cp.cuda.Stream(non_blocking=True)
    side = cp.cuda.Stream(non_blocking=True)
    idx = bench_gpu.index_stream(len(arrays), 64, seed=1 + k)
    keep = collections.deque(maxlen=8)
    with side:
        src = cp.zeros((64, bench_gpu.SIZE, bench_gpu.SIZE, 3), cp.uint8)
        out = cp.empty((64, 3, bench_gpu.SIZE, bench_gpu.SIZE), cp.float32)
    scale = np.float32(1 / 255)

    def step():
        ids = next(idx)
        t = time.perf_counter()
        res = dec.decode([arrays[i] for i in ids], params=params, cuda_stream=s.ptr)
        inside = time.perf_counter() - t
        if any(r is None for r in res):
            raise RuntimeError("nvImageCodec returned None")
        if outputs:
            ev = cp.cuda.Event(block=False, disable_timing=True)
            ev.record(s)
            side.wait_event(ev)
            with side:
                cp.multiply(src.transpose(0, 3, 1, 2), scale, out=out)
        keep.append(res)
        return len(ids), inside

    for _ in range(3):
        step()
    s.synchronize()
    side.synchronize()
    barrier.wait()
    n, inside, t0 = 0, 0.0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        m, d = step()
        n, inside = n + m, inside + d
    s.synchronize()
    side.synchronize()
    wall = time.perf_counter() - t0
    keep.clear()
    result[k] = (n / wall, inside / wall)


def run(arrays, threads, seconds, outputs):
    barrier = threading.Barrier(threads)
    result = {}
    ts = [threading.Thread(target=worker, args=(k, arrays, seconds, outputs, barrier, result))
          for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if len(result) != threads:
        return None, None
    return sum(r[0] for r in result.values()), [round(r[1], 2) for r in result.values()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data", nargs="?", default="/tmp/bench_data")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--threads", default="1,2,3,4")
    args = ap.parse_args()
    import glob

    import bench_gpu

    bench_gpu.preload_nvjpeg()
    files = sorted(glob.glob(os.path.join(args.data, "images", "*.jpg")))
    arrays = [np.fromfile(f, np.uint8) for f in files]
    print(f"{len(arrays)} files, {os.cpu_count()} cores; img/s summed over T threads of one process")
    print("| variant | T | img/s | share of wall inside decode(), per thread |")
    print("|---|---:|---:|---|")
    for outputs in (False, True):
        for T in [int(t) for t in args.threads.split(",")]:
            rate, inside = run(arrays, T, args.seconds, outputs)
            name = "decode + outputs (own stream)" if outputs else "decode"
            print(f"| {name} | {T} | {rate:,.0f} | {inside} |", flush=True)


if __name__ == "__main__":
    main()

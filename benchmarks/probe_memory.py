"""Probe, on the GPU machine: what a decode process costs in device memory, stage by stage, and
what T decoding threads in ONE process reach (img/s), so that the decode processes can be sized
from a memory budget (issue 11).

For each T in --threads (a fresh spawned child each): the drop of cudaMemGetInfo's free bytes
(whole device, sampled by this parent, which holds its own context from the start) after
(1) the child's CUDA context, (2) T nvImageCodec decoders, (3) a warm-up decode of 5 batches per
decoder, results freed, (4) T threads decoding batches of 64 (read from the files each time, as a
decode process does) for --seconds, all at once; then img/s summed over the threads.

    python benchmarks/probe_memory.py DATA [--threads 1,2,3,4] [--seconds 4]
"""
from __future__ import annotations

import argparse
import glob
import multiprocessing as mp
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def child(conn, files, threads, seconds, chunk, cpu_threads):
    import cupy as cp
    from nvidia import nvimgcodec

    from detaug.ops.gpu_decode import decode_params

    cp.cuda.Device(0).use()
    cp.empty(1)
    conn.send("context")
    conn.recv()
    decs = [nvimgcodec.Decoder(device_id=0, max_num_cpu_threads=cpu_threads) for _ in range(threads)]
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(threads)]
    conn.send("decoders")
    conn.recv()
    params = decode_params("RGB")

    def batch(k, i):
        paths = [files[(i * 64 + j) % len(files)] for j in range(64)]
        data = []
        for p in paths:
            with open(p, "rb") as f:
                data.append(f.read())
        srcs = [nvimgcodec.CodeStream(d) for d in data]
        out = []
        for lo in range(0, 64, chunk):
            out.extend(decs[k].decode(srcs[lo:lo + chunk], params=params, cuda_stream=streams[k].ptr))
        streams[k].synchronize()
        return out

    for k in range(threads):
        for i in range(5):
            batch(k, i)
    cp.get_default_memory_pool().free_all_blocks()
    conn.send("warm")
    conn.recv()
    counts = [0] * threads
    stop = time.perf_counter() + seconds
    keep = []

    def run(k):
        i = k * 1000
        while time.perf_counter() < stop:
            r = batch(k, i)
            if k == 0 and len(keep) < 1:
                keep.append(r)  # one batch held, as a ring would
            i += 1
            counts[k] += 64

    t0 = time.perf_counter()
    ts = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    rate = sum(counts) / (time.perf_counter() - t0)
    conn.send(("decoding", rate))
    conn.recv()
    conn.send("bye")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--threads", default="1,2,3,4")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--cpu-threads", type=int, default=0)
    args = ap.parse_args()
    import cupy as cp

    cp.cuda.Device(0).use()
    cp.empty(1)
    files = sorted(glob.glob(os.path.join(args.data, "images", "*.jpg")))
    ctx = mp.get_context("spawn")
    print(f"| threads | context MB | + decoders MB | + warm MB | decoding MB | img/s |")
    print("|---:|---:|---:|---:|---:|---:|")
    for t in [int(x) for x in args.threads.split(",")]:
        base = cp.cuda.runtime.memGetInfo()[0]
        a, b = ctx.Pipe()
        p = ctx.Process(target=child, args=(b, files, t, args.seconds, args.chunk, args.cpu_threads))
        p.start()
        row, rate = [], None
        while True:
            m = a.recv()
            if m == "bye":
                break
            if isinstance(m, tuple):
                rate = m[1]
            row.append((base - cp.cuda.runtime.memGetInfo()[0]) / 1e6)
            a.send("ok")
        p.join()
        print(f"| {t} | " + " | ".join(f"{v:,.0f}" for v in row) + f" | {rate:,.0f} |", flush=True)


if __name__ == "__main__":
    main()

"""Probe, on the GPU machine: nvImageCodec's batched decode (64 images per call, CodeStreams
from preloaded bytes, the benchmark's 1,024 COCO-like JPEGs) under decoder settings, in one
process and in two or three processes at once (as detaug's decode workers run): the CPU threads
of each decoder (``max_num_cpu_threads``; 0 = one per core, the default), the backend, and
nvjpeg options. Prints img/s per setting, all of one run.

Usage: python benchmarks/probe_decoder_config.py [DATA] [--seconds 4]
"""
from __future__ import annotations

import argparse
import glob
import multiprocessing
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _decoder(nvimgcodec, cfg):
    kw = {"device_id": 0}
    if cfg.get("threads") is not None:
        kw["max_num_cpu_threads"] = cfg["threads"]
    if cfg.get("backend"):
        kw["backends"] = [nvimgcodec.Backend(getattr(nvimgcodec.BackendKind, cfg["backend"]))]
    if cfg.get("options"):
        kw["options"] = cfg["options"]
    return nvimgcodec.Decoder(**kw)


def run_one(cfg, root, seconds, barrier=None, queue=None):
    """Decode batches of 64 for ``seconds``: images per second (None if the setting fails)."""
    import bench_gpu
    import cupy as cp

    bench_gpu.preload_nvjpeg()
    from nvidia import nvimgcodec

    from detaug.ops.gpu_decode import decode_params

    files = sorted(glob.glob(os.path.join(root, "images", "*.jpg")))
    arrays = [np.fromfile(f, np.uint8) for f in files]
    params = decode_params("RGB")
    s = cp.cuda.Stream(non_blocking=True)
    try:
        dec = _decoder(nvimgcodec, cfg)
        out = dec.decode([nvimgcodec.CodeStream(a) for a in arrays[:64]], params=params,
                         cuda_stream=s.ptr)
        s.synchronize()
        if any(o is None for o in out):
            raise RuntimeError("some images were not decoded")
    except Exception as e:  # noqa: BLE001
        if barrier is not None:
            barrier.abort()
        if queue is not None:
            queue.put(None)
        return f"{type(e).__name__}: {e}"
    if barrier is not None:
        try:
            barrier.wait(timeout=120)
        except Exception:  # noqa: BLE001 - another process failed: report nothing
            if queue is not None:
                queue.put(None)
            return None
    n, i, t0 = 0, 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        batch = arrays[i:i + 64] if i + 64 <= len(arrays) else arrays[:64]
        i = (i + 64) % (len(arrays) - 63)
        out = dec.decode([nvimgcodec.CodeStream(a) for a in batch], params=params, cuda_stream=s.ptr)
        n += len(out)
    s.synchronize()
    rate = n / (time.perf_counter() - t0)
    if queue is not None:
        queue.put(rate)
    return rate


def run_procs(cfg, root, seconds, procs):
    mp = multiprocessing.get_context("spawn")
    barrier, queue = mp.Barrier(procs), mp.Queue()
    ps = [mp.Process(target=run_one, args=(cfg, root, seconds, barrier, queue)) for _ in range(procs)]
    for p in ps:
        p.start()
    rates = [queue.get(timeout=120) for _ in ps]
    for p in ps:
        p.join(timeout=30)
    return None if any(r is None for r in rates) else sum(rates)


CONFIGS = [
    ("default", {}),
    ("8 CPU threads", {"threads": 8}),
    ("4 CPU threads", {"threads": 4}),
    ("2 CPU threads", {"threads": 2}),
    ("GPU_ONLY backend", {"backend": "GPU_ONLY"}),
    ("HYBRID_CPU_GPU backend", {"backend": "HYBRID_CPU_GPU"}),
    ("HW_GPU_ONLY backend", {"backend": "HW_GPU_ONLY"}),
    ("GPU Huffman for all (hybrid_huffman_threshold=0)",
     {"options": "nvjpeg_cuda_decoder:hybrid_huffman_threshold=0"}),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data", nargs="?", default="/tmp/bench_data")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--procs", default="1,2,3")
    args = ap.parse_args()
    import bench_gpu

    if not os.path.exists(os.path.join(args.data, "annotations.json")):
        bench_gpu.make_dataset(args.data, 1024, os.cpu_count())
    procs = [int(p) for p in args.procs.split(",")]
    print(f"{os.cpu_count()} cores; img/s of batched decode (64 per call), summed over processes")
    print("| setting | " + " | ".join(f"{p} proc" for p in procs) + " |")
    print("|---|" + "---:|" * len(procs))
    for name, cfg in CONFIGS:
        cells = []
        for p in procs:
            try:
                r = run_procs(cfg, args.data, args.seconds, p)
                cells.append("failed" if r is None else f"{r:,.0f}")
            except Exception as e:  # noqa: BLE001
                cells.append(f"error {type(e).__name__}")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()

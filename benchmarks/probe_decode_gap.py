"""Probe, on the GPU machine: where a decode process's decode loses to the decode ceiling.

The ceiling (bench_gpu's ``ceiling_work``) decodes preloaded bytes into nvImageCodec's own images,
with one decoder per process, warmed by a batch of real images, one CPU thread per core. A detaug
decode thread reads the files, parses their headers (``code_streams``), decodes into ring regions
(``as_images``) with a decoder of 4 CPU threads warmed on 64 tiny JPEGs, two threads per process.
Each variant below changes one of those steps from the ceiling towards detaug, and runs in P
processes at once (spawned, started together on a barrier), batches of 64 for ``--seconds``;
the summed img/s of each variant tells which step costs what, under the same P-process load as
the multi-process ceiling.

With ``--load``, each variant runs beside a load: busy CPU processes, or a process of its own
whose kernels read and write a launch of outputs R times a second (the pipeline's GPU work in its
own CUDA context).

The variant "+ stage b" runs a launch's output work in each decode process instead (in its own
context, on its decode stream): the comparison of the two says whether moving stage b into the
decode processes would win back what the load takes.

Usage: python benchmarks/probe_decode_gap.py DATA [--procs 3] [--seconds 5] [--variants a,b]
       [--load cpu:N|gpu:R]
"""
import argparse
import glob
import multiprocessing as mp
import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BASE = dict(src="pre", parse=False, into=False, cpu=0, warm="real", threads=1, stage_b=False)
VARIANTS = {
    "ceiling": {},
    "cpu4": dict(cpu=4),
    "cpu4 tiny warm-up": dict(cpu=4, warm="tiny"),
    "cpu4 parsed": dict(cpu=4, parse=True),
    "cpu4 read+parsed": dict(cpu=4, src="read", parse=True),
    "cpu4 into ring": dict(cpu=4, parse=True, into=True),
    "as detaug 1 thread": dict(cpu=4, src="read", parse=True, into=True, warm="tiny"),
    "as detaug 2 threads": dict(cpu=4, src="read", parse=True, into=True, warm="tiny", threads=2),
    # the launch's GPU work in the decode process's own context: after each decode, on the same
    # stream, one kernel reads the decoded slot (uint8) and writes a launch of float32 outputs
    # (as a warp + normalize would): what running stage b in the decode processes would cost
    "as detaug 2 threads + stage b": dict(cpu=4, src="read", parse=True, into=True, warm="tiny",
                                          threads=2, stage_b=True),
    # the same on a stream of its own (waiting for the decode by an event), as stage b would run
    "as detaug 2 threads + stage b own stream": dict(cpu=4, src="read", parse=True, into=True,
                                                     warm="tiny", threads=2, stage_b="own"),
}
SLOT = 96 << 20  # one batch of 64 images of up to 640 x 640 x 3


def _proc(k, root, cfg, seconds, batch, barrier, results):  # pragma: no cover - GPU machine
    import cupy as cp
    from nvidia import nvimgcodec

    from detaug.runtime.gpu.decode_proc import _Region, packed_offsets
    from detaug.ops.gpu_decode import code_streams, decode_params, warm_up
    from detaug.ops.sources import read_files

    cp.cuda.Device(0).use()
    rt = cp.cuda.runtime
    rt.deviceSetLimit(getattr(rt, "cudaLimitStackSize", 0), 0)
    files = sorted(glob.glob(os.path.join(root, "images", "*.jpg")))
    arrays = [np.fromfile(f, np.uint8) for f in files]
    params = decode_params("RGB")
    counts = [0] * cfg["threads"]
    ready = threading.Barrier(cfg["threads"] + 1, timeout=120)
    go = threading.Event()
    stop = threading.Event()

    def work(t):
        cp.cuda.Device(0).use()
        stream = cp.cuda.Stream(non_blocking=True)
        dec = nvimgcodec.Decoder(device_id=0, max_num_cpu_threads=cfg["cpu"])
        ring = rt.malloc(2 * SLOT) if cfg["into"] else None
        out = cp.empty(SLOT, cp.float32) if cfg["stage_b"] else None  # (a launch's outputs)
        b_stream = cp.cuda.Stream(non_blocking=True) if cfg["stage_b"] == "own" else stream
        rng = np.random.default_rng(100 * k + t)
        keep = []

        def one(j):
            ids = rng.choice(len(files), batch, replace=False)
            if cfg["src"] == "read":  # (as the decode processes: the bytes to code_streams)
                data = read_files([files[i] for i in ids])
            else:
                data = [arrays[i] for i in ids]
            srcs = code_streams(data) if cfg["parse"] else data
            kw = {}
            if cfg["into"]:
                shapes = np.array([(s.height, s.width, 3) for s in srcs], np.int64)
                offsets, total = packed_offsets(shapes)  # (as a decode process packs its slot)
                assert total <= SLOT, "a batch larger than its ring slot"
                base = ring + (j % 2) * SLOT
                regions = [_Region(base + o, shp) for o, shp in zip(offsets.tolist(), shapes.tolist())]
                with stream:
                    kw["images"] = nvimgcodec.as_images(regions, stream.ptr)
            res = dec.decode(srcs, params=params, cuda_stream=stream.ptr, **kw)
            if out is not None:  # stage b here: reads the slot, writes 4 bytes per decoded byte
                mem = cp.cuda.UnownedMemory(base, total, None)
                src = cp.ndarray((total,), cp.uint8, cp.cuda.MemoryPointer(mem, 0))
                if b_stream is not stream:
                    b_stream.wait_event(stream.record())
                with b_stream:
                    cp.multiply(src, np.float32(1 / 255), out=out[:total])
            keep.append(res)
            if len(keep) > 8:
                keep.pop(0)
            return sum(r is not None for r in res)  # (the images decoded)

        if cfg["warm"] == "tiny":
            warm_up(dec, 0)
        else:
            one(0)
        stream.synchronize()
        ready.wait()
        go.wait()
        j = 1
        while not stop.is_set():
            counts[t] += one(j)
            j += 1
        stream.synchronize()
        keep.clear()

    pool = [threading.Thread(target=work, args=(t,), daemon=True) for t in range(cfg["threads"])]
    for th in pool:
        th.start()
    ready.wait()
    barrier.wait()
    t0 = time.perf_counter()
    go.set()
    time.sleep(seconds)
    stop.set()
    for th in pool:
        th.join()
    results.put((k, sum(counts), time.perf_counter() - t0))


def _spin(stop):  # pragma: no cover - a CPU load: one busy core
    x = 0
    while not stop.is_set():
        for _ in range(10000):
            x += 1


def _gpu_load(stop, rate, batch):  # pragma: no cover - GPU machine
    """A GPU load like the pipeline's own work: ``rate`` times a second, one elementwise kernel
    that reads and writes a launch of outputs (batch x 3 x 640 x 640 float32), in its own
    process (its own CUDA context, as the pipeline's process beside its decode processes)."""
    import cupy as cp

    s = cp.cuda.Stream(non_blocking=True)
    a = cp.ones((batch, 3, 640, 640), cp.float32)
    out = cp.empty_like(a)
    t = time.perf_counter()
    while not stop.is_set():
        with s:
            cp.multiply(a, 0.5, out=out)
        s.synchronize()
        t += 1.0 / rate
        time.sleep(max(0.0, t - time.perf_counter()))


def start_load(load, batch):
    """'cpu:N' (N busy processes) or 'gpu:R[:B]' (R kernels a second, each over B images of
    outputs, default the batch), or ''; returns a stop()."""
    if not load:
        return lambda: None
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    kind, n, *size = load.split(":")
    size = int(size[0]) if size else batch
    ps = ([ctx.Process(target=_spin, args=(stop,), daemon=True) for _ in range(int(n))] if kind == "cpu"
          else [ctx.Process(target=_gpu_load, args=(stop, float(n), size), daemon=True)])
    for p in ps:
        p.start()
    time.sleep(3)  # (the GPU load's context and buffers up)

    def halt():
        stop.set()
        for p in ps:
            p.join(timeout=30)
    return halt


def run(root, name, cfg, procs, seconds, batch):
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(procs), ctx.Queue()
    ps = [ctx.Process(target=_proc, args=(k, root, cfg, seconds, batch, barrier, results), daemon=True)
          for k in range(procs)]
    for p in ps:
        p.start()
    got = [results.get(timeout=180) for _ in ps]
    for p in ps:
        p.join(timeout=30)
    rate = sum(n / s for _, n, s in got)
    print(f"| {name} | {procs} | {rate:,.0f} | {', '.join(f'{n / s:,.0f}' for _, n, s in sorted(got))} |",
          flush=True)
    return rate


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("--procs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--load", default="", help="beside each variant: 'cpu:N' busy processes, or "
                                               "'gpu:R[:B]' launch-sized kernels (B images) a second in a process of its own")
    args = ap.parse_args(argv)
    print("| variant | processes | img/s summed | per process |\n|---|---:|---:|---|", flush=True)
    for name in args.variants.split(","):
        halt = start_load(args.load, args.batch)
        try:
            run(args.data, f"{name}{' + load ' + args.load if args.load else ''}",
                {**BASE, **VARIANTS[name]}, args.procs, args.seconds, args.batch)
        finally:
            halt()


if __name__ == "__main__":
    main()

"""Could the pipeline's own process decode the first launch sooner than its decode processes can?
The bound, measured in fresh processes before building it (issue 32, time to first batch).

    python benchmarks/first_decode_probe.py [--data DIR] [--runs 3]

Each run is a fresh interpreter (``--child MODE``) that imports detaug, defines the benchmark
pipeline (bench_gpu.make_det_pipe, device='mixed', batch 64, the defaults) and takes its first
batch, synchronised, as ``startup_timeline.py``'s child does. MODE ``bg`` also starts, just
before ``build()`` (where the build's CUDA thread starts), a thread that imports nvImageCodec,
makes a decoder as the decode processes do (``max_num_cpu_threads=4``, ``warm_up``) and decodes
64 of the data set's files (read, parsed, decoded, synchronised): while the main thread indexes,
plans and waits (the GIL shared). MODE ``plain`` is the pipeline alone. MODE ``mem``: the device
memory (``cudaMemGetInfo``'s free bytes) a decoder adds to a process with a CUDA context, after
its warm-up and after a decode of 64 images (their images dropped).

Printed: the medians of the first batch (plain and bg), of the thread's steps (seconds since
the process started) and of the main thread's phases both ways (what the thread costs them), and
the bound of the idea: the thread's 64 images decoded, or the first launch planned, whichever is
later, plus the first launch's outputs (``first_launch.outputs``, kernels until synchronised).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import threading
import time

T0 = time.perf_counter()
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)


def _since_start() -> float:
    """Seconds since this process started (Linux /proc)."""
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")


def _files(root, n=64):
    return sorted(glob.glob(os.path.join(root, "images", "*.jpg")))[:n]


def decoder_thread(root, stamps, done):
    base = _since_start() - time.perf_counter()
    at = lambda name: stamps.__setitem__(name, round(base + time.perf_counter(), 4))  # noqa: E731
    try:
        at("thread.start")
        import cupy as cp

        cp.cuda.Device(0).use()
        cp.cuda.runtime.free(0)
        at("thread.context")
        from nvidia import nvimgcodec

        at("thread.import_nvimgcodec")
        from detaug.ops.gpu_decode import code_streams, decode_chunks, warm_up
        from detaug.ops.sources import read_files

        d = nvimgcodec.Decoder(device_id=0, max_num_cpu_threads=4)
        at("thread.decoder_made")
        warm_up(d, 0)
        at("thread.decoder_warm")
        s = cp.cuda.Stream(non_blocking=True)
        data = read_files(_files(root))
        out = decode_chunks(d, code_streams(data), "RGB", 64, s.ptr)
        s.synchronize()
        at("thread.decoded_64")
        stamps["thread.none_results"] = sum(r is None for r in out)
    except Exception as e:  # noqa: BLE001
        stamps["thread.error"] = f"{type(e).__name__}: {e}"
    finally:
        done.set()


def child(mode, root):
    t_start = _since_start()
    t0 = time.perf_counter()
    if mode == "mem":
        return mem_child(root)
    if mode == "steady":
        return steady_child(root)
    import detaug  # noqa: F401

    t1 = time.perf_counter()
    from bench_gpu import make_det_pipe

    pipe = make_det_pipe(root, "mixed", batch_size=64, num_threads=os.cpu_count(), seed=0, device_id=0)
    stamps, done = {}, threading.Event()
    if mode == "bg":
        threading.Thread(target=decoder_thread, args=(root, stamps, done), daemon=True).start()
    t2 = time.perf_counter()
    pipe.build()
    t3 = time.perf_counter()
    pipe.run()
    import cupy

    cupy.cuda.Device(0).synchronize()
    t4 = time.perf_counter()
    if mode == "bg":
        done.wait(60)
    clock = {"import": t1 - t0, "build": t3 - t2, "first_run": t4 - t3, "total": t_start + (t4 - t0)}
    print(json.dumps({"mode": mode, "clock": clock, "stamps": stamps,
                      "phases": pipe.stats.get("startup") or []}), flush=True)
    pipe.close()


def mem_child(root):
    import cupy as cp

    cp.cuda.Device(0).use()
    cp.cuda.runtime.free(0)
    rt = cp.cuda.runtime
    rt.deviceSynchronize()
    f0 = rt.memGetInfo()[0]
    from nvidia import nvimgcodec

    from detaug.ops.gpu_decode import code_streams, decode_chunks, warm_up
    from detaug.ops.sources import read_files

    d = warm_up(nvimgcodec.Decoder(device_id=0, max_num_cpu_threads=4), 0)
    rt.deviceSynchronize()
    f1 = rt.memGetInfo()[0]
    s = cp.cuda.Stream(non_blocking=True)
    out = decode_chunks(d, code_streams(read_files(_files(root))), "RGB", 64, s.ptr)
    s.synchronize()
    f2 = rt.memGetInfo()[0]
    del out
    rt.deviceSynchronize()
    f3 = rt.memGetInfo()[0]
    print(json.dumps({"mode": "mem", "decoder_warm_MB": (f0 - f1) / 1e6,
                      "with_64_images_MB": (f0 - f2) / 1e6, "after_images_dropped_MB": (f0 - f3) / 1e6}),
          flush=True)


def steady_child(root, batches=40):
    """Device memory in use (the whole device: cudaMemGetInfo) from before the build to after
    ``batches`` batches, and in this process after the first batch, with the in-process first
    decode on or off (DETAUG_EARLY_DECODE, set by the parent)."""
    import cupy as cp

    from bench_gpu import make_det_pipe

    cp.cuda.Device(0).use()
    rt = cp.cuda.runtime
    rt.free(0)
    rt.deviceSynchronize()
    f0 = rt.memGetInfo()[0]
    pipe = make_det_pipe(root, "mixed", batch_size=64, num_threads=os.cpu_count(), seed=0, device_id=0)
    pipe.build()
    out = pipe.run()
    rt.deviceSynchronize()
    pool = cp.get_default_memory_pool().total_bytes()
    f1 = rt.memGetInfo()[0]
    del out
    for _ in range(batches - 1):
        pipe.run()
    rt.deviceSynchronize()
    f2 = rt.memGetInfo()[0]
    early = pipe._decode_service.early
    print(json.dumps({"mode": "steady", "early": os.environ.get("DETAUG_EARLY_DECODE", "1"),
                      "first_batch_MB": (f0 - f1) / 1e6, "steady_MB": (f0 - f2) / 1e6,
                      "pool_MB_first": pool / 1e6,
                      "served": None if early is None else early.served,
                      "decoder_dropped": None if early is None else early.decoder is None}), flush=True)
    pipe.close()


def run_child(mode, root, env=None):
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", mode, "--data", root],
                       capture_output=True, text=True, timeout=120, env=dict(os.environ, **(env or {})))
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode or not lines:
        return {"mode": mode, "error": (r.stderr or r.stdout).strip().splitlines()[-4:]}
    return json.loads(lines[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--data", default="/tmp/bench_data")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--steady", type=int, default=0,
                    help="only: this many pairs of fresh processes (in-process first decode on, off), "
                         "device memory after the first batch and after 40")
    args = ap.parse_args(argv)
    sys.path.insert(0, HERE)
    if args.child:
        return child(args.child, args.data)
    if args.steady:
        rows = []
        for k in range(args.steady):
            for v in (("1", "0") if k % 2 == 0 else ("0", "1")):
                rows.append(run_child("steady", args.data, {"DETAUG_EARLY_DECODE": v}))
        for v in ("1", "0"):
            rs = [r for r in rows if r.get("early") == v]
            for r in rows:
                if "error" in r:
                    print("failed:", r["error"])
            if rs:
                med = statistics.median
                print(f"DETAUG_EARLY_DECODE={v}: device MB used after the first batch "
                      f"{med(r['first_batch_MB'] for r in rs):.0f} (this process's pool "
                      f"{med(r['pool_MB_first'] for r in rs):.0f}), after 40 batches "
                      f"{med(r['steady_MB'] for r in rs):.0f}; requests decoded in-process "
                      f"{[r['served'] for r in rs]}, decoder dropped {[r['decoder_dropped'] for r in rs]}")
        return None
    run_child("plain", args.data)  # warm-up: kernels compiled, files in the page cache
    res = {"plain": [], "bg": []}
    for k in range(args.runs):
        for mode in (("plain", "bg") if k % 2 == 0 else ("bg", "plain")):
            res[mode].append(run_child(mode, args.data))
    mem = run_child("mem", args.data)
    med = statistics.median
    out = {"mem": mem}
    for mode, rs in res.items():
        ok = [r for r in rs if "clock" in r]
        for r in rs:
            if "error" in r:
                print(mode, "failed:", r["error"])
        if not ok:
            continue
        totals = sorted(round(r["clock"]["total"], 3) for r in ok)
        print(f"{mode}: first batch median {med(totals):.3f} s of {totals}")
        names = [p["phase"] for p in ok[0]["phases"]]
        ph = {n: (med(p["start"] for r in ok for p in r["phases"] if p["phase"] == n),
                  med(p["end"] for r in ok for p in r["phases"] if p["phase"] == n)) for n in names}
        for n in names:
            print(f"  {n:34s} {ph[n][0]:7.3f} {ph[n][1]:7.3f} {ph[n][1] - ph[n][0]:7.3f}")
        st = {}
        if mode == "bg":
            keys = [k for k in ok[0]["stamps"] if k.startswith("thread.") and isinstance(ok[0]["stamps"][k], float)]
            for key in keys:
                st[key] = med(r["stamps"][key] for r in ok if key in r["stamps"])
                print(f"  {key:34s} {st[key]:7.3f}")
            errs = [r["stamps"].get("thread.error") for r in ok if "thread.error" in r["stamps"]]
            if errs:
                print("  thread errors:", errs[:1])
            if "thread.decoded_64" in st and "first_launch.host" in ph and "first_launch.outputs" in ph:
                outputs = ph["first_launch.outputs"][1] - ph["first_launch.outputs"][0]
                bound = max(st["thread.decoded_64"], ph["first_launch.host"][1]) + outputs
                print(f"  bound of an in-process first decode: max(decoded_64 {st['thread.decoded_64']:.3f}, "
                      f"first_launch.host end {ph['first_launch.host'][1]:.3f}) + outputs {outputs:.3f} "
                      f"= {bound:.3f} s")
                out["bound"] = bound
        out[mode] = {"totals": totals, "phases": ph, "stamps": st}
    print("mem:", mem)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()

"""Time to first batch and the cost of steady state: detaug against DALI 2.4 on the GPU, and
detaug's CPU pipeline against a torch DataLoader with albumentations at the same workers.

    python benchmarks/bench_startup.py --data /tmp/bench_data [--procs 3] [--seconds 8]
        [--workers 2,8] [--cpu-only | --gpu-only] [--dali-device mixed|cpu] [--json F]

Each measurement runs in a FRESH Python process (this script with ``--child``), alternating the
two engines of a section. Sections:

(a) GPU, time to first batch, cold: ``--procs`` processes per engine; the child's clock starts at
    its first line (interpreter up, before imports) and stops at the first batch in hand with the
    device synchronised (``cuCtxSynchronize`` through the driver API for both engines, so neither
    pays for an extra library). Split: import (the engine's modules) / build (pipeline defined
    and built) / first run. The benchmark's own modules (bench_gpu, bench_cpu, dali_pipe: for the
    DataLoader this drags in detaug) are timed apart as "harness" and left out. Warm: in the same
    process, the first pipeline closed, a second one built and run to its first batch.
(b) GPU, steady state (one more process per engine): after the first batch and ``--warmup``
    seconds, img/s over ``--seconds``; CPU seconds per image of the whole process tree (user +
    system from /proc, this process and every descendant, sampled at the window's start and end);
    device memory: the drop of ``cuMemGetInfo``'s free bytes (whole device) from before the build
    (the child's own CUDA context made first, as bench_gpu does) to the window's end.
(c) CPU, at each W of ``--workers``: (a) and (b) for detaug's CPU pipeline
    (``make_det_pipe(root, "cpu")``, ``num_threads=W`` host workers, batch 16) against a torch
    DataLoader of W workers over bench_cpu's ``AlbuDataset`` (cv2 decode, RandomSizedBBoxSafeCrop
    to 640, flip, Normalize, CHW; default_collate to torch tensors), batch 16.

The pipelines: ``bench_gpu.make_det_pipe`` at its defaults (batch 64, ``num_threads`` = cores) and
``dali_pipe.make_dali_pipe`` (the same work in DALI's operators; its docstring says what differs),
DALI at ``num_threads`` = cores, prefetch 2. ``--dali-device cpu`` runs DALI's CPU pipeline (a
check of the DALI child on a machine without a GPU). Files are in the page cache for every
process alike (the data set is read by the first). Not part of the test suite.
"""
import time; _T0 = time.time()  # noqa: E402,E702  (a child's clock: its first line, before any import)
import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MB = 1e6


# ---------------------------------------------------------------------------- child: CUDA probes
class Cuda:
    """The primary context of device 0 through libcuda (the context the CUDA runtime, cupy and DALI
    share): synchronise it, read its free bytes. No CUDA library beyond the driver is loaded."""

    def __init__(self):
        import ctypes

        self.ct, self.cu = ctypes, ctypes.CDLL("libcuda.so.1")
        dev, self.ctx = ctypes.c_int(), ctypes.c_void_p()
        self._ok(self.cu.cuInit(0), "cuInit")
        self._ok(self.cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
        self._ok(self.cu.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), dev), "cuDevicePrimaryCtxRetain")
        self._ok(self.cu.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    @staticmethod
    def _ok(rc, what):
        if rc != 0:
            raise RuntimeError(f"{what} failed with CUresult {rc}")

    def sync(self):
        self._ok(self.cu.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
        self._ok(self.cu.cuCtxSynchronize(), "cuCtxSynchronize")

    def free_bytes(self):
        free, total = self.ct.c_size_t(), self.ct.c_size_t()
        self._ok(self.cu.cuMemGetInfo_v2(self.ct.byref(free), self.ct.byref(total)), "cuMemGetInfo")
        return free.value


# ---------------------------------------------------------------------------- child: engines
class Engine:
    """One engine in a child: ``imports()`` (timed as import), ``harness()`` (left out), then
    ``build()`` -> handle, ``get(handle)`` -> images of one batch, ``close(handle)``."""
    gpu = False

    def __init__(self, args):
        self.a = args


class DetaugGPU(Engine):
    gpu = True

    def imports(self):
        import detaug  # noqa: F401

    def harness(self):
        global bench_gpu
        import bench_gpu

    def build(self):
        p = bench_gpu.make_det_pipe(self.a.data, "mixed", batch_size=self.a.batch_size,
                                    num_threads=os.cpu_count(), device_id=0, seed=0)
        p.build()
        return p

    def get(self, p):
        try:
            out = p.run()
        except StopIteration:
            p.reset()
            out = p.run()
        return out[0].data.shape[0]

    def close(self, p):
        p.close()


class DetaugCPU(DetaugGPU):
    gpu = False

    def build(self):
        p = bench_gpu.make_det_pipe(self.a.data, "cpu", max_boxes=None, batch_size=self.a.cpu_batch,
                                    num_threads=self.a.w, seed=0, prefetch_queue_depth=2,
                                    last_batch_policy="partial")
        p.build()
        return p


class Dali(Engine):
    def __init__(self, args):
        super().__init__(args)
        self.gpu = args.dali_device == "mixed"

    def imports(self):
        from nvidia.dali import fn, pipeline_def, types  # noqa: F401

    def harness(self):
        global dali_pipe
        import dali_pipe

    def build(self):
        p = dali_pipe.make_dali_pipe(self.a.data, self.a.dali_device, batch_size=self.a.batch_size,
                                     num_threads=os.cpu_count(), device_id=0, seed=0,
                                     roi_decode=self.a.roi_decode)
        p.build()
        return p

    def get(self, p):
        return len(p.run()[0])  # the reader wraps around at the epoch's end

    def close(self, p):
        p._shutdown()  # what DALI's Pipeline.__del__ does (DALI has no public close)


class AlbuLoader(Engine):
    def imports(self):
        import albumentations  # noqa: F401
        import cv2  # noqa: F401
        import torch  # noqa: F401

    def harness(self):
        global bench_cpu
        import bench_cpu

    def build(self):
        ds = bench_cpu.AlbuDataset(bench_cpu.load_coco(self.a.data))
        return {"loader": bench_cpu.make_loader(ds, bench_cpu._collate_images, self.a.w,
                                                self.a.cpu_batch), "it": None}

    def get(self, h):
        for _ in range(2):
            if h["it"] is None:
                h["it"] = iter(h["loader"])
            try:
                return next(h["it"])[0].shape[0]
            except StopIteration:
                h["it"] = None
        raise RuntimeError("the DataLoader delivered no batch")

    def close(self, h):
        bench_cpu.stop_loader(h["loader"])
        h.clear()


ENGINES = {"detaug": DetaugGPU, "dali": Dali, "detaug_cpu": DetaugCPU, "albu": AlbuLoader}
LABELS = {"detaug": "detaug (GPU)", "dali": "DALI 2.4", "detaug_cpu": "detaug (CPU)",
          "albu": "DataLoader + albumentations"}


def child(args):
    eng = ENGINES[args.child](args)
    res = {"engine": args.child, "t0": _T0}
    eng.imports()
    t1 = time.time()
    eng.harness()
    t2 = time.time()
    cuda = Cuda() if eng.gpu and args.mode == "steady" else None  # steady: context before build
    free0 = cuda.free_bytes() if cuda else None
    h = eng.build()
    t3 = time.time()
    eng.get(h)
    if eng.gpu:
        cuda = cuda or Cuda()  # cold: the engine made the context; retaining it is cheap
        cuda.sync()
    t4 = time.time()
    res.update(import_s=t1 - _T0, harness_s=t2 - t1, build_s=t3 - t2, first_s=t4 - t3,
               total_s=(t4 - _T0) - (t2 - t1))
    sync = cuda.sync if eng.gpu else (lambda: None)
    if args.mode == "cold":  # warm: a second pipeline, built and run after the first is closed
        eng.close(h)
        h = None
        gc.collect()  # the first pipeline gone before the second is built
        t5 = time.time()
        h = eng.build()
        eng.get(h)
        sync()
        res["warm_s"] = time.time() - t5
    else:
        from gpu_common import tree_cpu_seconds

        t_end = time.perf_counter() + args.warmup
        while time.perf_counter() < t_end:
            eng.get(h)
        sync()
        c0, t0, n = tree_cpu_seconds(), time.perf_counter(), 0
        while time.perf_counter() - t0 < args.seconds:
            n += eng.get(h)
        sync()
        secs, cpu = time.perf_counter() - t0, tree_cpu_seconds() - c0
        res.update(images=n, seconds=secs, img_s=n / secs, cpu_ms_per_img=1e3 * cpu / n,
                   cores=cpu / secs)
        if cuda:
            res["device_mb"] = (free0 - cuda.free_bytes()) / MB
    eng.close(h)
    print("RESULT " + json.dumps(res), flush=True)


# ---------------------------------------------------------------------------- parent
def spawn(args, engine, mode, w=None):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", engine, "--mode", mode,
           "--data", args.data, "--batch-size", str(args.batch_size), "--cpu-batch",
           str(args.cpu_batch), "--seconds", str(args.seconds), "--warmup", str(args.warmup),
           "--dali-device", args.dali_device, "--w", str(w or 0)] + (["--roi-decode"] if args.roi_decode else [])
    t_spawn = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.child_timeout)
        out, err, rc = p.stdout, p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out, err, rc = e.stdout or "", f"timed out after {args.child_timeout} s", "timeout"
        out = out.decode() if isinstance(out, bytes) else out
    line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        tail = " | ".join((err or "").strip().splitlines()[-3:])[-400:]
        print(f"  {engine} {mode}{f' W={w}' if w else ''}: FAILED (rc {rc}): {tail}", flush=True)
        return {"engine": engine, "error": f"rc {rc}: {tail}"}
    r = json.loads(line[7:])
    r["interpreter_s"] = r["t0"] - t_spawn  # fork/exec to the child's first line
    note = (f"first batch {r['total_s']:.2f} s, warm {r['warm_s']:.2f} s" if mode == "cold" else
            f"{r['img_s']:.0f} img/s, {r['cpu_ms_per_img']:.2f} CPU ms/img"
            + (f", {r['device_mb']:,.0f} MB" if r.get("device_mb") is not None else ""))
    print(f"  {LABELS[engine]} {mode}{f' W={w}' if w else ''}: {note}", flush=True)
    return r


def _med(rs, key):
    v = [r[key] for r in rs if r.get(key) is not None]
    return (statistics.median(v), min(v), max(v)) if v else None


def _fmt(m, digits=2):
    return "-" if m is None else f"{m[0]:.{digits}f} ({m[1]:.{digits}f}-{m[2]:.{digits}f})"


def _ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "-"


def report(title, pair, cold, steady):
    """One table per section: cold (median (min-max) of the processes) and steady rows, with
    detaug / peer ratios (time: < 1 is detaug ahead; img/s: > 1 is detaug ahead)."""
    print(f"\n### {title}\n")
    print("| engine | first batch, cold (s) | import | build | first run | interpreter | warm (s) "
          "| img/s | CPU ms / image | cores busy | device MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    med = {}
    for e in pair:
        rs = [r for r in cold if r["engine"] == e and "error" not in r]
        s = steady.get(e) or {}
        med[e] = {k: _med(rs, k) for k in ("total_s", "warm_s")}
        errs = [r["error"] for r in cold if r["engine"] == e and "error" in r] + (
            [s["error"]] if "error" in s else [])
        get = lambda k, f: f.format(s[k]) if s.get(k) is not None else "-"  # noqa: E731
        print(f"| {LABELS[e]} ({len(rs)} proc.) | {_fmt(med[e]['total_s'])} | "
              + " | ".join(_fmt(_med(rs, k)) for k in ("import_s", "build_s", "first_s",
                                                         "interpreter_s"))
              + f" | {_fmt(med[e]['warm_s'])} | {get('img_s', '{:,.0f}')} | "
              f"{get('cpu_ms_per_img', '{:.2f}')} | {get('cores', '{:.1f}')} | "
              f"{get('device_mb', '{:,.0f}')} |" + (f" FAILED: {errs[0][:200]}" if errs else ""))
    d, p = pair
    m = lambda e, k: (med[e][k] or (None,))[0]  # noqa: E731
    s = lambda e, k: (steady.get(e) or {}).get(k)  # noqa: E731
    print(f"\ndetaug / {LABELS[p]}: first batch cold {_ratio(m(d, 'total_s'), m(p, 'total_s'))}, "
          f"warm {_ratio(m(d, 'warm_s'), m(p, 'warm_s'))} (time: < 1 = detaug sooner); "
          f"img/s {_ratio(s(d, 'img_s'), s(p, 'img_s'))}; CPU per image "
          f"{_ratio(s(d, 'cpu_ms_per_img'), s(p, 'cpu_ms_per_img'))}; device memory "
          f"{_ratio(s(d, 'device_mb'), s(p, 'device_mb'))} (< 1 = detaug less)")


def run_section(args, pair, w=None):
    cold = []
    for i in range(args.procs):  # alternate, and swap who goes first each round
        for e in (pair if i % 2 == 0 else pair[::-1]):
            cold.append(spawn(args, e, "cold", w))
    steady = {e: spawn(args, e, "steady", w) for e in pair}
    return cold, steady


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="/tmp/bench_data", help="bench_gpu.make_dataset's folder")
    ap.add_argument("--procs", type=int, default=3, help="cold processes per engine (3)")
    ap.add_argument("--seconds", type=float, default=8.0, help="steady window (8 s)")
    ap.add_argument("--warmup", type=float, default=2.0, help="steady: seconds after the first batch")
    ap.add_argument("--workers", default="2,8", help="CPU section: W host workers, comma-separated")
    ap.add_argument("--batch-size", type=int, default=64, help="GPU batch (64)")
    ap.add_argument("--cpu-batch", type=int, default=16, help="CPU batch (16)")
    ap.add_argument("--cpu-only", action="store_true", help="only section (c)")
    ap.add_argument("--gpu-only", action="store_true", help="only sections (a) and (b)")
    ap.add_argument("--dali-device", choices=("mixed", "cpu"), default="mixed",
                    help="cpu: DALI's CPU pipeline (a check without a GPU; detaug's GPU rows skip)")
    ap.add_argument("--roi-decode", action="store_true", help="DALI decodes only the crop window")
    ap.add_argument("--child-timeout", type=float, default=120.0)
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", choices=sorted(ENGINES), help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=("cold", "steady"), help=argparse.SUPPRESS)
    ap.add_argument("--w", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.data = os.path.abspath(args.data)
    if args.child:
        return child(args)
    if not os.path.exists(os.path.join(args.data, "annotations.json")):
        sys.exit(f"bench_startup: no annotations.json in --data {args.data} "
                 "(make it with bench_gpu.make_dataset; device.sh's bench_data does)")
    sys.path.insert(0, REPO)
    from detaug.core.backend import gpu_available  # imports no GPU library

    gpu = gpu_available()
    print(f"bench_startup: {os.cpu_count()} cores, GPU {'yes' if gpu else 'no'}, data {args.data}, "
          f"{args.procs} cold processes per engine, steady {args.seconds:g} s after "
          f"{args.warmup:g} s; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
          flush=True)
    out = {}
    if not args.cpu_only:
        pair = ("detaug", "dali")
        if not gpu and args.dali_device == "cpu":  # only the DALI child can run here
            cold = [spawn(args, "dali", "cold") for _ in range(args.procs)]
            steady = {"dali": spawn(args, "dali", "steady")}
        elif not gpu:
            print("GPU section skipped: no GPU (--dali-device cpu checks the DALI child alone)")
            cold, steady = None, None
        else:
            cold, steady = run_section(args, pair)
        if cold is not None:
            out["gpu"] = {"cold": cold, "steady": steady}
            report(f"GPU: detaug against DALI (DALI device {args.dali_device}), batch "
                   f"{args.batch_size}", pair, cold, steady)
    if not args.gpu_only:
        for w in [int(x) for x in args.workers.split(",") if x.strip()]:
            cold, steady = run_section(args, ("detaug_cpu", "albu"), w)
            out[f"cpu_w{w}"] = {"cold": cold, "steady": steady}
            report(f"CPU, W={w} workers: detaug's host workers against a DataLoader, batch "
                   f"{args.cpu_batch}", ("detaug_cpu", "albu"), cold, steady)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

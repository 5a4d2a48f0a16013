"""Time to first batch and the cost of steady state: detaug against DALI 2.4 on the GPU, and
detaug's CPU pipeline against a torch DataLoader with albumentations at the same workers.

    python benchmarks/bench_startup.py --data /tmp/bench_data [--procs 3] [--seconds 8]
        [--workers 2,8] [--cpu-only | --gpu-only] [--dali-configs whole,slice:8,...] [--json F]
    python benchmarks/bench_startup.py --timeline --data DIR [--devices mixed,cpu] [--procs 5]
        [--off] [--env NAME=VALUE] [--base PATH] [--memory-runs 2] [--json F]

Each measurement is a fresh process (this script with ``--child``). Cold: from the child's first
line to the first batch in hand, the device synchronised (``cuCtxSynchronize`` through libcuda
for every engine), split into import / build / first run (the benchmark's own modules timed
apart and left out); warm: a second pipeline in the same process. Steady: img/s over
``--seconds`` after ``--warmup`` s, CPU ms per image of the process tree (/proc), device memory
(the drop of ``cuMemGetInfo``'s free bytes, whole device, from before the build with the child's
context made first). GPU: ``bench_gpu.make_det_pipe`` at its defaults against
``gpu_peers.make_dali_pipe`` at each of ``--dali-configs`` (``DECODE[:THREADS[:HW_LOAD]]``:
whole-image decode or ``decoders.image_slice`` of the crop window as DALI's SSD example;
``num_threads``; ``hw_decoder_load``): steady processes of detaug, of each configuration and of
detaug again (its drift), then ``--procs`` cold processes each of detaug and the best
configuration, alternated; every row, and the ratios against the best. ``--dali-device cpu``:
DALI's CPU pipeline alone (a check without a GPU). CPU, at each W of ``--workers``: detaug's CPU
pipeline (W host workers) against a DataLoader of W workers over ``bench_cpu.AlbuDataset``,
batch 16 both, alternated.

``--timeline``: detaug alone per device and variant (the defaults; ``--off``:
``DETAUG_EARLY_START=0``; ``--env NAME=VALUE``; ``--base``: another checkout first on the path),
``--procs`` fresh processes each after a warm-up run, alternated: medians of the clock (import,
define, build, first run, total from the process's start) and of ``pipe.stats['startup']``'s
phases; ``--memory-runs K``: K GPU processes per variant, their context made first, printing the
device memory in use after the first batch and after ``--memory-batches``. Not a test.
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
        if rc:
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
        global gpu_peers
        import gpu_peers  # the standard library at its top: DALI alone is paid for

    def build(self):
        cfg = gpu_peers.parse_dali_config(self.a.dali_config)
        p = gpu_peers.make_dali_pipe(self.a.data, self.a.dali_device, batch_size=self.a.batch_size,
                                     num_threads=cfg["num_threads"], device_id=0, seed=0,
                                     decode=cfg["decode"], hw_decoder_load=cfg["hw_decoder_load"])
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
LABELS = {"detaug": "detaug (GPU)", "detaug_again": "detaug (GPU), again after the DALI rows",
          "dali": "DALI 2.4", "detaug_cpu": "detaug (CPU)",
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
def key_of(engine, cfg=None):
    """A row's key: the engine, or ``dali DECODE:THREADS[:LOAD]`` for a DALI configuration."""
    return engine if cfg is None else f"dali {cfg}"


def label_of(key):
    if key.startswith("dali "):
        from gpu_peers import dali_label, parse_dali_config

        return dali_label(parse_dali_config(key[5:]))
    return LABELS[key]


def spawn(args, engine, mode, w=None, cfg=None):
    """One child: ``engine`` (for "dali", ``cfg``: a DALI configuration's text) in ``mode``."""
    key = key_of(engine, cfg)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", engine, "--mode", mode,
           "--data", args.data, "--batch-size", str(args.batch_size), "--cpu-batch",
           str(args.cpu_batch), "--seconds", str(args.seconds), "--warmup", str(args.warmup),
           "--dali-device", args.dali_device, "--w", str(w or 0)] + (
               ["--dali-config", cfg] if cfg else [])
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
        print(f"  {key} {mode}{f' W={w}' if w else ''}: FAILED (rc {rc}): {tail}", flush=True)
        return {"engine": key, "error": f"rc {rc}: {tail}"}
    r = json.loads(line[7:])
    r["engine"] = key
    r["interpreter_s"] = r["t0"] - t_spawn  # fork/exec to the child's first line
    note = (f"first batch {r['total_s']:.2f} s, warm {r['warm_s']:.2f} s" if mode == "cold" else
            f"{r['img_s']:.0f} img/s, {r['cpu_ms_per_img']:.2f} CPU ms/img"
            + (f", {r['device_mb']:,.0f} MB" if r.get("device_mb") is not None else ""))
    print(f"  {label_of(key)} {mode}{f' W={w}' if w else ''}: {note}", flush=True)
    return r


def _med(rs, key):
    v = [r[key] for r in rs if r.get(key) is not None]
    return (statistics.median(v), min(v), max(v)) if v else None


def _fmt(m, digits=2):
    return "-" if m is None else f"{m[0]:.{digits}f} ({m[1]:.{digits}f}-{m[2]:.{digits}f})"


def _ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "-"


def report(title, keys, cold, steady, peer=None):
    """One table per section: cold (median (min-max) of the processes) and steady rows of each
    key (detaug first), and the ratios of detaug to ``peer`` (default: the second key; for DALI
    the configuration of the most img/s): time < 1 is detaug sooner, img/s > 1 detaug ahead.
    With several peer rows, detaug's img/s against each as well."""
    print(f"\n### {title}\n\n| engine | first batch, cold (s) | import | build | first run | "
          "interpreter | warm (s) | img/s | CPU ms / image | cores busy | device MB |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    med = {}
    for e in keys:
        rs = [r for r in cold if r["engine"] == e and "error" not in r]
        st = steady.get(e) or {}
        med[e] = {k: _med(rs, k) for k in ("total_s", "warm_s")}
        errs = [r["error"] for r in cold if r["engine"] == e and "error" in r] + (
            [st["error"]] if "error" in st else [])
        got = [f.format(st[k]) if st.get(k) is not None else "-" for k, f in (
            ("img_s", "{:,.0f}"), ("cpu_ms_per_img", "{:.2f}"), ("cores", "{:.1f}"),
            ("device_mb", "{:,.0f}"))]
        print(f"| {label_of(e)} ({len(rs)} proc.) | " + " | ".join(
            [_fmt(med[e]["total_s"])] + [_fmt(_med(rs, k)) for k in (
                "import_s", "build_s", "first_s", "interpreter_s")] + [_fmt(med[e]["warm_s"])]
            + got) + " |" + (f" FAILED: {errs[0][:200]}" if errs else ""))
    d, p = keys[0], peer or keys[1]
    m = lambda e, k: (med[e][k] or (None,))[0]  # noqa: E731
    s = lambda e, k: (steady.get(e) or {}).get(k)  # noqa: E731
    best = " (the best of its rows by img/s)" if len(keys) > 2 else ""
    print(f"\ndetaug / {label_of(p)}{best}: first batch cold "
          f"{_ratio(m(d, 'total_s'), m(p, 'total_s'))}, warm {_ratio(m(d, 'warm_s'), m(p, 'warm_s'))} "
          f"(time: < 1 = detaug sooner); img/s {_ratio(s(d, 'img_s'), s(p, 'img_s'))}; CPU per "
          f"image {_ratio(s(d, 'cpu_ms_per_img'), s(p, 'cpu_ms_per_img'))}; device memory "
          f"{_ratio(s(d, 'device_mb'), s(p, 'device_mb'))} (< 1 = detaug less)")
    if len(keys) > 2:  # (against detaug's own second row: its drift within the run)
        print("detaug img/s / each: " + "; ".join(
            f"{label_of(e)} {_ratio(s(d, 'img_s'), s(e, 'img_s'))}" for e in keys[1:]))


def run_section(args, pair, w=None):
    cold = []
    for i in range(args.procs):  # alternate, and swap who goes first each round
        for e in (pair if i % 2 == 0 else pair[::-1]):
            cold.append(spawn(args, e, "cold", w))
    steady = {e: spawn(args, e, "steady", w) for e in pair}
    return cold, steady


def run_gpu_section(args, configs):
    """detaug against DALI at each configuration. Steady: detaug's process, one per DALI
    configuration (in the order given), detaug's again (its drift over the DALI rows); then
    ``--procs`` cold processes each of detaug and the best configuration (most img/s),
    alternated. Returns (keys, cold, steady, the best configuration's key)."""
    steady = {"detaug": spawn(args, "detaug", "steady")}
    dali = [key_of("dali", c) for c in configs]
    for k, c in zip(dali, configs):
        steady[k] = spawn(args, "dali", "steady", cfg=c)
    steady["detaug_again"] = dict(spawn(args, "detaug", "steady"), engine="detaug_again")
    ok = [k for k in dali if steady[k].get("img_s")]
    best = max(ok, key=lambda k: steady[k]["img_s"]) if ok else dali[0]
    cold = []
    for i in range(args.procs):
        for e in (("detaug", best) if i % 2 == 0 else (best, "detaug")):
            cold.append(spawn(args, "detaug", "cold") if e == "detaug"
                        else spawn(args, "dali", "cold", cfg=e[5:]))
    return ["detaug"] + dali + ["detaug_again"], cold, steady, best


# ---------------------------------------------------------------------------- --timeline
CLOCK = ("import", "define", "build", "first_run", "total")


def _since_process_start() -> float:
    """Seconds from this process's start to now (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def timeline_child(device, root, memory_batches=0):
    """One fresh process: import detaug, define the benchmark pipeline (make_det_pipe, batch 64,
    num_threads = cores, seed 0, the rest at its defaults), build it, take one batch
    (synchronised on a GPU); print one JSON line: the clock, ``pipe.stats['startup']``'s phases,
    the requests decoded in this process. ``memory_batches`` > 0 (GPU): a memory run instead: a
    CUDA context made first, then the device memory in use (cudaMemGetInfo's free bytes, whole
    device) after the first batch and after ``memory_batches`` batches."""
    t_start = _since_process_start()  # the process's start to t0
    t0 = time.perf_counter()
    import detaug  # noqa: F401

    t1 = time.perf_counter()
    import bench_gpu

    rt = free0 = None
    if memory_batches and device != "cpu":
        import cupy

        rt = cupy.cuda.runtime
        cupy.cuda.Device(0).use()
        rt.free(0)  # the context made
        rt.deviceSynchronize()
        free0 = rt.memGetInfo()[0]
    kw = dict(batch_size=64, num_threads=os.cpu_count(), seed=0)
    if device != "cpu":
        kw["device_id"] = 0
    pipe = bench_gpu.make_det_pipe(root, device, **kw)
    t2 = time.perf_counter()
    pipe.build()
    t3 = time.perf_counter()
    out = pipe.run()
    if device != "cpu":
        import cupy

        cupy.cuda.Device(0).synchronize()  # the batch's device work done
    assert out is not None
    t4 = time.perf_counter()
    early = getattr(getattr(pipe, "_decode_service", None), "early", None)
    res = {"device": device, "phases": pipe.stats.get("startup") or [],
           "early_served": None if early is None else early.served}
    if rt is not None:
        first_mb = (free0 - rt.memGetInfo()[0]) / MB
        del out
        for _ in range(memory_batches - 1):
            pipe.run()
        rt.deviceSynchronize()
        res.update(first_batch_mb=first_mb, steady_mb=(free0 - rt.memGetInfo()[0]) / MB,
                   batches=memory_batches,
                   decoder_dropped=None if early is None else early.decoder is None)
    else:
        res["clock"] = {"import": t1 - t0, "define": t2 - t1, "build": t3 - t2,
                        "first_run": t4 - t3, "total": t_start + (t4 - t0)}
    print("RESULT " + json.dumps(res), flush=True)
    pipe.close()


def run_timeline_child(args, device, pythonpath, env, memory=False):
    path = os.pathsep.join(p for p in (pythonpath, os.environ.get("PYTHONPATH")) if p)
    cmd = [sys.executable, os.path.abspath(__file__), "--timeline-child", device, "--data",
           args.data, "--memory-batches", str(args.memory_batches if memory else 0)]
    try:
        r = subprocess.run(cmd, env=dict(os.environ, PYTHONPATH=path, **env), capture_output=True,
                           text=True, timeout=args.child_timeout)
        out, err, rc = r.stdout, r.stderr, r.returncode
    except subprocess.TimeoutExpired:
        out, err, rc = "", f"timed out after {args.child_timeout} s", "timeout"
    line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        return {"device": device, "error": (err or out).strip().splitlines()[-3:]}
    return json.loads(line[7:])


def timeline_medians(results):
    """Medians over the runs of the clock and of each phase's start, end and seconds."""
    ok, med = [r for r in results if "clock" in r], statistics.median
    if not ok:
        return None
    names = list(dict.fromkeys(p["phase"] for r in ok for p in r["phases"]))
    by = {n: [p for r in ok for p in r["phases"] if p["phase"] == n] for n in names}
    phases = [{"phase": n, **{k: med(p[k] for p in ps) for k in ("start", "end", "seconds")}}
              for n, ps in by.items()]
    return {"runs": len(ok), "clock": {k: med(r["clock"][k] for r in ok) for k in CLOCK},
            "phases": phases, "totals": sorted(round(r["clock"]["total"], 3) for r in ok),
            "early_served": [r.get("early_served") for r in ok]}


def run_timeline(args):
    """``--timeline``: time to first batch from fresh processes and where it goes, per device
    and variant (``--off``, ``--env``, ``--base``), ``--procs`` runs each after one warm-up run
    per device (cupy's kernel cache, the page cache), alternated; then ``--memory-runs`` memory
    runs per variant on the GPU."""
    from gpu_common import gpu_available

    devices = [d for d in args.devices.split(",") if d]
    if "mixed" in devices and not gpu_available():
        print("mixed: skipped (no GPU here)")
        devices.remove("mixed")
    variants = [("defaults", REPO, {})]
    if args.off:
        variants.append(("off: DETAUG_EARLY_START=0", REPO, {"DETAUG_EARLY_START": "0"}))
    for kv in args.env:
        name, _, value = kv.partition("=")
        variants.append((f"env: {kv}", REPO, {name: value}))
    if args.base:
        variants.append(("before: " + args.base, os.path.abspath(args.base), {}))
    res = {(d, v): [] for d in devices for v, _, _ in variants}
    for d in devices:
        run_timeline_child(args, d, REPO, {})
    for k in range(args.procs):
        for d in devices:
            for label, path, env in (variants if k % 2 == 0 else variants[::-1]):
                res[(d, label)].append(run_timeline_child(args, d, path, env))
    out = {}
    for (d, label), rs in res.items():
        m = timeline_medians(rs)
        errors = [r["error"] for r in rs if "error" in r]
        out[f"{d}/{label}"] = {"median": m, "errors": errors}
        if m is None:
            print(f"{d} [{label}]: no run succeeded; last lines: {errors[-1:]}")
            continue
        c = m["clock"]
        print(f"{d} [{label}]: median of {m['runs']} fresh processes: first batch {c['total']:.3f} s "
              f"(import {c['import']:.3f}, define {c['define']:.3f}, build {c['build']:.3f}, first "
              f"run {c['first_run']:.3f}); totals {m['totals']}"
              + (f"; requests decoded in-process {m['early_served']}"
                 if any(v is not None for v in m["early_served"]) else "")
              + (f"; {len(errors)} runs failed: {errors[-1]}" if errors else ""))
        w = max((len(p["phase"]) for p in m["phases"]), default=5)
        for p in m["phases"]:
            print(f"  {p['phase']:<{w}}  {p['start']:7.3f}  {p['end']:7.3f}  {p['seconds']:7.3f}")
    mem = {v: [] for v, _, _ in variants if "mixed" in devices and args.memory_runs}
    for k in range(args.memory_runs if mem else 0):
        for label, path, env in (variants if k % 2 == 0 else variants[::-1]):
            mem[label].append(run_timeline_child(args, "mixed", path, env, memory=True))
    for label, rs in mem.items():
        ok, med = [r for r in rs if "steady_mb" in r], statistics.median
        out[f"memory/{label}"] = rs
        print(f"mixed [{label}] device MB in use (cudaMemGetInfo, whole device, from before the "
              f"build), median of {len(ok)}: after the first batch "
              f"{med(r['first_batch_mb'] for r in ok) if ok else 0:,.0f}, after "
              f"{args.memory_batches} batches {med(r['steady_mb'] for r in ok) if ok else 0:,.0f}; "
              f"decoded in-process {[r['early_served'] for r in ok]}, decoder dropped "
              f"{[r['decoder_dropped'] for r in ok]}" + "".join(
                  f"; a run failed: {r['error']}" for r in rs if "error" in r))
    return out


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
    ap.add_argument("--dali-configs", default=None, help="DALI configurations, comma-separated "
                    "DECODE[:THREADS[:HW_LOAD]] (default gpu_peers.DALI_CONFIGS)")
    ap.add_argument("--dali-config", default="whole", help=argparse.SUPPRESS)  # a child's
    ap.add_argument("--child-timeout", type=float, default=120.0)
    ap.add_argument("--timeline", action="store_true", help="detaug alone: first batch and phases")
    ap.add_argument("--devices", default="mixed,cpu", help="--timeline: devices (mixed,cpu)")
    ap.add_argument("--off", action="store_true", help="--timeline: also DETAUG_EARLY_START=0")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="--timeline: also with this variable set (repeatable)")
    ap.add_argument("--base", default=None, help="--timeline: also another checkout first")
    ap.add_argument("--memory-runs", type=int, default=0, help="--timeline: GPU memory runs (0)")
    ap.add_argument("--memory-batches", type=int, default=40, help="a memory run's batches (40)")
    ap.add_argument("--timeline-child", choices=("mixed", "cpu"), help=argparse.SUPPRESS)
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", choices=sorted(ENGINES), help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=("cold", "steady"), help=argparse.SUPPRESS)
    ap.add_argument("--w", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.data = os.path.abspath(args.data)
    if args.child:
        return child(args)
    if args.timeline_child:
        return timeline_child(args.timeline_child, args.data, args.memory_batches)
    sys.path.insert(0, REPO)
    from gpu_peers import DALI_CONFIGS, dali_config_text, parse_dali_configs

    try:
        configs = [dali_config_text(c) for c in parse_dali_configs(args.dali_configs or DALI_CONFIGS)]
    except ValueError as e:
        ap.error(str(e))
    if not os.path.exists(os.path.join(args.data, "annotations.json")):
        sys.exit(f"bench_startup: no annotations.json in --data {args.data} "
                 "(make it with bench_gpu.make_dataset; device.sh's bench_data does)")
    out = run_timeline(args) if args.timeline else run_sections(args, configs)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


def run_sections(args, configs):
    """The GPU section (detaug against DALI at ``configs``) and the CPU sections."""
    from detaug.core.backend import gpu_available  # imports no GPU library

    gpu = gpu_available()
    print(f"bench_startup: {os.cpu_count()} cores, GPU {'yes' if gpu else 'no'}, data {args.data}, "
          f"{args.procs} cold processes per engine, steady {args.seconds:g} s after "
          f"{args.warmup:g} s; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
          flush=True)
    out = {}
    if not args.cpu_only:
        keys = best = None
        if not gpu and args.dali_device == "cpu":  # only the DALI child can run here
            cold = [spawn(args, "dali", "cold", cfg=configs[0]) for _ in range(args.procs)]
            steady = {key_of("dali", c): spawn(args, "dali", "steady", cfg=c) for c in configs}
        elif not gpu:
            print("GPU section skipped: no GPU (--dali-device cpu checks the DALI child alone)")
            cold, steady = None, None
        else:
            keys, cold, steady, best = run_gpu_section(args, configs)
        if cold is not None:
            out["gpu"] = {"cold": cold, "steady": steady, "dali_configs": configs,
                          "dali_best": best}
        if keys:
            report(f"GPU: detaug against DALI (DALI device {args.dali_device}; cold: the best "
                   f"configuration), batch {args.batch_size}", keys, cold, steady, best)
    if not args.gpu_only:
        for w in [int(x) for x in args.workers.split(",") if x.strip()]:
            cold, steady = run_section(args, ("detaug_cpu", "albu"), w)
            out[f"cpu_w{w}"] = {"cold": cold, "steady": steady}
            report(f"CPU, W={w} workers: detaug's host workers against a DataLoader, batch "
                   f"{args.cpu_batch}", ("detaug_cpu", "albu"), cold, steady)
    return out


if __name__ == "__main__":
    sys.exit(main())

"""Time to first batch from fresh processes, and where it goes (``pipe.stats['startup']``).

    python benchmarks/startup_timeline.py [--devices cpu,mixed] [--runs 5] [--num-images 1024]
        [--data DIR] [--off] [--env NAME=VALUE] [--base PATH] [--json F]

Each run is a fresh interpreter (``python benchmarks/startup_timeline.py --child DEVICE``) that
imports detaug, defines the benchmark pipeline (bench_gpu.make_det_pipe: COCO reader -> decode
-> random_iou_crop -> flip -> resize 640 -> prune -> normalize; batch 64, num_threads = cores,
seed 0, the other settings at their defaults), builds it and takes one batch (synchronised on
a GPU), then prints one JSON line. The parent prints, per device, the median over the runs of
the child's own clock (``import``, ``define``, ``build``, ``first run``, ``total`` from the
process's start to the batch in hand) and of each phase of the timeline (start, end, seconds
since the process started). ``--warmup`` (1) runs per device go first, uncounted: a bare
machine compiles the CUDA kernels once (cupy's disk cache) and reads the files from disk once.
``--off`` runs the same children, alternated, with ``DETAUG_EARLY_START=0`` (the start-up order
off: the "before" of one call), ``--env NAME=VALUE`` with that variable set (``DETAUG_EARLY_DECODE=0``:
the first launch waits for the decode processes), ``--base PATH`` with another checkout first on ``PYTHONPATH`` (a
checkout without the timeline gives the child's clock only). Runs alternate between the devices
and variants.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

T0 = time.perf_counter()
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CLOCK = ("import", "define", "build", "first_run", "total")


def child(device, root):
    """One fresh process's measurement (prints one JSON line)."""
    t_start = _process_start_offset()
    t0 = time.perf_counter()
    import detaug  # noqa: F401

    t1 = time.perf_counter()
    sys.path.insert(0, HERE)
    from bench_gpu import make_det_pipe

    kw = dict(batch_size=64, num_threads=os.cpu_count(), seed=0)
    if device != "cpu":
        kw["device_id"] = 0
    pipe = make_det_pipe(root, device, **kw)
    t2 = time.perf_counter()
    pipe.build()
    t3 = time.perf_counter()
    out = pipe.run()
    if device != "cpu":
        import cupy

        cupy.cuda.Device(0).synchronize()  # the batch's device work done
    assert out is not None
    t4 = time.perf_counter()
    clock = {"import": t1 - t0, "define": t2 - t1, "build": t3 - t2, "first_run": t4 - t3,
             "total": t4 - t0 + t_start}
    early = getattr(getattr(pipe, "_decode_service", None), "early", None)
    print(json.dumps({"device": device, "clock": clock,
                      "phases": pipe.stats.get("startup") or [],
                      "early_served": None if early is None else early.served,
                      "host_processes": getattr(pipe, "host_processes", None),
                      "summary": getattr(pipe, "device_summary", None)}), flush=True)
    pipe.close()


def _process_start_offset() -> float:
    """Seconds from this process's start to now (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")) - (time.perf_counter() - T0)
    except (OSError, ValueError, IndexError):
        return 0.0


def run_child(device, root, pythonpath, extra_env):
    path = os.pathsep.join(p for p in (pythonpath, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path, **extra_env)
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", device, "--data", root],
                       env=env, capture_output=True, text=True, timeout=300)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode or not lines:
        return {"device": device, "error": (r.stderr or r.stdout).strip().splitlines()[-3:]}
    return json.loads(lines[-1])


def medians(results):
    ok = [r for r in results if "clock" in r]
    if not ok:
        return None
    clock = {k: statistics.median(r["clock"][k] for r in ok) for k in CLOCK}
    names = []
    for r in ok:
        for p in r["phases"]:
            if p["phase"] not in names:
                names.append(p["phase"])
    phases = []
    for n in names:
        ps = [p for r in ok for p in r["phases"] if p["phase"] == n]
        phases.append({"phase": n, "start": statistics.median(p["start"] for p in ps),
                       "end": statistics.median(p["end"] for p in ps),
                       "seconds": statistics.median(p["seconds"] for p in ps), "n": len(ps)})
    return {"runs": len(ok), "clock": clock, "phases": phases,
            "totals": sorted(round(r["clock"]["total"], 3) for r in ok),
            "early_served": [r.get("early_served") for r in ok]}


def show(label, m):
    if m is None:
        print(f"{label}: no run succeeded")
        return
    c = m["clock"]
    print(f"{label}: median of {m['runs']} fresh processes: total {c['total']:.3f} s (import "
          f"{c['import']:.3f}, define {c['define']:.3f}, build {c['build']:.3f}, first run "
          f"{c['first_run']:.3f}); totals {m['totals']}"
          + (f"; requests decoded in-process {m['early_served']}" if any(
              v is not None for v in m.get("early_served", [])) else ""))
    if m["phases"]:
        w = max(len(p["phase"]) for p in m["phases"])
        print(f"  {'phase':<{w}}  {'start':>7}  {'end':>7}  {'seconds':>7}")
        for p in m["phases"]:
            print(f"  {p['phase']:<{w}}  {p['start']:7.3f}  {p['end']:7.3f}  {p['seconds']:7.3f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--devices", default="cpu,mixed")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--num-images", type=int, default=1024)
    ap.add_argument("--data", default=None, help="data set folder (made there if missing)")
    ap.add_argument("--base", default=None, help="another checkout to compare (before/after)")
    ap.add_argument("--off", action="store_true", help="also with DETAUG_EARLY_START=0")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="also with this variable set (e.g. DETAUG_EARLY_DECODE=0); repeatable")
    ap.add_argument("--warmup", type=int, default=1,
                    help="runs per device first, not counted (cupy's kernel cache, the page cache)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child, args.data)
    sys.path.insert(0, HERE)
    from gpu_common import gpu_available, make_dataset

    root = args.data or os.path.join(tempfile.gettempdir(), f"detaug_startup_{args.num_images}")
    make_dataset(root, args.num_images, os.cpu_count() or 1)
    devices = [d for d in args.devices.split(",") if d]
    if "mixed" in devices and not gpu_available():
        print("mixed: skipped (no GPU here)")
        devices.remove("mixed")
    trees = [("after", REPO, {})]
    if args.off:
        trees.append(("off: DETAUG_EARLY_START=0", REPO, {"DETAUG_EARLY_START": "0"}))
    for kv in args.env:
        name, _, value = kv.partition("=")
        trees.append((f"env: {kv}", REPO, {name: value}))
    if args.base:
        trees.append(("before: " + args.base, os.path.abspath(args.base), {}))
    results = {(d, t): [] for d in devices for t, _, _ in trees}
    for d in devices:
        for _ in range(args.warmup):
            run_child(d, root, REPO, {})
    for k in range(args.runs):
        for d in devices:
            for label, path, env in (trees if k % 2 == 0 else trees[::-1]):
                results[(d, label)].append(run_child(d, root, path, env))
    out = {}
    for (d, label), rs in results.items():
        errors = [r["error"] for r in rs if "error" in r]
        m = medians(rs)
        show(f"{d} [{label}]", m)
        for e in errors[:1]:
            print(f"  ({len(errors)} runs failed; last lines: {e})")
        out[f"{d}/{label}"] = {"median": m, "errors": errors}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()

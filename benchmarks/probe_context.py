"""Probe, on the GPU machine: what a decode process's device memory is made of, what shrinks it
(issue 11: two decode processes within 2.2 GB), and whether nvImageCodec's choice of JPEG backend
(hardware NVJPG engine or CUDA hybrid) changes the decoded pixels.

Each variant runs in a fresh spawned child. This parent holds its own CUDA context and samples
cudaMemGetInfo's free bytes (whole device) when the child reports a stage, and every 20 ms in
between (the peak). MB = 10^6 bytes, the drop of free bytes from before the child started.
Stages: ctx (cudaFree(0) made the child's primary context), limits (after cudaDeviceSetLimit,
where the variant lowers limits), cupy (a cupy allocation and kernel, as a decode process makes),
dec (T nvImageCodec decoders made), warm (5 batches of 64 decoded by each, results freed),
decoding (T threads decoding batches of 64 read from the files, for --seconds; one batch held).
Limit columns: bytes at context creation -> after setting -> at the end (the driver grows the
stack for a kernel that needs more). The determinism table compares decoders of one child on
the same 64 files (max abs difference, fraction of differing elements, images bit-equal).

    python benchmarks/probe_context.py DATA [--seconds 4] [--only SUBSTR,...] [--budget 150]
    python benchmarks/probe_context.py --dry-run   # the table code with fake numbers, no GPU
"""
from __future__ import annotations

import argparse
import collections
import glob
import hashlib
import multiprocessing as mp
import os
import re
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# cudaLimit values: cupy.cuda.runtime.cudaLimitStackSize = 0, cudaLimitPrintfFifoSize = 1,
# cudaLimitMallocHeapSize = 2 (cupy_backends/cuda/api/_runtime_enum.pxd)
LIMITS = {"stack": 0, "fifo": 1, "heap": 2}
ZERO = {"stack": 0, "heap": 0, "fifo": 0}  # requests: the driver may clamp (deviceGetLimit says)
HW, CUDA, GPU = ["HW_GPU_ONLY"], ["HYBRID_CPU_GPU"], ["GPU_ONLY"]
VARIANTS = [  # most telling first: --budget skips the tail
    ("ctx default", {}),
    ("ctx stack=0", {"limits": {"stack": 0}}),
    ("ctx stack,heap,fifo=0", {"limits": ZERO}),
    ("1 dec default", {"dec": 1}),
    ("1 dec, limits 0", {"dec": 1, "limits": ZERO}),
    ("determinism", {"det": True}),
    ("2 dec default", {"dec": 2}),
    ("2 dec, limits 0", {"dec": 2, "limits": ZERO}),
    ("1 dec HW_GPU_ONLY", {"dec": 1, "backends": HW}),
    ("1 dec HYBRID_CPU_GPU", {"dec": 1, "backends": CUDA}),
    ("2 dec cpu_threads=2, limits 0", {"dec": 2, "cpu_threads": 2, "limits": ZERO}),
    ("1 dec cpu_threads=2", {"dec": 1, "cpu_threads": 2}),
    ("ctx LAZY", {"env": "LAZY"}),
    ("ctx EAGER", {"env": "EAGER"}),
    ("ctx stack=256", {"limits": {"stack": 256}}),
    ("ctx heap=0", {"limits": {"heap": 0}}),
    ("1 dec GPU_ONLY", {"dec": 1, "backends": GPU}),
]
# nvImageCodec INFO lines worth keeping: HW engines, each backend's batch size, the samples a
# per-sample decoder (nvjpeg_cuda_decoder) took ("process #k"), fallbacks
LOG_KEYS = ("num_hw_engines", "max batch size", "process #", "Trying next", "set failure", "can't be",
            "preallocate_batch_size", "load_hint")
STAGES = ["ctx", "limits", "cupy", "dec", "warm", "decoding"]


def make_decoder(nvimgcodec, cfg):
    kw = {"device_id": 0}
    if cfg.get("cpu_threads"):
        kw["max_num_cpu_threads"] = cfg["cpu_threads"]
    if cfg.get("backends"):
        kw["backends"] = [nvimgcodec.Backend(getattr(nvimgcodec.BackendKind, b)) for b in cfg["backends"]]
    return nvimgcodec.Decoder(**kw)


def read_limits(rt):
    return {k: int(rt.deviceGetLimit(v)) for k, v in LIMITS.items()}


def loading_mode():
    """CUDA's module loading mode (cuModuleGetLoadingMode: 1 EAGER, 2 LAZY)."""
    try:
        import ctypes

        m = ctypes.c_int()
        if ctypes.CDLL("libcuda.so.1").cuModuleGetLoadingMode(ctypes.byref(m)) == 0:
            return {1: "EAGER", 2: "LAZY"}.get(m.value, str(m.value))
    except Exception:  # noqa: BLE001
        pass
    return "?"


def stage(conn, name, **info):
    conn.send(("stage", name, info))
    conn.recv()  # the parent has sampled


def start_cuda(conn, cfg):
    """The child's context, limits and a cupy allocation, each stage reported; cupy."""
    if cfg.get("env"):
        os.environ["CUDA_MODULE_LOADING"] = cfg["env"]  # before the driver initializes
    import cupy as cp

    rt = cp.cuda.runtime
    rt.setDevice(0)
    rt.free(0)  # cudaFree(0): creates the primary context
    stage(conn, "ctx", limits0=read_limits(rt), loading=loading_mode())
    if cfg.get("limits"):
        refused = []
        for k, v in cfg["limits"].items():
            try:
                rt.deviceSetLimit(LIMITS[k], v)
            except Exception as e:  # noqa: BLE001 - reported in the row's notes
                refused.append(f"{k}={v} refused: {e}")
        stage(conn, "limits", limits1=read_limits(rt), refused=refused)
    float((cp.arange(1024, dtype=cp.float32) * 2).sum())
    stage(conn, "cupy")
    return cp


def decoding_tools(cp):
    """(nvimgcodec, decode(decoder, paths, stream) -> decoded images) as a decode process does:
    read the files, parse, decode in calls of 64."""
    try:
        import bench_gpu

        bench_gpu.preload_nvjpeg()
    except Exception:  # noqa: BLE001 - libnvjpeg may already be on the loader's path
        pass
    from nvidia import nvimgcodec

    from detaug.ops.gpu_decode import code_streams, decode_chunks
    from detaug.ops.sources import read_files

    def decode(dec, paths, stream):
        srcs = [s for s in code_streams(read_files(paths)) if s is not None]
        out = decode_chunks(dec, srcs, "RGB", 64, stream.ptr)
        stream.synchronize()
        return out

    return nvimgcodec, decode


def to_host(cp, images):
    return [None if im is None else cp.asarray(im).get() for im in images]


def child(conn, files, cfg, seconds):
    try:
        cp = start_cuda(conn, cfg)
        if cfg.get("dec"):
            run_decoders(conn, cp, files, cfg, seconds)
        conn.send(("done", {"limits2": read_limits(cp.cuda.runtime)}))
    except Exception as e:  # noqa: BLE001 - the parent prints it in the row
        conn.send(("error", f"{type(e).__name__}: {e}"[:300]))


def run_decoders(conn, cp, files, cfg, seconds):
    nvimgcodec, decode = decoding_tools(cp)
    t = cfg["dec"]
    decs = [make_decoder(nvimgcodec, cfg) for _ in range(t)]
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(t)]
    stage(conn, "dec")

    def batch(k, i):
        return decode(decs[k], [files[(i * 64 + j) % len(files)] for j in range(64)], streams[k])

    first = to_host(cp, batch(0, 0)[:8])
    for k in range(t):
        for i in range(5):
            batch(k, i)
    cp.get_default_memory_pool().free_all_blocks()
    stage(conn, "warm")
    counts, nones, keep = [0] * t, [0] * t, []
    stop = time.perf_counter() + seconds

    def run(k):
        i = k * 1000
        while time.perf_counter() < stop:
            r = batch(k, i)
            if k == 0 and not keep:
                keep.append(r)  # one batch held, as a ring would
            counts[k] += sum(x is not None for x in r)
            nones[k] += sum(x is None for x in r)
            i += 1

    t0 = time.perf_counter()
    ths = [threading.Thread(target=run, args=(k,)) for k in range(t)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    rate = sum(counts) / (time.perf_counter() - t0)
    stage(conn, "decoding", rate=rate, nones=sum(nones), hashes=[
        "None" if a is None else hashlib.sha1(np.ascontiguousarray(a).tobytes()).hexdigest()[:12] for a in first])


def compare(xs, ys):
    """(max abs difference, fraction of differing elements, images bit-equal, images not comparable)."""
    mx = diff = total = same = bad = 0
    for x, y in zip(xs, ys):
        if x is None or y is None or x.shape != y.shape:
            bad += 1
            continue
        d = np.abs(x.astype(np.int16) - y.astype(np.int16))
        mx, diff, total = max(mx, int(d.max())), diff + int((d > 0).sum()), total + d.size
        same += int(not d.any())
    return (mx, diff / total, same, bad) if total else (None, None, same, bad)


def det_child(conn, files, cfg, seconds):
    """Decode the same 64 files with several decoders of this process and compare them."""
    out, errors, logs, pos = {}, {}, [], [0]
    # nvImageCodec's INFO log (std::cerr, at PYNVIMGCODEC_VERBOSITY=3) goes to a file; its lines
    # on backends (batch sizes, samples per decoder, fallbacks) are summed per step
    os.environ["PYNVIMGCODEC_VERBOSITY"] = "3"
    path, saved = os.path.join(tempfile.mkdtemp(), "nvimgcodec.log"), [os.dup(1), os.dup(2)]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)

    def take_log(step):
        with open(path, errors="replace") as f:
            f.seek(pos[0])
            text, pos[0] = f.read(), f.tell()
        norm = (re.sub(r"\b\d+: ", "T: ", re.sub(r"#\d+", "#N", re.sub(r"\x1b\[[0-9;]*m", "", ln))).strip()[:150]
                for ln in text.splitlines() if any(k in ln for k in LOG_KEYS))
        logs.extend(f"{step}: {n} x {ln}" for ln, n in collections.Counter(norm).most_common(8))

    try:
        cp = start_cuda(conn, {})
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        nvimgcodec, decode = decoding_tools(cp)
        s = cp.cuda.Stream(non_blocking=True)

        def run(dec, lo=0, n=64):
            return to_host(cp, decode(dec, [files[(lo + j) % len(files)] for j in range(n)], s))

        def first_small():  # nvImageCodec sizes a backend's batch from a decoder's first call
            dec = make_decoder(nvimgcodec, {})
            run(dec, 64, 4)
            return run(dec)

        def thirteenth():  # as a test process holding many used decoders
            for k, m in enumerate([make_decoder(nvimgcodec, {}) for _ in range(12)]):
                run(m, 64 * (k + 1))
            return run(make_decoder(nvimgcodec, {}))

        for name, fn in [("a default", lambda: run(make_decoder(nvimgcodec, {}))),
                         ("b HW_GPU_ONLY", lambda: run(make_decoder(nvimgcodec, {"backends": HW}))),
                         ("c HYBRID_CPU_GPU", lambda: run(make_decoder(nvimgcodec, {"backends": CUDA}))),
                         ("d GPU_ONLY", lambda: run(make_decoder(nvimgcodec, {"backends": GPU}))),
                         ("e default, first call 4 images", first_small),
                         ("f 13th default, 12 used ones alive", thirteenth)]:
            try:
                out[name] = fn()
            except Exception as e:  # noqa: BLE001
                errors[name] = f"{type(e).__name__}: {e}"[:200]
            take_log(name[0])
            stage(conn, name)  # progress (a timeout names the step after it)
    except Exception as e:  # noqa: BLE001
        errors["setup"] = f"{type(e).__name__}: {e}"[:200]
    sys.stdout.flush()
    for f, orig in zip((1, 2), saved):
        os.dup2(orig, f)
    take_log("end")
    names = {n[0]: n for n in list(out) + list(errors)}
    hw, cuda = out.get(names.get("b")), out.get(names.get("c"))
    rows = []
    for x, y in [("a", "b"), ("a", "c"), ("b", "c"), ("a", "d"), ("e", "a"), ("f", "a")]:
        nx, ny = names.get(x, x), names.get(y, y)
        if nx not in out or ny not in out:
            rows.append((nx, ny, None, errors.get(nx) or errors.get(ny) or errors.get("setup") or "missing"))
            continue
        extra = tuple(None if r is None else compare(out[nx], r)[2] for r in (hw, cuda))
        none = "/".join(str(sum(a is None for a in out[n])) for n in (nx, ny))
        rows.append((nx, ny, compare(out[nx], out[ny]) + extra + (none,), ""))
    conn.send(("done", {"det": rows, "log": logs}))


def run_child(ctx, rt, target, args, timeout):
    """(stage drops MB, peak MB, info, error) of one child."""
    base = rt.memGetInfo()[0]
    a, b = ctx.Pipe()
    p = ctx.Process(target=target, args=(b,) + args, daemon=True)
    p.start()
    b.close()
    stages, info, peak, err, last = {}, {}, 0, None, "start"
    end = time.monotonic() + timeout

    def died():
        p.join(2)
        return f"child died (exit code {p.exitcode}) after stage '{last}'"

    while err is None:
        peak = max(peak, base - rt.memGetInfo()[0])
        try:
            m = a.recv() if a.poll(0.02) else None
        except (EOFError, OSError):
            m = ("error", died())
        if m is None:  # nothing yet: sample again, unless the child is gone or late
            if time.monotonic() > end:
                err = f"timeout after {timeout:.0f} s in the stage after '{last}'"
                p.terminate()
            elif not p.is_alive() and not a.poll(0):
                err = died()
        elif m[0] == "stage":
            stages[m[1]], last = (base - rt.memGetInfo()[0]) / 1e6, m[1]
            info.update(m[2])
            a.send("ok")
        elif m[0] == "done":
            info.update(m[1])
            break
        else:
            err = m[1]
    p.join(10)
    if p.is_alive():
        p.terminate()
        p.join(5)
    return stages, peak / 1e6, info, err


def fmt_row(name, stages, peak, info, err, ref_hashes):
    cells = [name] + [f"{stages[s]:,.0f}" if s in stages else "" for s in STAGES]
    cells += [f"{peak:,.0f}", f"{info['rate']:,.0f}" if info.get("rate") is not None else ""]
    for k in ("stack", "heap", "fifo"):
        cells.append(" -> ".join(str(info[s][k]) for s in ("limits0", "limits1", "limits2") if s in info))
    notes = [f"loading {info['loading']}"] if "loading" in info else []
    notes += info.get("refused", [])
    if info.get("nones"):
        notes.append(f"{info['nones']} images not decoded")
    if info.get("hashes") and ref_hashes and name != "1 dec default":
        k = sum(h != r for h, r in zip(info["hashes"], ref_hashes))
        notes.append("pixels = 1 dec default" if k == 0 else f"pixels differ from 1 dec default in {k}/8 images")
    if err:
        notes.append(f"ERROR {err}")
    return "| " + " | ".join(cells + ["; ".join(notes)]) + " |"


def fmt_det(rows):
    lines = ["| decoder | vs | max abs diff | differing elements | images equal | not comparable "
             "| images = HW (b) | images = CUDA (c) | not decoded (x/y) | error |", "|---|---|" + "---:|" * 7 + "---|"]
    for x, y, c, err in rows:
        vals = ["" if v is None else f"{v:.4%}" if i == 1 else str(v) for i, v in enumerate(c or [None] * 7)]
        lines.append(f"| {x} | {y} | " + " | ".join(vals) + f" | {err} |")
    return lines


def header(rt):
    p = rt.getDeviceProperties(0)
    name = p["name"].decode() if isinstance(p["name"], bytes) else p["name"]
    sms, tpm, stack = p["multiProcessorCount"], p["maxThreadsPerMultiProcessor"], rt.deviceGetLimit(LIMITS["stack"])
    from importlib import metadata

    ver = "?"
    for d in ("nvidia-nvimgcodec-cu12", "nvidia-nvimgcodec-cu13"):
        try:
            ver = metadata.version(d)
        except metadata.PackageNotFoundError:
            pass
    return [f"{name}: {sms} SMs x {tpm} threads/SM; runtime {rt.runtimeGetVersion()}, driver "
            f"{rt.driverGetVersion()}; nvimgcodec {ver}; {os.cpu_count()} cores; parent's loading mode {loading_mode()}",
            f"stack {stack} B x {sms * tpm:,} resident threads = {stack * sms * tpm / 1e6:,.0f} MB "
            "(the local memory a context reserves, if it is stack x max resident threads)"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", nargs="?", help="a folder of JPEGs (searched recursively)")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--timeout", type=float, default=60.0, help="per child, seconds (determinism: 1.5x)")
    ap.add_argument("--budget", type=float, default=150.0, help="seconds; variants after it are skipped")
    ap.add_argument("--only", default="", help="comma-separated substrings of variant names")
    ap.add_argument("--dry-run", action="store_true", help="print the tables from fake numbers (no GPU)")
    args = ap.parse_args()
    variants = [v for v in VARIANTS if not args.only or any(s in v[0] for s in args.only.split(","))]
    rows, det = [], []
    if args.dry_run:
        fake = dict(zip(STAGES, [551.0, 275.0, 280.0, 288.0, 430.0, 560.0]))
        info = {"rate": 10708.4, "loading": "LAZY", "hashes": ["x"] * 8, "limits0": {"stack": 1024, "heap": 8388608,
                "fifo": 1048576}, "limits1": ZERO, "limits2": {"stack": 64, "heap": 0, "fifo": 0}}
        rows.append(fmt_row("1 dec default", fake, 600.0, info, None, ["x"] * 8))
        rows.append(fmt_row("1 dec, limits 0", fake, 320.0, dict(info, hashes=["y"] + ["x"] * 7, nones=3), None,
                            ["x"] * 8))
        rows.append(fmt_row("ctx EAGER", {"ctx": 900.0}, 900.0, {}, "timeout after 60 s", None))
        det = fmt_det([("a default", "b HW_GPU_ONLY", (3, 0.027, 60, 0, 64, 4, "0/0"), ""),
                       ("a default", "d GPU_ONLY", None, "RuntimeError: no decoder")])
        hdr = ["(dry run: fake numbers)"]
    else:
        if not args.data or not os.path.isdir(args.data):
            ap.error(f"DATA must be a folder of JPEGs (got {args.data!r})")
        files = sorted(glob.glob(os.path.join(args.data, "**", "*.jpg"), recursive=True))
        if len(files) < 64:
            ap.error(f"{args.data} holds {len(files)} .jpg files (searched recursively); 64 or more are needed")
        try:
            import cupy as cp

            rt = cp.cuda.runtime
            rt.setDevice(0)
            rt.free(0)  # this parent's own context, held throughout
        except Exception as e:  # noqa: BLE001
            sys.exit(f"no CUDA device ({type(e).__name__}: {e}): this probe runs on the GPU machine; "
                     "--dry-run checks the table code")
        hdr = header(rt)
        ctx, t0, ref = mp.get_context("spawn"), time.monotonic(), None
        for name, cfg in variants:
            if time.monotonic() - t0 > args.budget:
                rows.append(f"| {name} |" + " |" * 11 + " skipped: --budget spent |")
                continue
            t1 = time.monotonic()
            det_run = bool(cfg.get("det"))
            stages, peak, info, err = run_child(ctx, rt, det_child if det_run else child,
                                                (files, cfg, args.seconds), args.timeout * (1.5 if det_run else 1))
            if det_run:
                det = fmt_det(info.get("det") or [("determinism", "", None, err or "no result")])
                det += ["", "nvImageCodec log of the determinism child (step: count x line, "
                        "T = thread, N = sample):"] + info.get("log", [])
                print("\n".join(det), file=sys.stderr, flush=True)
                continue
            ref = info.get("hashes") if name == "1 dec default" else ref
            rows.append(fmt_row(name, stages, peak, info, err, ref))
            print(rows[-1], f"({time.monotonic() - t1:.0f} s)", file=sys.stderr, flush=True)
    print("\n".join(hdr))
    print("| variant | ctx MB | limits MB | cupy MB | + dec MB | warm MB | decoding MB | peak MB | img/s "
          "| stack B | malloc heap B | printf fifo B | notes |")
    print("|---|" + "---:|" * 8 + "---|---|---|---|")
    print("\n".join(rows))
    if det:
        print("\n" + "\n".join(det))


if __name__ == "__main__":
    main()

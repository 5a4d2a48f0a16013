"""Device memory of the default GPU pipeline, part by part, and of the settings that could bring it
to DALI's 1,366 MB at no loss of img/s.

    python benchmarks/bench_memory.py [--data DIR] [--num-images 2048] [--seconds 8]
                                      [--only contexts,pipelines,seg] [--rows defaults,...] [--json F]
    python benchmarks/bench_memory.py --only seg [--seg-data DIR] [--seg-images 512] [--device cpu]
    python benchmarks/bench_memory.py soak --data DIR [--batches 20000] [--pipe-kwargs JSON]

Every figure is a drop of ``cudaMemGetInfo``'s free bytes (the whole device, every process), in
MB of 10^6 bytes, each measured in a process of its own so that no cache carries over:

1. contexts: this process holds a CUDA context of its own (the observer) and starts one child per
   variant; the child sets itself up, says READY and waits; the drop seen here meanwhile is what
   the child holds: a CUDA context as cupy makes it (what the main process of a pipeline pays),
   with the stack reservation dropped (what decode processes do), with the malloc heap and printf
   buffer made small too, with eager module loading (``CUDA_MODULE_LOADING=EAGER``, the opposite
   of the default lazy loading, to show what lazy saves), and with nvImageCodec decoders warmed up
   as a decode process warms them (1 or 2 decoders, 4 or 1 CPU threads each; one also decoding
   the data set's images, whose scratch buffers grow with them).
2. pipelines: one child per row builds ``bench_gpu.make_det_pipe`` (the benchmark pipeline) with
   the row's settings and measures, from after its own context is up: the drop after build, after
   the first batch and its lowest free bytes over ``--seconds`` of batches (img/s over the same
   window, the GPU synchronised at its ends), and the pool its device threads allocate from
   (detaug/runtime/gpu/allocator.py: the outputs in flight and the batches the caller holds:
   total and in use), the hand-out hold's peak (batches held at once),
   the output slots and the memory plan. What the decode side takes is the drop less the pool.
   Rows: the defaults; 1 decode process with 2, 3 and 4 decoder threads; 2 processes of 1 thread;
   decode in the device-stage threads (decode_processes=0); the RetinaNet input at batch 16. The
   hold: each row drops its batch before asking for the next; the "-for" rows keep it bound
   while asking, as ``for batch in pipe`` does, so the caller holds two batches at that moment
   (the plan counts one).
   Every setting gives the same batches (the engine's promise); only memory and speed differ.
3. seg (not among the default parts): the instance-segmentation recipe of ``bench_gpu.py --seg``
   (``gpu_common.make_seg_pipe``: 1024 px, batch 16, the default budget) in modes masks (in the
   graph), polygons and boxes, each run alone (``pipe.run()``) and through the torch adapter
   (``DetaugIterator``, list targets, as ``bench_gpu --seg`` measures it; for polygons the
   adapter makes the masks), one child a row. Each child measures from after its cupy context:
   torch's context (adapter rows), the drop after build and its lowest free bytes over the first
   batch, the warm-up and ``--seconds`` of batches (sampled after every batch and after a final
   synchronisation), and at the end the parts that allocate: the device threads' pool,
   cupy's default pool of the caller's thread (where the adapter makes masks),
   ``torch.cuda.memory_reserved`` (its peak) and ``max_memory_allocated`` (the adapter's
   gathers), the pipeline's plan as in part 2; what remains is mostly the decode side. The
   adapter's share of a mode: its adapter row's drop less its run-alone row's. Each batch is
   dropped before the next is asked for, as ``bench_gpu --seg`` does; a key ending in "-for"
   keeps it bound (``--rows seg-masks-torch-for``). An adapter row's pipeline is built by its
   ``DetaugIterator``, which declares what it takes (detaug/adapters/torch.py
   ``consumer_share``): the plan sets that aside from the budget (the budget column shows it),
   and its build time and "after build" include the iterator's. ``--device cpu`` runs the rows on the CPU:
   a smoke form of their code, without device figures.

A table per part goes to stdout; everything to ``--json`` (default ``$OUT/bench_memory.json``
where $OUT is set). Needs cupy, nvImageCodec and a GPU (seg rows: torch too); not part of the
test suite.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpu_common  # noqa: E402,F401  (puts the repository on sys.path)
from detaug.runtime.gpu.allocator import device_pool, free_cached  # noqa: E402

MB = 1e6

# (name, environment, setup): what a context child does before READY
CONTEXTS = [
    ("cupy context (a pipeline's main process)", {}, {}),
    ("+ stack limit 0 (decode processes)", {}, {"stack0": True}),
    ("+ stack 0, malloc heap 1 MiB, printf 64 KiB", {}, {"stack0": True, "small_limits": True}),
    ("stack 0, CUDA_MODULE_LOADING=EAGER", {"CUDA_MODULE_LOADING": "EAGER"}, {"stack0": True}),
    ("stack 0 + 1 decoder warm (4 CPU threads)", {}, {"stack0": True, "decoders": 1}),
    ("stack 0 + 2 decoders warm (4 CPU threads)", {}, {"stack0": True, "decoders": 2}),
    ("stack 0 + 1 decoder warm (1 CPU thread)", {}, {"stack0": True, "decoders": 1, "cpu_threads": 1}),
    ("stack 0 + 1 decoder, 64 data set images decoded", {}, {"stack0": True, "decoders": 1, "decode": 64}),
]

# (key, label, pipeline kwargs, environment, retinanet, batch size); a key ending in "-for"
# iterates as a for loop does (the previous batch still bound while the next is asked for: the
# caller holds two batches then); the others drop each batch before asking for the next
ROWS = [
    ("defaults", "defaults (2.3 GB budget)", {}, {}, False, 64),
    ("defaults-for", "defaults, for-loop idiom (previous batch bound during next())", {}, {}, False, 64),
    ("1x2", "decode_processes=1 (2 threads)", {"decode_processes": 1}, {}, False, 64),
    ("1x3", "decode_processes=1, 3 threads", {"decode_processes": 1}, {"DETAUG_DECODE_THREADS": "3"}, False, 64),
    ("1x4", "decode_processes=1, 4 threads", {"decode_processes": 1}, {"DETAUG_DECODE_THREADS": "4"}, False, 64),
    ("2x1", "decode_processes=2, 1 thread", {"decode_processes": 2}, {"DETAUG_DECODE_THREADS": "1"}, False, 64),
    ("0", "decode_processes=0 (decode in device threads)", {"decode_processes": 0}, {}, False, 64),
    ("retinanet16", "RetinaNet input, batch 16, defaults", {}, {}, True, 16),
    ("retinanet16-for", "RetinaNet input, batch 16, for-loop idiom", {}, {}, True, 16),
]

# the seg rows: seg-MODE-WAY, WAY 'run' (pipe.run() alone) or 'torch' (through DetaugIterator's
# list targets); a key ending in "-for" keeps the previous batch bound while asking for the next
SEG_WAYS = {"run": "pipe.run() alone", "torch": "DetaugIterator list targets"}
SEG_ROWS = [f"seg-{m}-{w}" for m in gpu_common.SEG_MODES for w in SEG_WAYS]


def _seg_key(key):
    """(mode, way, keep_previous, label) of a seg row's key; ValueError for another key."""
    parts = key.split("-")
    hold = parts[-1] == "for"
    if hold:
        parts = parts[:-1]
    if len(parts) != 3 or parts[0] != "seg" or parts[1] not in gpu_common.SEG_MODES \
            or parts[2] not in SEG_WAYS:
        raise ValueError(f"{key!r} is not a seg row: seg-MODE-WAY[-for], MODE one of "
                         f"{', '.join(gpu_common.SEG_MODES)}, WAY one of {', '.join(SEG_WAYS)}")
    what = {"masks": "masks in the graph", "boxes": "boxes only", "polygons": "polygons" + (
        " (the adapter makes the masks)" if parts[2] == "torch" else " (no masks)")}[parts[1]]
    label = f"seg {what}, {SEG_WAYS[parts[2]]}" + (", for-loop idiom" if hold else "")
    return parts[1], parts[2], hold, label


def _free():
    import cupy as cp

    return int(cp.cuda.runtime.memGetInfo()[0])


# the stream-ordered pool's high marks (cudaMemPoolAttr ReservedMemHigh, UsedMemHigh): what it
# reserved and had in use at most since they were reset (cupy keeps what it reserved: the first
# exceeds the second by what the pool holds beyond its peak in use)
_RESERVED_HIGH, _USED_HIGH = 6, 8


def _pool_highs(device_id=0, reset=False):
    """(reserved high, used high) of the device's current stream-ordered pool, in bytes (reset
    to now where ``reset``); None where the device threads use cupy's default pool."""
    import cupy as cp

    if device_pool(device_id) is cp.get_default_memory_pool():
        return None
    rt = cp.cuda.runtime
    h = rt.deviceGetMemPool(device_id)
    if reset:
        rt.memPoolSetAttribute(h, _RESERVED_HIGH, 0)
        rt.memPoolSetAttribute(h, _USED_HIGH, 0)
    return int(rt.memPoolGetAttribute(h, _RESERVED_HIGH)), int(rt.memPoolGetAttribute(h, _USED_HIGH))


# ---- children ---------------------------------------------------------------------------------

def child_context(spec, data):  # pragma: no cover - GPU
    import cupy as cp

    rt = cp.cuda.runtime
    cp.cuda.Device(0).use()
    rt.free(0)
    if spec.get("stack0"):
        rt.deviceSetLimit(getattr(rt, "cudaLimitStackSize", 0), 0)
    if spec.get("small_limits"):  # before any kernel runs (the heap is fixed at the first)
        rt.deviceSetLimit(getattr(rt, "cudaLimitMallocHeapSize", 2), 1 << 20)
        rt.deviceSetLimit(getattr(rt, "cudaLimitPrintfFifoSize", 1), 64 << 10)
    cp.zeros(1).sum()  # a kernel module loaded, as any process that runs one
    keep = []
    if spec.get("decoders"):
        from nvidia import nvimgcodec

        from detaug.ops.gpu_decode import decode_params, warm_up

        for _ in range(spec["decoders"]):
            keep.append(warm_up(nvimgcodec.Decoder(device_id=0, max_num_cpu_threads=spec.get(
                "cpu_threads", 4)), 0))
        if spec.get("decode"):
            folder = os.path.join(data, "images")
            names = sorted(os.listdir(folder))[: spec["decode"]]
            blobs = [open(os.path.join(folder, n), "rb").read() for n in names]
            s = cp.cuda.Stream(non_blocking=True)
            out = keep[0].decode([nvimgcodec.CodeStream(b) for b in blobs],
                                 params=decode_params("RGB"), cuda_stream=s.ptr)
            s.synchronize()
            del out
    free_cached(0)
    rt.deviceSynchronize()
    print("READY", flush=True)
    sys.stdin.readline()


def child_pipeline(row, data, seconds):  # pragma: no cover - GPU
    import cupy as cp

    import bench_gpu

    key, label, kwargs, env, retinanet, bs = next(r for r in ROWS if r[0] == row)
    cp.cuda.Device(0).use()
    cp.zeros(1).sum()
    cp.cuda.runtime.deviceSynchronize()
    f0 = _free()
    res = {"row": key, "label": label}
    t = time.perf_counter()
    pipe = bench_gpu.make_det_pipe(data, "mixed", retinanet, batch_size=bs, device_id=0, seed=0,
                                   **kwargs)
    if not _built(pipe, res, f0, t):
        return

    def get():
        return gpu_common.next_batch(pipe)

    out = get()
    cp.cuda.runtime.deviceSynchronize()
    res["after_first"] = f0 - _free()
    del out
    for _ in range(pipe.prefetch_queue_depth + 3):
        del_out = get()
        del del_out
    cp.cuda.runtime.deviceSynchronize()
    lowest, n, k = _free(), 0, 0
    keep_previous = key.endswith("-for")
    out = None
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        if keep_previous:
            out = get()  # (the previous batch is let go only once this returns)
        else:
            out = None
            out = get()
        n += bs
        k += 1
        if k % 4 == 0:
            lowest = min(lowest, _free())
    del out
    cp.cuda.runtime.deviceSynchronize()
    el = time.perf_counter() - t0
    lowest = min(lowest, _free())
    res.update(img_s=n / el, batches=k, drop=f0 - lowest, env=env, kwargs=kwargs,
               **_plan_figures(pipe, True))
    pipe.close()
    print("RESULT " + json.dumps(res), flush=True)


def _built(pipe, res, f0=None, t=None, build=None) -> bool:
    """``pipe`` built (by ``build()`` where given: an iterator that builds it), into the row
    ``res``: ``build_s`` (from ``t``, else from now) and, given ``f0`` (the free device bytes
    before), ``after_build``. False where the build is refused (a BudgetError: the refusal is
    the row's result, printed)."""
    t = time.perf_counter() if t is None else t
    try:
        (build or pipe.build)()
    except ValueError as e:
        res["error"] = str(e)[:300]
        print("RESULT " + json.dumps(res), flush=True)
        return False
    res["build_s"] = time.perf_counter() - t
    if f0 is not None:
        import cupy as cp

        cp.cuda.runtime.deviceSynchronize()
        res["after_build"] = f0 - _free()
    return True


def _plan_figures(pipe, gpu):
    """The device threads' pool (total, in use) and the pipeline's plan: the hold's peak, the
    output slots, one launch's outputs, the decode side planned and the decode processes."""
    plan = pipe.memory_plan
    svc = pipe._decode_service
    pool = device_pool(pipe.device_id or 0) if gpu else None
    return dict(pool_total=pool.total_bytes() if gpu else None,
                pool_used=pool.used_bytes() if gpu else None, hold_peak=pipe._handout.held.peak,
                output_slots=pipe.output_slots, output_slots_peak=pipe.output_slots_peak,
                launch_out=pipe._output_budget.launch_bytes, plan=plan.describe() if plan else None,
                planned_decode=pipe.build_plan.decode_bytes, budget=pipe.device_memory_budget,
                processes=len(svc.workers) if svc is not None else 0,
                threads=svc.threads if svc is not None else 0, ring=plan.ring_bytes if plan else 0)


def child_seg(key, args):  # pragma: no cover - GPU (--device cpu: no device figures)
    """One seg row (``_seg_key``) in this process: RESULT json on stdout."""
    mode, way, keep_previous, label = _seg_key(key)
    gpu = args.device == "gpu"
    res = {"row": key, "label": label, "device": args.device}
    f0 = lowest = None
    if gpu:
        import cupy as cp

        cp.cuda.Device(0).use()
        cp.zeros(1).sum()
        cp.cuda.runtime.deviceSynchronize()
        f0 = _free()
    if way == "torch":
        import torch

        from detaug.adapters.torch import DetaugIterator

        if gpu:  # torch's own context (its kernels, its allocator): counted in the drop, and apart
            torch.ones(1, device="cuda").add_(1)
            torch.cuda.synchronize()
            res["torch_context"] = f0 - _free()
    pipe = gpu_common.make_seg_pipe(args.seg_data, args.device, mode, args.batch_size,
                                    args.seg_size)
    made = []  # the adapter rows' iterator: it builds the pipeline, declaring what it takes
    build = (lambda: made.append(DetaugIterator(  # noqa: E731
        pipe, output_map=["images", "targets"], boxes_format="list", auto_reset=True))) \
        if way == "torch" else None
    if not _built(pipe, res, f0 if gpu else None, build=build):
        return
    stats = {"images": 0, "instances": 0}
    if way == "torch":
        it = made[0]
        res["adapter_share"] = pipe.build_plan.reserved  # (set aside from the budget)

        def get():
            return gpu_common.next_targets(it, stats)
    else:
        def get():
            return gpu_common.next_batch(pipe)

    def low():  # the lowest free bytes so far (GPU)
        return min(lowest, _free()) if gpu else None

    if gpu:
        lowest = _free()
    out = get()
    if gpu:
        cp.cuda.runtime.deviceSynchronize()
        lowest = low()
        res["after_first"] = f0 - lowest
    out = None
    for _ in range(pipe.prefetch_queue_depth + 3):
        out = get()
        out = None
        lowest = low()
    if gpu:
        _pool_highs(pipe.device_id or 0, reset=True)  # the timed window's own high marks
    n = k = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < args.seconds:
        if not keep_previous:
            out = None
        out = get()  # (with keep_previous the previous batch is let go once this returns)
        n += args.batch_size
        k += 1
        lowest = low()
    del out
    if gpu:
        cp.cuda.runtime.deviceSynchronize()
        lowest = low()
    el = time.perf_counter() - t0
    res.update(img_s=n / el, batches=k, mode=mode, way=way,
               boxes_per_image=stats["instances"] / stats["images"] if stats["images"] else None,
               drop=f0 - lowest if gpu else None, **_plan_figures(pipe, gpu))
    if gpu:
        cpool = cp.get_default_memory_pool()  # the caller's cupy allocations (adapter's masks)
        res.update(cupy_pool_total=cpool.total_bytes(), cupy_pool_used=cpool.used_bytes(),
                   pool_highs=_pool_highs(pipe.device_id or 0))
        if way == "torch":
            res.update(torch_reserved=torch.cuda.memory_reserved(),
                       torch_reserved_peak=torch.cuda.max_memory_reserved(),
                       torch_allocated_peak=torch.cuda.max_memory_allocated())
    pipe.close()
    print("RESULT " + json.dumps(res), flush=True)


# ---- the observer -----------------------------------------------------------------------------

def _env(extra):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), HERE,
                                                       os.environ.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


def measure_contexts(data, args):
    import cupy as cp

    cp.cuda.Device(0).use()
    cp.zeros(1).sum()
    rows = []
    for name, env, spec in CONTEXTS:
        cp.cuda.runtime.deviceSynchronize()
        before = _free()
        p = subprocess.Popen([sys.executable, __file__, "--child-context", json.dumps(spec),
                              "--data", data], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env=_env(env))
        try:
            line = ""
            t = time.perf_counter()
            while "READY" not in line and time.perf_counter() - t < 60:
                line = p.stdout.readline()
                if not line and p.poll() is not None:
                    break
            drop = before - _free() if "READY" in line else None
            p.stdin.write("\n")
            p.stdin.flush()
            p.wait(30)
        finally:
            if p.poll() is None:
                p.kill()
        rows.append({"name": name, "drop": drop})
        print(f"| {name} | " + (f"{drop / MB:,.0f}" if drop is not None else "failed") + " |",
              flush=True)
    return rows


def measure_rows(keys, args, seg=False):
    """Each row in a child process of its own (``--child-pipeline`` / ``--child-seg``): its
    RESULT, or the child's last line as the error; a table line each."""
    rows = []
    for key in keys:
        cmd = [sys.executable, __file__, "--seconds", str(args.seconds)] + (
            ["--child-seg", key, "--seg-data", args.seg_data, "--device", args.device,
             "--batch-size", str(args.batch_size), "--seg-size", str(args.seg_size)] if seg
            else ["--child-pipeline", key, "--data", args.data])
        env = {} if seg else next(r for r in ROWS if r[0] == key)[3]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(env),
                                  timeout=args.seconds + (120 if seg else 90))
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            res = json.loads(lines[-1][7:]) if lines else {
                "row": key, "error": (proc.stderr or proc.stdout).strip().splitlines()[-1:]}
        except subprocess.TimeoutExpired:
            res = {"row": key, "error": "timed out"}
        rows.append(res)
        print((_seg_line if seg else _row_line)(res), flush=True)
    return rows


def _seg_line(r):
    if r.get("error"):
        return f"| {r.get('label', r['row'])} | error: {r['error']} |"
    torch_part = ((r.get("torch_reserved_peak") or 0) + (r.get("torch_context") or 0)
                  if "torch_reserved" in r else 0)
    other = (r["drop"] - r["pool_total"] - r["cupy_pool_total"] - torch_part
             if r["drop"] is not None else None)
    torch_cols = (f"{_mb(r['torch_context'])} | {_mb(r['torch_reserved'])} "
                  f"({_mb(r['torch_reserved_peak'])}) / {_mb(r['torch_allocated_peak'])}"
                  if "torch_reserved" in r else "- | -")
    per = f"{r['boxes_per_image']:.1f}" if r.get("boxes_per_image") is not None else "-"
    share = f" ({_mb(r['adapter_share'])} set aside)" if r.get("adapter_share") else ""
    highs = r.get("pool_highs")
    highs = f" (high {_mb(highs[0])} / {_mb(highs[1])})" if highs else ""
    return (f"| {r['label']} | {r['img_s']:,.0f} | {_mb(r['drop'])} | {_mb(r['budget'])}{share} | "
            f"{_mb(r.get('after_build'))} | {_mb(r['pool_total'])} / {_mb(r['pool_used'])}{highs} | "
            f"{_mb(r.get('cupy_pool_total'))} / {_mb(r.get('cupy_pool_used'))} | {torch_cols} | "
            f"{_mb(other)} ({r['processes']} x {r['threads']}, ring {_mb(r['ring'])}) | "
            f"{_mb(r['launch_out'])} | {r['output_slots']} (peak {r['output_slots_peak']}), "
            f"hold peak {r['hold_peak']} | {_mb(r['planned_decode'])} | {per} |")


def _seg_shares(rows):
    """Per mode: the adapter's row's drop less the run-alone row's (the same hold)."""
    by = {(r.get("mode"), r.get("way"), r["row"].endswith("-for")): r for r in rows
          if r.get("drop") is not None}
    out = []
    for mode in gpu_common.SEG_MODES:
        for hold in (False, True):
            a, b = by.get((mode, "torch", hold)), by.get((mode, "run", hold))
            if a and b:
                out.append(f"{mode}{' (for-loop idiom)' if hold else ''} "
                           f"{(a['drop'] - b['drop']) / MB:+,.0f} MB")
    return out


def _mb(v):
    return "-" if v is None else f"{v / MB:,.0f}"


def _row_line(r):
    if r.get("error"):
        return f"| {r.get('label', r['row'])} | error: {r['error']} |"
    decode = r["drop"] - r["pool_total"]
    per = decode / r["processes"] if r["processes"] else None
    return (f"| {r['label']} | {r['img_s']:,.0f} | {_mb(r['drop'])} | {_mb(r['after_build'])} | "
            f"{_mb(decode)} ({r['processes']} x {r['threads']}, ring {_mb(r['ring'])}, "
            f"per process {_mb(per)}) | {_mb(r['pool_total'])} / {_mb(r['pool_used'])} | "
            f"{_mb(r['launch_out'])} | {r['output_slots']} (peak {r['output_slots_peak']}), "
            f"hold peak {r['hold_peak']} | {_mb(r['planned_decode'])} |")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="bench_memory.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/bench_data", help="data set folder (made if missing)")
    ap.add_argument("--num-images", type=int, default=1024)
    ap.add_argument("--seconds", type=float, default=8.0, help="timed window of each pipeline row")
    ap.add_argument("--only", default="contexts,pipelines",
                    help="parts: contexts, pipelines, seg (not a default)")
    ap.add_argument("--rows", default=None, help="rows of pipelines and seg, comma-separated keys: "
                    + ",".join(r[0] for r in ROWS) + "; " + ",".join(SEG_ROWS) + " (+ '-for')")
    ap.add_argument("--seg-data", default="/tmp/seg_data", help="seg: data set (made if missing)")
    ap.add_argument("--seg-images", type=int, default=512, help="seg: images of the data set")
    ap.add_argument("--seg-size", type=int, default=1024, help="seg: the canvas")
    ap.add_argument("--batch-size", type=int, default=16, help="seg: batch size")
    ap.add_argument("--device", default="gpu", choices=("gpu", "cpu"),
                    help="seg: cpu runs its rows on the CPU (a smoke run, no device figures)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--child-context", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-pipeline", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-seg", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child_context:
        return child_context(json.loads(args.child_context), args.data)
    if args.child_pipeline:
        return child_pipeline(args.child_pipeline, args.data, args.seconds)
    if args.child_seg:
        return child_seg(args.child_seg, args)
    import bench_gpu

    parts = args.only.split(",")
    if set(parts) - {"contexts", "pipelines", "seg"}:
        ap.error(f"--only {args.only}: parts are contexts, pipelines, seg")
    keys = args.rows.split(",") if args.rows else None
    for key in keys or ():
        if key not in [r[0] for r in ROWS]:
            try:
                _seg_key(key)
            except ValueError as e:
                ap.error(f"--rows: {e}")
    if args.device == "cpu" and parts != ["seg"]:
        ap.error("--device cpu: only the seg rows run on the CPU (--only seg)")
    if {"contexts", "pipelines"} & set(parts):
        bench_gpu.make_dataset(args.data, args.num_images, os.cpu_count() or 1)
    result = {"seconds": args.seconds, "num_images": args.num_images}
    if "pipelines" in parts:  # first: its children start before this process holds a context
        print("| pipeline | img/s | device MB | after build | decode side (procs x threads) | "
              "device pool total / used | launch outputs | output slots, hold | planned decode |")
        print("|---|---:|---:|---:|---|---|---:|---|---:|")
        result["pipelines"] = measure_rows([k for k in keys if not k.startswith("seg-")] if keys
                                           else [r[0] for r in ROWS], args)
        ok = [r for r in result["pipelines"] if r.get("img_s")]
        if len(ok) > 1:  # the baseline measured in this run: the first row (the defaults)
            print(f"\nimg/s against {ok[0]['label']} (this run): " + "; ".join(
                f"{r['label']} {r['img_s'] / ok[0]['img_s']:.2f}x" for r in ok[1:]))
    if "seg" in parts:  # before this process holds a context, as the pipelines
        gpu_common.make_seg_dataset(args.seg_data, args.seg_images, os.cpu_count() or 1)
        print(f"\n| seg row ({args.seg_size} px, batch {args.batch_size}, {args.device}) | img/s | "
              "device MB | budget (the adapter's share set aside) | after build | device pool total / used "
              "(its high marks in the timed window) | caller's cupy pool "
              "total / used | torch context | torch reserved (peak) / peak allocated | other: "
              "decode side (procs x threads, ring) | launch outputs | output slots, hold | "
              "planned decode | boxes/img |")
        print("|---|---:|---:|---:|---:|---|---|---:|---|---|---:|---|---:|---:|")
        result["seg"] = measure_rows([k for k in keys if k.startswith("seg-")] if keys
                                     else SEG_ROWS, args, seg=True)
        shares = _seg_shares(result["seg"])
        if shares:
            print("\nthe adapter's share (its row's device MB less pipe.run() alone's): "
                  + "; ".join(shares))
    if "contexts" in parts:
        print("\n| context variant (one process) | device MB |\n|---|---:|")
        result["contexts"] = measure_contexts(args.data, args)
    path = args.json or (os.path.join(os.environ["OUT"], "bench_memory.json")
                         if os.environ.get("OUT") else None)
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
    return 0


def soak(argv=None):
    """The soak (``bench_memory.py soak ...``): the bench_gpu pipeline run for --batches batches
    across epochs; device memory (pipeline and decode processes, whole device) and the device threads' pool at
    batch --mark and at the last batch; img/s over the batches after the mark. One markdown row;
    $OUT/bench_soak.json when OUT is set."""
    import bench_gpu as bg

    ap = argparse.ArgumentParser(prog="bench_memory.py soak", description="soak of the GPU pipeline")
    ap.add_argument("--data", required=True)
    ap.add_argument("--batches", type=int, default=20000)
    ap.add_argument("--mark", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--max-seconds", type=float, default=240.0)
    ap.add_argument("--pipe-kwargs", default="{}")
    args = ap.parse_args(argv)
    import cupy as cp

    cp.cuda.Device(0).use()
    bg.free_gpu_memory()
    before = bg.device_free_bytes()
    pool = device_pool(0)
    pipe = bg.make_det_pipe(args.data, "mixed", batch_size=args.batch_size,
                            num_threads=os.cpu_count(), device_id=0, seed=0,
                            **json.loads(args.pipe_kwargs))
    pipe.build()
    marks, k, t_mark = {}, 0, None
    t0 = time.perf_counter()
    while k < args.batches and time.perf_counter() - t0 < args.max_seconds:
        out = pipe.run()  # a reader's run() goes round into the next epoch
        k += 1
        if k == args.mark:
            cp.cuda.runtime.deviceSynchronize()
            t_mark = time.perf_counter()
            marks["mark"] = (before - bg.device_free_bytes(), pool.total_bytes(), pool.used_bytes())
    cp.cuda.runtime.deviceSynchronize()
    t_end = time.perf_counter()
    marks["end"] = (before - bg.device_free_bytes(), pool.total_bytes(), pool.used_bytes())
    del out
    rate = (k - args.mark) * args.batch_size / (t_end - t_mark) if t_mark else float("nan")
    slots = getattr(pipe._executor, "slots", None)
    res = {"batches": k, "img_s_after_mark": rate, "settings": bg.pipe_settings(pipe),
           "memory_plan": pipe.memory_plan.describe() if pipe.memory_plan else None,
           "output_slots": pipe.output_slots, "slots_peak": getattr(slots, "peak", None),
           "launch_output_MB": (pipe._output_budget.launch_bytes or 0) / 1e6,
           "device_MB": {m: v[0] / 1e6 for m, v in marks.items()},
           "pool_total_MB": {m: v[1] / 1e6 for m, v in marks.items()},
           "pipe_kwargs": json.loads(args.pipe_kwargs)}
    pipe.close()
    mk, end = res["device_MB"].get("mark", float("nan")), res["device_MB"]["end"]
    print("| soak | batches | img/s after batch %d | device MB at %d | device MB at end | growth MB "
          "| pool MB (mark / end) | plan |" % (args.mark, args.mark))
    print("|---|---:|---:|---:|---:|---:|---|---|")
    print(f"| {args.pipe_kwargs} | {k} | {rate:,.0f} | {mk:,.0f} | {end:,.0f} | {end - mk:+,.0f} "
          f"| {res['pool_total_MB'].get('mark', 0):,.0f} / {res['pool_total_MB']['end']:,.0f} "
          f"| {res['memory_plan']}; output slots {res['output_slots']} (peak {res['slots_peak']}), "
          f"launch output {res['launch_output_MB']:,.0f} MB |")
    bg.write_json(res, None, "bench_soak.json")



if __name__ == "__main__":
    if sys.argv[1:2] == ["soak"]:
        sys.exit(soak(sys.argv[2:]))
    sys.exit(main())

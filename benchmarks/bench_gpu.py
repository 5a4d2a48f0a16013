"""GPU throughput of one detection pipeline: detaug vs nvImageCodec's decode ceiling,
torchvision.transforms.v2 (GPU, and a CPU DataLoader) and kornia; plus the fused warp alone.

    python benchmarks/bench_gpu.py [--num-images 1024] [--batch-size 64] [--only ...] [--json F]
    python benchmarks/bench_gpu.py --cpu-smoke      # plumbing test on a machine without a GPU
    python benchmarks/bench_gpu.py --seg [--cpu-smoke]   # the instance-segmentation recipe

``--seg`` (gpu_common.run_seg): COCO-like JPEGs with polygons, large-scale jitter (0.1-2.0 of
``--seg-size`` 1024, crop and pad to it) + flip, masks from the polygons at the output
(``fn.instance_masks``), batch 16, as the torch adapter's list targets: detaug with masks, with
the polygons rasterised by the adapter instead, boxes only; torchvision v2 (``ScaleJitter`` +
``RandomCrop(pad_if_needed)`` + flip, pycocotools masks per image) in a DataLoader of
``--seg-workers`` (15); detaug's rows ``--seg-passes`` (2) times alternated, the best in the
ratios (a fresh process's first row pays first compiles and cold caches); a short table.

The pipeline, per image: decode JPEG -> random IoU crop (SSD) -> random horizontal flip ->
resize to 640x640 -> drop boxes under 1 px -> normalize to float32 CHW; batches of 64.

Sections (each in its own try/except: one failure never loses the others; each bounded in time):

1. data: ``--num-images`` COCO-like JPEGs (about 640x480: 600-660 x 440-500, Pillow quality
   85-95, 4:2:0) made from the repository's sample images, with a COCO annotations.json
   (3-10 random boxes each, the 80 COCO categories with their non-contiguous ids).
2. detaug: ``fn.readers.coco`` -> ``fn.decoders.image(device="mixed")`` (nvImageCodec) ->
   random_iou_crop -> flip(coin_flip) -> resize(640, 640) -> prune_boxes(min_size=1) ->
   normalize(CHW) + pad_boxes(max_boxes=64); timed across epochs (``pipe.reset()`` at each end), GPU
   synchronised at the end. Also: CPU time of the driving thread per batch (``time.thread_time()``
   around ``run()``), the in-epoch rate (epoch ends drain the queue), and the device memory of the
   pipeline with its decode processes: the drop of ``cudaMemGetInfo``'s free bytes (the whole
   device, every process), sampled in this process, from before the pipeline is built to after
   ``--mem-batches`` batches (300; warm-up batches count), in MB of 10^6 bytes.
3. peers: (a) nvImageCodec's batched decode alone on the same bytes (preloaded): the one-process
   ceiling; (a'') the machine's decode ceiling: the same work (same decoder settings, batches of
   64) in P spawned processes at once (``--ceiling-processes 1,2,3,4``), each decoding its own
   in-memory copy of the files, started together by a barrier, each timed over the same
   ``--ceiling-window`` seconds; img/s summed over the P processes;
   (a') the same + ``cupy.asarray`` of each image (what detaug's decode op does: shows the cost
   of that hand-over); (b) torchvision v2 on the GPU (batched ``decode_jpeg(device="cuda")``, then
   per-sample transforms on cuda tensors); (c) torchvision v2 in a DataLoader with
   ``cpu_count - 1`` workers (CPU decode, batch 64 collate); (d) kornia 0.9: batched GPU decode,
   per-sample resize to 640x640, stack, ``AugmentationSequential(RandomResizedCrop, flip,
   Normalize)`` with padded boxes; (e) DALI 2.4 (``gpu_peers.make_dali_pipe``) at each
   configuration of ``--dali-configs``, each in a fresh process (bench_startup's steady child),
   and the best of them. (b) and (d) read bytes preloaded in memory (file reading is not counted
   for them; detaug, (c) and (e) read the files). (c) at each of ``--tv-workers``, and with
   ``--tv-to-gpu`` also pinned and copied to the GPU.
4. warp: one batch of decoded images already on the GPU; detaug's fused warp
   (``detaug.kernels.warp.warp_cupy``: crop + flip + resize + normalize + CHW in one launch),
   200 calls timed with CUDA events, and the same calls with the stream's queue pre-filled
   (kernel time without host gaps); bandwidth vs a 1 GiB device-to-device copy.
5. a table (name, img/s, detaug / engine, device memory (MB), notes), device, CPU count,
   versions, detaug against the two ceilings and its memory; JSON to ``--json`` or
   ``$OUT/bench_gpu.json``.

The CUDA peers and the CPU DataLoader run first/last so that DataLoader workers are forked
before this process initialises CUDA. This script is not part of the test suite. Its parts:
``gpu_common.py`` (data set, timing, rows), ``gpu_ceilings.py`` (decode ceilings, the warp alone),
``gpu_peers.py`` (torchvision v2, kornia, DALI); this file holds the detaug rows, the report and main.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback

from gpu_common import (EXTRA, MB, MEAN, ROWS, SIZE, STD, T_START, _version, build_within_budget,
    device_free_bytes, free_gpu_memory, gpu_available, load_records, log, make_dataset, over_budget, preload_nvjpeg,
    run_seg, section, skip, tree_cpu_seconds)
from gpu_ceilings import (OUTPUT_KINDS, _outputs_label, bench_decode_ceiling,
    bench_decode_ceiling_mp, bench_warp)
from gpu_peers import (DALI_CONFIGS, bench_dali, bench_kornia, bench_tv_cpu, bench_tv_gpu, best_row,
                       parse_dali_configs)

# the names the other benchmarks take from bench_gpu (bench_cpu, bench_train, bench_ddp, bench_memory's soak)
# and .ci/device_setup.sh (make_dataset)
from gpu_common import REPO  # noqa: E402,F401
from gpu_peers import TVFileDataset, _tv_collate  # noqa: E402,F401


def make_det_pipe(root, decode_device, retinanet=False, max_boxes=64, targets=True, size=None,
                  dtype="float32", **pipe_kwargs):
    """The benchmark pipeline on the data set at ``root`` (images/, annotations.json): readers.coco
    -> decode -> random_iou_crop -> flip (-> rotate) -> resize (``size`` x ``size``, default
    SIZE) -> prune -> normalize CHW (``dtype``), boxes padded (to the batch's largest count with
    max_boxes=None) (-> RetinaNet targets). One definition for bench_gpu, bench_cpu, bench_train
    and the profiling scripts."""
    from detaug import fn, pipeline_def

    size = SIZE if size is None else int(size)

    @pipeline_def
    def det_pipe():
        enc, boxes = fn.readers.coco(file_root=os.path.join(root, "images"),
                                     annotations_file=os.path.join(root, "annotations.json"),
                                     random_shuffle=True)
        img = fn.decoders.image(enc, device=decode_device)
        img, boxes = fn.random_iou_crop(img, boxes)
        img, boxes = fn.flip(img, boxes, horizontal=fn.random.coin_flip())
        if retinanet:  # the RetinaNet input pipeline: plus rotate and target encoding
            img, boxes = fn.rotate(img, boxes, angle=fn.random.uniform(range=(-10, 10)))
        img, boxes = fn.resize(img, boxes, size=(size, size))
        boxes = fn.prune_boxes(boxes, min_size=1)
        img = fn.normalize(img, mean=list(MEAN), std=list(STD), output_layout="CHW", dtype=dtype)
        if retinanet and targets:  # (targets=False: the RetinaNet pipeline without its targets)
            reg, cls = fn.retinanet_encode(boxes, num_classes=80)
            return img, fn.pad_boxes(boxes, max_boxes=max_boxes), reg, cls
        return img, fn.pad_boxes(boxes, max_boxes=max_boxes)

    return det_pipe(**pipe_kwargs)


def pipe_settings(pipe) -> dict:
    """What a built pipeline runs with (its defaults resolved): launches in flight, device
    workers, batches per launch, decode processes."""
    svc = getattr(pipe, "_decode_service", None)
    return {"prefetch_queue_depth": getattr(pipe, "prefetch_queue_depth", None),
            "device_workers": getattr(pipe, "device_workers", None),
            "batches_per_launch": getattr(pipe, "batches_per_launch", None),
            "decode_processes": len(getattr(svc, "workers", ())) if svc is not None else 0}


def bench_detaug(args, root, gpu, retinanet=False):
    bs = args.batch_size
    mem = {"before": None, "at": None, "end": None}  # free device bytes (GPU runs)
    if gpu:
        free_gpu_memory()
        mem["before"] = device_free_bytes()
    kwargs = dict(batch_size=bs, num_threads=args.threads, device_id=0 if gpu else None, seed=0,
                  prefetch_queue_depth=args.prefetch, batches_per_launch=args.batches_per_launch,
                  device_workers=args.device_workers, decode_processes=args.decode_processes)
    kwargs.update(json.loads(args.pipe_kwargs))  # (--pipe-kwargs wins)
    pipe, refused, build_s = build_within_budget(
        lambda budget: make_det_pipe(root, "mixed" if gpu else "cpu", retinanet,
                                     targets=args.retinanet_targets, dtype=args.dtype,
                                     **(kwargs if budget is None
                                        else dict(kwargs, device_memory_budget=budget))),
        explicit="device_memory_budget" in kwargs, say=lambda m: log("detaug: " + m))
    settings = pipe_settings(pipe)
    n_rec = pipe.epoch_size() if not isinstance(pipe.epoch_size(), dict) else None
    if gpu:
        import cupy

        sync = cupy.cuda.runtime.deviceSynchronize
    else:
        def sync():
            return None

    st = {"thread": 0.0, "epoch": 0, "stamps": [], "runs": 0}

    def get():
        t = time.thread_time()
        try:
            out = pipe.run()
        except StopIteration:
            pipe.reset()
            st["epoch"] += 1
            out = pipe.run()
        if retinanet and gpu and args.retinanet_torch:  # hand the outputs to torch, on the GPU, without copies
            import cupy
            import torch

            cupy.cuda.runtime.streamWaitEvent(torch.cuda.current_stream().cuda_stream,
                                              pipe.last_event.ptr, 0)
            out = (torch.from_dlpack(out[0].data), out[1]) + tuple(torch.from_dlpack(o) for o in out[2:])
        st["thread"] += time.thread_time() - t
        st["runs"] += 1
        if gpu and st["runs"] == args.mem_batches:  # the pipeline's memory after N batches
            mem["at"] = device_free_bytes()
        return out

    def images_of(out):
        img = out[0]
        return getattr(img, "data", img)

    try:
        t0 = time.perf_counter()
        first = get()
        first_s = time.perf_counter() - t0
        data = images_of(first)
        boxes = first[1]
        check = (f"first batch: images {type(data).__module__.split('.')[0]} "
                 f"{tuple(data.shape)} {data.dtype}; boxes {tuple(boxes['boxes'].shape)}, "
                 f"{int(boxes['counts'].sum())} boxes kept; first batch {first_s:.2f} s "
                 f"(build {build_s:.2f} s)")
        log("detaug " + check)
        if tuple(data.shape) != (bs, 3, SIZE, SIZE) or args.dtype not in str(data.dtype):
            raise AssertionError(f"unexpected output {tuple(data.shape)} {data.dtype}")
        del first, data, boxes
        for _ in range(max(0, args.warmup - 1)):
            get()
        sync()
        st["thread"], st["epoch"], st["stamps"] = 0.0, 0, []
        c0, t0, tree0 = os.times(), time.perf_counter(), tree_cpu_seconds()
        n = k = 0
        min_items = args.epochs * (n_rec or 0)
        while True:
            out = get()
            n += images_of(out).shape[0]
            k += 1
            st["stamps"].append((st["epoch"], time.perf_counter()))
            del out
            el = time.perf_counter() - t0
            if (el >= args.min_seconds and n >= min_items) or el >= args.max_seconds:
                break
        sync()
        secs = time.perf_counter() - t0
        c1, tree_s = os.times(), tree_cpu_seconds() - tree0
        if gpu:
            mem["end"] = device_free_bytes()
    finally:
        pipe.close()
    mem_mb = mem_end_mb = left_mb = None
    mem_at = args.mem_batches if mem["at"] is not None else st["runs"]
    if gpu:
        mem_mb = (mem["before"] - (mem["at"] if mem["at"] is not None else mem["end"])) / MB
        mem_end_mb = (mem["before"] - mem["end"]) / MB
        del pipe, get
        free_gpu_memory()
        left_mb = (mem["before"] - device_free_bytes()) / MB
        log(f"detaug: device memory {mem_mb:,.0f} MB after {mem_at} batches (cudaMemGetInfo, "
            f"whole device), {mem_end_mb:,.0f} MB after {st['runs']}; {left_mb:,.0f} MB still "
            "taken after close()")
    cpu_s = (c1.user + c1.system) - (c0.user + c0.system)
    # in-epoch rate: the batches after the first launch of each epoch, over the time since that
    # launch's batches arrived (the k batches of a launch arrive together: counting from the
    # first batch alone, as the first version did, overstated the rate for k > 1)
    by_epoch = collections.defaultdict(list)
    for e, t in st["stamps"]:
        by_epoch[e].append(t)
    kk = settings["batches_per_launch"] or 1
    num = sum((len(v) - kk) * bs for v in by_epoch.values() if len(v) > kk)
    den = sum(v[-1] - v[0] for v in by_epoch.values() if len(v) > kk)
    steady = num / den if den > 0 else None
    thread_ms = 1e3 * st["thread"] / max(k, 1)
    name = "detaug (GPU, nvImageCodec)" if gpu else "detaug (CPU backend, smoke)"
    if retinanet:
        name = (f"detaug RetinaNet input (+rotate{', +targets' if args.retinanet_targets else ''}, "
                f"{'torch' if args.retinanet_torch or not gpu else 'cupy'})")
    res = {"name": name,
           "img_s": n / secs, "images": n, "seconds": round(secs, 2), "batches": k,
           "epochs_crossed": st["epoch"], "in_epoch_img_s": steady,
           "driver_thread_ms_per_batch": thread_ms, "cores_busy": cpu_s / secs,
           "tree_cores_busy": tree_s / secs,
           "first_batch_s": round(first_s, 2), "build_s": round(build_s, 2), "check": check,
           "settings": settings, "device_mem_mb": mem_mb, "mem_batches": mem_at,
           "device_mem_end_mb": mem_end_mb, "mem_end_batches": st["runs"],
           "device_mem_after_close_mb": left_mb,
           "notes": f"batch {bs}, {args.threads} threads, prefetch {settings['prefetch_queue_depth']}, {settings['device_workers']} device workers, {settings['batches_per_launch']} batch(es) per launch, {settings['decode_processes']} decode process(es); "
                    f"driver thread {thread_ms:.3f} ms CPU/batch (target < 1); "
                    f"in-epoch {steady or 0:.0f} img/s; {cpu_s / secs:.1f} cores busy "
                    f"({tree_s / secs:.1f} with its worker processes); "
                    f"{st['epoch']} epoch ends crossed" + (f"; {refused}" if refused else "")
                    + (f"; device memory {mem_mb:,.0f} MB after {mem_at} batches, "
                       f"{mem_end_mb:,.0f} MB after {st['runs']}" if gpu else "")}
    log(f"detaug: driving thread {thread_ms:.3f} ms CPU per batch of {bs} "
        f"({'OK' if thread_ms < 1 else 'over'} the 1 ms target); in-epoch rate {steady or 0:.1f} img/s")
    return res


# ---------------------------------------------------------------------------- 3a. decode ceiling
def device_info(gpu):
    info = {"cpu_count": os.cpu_count(), "python": platform.python_version(),
            "machine": f"{platform.machine()} {platform.system()}"}
    if gpu:
        with contextlib.suppress(BaseException):
            import cupy as cp

            p = cp.cuda.runtime.getDeviceProperties(0)
            name = p["name"]
            info["device"] = name.decode() if isinstance(name, bytes) else str(name)
            info["device_mem_gib"] = round(p["totalGlobalMem"] / 2**30, 1)
            info["cuda_runtime"] = cp.cuda.runtime.runtimeGetVersion()
            info["cuda_driver"] = cp.cuda.runtime.driverGetVersion()
    else:
        info["device"] = "none (CPU smoke)"
    vers = {}
    for mod, key in (("detaug", "detaug"), ("numpy", "numpy"), ("cupy", "cupy"),
                     ("nvidia.nvimgcodec", "nvimgcodec"), ("torch", "torch"),
                     ("torchvision", "torchvision"), ("kornia", "kornia"), ("PIL", "Pillow"),
                     ("cv2", "opencv")):
        v = _version(mod)
        if v:
            vers[key] = v
    info["versions"] = vers
    return info


def report(args, info):
    det = next((r for r in ROWS if r["name"].startswith("detaug (") and r.get("img_s")), None)
    d = det["img_s"] if det else None
    print()
    print(f"device: {info.get('device')}; CPU count {info['cpu_count']}; python {info['python']}; "
          + ", ".join(f"{k} {v}" for k, v in info["versions"].items()))
    print(f"batch {args.batch_size}; {args.num_images} images; detaug threads {args.threads}, "
          f"prefetch {args.prefetch or 'default'}")
    print()
    print("| name | img/s | detaug / engine | device memory (MB) | notes |")
    print("|---|---:|---:|---:|---|")
    for r in ROWS:
        if r["name"] == "detaug fused warp alone":
            continue
        rate = r.get("img_s")
        mem = f"{r['device_mem_mb']:,.0f}" if r.get("device_mem_mb") is not None else "-"
        if rate:
            ratio = "1.00x" if r is det else (f"{d / rate:.2f}x" if d else "-")
            note = r.get("notes", "")
            if d and "ceiling" in r["name"]:
                note = f"detaug = {100 * d / rate:.1f}% of this; " + note
                if det.get("in_epoch_img_s"):
                    note += f"; in-epoch detaug = {100 * det['in_epoch_img_s'] / rate:.1f}%"
            print(f"| {r['name']} | {rate:.1f} | {ratio} | {mem} | {note} |")
        else:
            why = r.get("error") or r.get("skipped") or "no result"
            print(f"| {r['name']} | - | - | - | {'FAILED: ' if r.get('error') else 'skipped: '}{why} |")
    w = next((r for r in ROWS if r["name"] == "detaug fused warp alone"), None)
    if w:
        print()
        if w.get("ms_per_batch"):
            print(f"warp alone (batch {w.get('batch')}): {w['ms_per_batch']:.3f} ms/batch, "
                  f"{w['gb_s']:.1f} GB/s; copy {w.get('copy_gb_s') or 0:.1f} GB/s; "
                  f"ratio {100 * (w.get('ratio') or 0):.1f}% (target >= 50%). {w.get('notes', '')}")
        else:
            print(f"warp alone: {w.get('error') or w.get('skipped')}")
    one = next((r for r in ROWS if r["name"] == "nvImageCodec batched decode (ceiling)"
                and r.get("img_s")), None)
    multi = [r for r in ROWS if r.get("processes") and r["name"].startswith("decode ceiling")
             and r.get("img_s")]
    best = max(multi, key=lambda r: r["img_s"], default=None)
    if one or multi:
        print()
        if one:
            print(f"decode ceiling, one process (this process, one thread): {one['img_s']:,.0f} img/s"
                  + (f"; detaug / it = {d / one['img_s']:.2f}x (target at the defaults: "
                     ">= 1.2x)" if d else ""))
        if multi:
            plus = _outputs_label(next((r["outputs"] for r in multi if r.get("outputs")), None))
            print(f"decode ceiling{plus}, P processes (summed): " + ", ".join(
                f"P={r['processes']} {r['img_s']:,.0f}" for r in multi) + " img/s"
                + (f"; detaug / best (P={best['processes']}) = {d / best['img_s']:.3f} "
                   + ("(a reference: the least a pipeline writing the outputs adds)" if plus
                      else "(target, high-throughput setting: >= 0.90)") if d else ""))
    dali = [r for r in ROWS if r.get("dali_config")]
    top = best_row(dali)
    if top:
        print(f"DALI 2.4, best of {len(dali)} configurations: {top['name']} {top['img_s']:,.0f} img/s"
              + (f" at {top['device_mem_mb']:,.0f} MB" if top.get("device_mem_mb") else "")
              + (f"; detaug / best DALI = {d / top['img_s']:.2f}x (the target: >= 1.5x)"
                 if d else "") + "; all: " + ", ".join(
                     f"{r['dali_config']} {r['img_s']:,.0f}" if r.get("img_s") else
                     f"{r['dali_config']} FAILED" for r in dali))
    if det and det.get("device_mem_mb") is not None:
        print(f"detaug device memory (cudaMemGetInfo drop, whole device, decode processes included): "
              f"{det['device_mem_mb']:,.0f} MB after {det['mem_batches']} batches "
              f"(target at the defaults: <= 2,200 MB); "
              f"{det['device_mem_end_mb']:,.0f} MB after {det['mem_end_batches']}")
    if det:
        print(f"detaug driving thread: {det['driver_thread_ms_per_batch']:.3f} ms CPU per batch "
              f"(target < 1 ms); in-epoch rate {det.get('in_epoch_img_s') or 0:.1f} img/s; "
              f"{det.get('cores_busy', 0):.1f} cores busy")
    print(f"total wall time {time.perf_counter() - T_START:.1f} s")
    out = {"device": info, "args": vars(args), "rows": ROWS, "extra": EXTRA,
           "detaug_img_s": d, "detaug_device_mem_mb": det.get("device_mem_mb") if det else None,
           "decode_ceiling_one_process_img_s": one["img_s"] if one else None,
           "decode_ceiling_processes_img_s": {r["processes"]: r["img_s"] for r in multi
                                              if not r.get("outputs")},
           "decode_ceiling_outputs_processes_img_s": {r["processes"]: r["img_s"] for r in multi
                                                      if r.get("outputs")},
           "total_s": round(time.perf_counter() - T_START, 1)}
    write_json(out, args.json, "bench_gpu.json")


def write_json(out: dict, path, default_name: str):
    """Write a benchmark's results as JSON to ``path``, or to $OUT/``default_name`` when no path
    is given and $OUT is set (the device machine's folder that comes back)."""
    path = path or (os.path.join(os.environ["OUT"], default_name) if os.environ.get("OUT") else None)
    if path:
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, "w") as f:
                json.dump(out, f, indent=1, default=lambda o: o.item() if hasattr(o, "item") else str(o))
            print(f"wrote {path}")
        except OSError as e:
            print(f"could not write {path}: {e}")


# ---------------------------------------------------------------------------- main
ALL = ("tv_cpu", "detaug", "retinanet", "ceiling", "ceiling_asarray", "ceiling_mp", "tv_gpu",
       "kornia", "dali", "warp")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seg", action="store_true", help="the instance-seg recipe (above)")
    ap.add_argument("--seg-size", type=int, help="--seg canvas (1024; 256 smoke)")
    ap.add_argument("--seg-workers", type=int, default=15, help="--seg torchvision workers")
    ap.add_argument("--seg-passes", type=int, default=2, help="--seg detaug rows, alternated (best)")
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="no GPU: small data, detaug on the CPU backend, peers where importable")
    ap.add_argument("--num-images", type=int, default=None, help="default 1024 (128 with --cpu-smoke)")
    ap.add_argument("--batch-size", type=int, default=None, help="default 64 (16 with --cpu-smoke)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="detaug num_threads")
    ap.add_argument("--prefetch", type=int, default=None,
                    help="detaug prefetch_queue_depth (default: the pipeline's, 12 with decode processes)")
    ap.add_argument("--batches-per-launch", type=int, default=None,
                    help="detaug batches_per_launch (default: the pipeline's, 4 on the GPU)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed batches first (detaug, decode)")
    ap.add_argument("--min-seconds", type=float, default=None, help="detaug timed seconds (10)")
    ap.add_argument("--max-seconds", type=float, default=None, help="detaug cap (20)")
    ap.add_argument("--epochs", type=int, default=3, help="detaug timed epochs, at least")
    ap.add_argument("--ceiling-seconds", type=float, default=None, help="decode ceiling seconds (6)")
    ap.add_argument("--ceiling-processes", default="1,2,3,4",
                    help="P of the P-process decode ceiling (comma-separated; '' skips it)")
    ap.add_argument("--ceiling-outputs", nargs="?", const="convert", default=None,
                    choices=sorted(OUTPUT_KINDS),
                    help="the P-process ceiling also writes each batch's outputs (one kernel: batch x "
                         "3 x 640 x 640 float32 from as many uint8), the least GPU work a pipeline "
                         "making them adds to the decode; write32: the float32 writes alone (a "
                         "fill); convert16 / write16: float16 outputs; warp: detaug's own fused "
                         "warp (crop + flip + resize + normalize) of the decoded batch")
    ap.add_argument("--dtype", default="float32", choices=("float32", "float16"),
                    help="the detaug pipeline's image output (normalize's dtype)")
    ap.add_argument("--ceiling-window", type=float, default=5.0,
                    help="timed seconds of each P-process round (the same window in every process)")
    ap.add_argument("--mem-batches", type=int, default=300,
                    help="detaug's device memory is sampled after this many batches (and at the end)")
    ap.add_argument("--peer-seconds", type=float, default=None, help="timed seconds per peer (12)")
    ap.add_argument("--tv-workers", default=str(max(1, (os.cpu_count() or 2) - 1)),
                    help="torchvision DataLoader workers, comma-separated: a row each (cores - 1)")
    ap.add_argument("--tv-to-gpu", action="store_true",
                    help="torchvision DataLoader rows also with pin_memory and each batch copied to "
                         "the GPU (what a user training on the GPU writes)")
    ap.add_argument("--dali-configs", default=DALI_CONFIGS,
                    help="DALI 2.4 rows (section dali, each in a fresh process): comma-separated "
                         "DECODE[:THREADS[:HW_LOAD]], DECODE whole or slice (gpu_peers.parse_dali_config)")
    ap.add_argument("--kornia-decode", choices=("nvimgcodec", "torchvision"), default="nvimgcodec",
                    help="kornia's GPU decode (default nvImageCodec: the same decoder as detaug)")
    ap.add_argument("--warp-iters", type=int, default=200)
    ap.add_argument("--warp-check", action="store_true",
                    help="compare one warped sample with the NumPy twin (slow)")
    ap.add_argument("--only", default=",".join(ALL), help=f"comma-separated subset of {ALL}")
    ap.add_argument("--data", default=None, help="dataset folder (made if missing; default temp)")
    ap.add_argument("--keep-data", action="store_true", help="keep the temporary dataset")
    ap.add_argument("--gen-workers", type=int, default=min(16, os.cpu_count() or 1))
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds after which remaining sections are skipped (220)")
    ap.add_argument("--json", default=None, help="write the table as JSON here "
                    "(default: $OUT/bench_gpu.json when OUT is set)")
    ap.add_argument("--switch-interval", type=float, default=None,
                    help="sys.setswitchinterval (seconds) for this run; Python's default is 0.005")
    ap.add_argument("--device-workers", type=int, default=None, help="detaug device_workers")
    ap.add_argument("--no-retinanet-torch", dest="retinanet_torch", action="store_false",
                    help="RetinaNet row: leave the outputs as cupy arrays (no torch hand-over)")
    ap.add_argument("--no-retinanet-targets", dest="retinanet_targets", action="store_false",
                    help="RetinaNet row without retinanet_encode (rotate kept): what the targets cost")
    ap.add_argument("--decode-cpu-threads", type=int, default=None,
                    help="nvImageCodec CPU threads per decode process (DETAUG_DECODE_CPU_THREADS)")
    ap.add_argument("--decode-processes", type=int, default=None,
                    help="detaug decode_processes (default: the pipeline's, 3; 0 = in-thread decode)")
    ap.add_argument("--pipe-kwargs", default="{}",
                    help="more Pipeline arguments for the detaug rows, as JSON "
                         "(e.g. '{\"device_memory_budget\": 2e9}')")
    args = ap.parse_args(argv)
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)
    smoke = args.cpu_smoke
    dflt = dict(num_images=(128, 1024), batch_size=(16, 64), min_seconds=(2.0, 10.0),
                max_seconds=(6.0, 20.0), ceiling_seconds=(2.0, 6.0), peer_seconds=(3.0, 12.0),
                budget=(600.0, 220.0))
    if args.seg:  # 1024 px, batch 16 (smoke: 256 px, batch 4)
        dflt.update(num_images=(24, 512), batch_size=(4, 16), seg_size=(256, 1024))
    for k, (a, b) in dflt.items():
        if getattr(args, k) is None:
            setattr(args, k, a if smoke else b)
    if smoke:
        args.warp_iters = min(args.warp_iters, 3)
    if args.decode_cpu_threads is not None:  # read by the decode processes (spawned later)
        os.environ["DETAUG_DECODE_CPU_THREADS"] = str(args.decode_cpu_threads)
    try:
        args.ceiling_processes = [int(p) for p in args.ceiling_processes.split(",") if p.strip()]
    except ValueError:
        ap.error(f"--ceiling-processes takes comma-separated integers, not {args.ceiling_processes!r}")
    try:
        args.tv_workers = [int(p) for p in args.tv_workers.split(",") if p.strip()] or [1]
    except ValueError:
        ap.error(f"--tv-workers takes comma-separated integers, not {args.tv_workers!r}")
    try:
        parse_dali_configs(args.dali_configs)
    except ValueError as e:
        ap.error(str(e))
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(only) - set(ALL)
    if unknown:
        ap.error(f"unknown sections {sorted(unknown)}; choose from {ALL}")

    gpu = False if smoke else gpu_available()
    if gpu:
        log(f"libnvjpeg preloaded from: {preload_nvjpeg() or 'not found on sys.path (system one)'}")
    if not smoke and not gpu:
        log("WARNING: no CUDA device visible to cupy; GPU sections will fail (use --cpu-smoke "
            "for a plumbing test)")
    log(f"bench_gpu: {'CPU smoke' if smoke else 'GPU'} run; python {platform.python_version()}; "
        f"{os.cpu_count()} cores; sections {only}")

    tmp = None
    root = args.data
    if root is None:
        tmp = tempfile.mkdtemp(prefix="detaug_bench_gpu_")
        root = args.data = tmp
    recs = blobs = None
    try:
        if args.seg:
            return run_seg(args, smoke, gpu)
        try:
            make_dataset(root, args.num_images, args.gen_workers)
            recs, blobs = load_records(root)
        except BaseException as e:  # noqa: BLE001
            traceback.print_exc()
            log(f"data generation FAILED: {e}; nothing to measure")
            ROWS.append({"name": "data", "img_s": None, "error": str(e)})
            report(args, device_info(gpu))
            return 1

        # (c) first: its DataLoader workers fork before this process touches CUDA
        if "tv_cpu" in only and not over_budget(args, "torchvision v2 DataLoader CPU"):
            if _version("torchvision") is None:
                skip("torchvision v2 DataLoader CPU", "torchvision not importable")
            else:  # a row per worker count, then pinned and copied to the GPU (--tv-to-gpu)
                for w, to_gpu in [(w, False) for w in args.tv_workers] + (
                        [(w, True) for w in args.tv_workers] if args.tv_to_gpu and gpu else []):
                    section("torchvision v2 DataLoader CPU", bench_tv_cpu, args, recs, w, to_gpu)
        if "detaug" in only and not over_budget(args, "detaug"):
            section("detaug (GPU)" if gpu else "detaug (CPU backend, smoke)",
                    bench_detaug, args, root, gpu)
            free_gpu_memory()
        if "retinanet" in only and gpu and not over_budget(args, "retinanet"):
            section("detaug RetinaNet input", bench_detaug, args, root, gpu, True)
            free_gpu_memory()
        for key, name, fn_, a in (
                ("ceiling", "nvImageCodec batched decode (ceiling)", bench_decode_ceiling,
                 (args, blobs)),
                ("ceiling_asarray", "nvImageCodec decode + cupy.asarray (diag.)",
                 lambda *x: bench_decode_ceiling(*x, with_asarray=True), (args, blobs))):
            if key not in only or over_budget(args, name):
                continue
            if not gpu:
                skip(name, "needs a GPU")
            elif _version("nvidia.nvimgcodec") is None:
                skip(name, "nvidia.nvimgcodec not importable")
            else:
                section(name, fn_, *a)
                free_gpu_memory()
        name = "decode ceiling, P processes"
        if "ceiling_mp" in only and args.ceiling_processes and not over_budget(args, name):
            if not gpu:
                skip(name, "needs a GPU")
            elif _version("nvidia.nvimgcodec") is None:
                skip(name, "nvidia.nvimgcodec not importable")
            else:
                section(name, bench_decode_ceiling_mp, args, recs)
        if "tv_gpu" in only and not over_budget(args, "torchvision v2 on GPU"):
            if not gpu:
                skip("torchvision v2 on GPU", "needs a GPU")
            elif _version("torchvision") is None:
                skip("torchvision v2 on GPU", "torchvision not importable")
            else:
                section("torchvision v2 on GPU", bench_tv_gpu, args, recs, blobs)
                free_gpu_memory()
        if "kornia" in only and not over_budget(args, "kornia"):
            if _version("kornia") is None:
                skip("kornia", "kornia not importable")
            else:
                section("kornia", bench_kornia, args, recs, blobs, gpu)
                free_gpu_memory()
        if "dali" in only and not over_budget(args, "DALI 2.4"):
            if not gpu:
                skip("DALI 2.4", "needs a GPU")
            elif _version("nvidia.dali") is None:
                skip("DALI 2.4", "nvidia.dali not importable")
            else:
                section("DALI 2.4", bench_dali, args, root)
        if "warp" in only and not over_budget(args, "detaug fused warp alone"):
            section("detaug fused warp alone", bench_warp, args, blobs, gpu)
            free_gpu_memory()
        report(args, device_info(gpu))
    finally:
        if tmp and not args.keep_data:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

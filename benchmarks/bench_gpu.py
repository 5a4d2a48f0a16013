"""GPU throughput of one detection pipeline: detaug vs nvImageCodec's decode ceiling,
torchvision.transforms.v2 (GPU, and a CPU DataLoader) and kornia; plus the fused warp alone.

    python benchmarks/bench_gpu.py [--num-images 1024] [--batch-size 64] [--only ...] [--json F]
    python benchmarks/bench_gpu.py --cpu-smoke      # plumbing test on a machine without a GPU

The pipeline, per image: decode JPEG -> random IoU crop (SSD) -> random horizontal flip ->
resize to 640x640 -> drop boxes under 1 px -> normalize to float32 CHW; batches of 64.

Sections (each in its own try/except: one failure never loses the others; each bounded in time):

1. data: ``--num-images`` COCO-like JPEGs (about 640x480: 600-660 x 440-500, Pillow quality
   85-95, 4:2:0) made from the repository's sample images, with a COCO annotations.json
   (3-10 random boxes each, the 80 COCO categories with their non-contiguous ids).
2. detaug: ``fn.readers.coco`` -> ``fn.decoders.image(device="mixed")`` (nvImageCodec) ->
   random_iou_crop -> flip(coin_flip) -> resize(640, 640) -> prune_boxes(min_size=1) ->
   normalize(CHW) + pad_boxes(max_boxes=64); timed across epochs (``pipe.reset()`` at each end),
   GPU synchronised at the end. Also: CPU time of the driving thread per batch
   (``time.thread_time()`` around ``run()``), the in-epoch rate (epoch ends drain the queue), and
   the device memory of the pipeline with its decode processes: the drop of ``cudaMemGetInfo``'s
   free bytes (the whole device, every process), sampled in this process, from before the
   pipeline is built to after ``--mem-batches`` batches (300; warm-up batches count), in MB of
   10^6 bytes.
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
   Normalize)`` with padded boxes. (b) and (d) read bytes preloaded in memory (file reading is
   not counted for them; detaug and (c) read the files).
4. warp: one batch of decoded images already on the GPU; detaug's fused warp
   (``detaug.kernels.warp.warp_cupy``: crop + flip + resize + normalize + CHW in one launch),
   200 calls timed with CUDA events, and the same calls with the stream's queue pre-filled
   (kernel time without host gaps); bandwidth vs a 1 GiB device-to-device copy.
5. a table (name, img/s, detaug / engine, device memory (MB), notes), device, CPU count,
   versions, detaug against the two ceilings and its memory; JSON to ``--json`` or
   ``$OUT/bench_gpu.json``.

The CUDA peers and the CPU DataLoader run first/last so that DataLoader workers are forked
before this process initialises CUDA. This script is not part of the test suite.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import glob
import itertools
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback

for _v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)
from detaug.core.backend import gpu_available  # noqa: E402  (imports no GPU library)
from detaug.ops.gpu_decode import decode_params  # noqa: E402  (detaug's own decode settings)
MEAN = (123.675, 116.28, 103.53)  # pixel units (ImageNet mean * 255)
STD = (58.395, 57.12, 57.375)
SIZE = 640
# the benchmark's fused warp: normalize to float32 CHW (bench_warp's case, the ceiling's "warp")
WARP_KW = dict(fill=0.0, mean=MEAN, std=STD, out_dtype=np.float32, layout="CHW")
# The 80 COCO category ids (non-contiguous), used when coco-mini's file cannot be read.
COCO_IDS = [i for i in range(1, 91) if i not in (12, 26, 29, 30, 45, 66, 68, 69, 71, 83)]

MB = 1e6         # device memory is reported in MB of 10^6 bytes
ROWS = []        # table rows: dict(name, img_s, notes, error, ...)
EXTRA = {}       # details for the JSON
T_START = time.perf_counter()


def log(msg):
    print(f"[{time.perf_counter() - T_START:7.1f}s] {msg}", flush=True)


def section(name, func, *a, **kw):
    """Run one measured section; print and record any error, never raise."""
    log(f"--- {name}")
    t0 = time.perf_counter()
    try:
        res = func(*a, **kw)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 -- one failure must not lose the others
        traceback.print_exc()
        err = f"{type(e).__name__}: {e}".strip()[:300]
        log(f"{name}: FAILED ({err})")
        res = {"name": name, "img_s": None, "error": err}
    if res is None:
        return None
    res.setdefault("name", name)
    res["section_s"] = round(time.perf_counter() - t0, 2)
    if res.get("img_s") is not None:
        log(f"{res['name']}: {res['img_s']:.1f} img/s  ({res.get('notes', '')})")
    ROWS.append(res)
    return res


def skip(name, why):
    log(f"{name}: skipped ({why})")
    ROWS.append({"name": name, "img_s": None, "skipped": why})
    return None


def over_budget(args, name):
    spent = time.perf_counter() - T_START
    if spent > args.budget:
        skip(name, f"time budget of {args.budget:.0f} s spent ({spent:.0f} s)")
        return True
    return False


def _version(mod):
    try:
        m = __import__(mod, fromlist=["_"])
        return str(getattr(m, "__version__", "?"))
    except BaseException:  # noqa: BLE001 -- a broken install raises anything
        return None


def preload_nvjpeg():
    """Best effort: load libnvjpeg from a pip wheel on sys.path (nvidia-nvjpeg) before
    nvImageCodec looks for it, in case it is not on the loader's path."""
    import ctypes

    found = []
    for p in sys.path:
        found += glob.glob(os.path.join(p or ".", "nvidia", "**", "libnvjpeg.so*"), recursive=True)
    for f in sorted(found):
        try:
            ctypes.CDLL(f, mode=ctypes.RTLD_GLOBAL)
            return f
        except OSError:
            continue
    return None


def import_nvimgcodec():
    preload_nvjpeg()
    from nvidia import nvimgcodec

    return nvimgcodec


def free_gpu_memory():
    gc.collect()
    with contextlib.suppress(BaseException):
        import cupy

        cupy.cuda.runtime.deviceSynchronize()
        cupy.get_default_memory_pool().free_all_blocks()
        cupy.get_default_pinned_memory_pool().free_all_blocks()
    if "torch" in sys.modules:
        with contextlib.suppress(BaseException):
            import torch

            if torch.cuda.is_initialized():
                torch.cuda.synchronize()
                torch.cuda.empty_cache()


def tree_cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and every live descendant (decode and host
    worker processes), from /proc (Linux; 0 elsewhere)."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    procs = {}
    for d in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    rest = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            procs[int(d)] = (int(rest[1]), (int(rest[11]) + int(rest[12])) / tick)  # ppid, cpu
    mine, todo = set(), [os.getpid()]
    while todo:
        p = todo.pop()
        mine.add(p)
        todo.extend(c for c, (pp, _) in procs.items() if pp == p and c not in mine)
    return sum(procs[p][1] for p in mine if p in procs)


def device_free_bytes(device_id=0):
    """``cudaMemGetInfo``'s free bytes of the device: what every process on it has taken counts
    (an allocator's cache included). Needs cupy and a GPU."""
    import cupy

    with cupy.cuda.Device(device_id):
        return int(cupy.cuda.runtime.memGetInfo()[0])


def timed(step, *, warmup, min_s, max_s, sync=lambda: None, min_items=0):
    """``warmup`` untimed steps, sync, then steps until >= min_s and >= min_items images (or
    max_s); sync. ``step()`` returns the images it produced. Returns (images, seconds, steps)."""
    for _ in range(warmup):
        step()
    sync()
    n, k, t0 = 0, 0, time.perf_counter()
    while True:
        n += step()
        k += 1
        el = time.perf_counter() - t0
        if (el >= min_s and n >= min_items) or el >= max_s:
            break
    sync()
    return n, time.perf_counter() - t0, k


def index_stream(n, batch, seed=0):
    """Endless batches of indices: successive random permutations, chained (full batches)."""
    rng = np.random.default_rng(seed)
    it = itertools.chain.from_iterable(rng.permutation(n) for _ in itertools.count())
    while True:
        yield np.fromiter(itertools.islice(it, batch), np.int64, batch)


# ---------------------------------------------------------------------------- 1. data
def _source_images():
    srcs = sorted(glob.glob(os.path.join(REPO, "examples", "data", "coco-mini", "images", "*.jpg")))
    srcs += sorted(glob.glob(os.path.join(REPO, "examples", "data", "voc-mini", "JPEGImages", "*.jpg")))
    if not srcs:
        raise FileNotFoundError("no sample images under examples/data (coco-mini, voc-mini)")
    return srcs


def _categories():
    try:
        with open(os.path.join(REPO, "examples", "data", "coco-mini", "annotations.json")) as f:
            cats = json.load(f)["categories"]
        if len(cats) == 80:
            return [{"id": c["id"], "name": c["name"], "supercategory": c.get("supercategory", "")}
                    for c in cats]
    except (OSError, ValueError, KeyError):
        pass
    return [{"id": i, "name": f"class{i}", "supercategory": ""} for i in COCO_IDS]


def _make_one(task):
    """Make image ``i``: a random window of a sample image resized to about 640x480, JPEG
    quality 85-95, 4:2:0; plus 3-10 random boxes. Returns its COCO entries."""
    from PIL import Image

    i, src, out_dir, seed = task
    rng = np.random.default_rng([seed, i])
    w, h = int(rng.integers(600, 661)), int(rng.integers(440, 501))
    with Image.open(src) as im:
        im = im.convert("RGB")
        sw, sh = im.size
        ar = w / h
        cw = min(float(sw), sh * ar) * rng.uniform(0.7, 1.0)
        ch = cw / ar
        x0, y0 = rng.uniform(0, sw - cw), rng.uniform(0, sh - ch)
        im = im.resize((w, h), Image.BILINEAR, box=(x0, y0, x0 + cw, y0 + ch))
        name = f"{i:06d}.jpg"
        im.save(os.path.join(out_dir, name), "JPEG", quality=int(rng.integers(85, 96)),
                subsampling=2)
    k = int(rng.integers(3, 11))
    bw, bh = rng.uniform(16, w / 2, k), rng.uniform(16, h / 2, k)
    bx, by = rng.uniform(0, w - bw), rng.uniform(0, h - bh)
    cats = rng.integers(0, 80, k)
    boxes = [(round(float(a), 2), round(float(b), 2), round(float(c), 2), round(float(d), 2), int(e))
             for a, b, c, d, e in zip(bx, by, bw, bh, cats)]
    return i, name, w, h, boxes


def make_dataset(root, n, workers, seed=0):
    """Write ``n`` images to ``root/images`` and ``root/annotations.json`` (reused when it exists
    with ``n`` images)."""
    ann = os.path.join(root, "annotations.json")
    if os.path.exists(ann):
        with open(ann) as f:
            if len(json.load(f)["images"]) == n:
                log(f"data: reusing {ann} ({n} images)")
                return root
    img_dir = os.path.join(root, "images")
    os.makedirs(img_dir, exist_ok=True)
    srcs = _source_images()
    tasks = [(i, srcs[i % len(srcs)], img_dir, seed) for i in range(n)]
    t0 = time.perf_counter()
    import multiprocessing as mp

    with mp.get_context("fork").Pool(max(1, min(workers, n))) as pool:
        made = sorted(pool.imap_unordered(_make_one, tasks, chunksize=8))
    cats = _categories()
    images, anns, aid = [], [], 1
    for i, name, w, h, boxes in made:
        images.append({"id": i + 1, "file_name": name, "width": w, "height": h})
        for x, y, bw, bh, c in boxes:
            anns.append({"id": aid, "image_id": i + 1, "category_id": cats[c]["id"],
                         "bbox": [x, y, bw, bh], "area": round(bw * bh, 2), "iscrowd": 0})
            aid += 1
    with open(ann, "w") as f:
        json.dump({"info": {"description": "detaug bench_gpu synthetic"}, "licenses": [],
                   "categories": cats, "images": images, "annotations": anns}, f)
    mb = sum(os.path.getsize(os.path.join(img_dir, m[1])) for m in made) / 2**20
    log(f"data: {n} images ({mb:.1f} MiB, {len(anns)} boxes, from {len(srcs)} sample images) "
        f"in {time.perf_counter() - t0:.1f} s with {workers} processes -> {root}")
    EXTRA["data"] = {"images": n, "boxes": len(anns), "mib": round(mb, 1),
                     "seconds": round(time.perf_counter() - t0, 2)}
    return root


def load_records(root):
    """[(path, boxes xyxy float32 (k, 4), labels int64 (k,), w, h)] and the files' bytes."""
    from readers import read_coco

    ds = read_coco(os.path.join(root, "annotations.json"), os.path.join(root, "images"))
    recs = [(r.path, r.boxes, r.labels, r.width, r.height) for r in ds.records]
    blobs = []
    for r in recs:
        with open(r[0], "rb") as f:
            blobs.append(f.read())
    return recs, blobs


# ---------------------------------------------------------------------------- 2. detaug
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
    pipe = make_det_pipe(root, "mixed" if gpu else "cpu", retinanet, targets=args.retinanet_targets,
                         dtype=args.dtype, **kwargs)
    t0 = time.perf_counter()
    pipe.build()
    build_s = time.perf_counter() - t0
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
                    f"{st['epoch']} epoch ends crossed"
                    + (f"; device memory {mem_mb:,.0f} MB after {mem_at} batches, "
                       f"{mem_end_mb:,.0f} MB after {st['runs']}" if gpu else "")}
    log(f"detaug: driving thread {thread_ms:.3f} ms CPU per batch of {bs} "
        f"({'OK' if thread_ms < 1 else 'over'} the 1 ms target); in-epoch rate {steady or 0:.1f} img/s")
    return res


# ---------------------------------------------------------------------------- 3a. decode ceiling
OUTPUT_KINDS = {  # --ceiling-outputs KIND: (output dtype, whether the decoded bytes are read)
    "convert": ("float32", True), "write32": ("float32", False),
    "convert16": ("float16", True), "write16": ("float16", False),
    "warp": ("float32", "warp")}  # detaug's own fused warp of the decoded batch


def ceiling_work(blobs, batch_size, seed=1, with_asarray=False, outputs=0, out_kind="convert"):
    """The decode ceiling's work, one definition for the one-process and the P-process ceiling:
    nvImageCodec ``Decoder(device_id=0)`` (its defaults: one CPU thread per core), detaug's
    ``decode_params("RGB")``, batches of ``batch_size`` of the preloaded bytes (successive random
    permutations) on a non-blocking stream, results released 8 batches later (as detaug's decode
    op). Returns (step, sync, keep): ``step()`` decodes one batch and returns its image count.
    ``outputs`` (a side, e.g. SIZE): after each decode, on its stream, one kernel also writes the
    batch's outputs as the pipeline's are (batch x 3 x side x side float32, from as many uint8):
    the least GPU work a pipeline that makes those outputs adds to the decode. ``out_kind``
    (OUTPUT_KINDS): "convert" reads uint8 and writes float32 as above; "write32" only writes the
    float32 outputs (a fill: the bytes any pipeline making them writes, nothing read);
    "convert16" / "write16" the same with float16 outputs; "warp": detaug's fused warp kernel
    (``warp_cupy``: crop + flip + resize + normalize to float32 CHW, one launch, its metadata
    uploaded) of the decoded images themselves, with bench_warp's random windows: a pipeline's
    stage b run in the decode process, with no pipeline around it."""
    import cupy as cp

    nvimgcodec = import_nvimgcodec()
    dec = nvimgcodec.Decoder(device_id=0)
    params = decode_params("RGB")
    stream = cp.cuda.Stream(non_blocking=True)
    arrays = [np.frombuffer(b, np.uint8) for b in blobs]  # as detaug's reader hands them over
    idx = index_stream(len(arrays), batch_size, seed=seed)
    keep = collections.deque(maxlen=8)  # as detaug's decode op: release a few batches later
    if outputs:
        out_dtype, reads = OUTPUT_KINDS[out_kind]
        if reads == "warp":
            from detaug.kernels import warp as W

            rng = np.random.default_rng(seed)
        else:
            with stream:
                src = cp.zeros((batch_size, outputs, outputs, 3), cp.uint8)
                out = cp.empty((batch_size, 3, outputs, outputs), out_dtype)
        scale = np.float32(1 / 255)

    def step():
        ids = next(idx)
        res = dec.decode([arrays[i] for i in ids], params=params, cuda_stream=stream.ptr)
        bad = sum(r is None for r in res)
        if bad:
            raise RuntimeError(f"nvImageCodec returned None for {bad} images")
        if outputs and reads == "warp":  # (its output goes back to the pool, stream-ordered)
            imgs = [cp.asarray(r) for r in res]
            sizes = np.array([im.shape[:2] for im in imgs], np.int64)
            m, _, _ = crop_flip_resize_matrices(sizes, rng)
            W.warp_cupy(imgs, m, np.tile([outputs, outputs], (len(imgs), 1)), stream=stream,
                        **WARP_KW)
        elif outputs:
            with stream:
                if reads:
                    cp.multiply(src.transpose(0, 3, 1, 2), scale, out=out, casting="unsafe")
                else:
                    out.fill(0)
        if with_asarray:
            with stream:
                keep.append([cp.asarray(r) for r in res])
        keep.append(res)
        return len(ids)

    def sync():
        stream.synchronize()
        cp.cuda.runtime.deviceSynchronize()

    return step, sync, keep


def _outputs_label(kind):
    """The rows' name for a ceiling with outputs: " + outputs" (convert, as before), else with
    the kind."""
    if not kind:
        return ""
    return " + outputs" if kind == "convert" else f" + outputs ({kind})"


def bench_decode_ceiling(args, blobs, with_asarray=False):
    step, sync, keep = ceiling_work(blobs, args.batch_size, seed=1, with_asarray=with_asarray)
    n, secs, k = timed(step, warmup=args.warmup, min_s=args.ceiling_seconds,
                       max_s=args.ceiling_seconds * 2, sync=sync,
                       min_items=min(len(blobs), 16 * args.batch_size))
    keep.clear()
    if with_asarray:
        return {"name": "nvImageCodec decode + cupy.asarray (diag.)", "img_s": n / secs,
                "images": n, "seconds": round(secs, 2),
                "notes": "as (a), plus cupy.asarray of each decoded image, as detaug's decode op does"}
    return {"name": "nvImageCodec batched decode (ceiling)", "img_s": n / secs, "images": n,
            "seconds": round(secs, 2),
            "notes": f"Decoder().decode(batch of {args.batch_size} preloaded bytes, cuda_stream), "
                     "sync at the end; no augmentation; one thread of this process"}


def _ceiling_proc(k, paths, batch_size, warmup, window, rounds, barriers, conn, wait_s, outputs=0,
                  out_kind="convert"):
    """One process of the P-process ceiling (spawned): reads its own copy of the files, makes its
    decoder and decodes one batch, waits on the "ready" barrier (every process and the parent);
    then for each round P it takes part in (k < P): the round's "warm" barrier (its P processes
    and the parent: the previous round is over), ``warmup`` batches, the round's "go" barrier,
    ``window`` seconds of batches, a sync; sends ("ok", P, k, images, seconds, t0, t1)
    (perf_counter: CLOCK_MONOTONIC, one clock for all processes on Linux), or
    ("error", k, message) after aborting every barrier."""
    keep = None
    try:
        blobs = []
        for p in paths:
            with open(p, "rb") as f:
                blobs.append(f.read())
        step, sync, keep = ceiling_work(blobs, batch_size, seed=1 + k, outputs=outputs,
                                        out_kind=out_kind)
        step()  # first-call set-up of the decoder, before any round
        sync()
        barriers["ready"].wait(timeout=wait_s)
        for P in rounds:
            if k >= P:
                continue
            barriers["warm", P].wait(timeout=wait_s)
            for _ in range(warmup):
                step()
            sync()
            barriers["go", P].wait(timeout=wait_s)
            n, t0 = 0, time.perf_counter()
            while True:
                n += step()
                if time.perf_counter() - t0 >= window:
                    break
            sync()
            t1 = time.perf_counter()
            conn.send(("ok", P, k, n, t1 - t0, t0, t1))
    except BaseException as e:  # noqa: BLE001 -- report (first: the parent reads it when a
        with contextlib.suppress(BaseException):  # barrier breaks), then free the others
            conn.send(("error", k, f"{type(e).__name__}: {e}"[:300]))
        for b in barriers.values():
            with contextlib.suppress(BaseException):
                b.abort()
    finally:
        if keep is not None:  # images before their decoder (see detaug.ops.gpu_decode)
            keep.clear()
        with contextlib.suppress(BaseException):
            conn.close()


def bench_decode_ceiling_mp(args, recs):
    """The machine's decode ceiling: ``ceiling_work`` in P processes at once, for each P of
    ``--ceiling-processes``. max(P) processes are spawned once (each reads the files into its own
    memory, makes its decoder and decodes a batch: all are ready before round 1); round P runs
    processes 0..P-1 (the others idle, blocked on a later round's barrier): they warm up once the
    previous round is over, then start together on a barrier of P + 1 (the parent too). Appends
    one row per P (img/s summed over the processes); details in EXTRA["decode_ceiling_mp"]."""
    import multiprocessing as mp
    from multiprocessing.connection import wait as mp_wait

    rounds = sorted({int(p) for p in args.ceiling_processes if int(p) > 0})
    if not rounds:
        return None
    ctx = mp.get_context("spawn")
    barriers = {"ready": ctx.Barrier(max(rounds) + 1)}
    for P in rounds:
        barriers["warm", P] = ctx.Barrier(P + 1)
        barriers["go", P] = ctx.Barrier(P + 1)
    paths = [r[0] for r in recs]
    start_s = 180.0  # spawn, imports, CUDA context, decoder, reading the files, warm-up
    window = args.ceiling_window
    procs, conns = [], []
    for k in range(max(rounds)):
        parent, child = ctx.Pipe(duplex=False)
        pr = ctx.Process(target=_ceiling_proc, name=f"decode-ceiling-{k}", daemon=True,
                         args=(k, paths, args.batch_size, args.warmup, window, rounds, barriers,
                               child, start_s + 2 * window * len(rounds),
                               SIZE if args.ceiling_outputs else 0,
                               args.ceiling_outputs or "convert"))
        pr.start()
        child.close()
        procs.append(pr)
        conns.append(parent)
    detail = {"window_s": window, "batch": args.batch_size, "rounds": {}}
    EXTRA["decode_ceiling_mp"] = detail
    plus = _outputs_label(args.ceiling_outputs)
    too = f" (each batch's outputs written too: {args.ceiling_outputs})" if args.ceiling_outputs else ""
    t_start = time.perf_counter()

    def meet(key, timeout):
        try:
            barriers[key].wait(timeout=timeout)
        except Exception as e:  # noqa: BLE001 -- a process failed or never came
            errs = []
            for c in conns:
                with contextlib.suppress(BaseException):
                    if c.poll(0.2):
                        errs.append(c.recv())
            raise RuntimeError(f"barrier {key}: the processes did not meet ({type(e).__name__}); "
                               f"{[m for m in errs if m[0] == 'error'] or 'no process reported an error'}"
                               ) from None

    try:
        meet("ready", start_s)
        log(f"decode ceiling, P processes: {len(procs)} spawned and ready in "
            f"{time.perf_counter() - t_start:.1f} s")
        for P in rounds:
            meet(("warm", P), 60.0)
            meet(("go", P), 60.0)
            got, deadline = {}, time.perf_counter() + window * 3 + 60
            while len(got) < P:  # one message from each of processes 0..P-1
                left = deadline - time.perf_counter()
                waiting = {conns[k]: k for k in range(P) if k not in got}
                ready = mp_wait(list(waiting), timeout=max(0.0, left))
                if not ready:
                    raise RuntimeError(f"round P={P}: {P - len(got)} process(es) did not report "
                                       f"within {window * 3 + 60:.0f} s")
                for c in ready:
                    try:
                        m = c.recv()
                    except EOFError:
                        raise RuntimeError(f"round P={P}: decode process {waiting[c]} ended "
                                           "without a result") from None
                    if m[0] == "error":
                        raise RuntimeError(f"round P={P}: process {m[1]}: {m[2]}")
                    got[m[2]] = m
            per = [got[k][3] / got[k][4] for k in range(P)]
            n_all = sum(got[k][3] for k in range(P))
            span = max(got[k][6] for k in range(P)) - min(got[k][5] for k in range(P))
            summed = sum(per)
            skew = max(got[k][5] for k in range(P)) - min(got[k][5] for k in range(P))
            detail["rounds"][P] = {"img_s_summed": summed, "img_s_per_process": per,
                                   "images": n_all, "img_s_over_span": n_all / span,
                                   "span_s": span, "start_skew_ms": 1e3 * skew}
            row = {"name": f"decode ceiling{plus}, P={P} process{'es' if P > 1 else ''}",
                   "img_s": summed, "images": n_all, "seconds": round(span, 2), "processes": P,
                   "outputs": args.ceiling_outputs or False,
                   "img_s_per_process": per, "img_s_over_span": n_all / span,
                   "notes": f"the one-process ceiling's work{too} in {P} spawned process(es) at once, "
                            f"each on its own copy of the bytes, {window:g} s window, summed; "
                            f"per process {', '.join(f'{r:,.0f}' for r in per)}; all images / "
                            f"span {n_all / span:,.0f}; start skew {1e3 * skew:.1f} ms"}
            ROWS.append(row)
            log(f"{row['name']}: {summed:.1f} img/s summed ({row['notes']})")
    finally:
        for b in barriers.values():  # a process still waiting (after a failure) ends now
            with contextlib.suppress(BaseException):
                b.abort()
        for c in conns:
            with contextlib.suppress(BaseException):
                c.close()
        for pr in procs:
            pr.join(timeout=15)
        for pr in procs:
            if pr.is_alive():
                pr.terminate()
                pr.join(timeout=5)
    best = max(detail["rounds"].items(), key=lambda kv: kv[1]["img_s_summed"], default=None)
    if best:
        detail["best"] = {"processes": best[0], "img_s": best[1]["img_s_summed"]}
    return None


# ---------------------------------------------------------------------------- 3b/c. torchvision
def make_tv_transform(size=None):
    """torchvision v2's twin of make_det_pipe's augmentation (``size`` x ``size``, default SIZE)."""
    import torch
    from torchvision.transforms import v2

    size = SIZE if size is None else int(size)
    return v2.Compose([
        v2.RandomIoUCrop(),
        v2.RandomHorizontalFlip(p=0.5),
        v2.Resize((size, size), antialias=True),
        v2.SanitizeBoundingBoxes(min_size=1),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(mean=[m / 255 for m in MEAN], std=[s / 255 for s in STD]),
    ])


def bench_tv_gpu(args, recs, blobs):
    import torch
    import torchvision  # noqa: F401
    from torchvision import tv_tensors
    from torchvision.io import ImageReadMode, decode_jpeg

    dev = torch.device("cuda", 0)
    datas = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]
    boxes = [torch.from_numpy(r[1]) for r in recs]
    labels = [torch.from_numpy(r[2]) for r in recs]
    tf = make_tv_transform()
    idx = index_stream(len(datas), args.batch_size, seed=2)

    def step():
        ids = next(idx)
        imgs = decode_jpeg([datas[i] for i in ids], mode=ImageReadMode.RGB, device=dev)
        outs = []
        for img, i in zip(imgs, ids):
            h, w = img.shape[-2:]
            target = {"boxes": tv_tensors.BoundingBoxes(boxes[i].to(dev), format="XYXY",
                                                        canvas_size=(h, w)),
                      "labels": labels[i].to(dev)}
            o, _t = tf(tv_tensors.Image(img), target)
            outs.append(o)
        batch = torch.stack(outs)
        assert batch.shape == (len(ids), 3, SIZE, SIZE)
        return len(ids)

    n, secs, k = timed(step, warmup=1, min_s=args.peer_seconds, max_s=args.peer_seconds * 1.5,
                       sync=torch.cuda.synchronize)
    return {"name": "torchvision v2 on GPU", "img_s": n / secs, "images": n,
            "seconds": round(secs, 2),
            "notes": f"decode_jpeg(list, device='cuda') batched, per-sample v2 on cuda tensors; "
                     f"bytes preloaded; {k} batches"}


class TVFileDataset:
    """torchvision v2 per sample, CPU: read the file, decode (``decode_jpeg``, or Pillow with
    ``decode="pil"``), transforms (make_tv_transform(size)). ``recs[i]`` starts with (path,
    boxes, labels)."""

    def __init__(self, recs, decode="tensor", size=None):
        self.recs, self.decode, self.size = recs, decode, size
        self.tf = None

    def __len__(self):
        return len(self.recs)

    def __getitem__(self, i):
        import torch
        from torchvision import io, tv_tensors

        if self.tf is None:
            self.tf = make_tv_transform(self.size)
        path, boxes, labels = self.recs[i][:3]
        if self.decode == "pil":
            from PIL import Image

            with Image.open(path) as im:
                img = torch.from_numpy(np.asarray(im.convert("RGB"))).permute(2, 0, 1)
        else:
            img = io.decode_jpeg(io.read_file(path), mode=io.ImageReadMode.RGB)
        h, w = img.shape[-2:]
        target = {"boxes": tv_tensors.BoundingBoxes(torch.from_numpy(boxes), format="XYXY",
                                                    canvas_size=(h, w)),
                  "labels": torch.from_numpy(labels)}
        return self.tf(tv_tensors.Image(img), target)


def _tv_collate(batch):
    import torch

    return torch.stack([b[0] for b in batch]), [b[1] for b in batch]


def _tv_worker_init(_):
    import torch

    torch.set_num_threads(1)
    with contextlib.suppress(ImportError):
        import cv2

        cv2.setNumThreads(1)


def bench_tv_cpu(args, recs):
    import torch
    import torchvision  # noqa: F401
    from torch.utils.data import DataLoader, RandomSampler

    workers = args.tv_workers
    ds = TVFileDataset(recs)
    # one long stream of successive permutations: no epoch-end bubbles for the peer
    sampler = RandomSampler(ds, replacement=False, num_samples=len(ds) * 10_000,
                            generator=torch.Generator().manual_seed(0))
    pf = 2
    loader = DataLoader(ds, batch_size=args.batch_size, sampler=sampler, num_workers=workers,
                        collate_fn=_tv_collate, worker_init_fn=_tv_worker_init,
                        prefetch_factor=pf if workers else None, drop_last=True)
    it = iter(loader)
    try:
        # warm-up: every worker started and past its first batches, prefetch queue drained
        t0 = time.perf_counter()
        warm = 0
        while warm < max(2, workers * (pf + 1)) and time.perf_counter() - t0 < args.peer_seconds:
            next(it)
            warm += 1
        n, k, t0 = 0, 0, time.perf_counter()
        while True:
            img, _t = next(it)
            n += img.shape[0]
            k += 1
            el = time.perf_counter() - t0
            if el >= args.peer_seconds and k >= 3:
                break
            if el >= args.peer_seconds * 2:
                break
        secs = time.perf_counter() - t0
    finally:
        del it
        del loader
        gc.collect()
    return {"name": f"torchvision v2 DataLoader CPU ({workers} workers)", "img_s": n / secs,
            "images": n, "seconds": round(secs, 2),
            "notes": f"decode_jpeg on CPU, batch {args.batch_size} collate, {warm} warm-up "
                     "batches; batches stay on the host (no H2D counted)"}


# ---------------------------------------------------------------------------- 3d. kornia
def bench_kornia(args, recs, blobs, gpu):
    import torch
    import torch.nn.functional as F
    import kornia
    import kornia.augmentation as K

    dev = torch.device("cuda", 0) if gpu else torch.device("cpu")
    aug = K.AugmentationSequential(
        K.RandomResizedCrop((SIZE, SIZE), scale=(0.09, 1.0), ratio=(0.5, 2.0)),
        K.RandomHorizontalFlip(p=0.5),
        K.Normalize(mean=torch.tensor(MEAN) / 255, std=torch.tensor(STD) / 255),
        data_keys=["input", "bbox_xyxy"]).to(dev)
    mode = args.kornia_decode if gpu else "pillow"
    if mode == "nvimgcodec" and _version("nvidia.nvimgcodec") is None:
        mode = "torchvision"
    decode_note = mode
    if mode == "nvimgcodec":
        nvimgcodec = import_nvimgcodec()
        dec = nvimgcodec.Decoder(device_id=0)
        params = decode_params("RGB")
        arrays = [np.frombuffer(b, np.uint8) for b in blobs]
        keep = collections.deque(maxlen=8)

        def decode(ids):
            res = dec.decode([arrays[i] for i in ids], params=params,
                             cuda_stream=torch.cuda.current_stream().cuda_stream)
            keep.append(res)
            out = []
            for r in res:
                try:
                    t = torch.from_dlpack(r)
                except Exception:  # noqa: BLE001 -- older bindings: CUDA array interface
                    t = torch.as_tensor(r, device=dev)
                out.append(t.permute(2, 0, 1))
            return out
    elif mode == "torchvision":
        from torchvision.io import ImageReadMode, decode_jpeg

        datas = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]

        def decode(ids):
            return decode_jpeg([datas[i] for i in ids], mode=ImageReadMode.RGB, device=dev)
    else:  # CPU smoke: Pillow
        import io as _io

        from PIL import Image

        def decode(ids):
            out = []
            for i in ids:
                with Image.open(_io.BytesIO(blobs[i])) as im:
                    out.append(torch.from_numpy(np.array(im.convert("RGB"))).permute(2, 0, 1))
            return out

    mb = max(len(r[1]) for r in recs)
    idx = index_stream(len(blobs), args.batch_size, seed=3)

    def step():
        ids = next(idx)
        imgs = decode(ids)
        x = torch.cat([F.interpolate(im[None].float(), size=(SIZE, SIZE), mode="bilinear",
                                     align_corners=False) for im in imgs]).div_(255)
        pb = np.zeros((len(ids), mb, 4), np.float32)
        for k, i in enumerate(ids):
            b = recs[i][1]
            pb[k, :len(b)] = b * np.float32([SIZE / recs[i][3], SIZE / recs[i][4]] * 2)
        bx = torch.from_numpy(pb).to(dev)
        out, obx = aug(x, bx)
        assert out.shape == (len(ids), 3, SIZE, SIZE)
        return len(ids)

    sync = torch.cuda.synchronize if gpu else (lambda: None)
    n, secs, k = timed(step, warmup=2, min_s=args.peer_seconds, max_s=args.peer_seconds * 1.5,
                       sync=sync)
    return {"name": f"kornia {kornia.__version__}" + ("" if gpu else " (CPU, smoke)"),
            "img_s": n / secs, "images": n, "seconds": round(secs, 2),
            "notes": f"decode {decode_note} (batched), per-sample interpolate to {SIZE}x{SIZE}, "
                     "AugmentationSequential(RandomResizedCrop, HFlip, Normalize) on the batch, "
                     "boxes padded (not pruned); bytes preloaded"}


# ---------------------------------------------------------------------------- 4. warp alone
def crop_flip_resize_matrices(sizes_hw, rng):
    """Matrices of an IoU-crop-like window (each side 0.3-1 of the image), a coin-flip mirror
    and a resize to SIZE x SIZE, composed with detaug.core.geometry; and the window sizes."""
    from detaug.core import geometry as G

    h, w = sizes_hw[:, 0].astype(np.float64), sizes_hw[:, 1].astype(np.float64)
    b = len(sizes_hw)
    cw = np.maximum(np.round(w * rng.uniform(0.3, 1.0, b)), 1)
    ch = np.maximum(np.round(h * rng.uniform(0.3, 1.0, b)), 1)
    x0 = np.floor(rng.uniform(0, 1, b) * (w - cw + 1))
    y0 = np.floor(rng.uniform(0, 1, b) * (h - ch + 1))
    flip = (rng.uniform(0, 1, b) < 0.5).astype(np.int32)
    m = (G.scale(SIZE / cw, SIZE / ch) @ G.flip(cw, ch, flip, np.zeros(b))
         @ G.translate(-x0, -y0))
    return m, cw, ch


def _decoded_batch(blobs, bs, gpu):
    """One batch of decoded images, uint8 HWC: cupy arrays (own memory) or numpy."""
    if gpu:
        import cupy as cp

        nvimgcodec = import_nvimgcodec()
        dec = nvimgcodec.Decoder(device_id=0)
        params = decode_params("RGB")
        res = dec.decode([np.frombuffer(b, np.uint8) for b in blobs[:bs]], params=params)
        imgs = [cp.array(cp.asarray(r), copy=True) for r in res]
        cp.cuda.runtime.deviceSynchronize()
        del res
        return imgs
    import io as _io

    from PIL import Image

    out = []
    for b in blobs[:bs]:
        with Image.open(_io.BytesIO(b)) as im:
            out.append(np.asarray(im.convert("RGB")))
    return out


def prefilled_ms(cp, s, call, n, host_ms):
    """GPU milliseconds per ``call()`` without host gaps: a spin kernel holds ``s`` while the
    host queues ``n`` calls between two events; None if the GPU caught up with the host (three
    tries with a longer spin each)."""
    spin = cp.RawKernel(r'''
extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}''', "spin")
    clock_khz = cp.cuda.runtime.getDeviceProperties(0).get("clockRate", 2_000_000) or 2_000_000
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    spin_s = max(0.2, 3.0 * n * host_ms / 1e3)
    for _attempt in range(3):
        with s:
            spin((1,), (1,), (np.int64(spin_s * clock_khz * 1e3),))
        e0.record(s)
        for _ in range(n):
            call()
        e1.record(s)
        prefilled = not e0.done  # the GPU had not reached e0 when all calls were queued
        e1.synchronize()
        if prefilled:
            return cp.cuda.get_elapsed_time(e0, e1) / n
        spin_s *= 4
    return None


def d2d_copy_gb_s(cp, s, nbytes=1 << 30, reps=10):
    """Device-to-device copy bandwidth (bytes read + written per second, GB/s) on stream ``s``."""
    a = cp.empty(nbytes, cp.uint8)
    b = cp.empty(nbytes, cp.uint8)
    with s:
        a.fill(1)
        b.fill(0)
        b.data.copy_from_device_async(a.data, nbytes, s)
    s.synchronize()
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    e0.record(s)
    for _ in range(reps):
        b.data.copy_from_device_async(a.data, nbytes, s)
    e1.record(s)
    e1.synchronize()
    return 2 * nbytes / (cp.cuda.get_elapsed_time(e0, e1) / reps / 1e3) / 1e9


def warp_case(blobs, bs, gpu):
    """The warp-alone workload: ``bs`` decoded images, their crop + flip + resize matrices, the
    output sizes, the bytes counted (source inside the windows, output) and the warp's keywords
    (normalize to float32 CHW)."""
    imgs = _decoded_batch(blobs, bs, gpu)
    sizes = np.array([im.shape[:2] for im in imgs], np.int64)
    m, cw, ch = crop_flip_resize_matrices(sizes, np.random.default_rng(4))
    out_sizes = np.tile([SIZE, SIZE], (bs, 1))
    src_bytes = float(np.sum(cw * ch * 3))
    out_bytes = float(bs * 3 * SIZE * SIZE * 4)
    return imgs, m, out_sizes, src_bytes, out_bytes, dict(WARP_KW)


def bench_warp(args, blobs, gpu):
    from detaug.kernels import warp as W

    bs = min(args.batch_size, len(blobs))
    imgs, m, out_sizes, src_bytes, out_bytes, kw = warp_case(blobs, bs, gpu)
    res = {"name": "detaug fused warp alone", "batch": bs, "src_bytes": src_bytes,
           "out_bytes": out_bytes}
    iters = args.warp_iters
    if not gpu:  # smoke: the OpenCV path, a few calls
        t0 = time.perf_counter()
        for _ in range(3):
            out = W.warp_cv2(imgs, m, out_sizes, **kw)
        ms = (time.perf_counter() - t0) / 3 * 1e3
        assert out.shape == (bs, 3, SIZE, SIZE), out.shape
        a = np.empty(2**28, np.uint8)
        b = np.empty_like(a)
        a.fill(1)
        b.fill(0)
        t0 = time.perf_counter()
        np.copyto(b, a)
        copy_bw = 2 * a.nbytes / (time.perf_counter() - t0) / 1e9
        bw = (src_bytes + out_bytes) / (ms / 1e3) / 1e9
        res.update(ms_per_batch=ms, gb_s=bw, copy_gb_s=copy_bw, ratio=bw / copy_bw,
                   img_s=bs / (ms / 1e3),
                   notes=f"CPU smoke: warp_cv2, 1 thread, {ms:.1f} ms/batch, {bw:.2f} GB/s vs "
                         f"memcpy {copy_bw:.1f} GB/s")
        return res

    import cupy as cp

    s = cp.cuda.Stream(non_blocking=True)

    def call():
        return W.warp_cupy(imgs, m, out_sizes, stream=s, **kw)

    out = call()
    s.synchronize()
    assert tuple(out.shape) == (bs, 3, SIZE, SIZE) and out.dtype == np.float32, out.shape
    if args.warp_check:  # one sample against the NumPy twin (slow: float64 reference)
        ref = W.warp_numpy([cp.asnumpy(imgs[0])], m[:1], out_sizes[:1], **kw)
        err = float(np.abs(ref[0] - cp.asnumpy(out[0])).max())
        res["max_abs_err_vs_twin"] = err
        log(f"warp: max |cupy - numpy twin| on sample 0 = {err:.4g} (normalised units)")
    for _ in range(5):
        out = call()
    s.synchronize()
    # (i) back to back, events on the stream: includes any gap while the host prepares a call
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    t0 = time.perf_counter()
    e0.record(s)
    for _ in range(iters):
        out = call()
    e1.record(s)
    host_ms = (time.perf_counter() - t0) / iters * 1e3
    e1.synchronize()
    stream_ms = cp.cuda.get_elapsed_time(e0, e1) / iters
    res.update(stream_ms_per_batch=stream_ms, host_ms_per_call=host_ms)
    # (ii) the queue pre-filled behind a spin kernel: GPU time of the calls without host gaps
    n2 = max(10, min(iters, 100))
    kern_ms, prefilled = None, False
    try:
        kern_ms = prefilled_ms(cp, s, call, n2, host_ms)
        prefilled = kern_ms is not None
        res["prefilled_calls"] = n2
    except Exception as e:  # noqa: BLE001
        log(f"warp: pre-filled measurement failed: {type(e).__name__}: {e}")
    res["kernel_ms_per_batch"] = kern_ms
    ms = kern_ms if kern_ms is not None else stream_ms
    bw = (src_bytes + out_bytes) / (ms / 1e3) / 1e9
    del out
    copy_bw = None
    try:
        copy_bw = d2d_copy_gb_s(cp, s)
    except Exception as e:  # noqa: BLE001
        log(f"warp: copy bandwidth failed: {type(e).__name__}: {e}")
    ratio = bw / copy_bw if copy_bw else None
    res.update(ms_per_batch=ms, gb_s=bw, copy_gb_s=copy_bw, ratio=ratio, img_s=bs / (ms / 1e3),
               notes=(f"{ms:.3f} ms/batch {'(kernel, queue pre-filled)' if kern_ms else '(stream)'}; "
                      f"stream back-to-back {stream_ms:.3f} ms, host {host_ms:.3f} ms/call; "
                      f"{bw:.0f} GB/s vs D2D copy {copy_bw or 0:.0f} GB/s = "
                      f"{100 * (ratio or 0):.1f}% (target >= 50%)"))
    log(f"warp: src {src_bytes / 1e6:.1f} MB + out {out_bytes / 1e6:.1f} MB per batch; "
        f"kernel {kern_ms if kern_ms is not None else float('nan'):.3f} ms (pre-filled: {prefilled}), "
        f"stream {stream_ms:.3f} ms, host {host_ms:.3f} ms/call; {bw:.0f} GB/s; "
        f"copy {copy_bw or 0:.0f} GB/s; ratio {100 * (ratio or 0):.1f}%")
    return res


# ---------------------------------------------------------------------------- 5. report
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
                  + (f"; detaug / it = {d / one['img_s']:.2f}x (issue 11 target 1, at the defaults: "
                     ">= 1.2x)" if d else ""))
        if multi:
            plus = _outputs_label(next((r["outputs"] for r in multi if r.get("outputs")), None))
            print(f"decode ceiling{plus}, P processes (summed): " + ", ".join(
                f"P={r['processes']} {r['img_s']:,.0f}" for r in multi) + " img/s"
                + (f"; detaug / best (P={best['processes']}) = {d / best['img_s']:.3f} "
                   + ("(a reference: the least a pipeline writing the outputs adds)" if plus
                      else "(issue 11 target 2, high-throughput setting: >= 0.90)") if d else ""))
    if det and det.get("device_mem_mb") is not None:
        print(f"detaug device memory (cudaMemGetInfo drop, whole device, decode processes included): "
              f"{det['device_mem_mb']:,.0f} MB after {det['mem_batches']} batches "
              f"(issue 11 target 1, at the defaults: <= 2,200 MB); "
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
       "kornia", "warp")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
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
    ap.add_argument("--tv-workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
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
        root = tmp
    recs = blobs = None
    try:
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
            else:
                section("torchvision v2 DataLoader CPU", bench_tv_cpu, args, recs)
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

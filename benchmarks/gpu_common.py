"""bench_gpu's shared parts: the data set it measures on (COCO-like JPEGs with a COCO
annotations.json, made from the repository's sample images), the timing loop, the table rows and
the device-memory and CPU-time probes. Imported by bench_gpu.py, gpu_ceilings.py and gpu_peers.py;
``.ci/device_setup.sh`` calls ``make_dataset`` (re-exported by bench_gpu)."""
from __future__ import annotations

import contextlib
import gc
import glob
import itertools
import json
import os
import sys
import time
import traceback

for _v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)
from detaug.core.backend import gpu_available  # noqa: E402,F401  (bench_gpu's; imports no GPU library)
from detaug.ops.gpu_decode import decode_params  # noqa: E402,F401  (detaug's own decode settings)
from detaug.runtime.gpu.allocator import free_cached  # noqa: E402  (both pools a pipeline allocates from)
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
        free_cached(0)
        cupy.get_default_pinned_memory_pool().free_all_blocks()
    if "torch" in sys.modules:
        with contextlib.suppress(BaseException):
            import torch

            if torch.cuda.is_initialized():
                torch.cuda.synchronize()
                torch.cuda.empty_cache()


def build_within_budget(make, explicit=False, say=None):
    """``make(budget)`` -> an unbuilt pipeline (``budget`` None: its default budget), built.
    Where the memory plan refuses it at build (``BudgetError``, a ValueError with ``.need``) and
    the budget was not ``explicit``, it is made again at the refusal's figure rounded up to
    0.5 GB and built. Returns ``(pipe, note, seconds)``: note None, or what was refused and where
    it ran; seconds: the build that succeeded."""
    budget = note = None
    while True:
        pipe = make(budget)
        try:
            t0 = time.perf_counter()
            pipe.build()
            return pipe, note, time.perf_counter() - t0
        except BaseException as e:
            pipe.close()
            need = getattr(e, "need", None)
            if not isinstance(e, ValueError) or need is None or explicit or note is not None:
                raise
            budget = -(-need // 500_000_000) * 500_000_000
            note = (f"refused at the default budget (needs {need / 1e9:.2f} GB); "
                    f"run at {budget / 1e9:.1f} GB")
            (say or log)(f"{e}\n{note}")


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


# ---------------------------------------------------------------------------- instance segmentation
# bench_gpu.py --seg: the instance-segmentation recipe (large-scale jitter of 1024 + flip, masks
# rasterised from COCO polygons at the output), detaug with masks and with boxes only, beside
# torchvision v2 in a DataLoader (gpu_peers.bench_tv_seg).
def _polygon_in(rng, x, y, w, h):
    """A star-shaped polygon of 8-20 vertices inside the box (x, y, w, h): COCO's flat list."""
    k = int(rng.integers(8, 21))
    ang = np.sort(rng.uniform(0, 2 * np.pi, k))
    rad = rng.uniform(0.45, 1.0, k)
    px = x + w / 2 + np.cos(ang) * rad * w / 2
    py = y + h / 2 + np.sin(ang) * rad * h / 2
    return [round(float(v), 2) for v in np.stack([px, py], 1).reshape(-1)]


def make_seg_dataset(root, n, workers, seed=0):
    """:func:`make_dataset`'s images, each box an object with one or two polygons inside it
    (its ``segmentation``; the ``bbox`` the polygons' enclosing box, as COCO's)."""
    make_dataset(root, n, workers, seed)
    ann = os.path.join(root, "annotations.json")
    with open(ann) as f:
        d = json.load(f)
    if d["annotations"] and "segmentation" in d["annotations"][0]:
        return root
    rng = np.random.default_rng([seed, 7])
    for a in d["annotations"]:
        x, y, w, h = a["bbox"]
        polys = [_polygon_in(rng, x, y, w, h)]
        if rng.random() < 0.3:  # a second part, as an occluded COCO object has
            polys.append(_polygon_in(rng, x + w * 0.6, y + h * 0.6, w * 0.4, h * 0.4))
        pts = np.concatenate([np.reshape(p, (-1, 2)) for p in polys])
        lo, hi = pts.min(0), pts.max(0)
        a["segmentation"] = polys
        a["bbox"] = [round(float(v), 2) for v in (*lo, *(hi - lo))]
        a["area"] = round(float(np.prod(hi - lo)), 2)
    with open(ann, "w") as f:
        json.dump(d, f)
    return root


SEG_MODES = ("masks", "polygons", "boxes")  # the rows: what the pipeline reads and gives


def make_seg_pipe(root, device, mode="masks", batch_size=16, size=1024, **kw):
    """The recipe: COCO reader, decode, ``scale_jitter`` (scale 0.1-2.0 of ``size``, crop and
    pad to size x size), horizontal flip, boxes under 1 px dropped; ``mode`` 'masks': the
    polygons read, moved and rasterised in the graph (``fn.instance_masks``); 'polygons': read
    and moved, handed to the torch adapter as they are, which rasterises them itself (its list
    targets give Mask R-CNN ``masks``: outside the graph and its memory plan); 'boxes': boxes
    only."""
    masks = mode != "boxes"
    from detaug import Pipeline, fn

    gpu = device == "gpu"
    pipe = Pipeline(batch_size=batch_size, num_threads=kw.pop("num_threads", 4), seed=0,
                    device_id=0 if gpu else None, **kw)
    with pipe:
        enc, boxes = fn.readers.coco(file_root=os.path.join(root, "images"),
                                     annotations_file=os.path.join(root, "annotations.json"),
                                     polygons=masks, random_shuffle=True)
        img = fn.decoders.image(enc, device="mixed" if gpu else "cpu")
        img, boxes = fn.scale_jitter(img, boxes, size=(size, size), scale_range=(0.1, 2.0))
        img, boxes = fn.flip(img, boxes, horizontal=fn.random.coin_flip())
        boxes = fn.prune_boxes(boxes, min_size=1.0)
        pipe.set_outputs(img, fn.instance_masks(boxes) if mode == "masks" else boxes)
    return pipe


def next_batch(pipe):
    """The pipeline's next outputs, across an epoch's end (reset: the next epoch's first)."""
    try:
        return pipe.run()
    except StopIteration:
        pipe.reset()
        return pipe.run()


def next_targets(it, stats):
    """The torch adapter's next batch (list targets), across an epoch's end (auto_reset: the
    next epoch follows); its images and boxes added to ``stats`` ('images', 'instances')."""
    try:
        b = next(it)
    except StopIteration:
        b = next(it)
    stats["images"] += len(b["targets"])
    stats["instances"] += sum(len(t["boxes"]) for t in b["targets"])
    return b


def bench_detaug_seg(args, root, device, mode):
    """img/s of :func:`make_seg_pipe` through the torch adapter (list targets: each image's
    boxes, labels and, for 'masks', its (n, H, W) uint8 masks), as a training loop takes it;
    on the GPU the device memory taken (the drop of free memory from before the build to the
    lowest seen after each batch's sync)."""
    from detaug.adapters.torch import DetaugIterator

    masks = mode == "masks"
    sync, free = (lambda: None), None  # noqa: E731
    if device == "gpu":
        import cupy as cp

        free_gpu_memory()
        low = [int(cp.cuda.runtime.memGetInfo()[0])] * 2  # (before the build, lowest since)

        def sync():
            cp.cuda.Device().synchronize()
            low[1] = min(low[1], int(cp.cuda.runtime.memGetInfo()[0]))

        free = low
    pipe = make_seg_pipe(root, device, mode, args.batch_size, args.seg_size)
    it = DetaugIterator(pipe, output_map=["images", "targets"], boxes_format="list",
                        auto_reset=True)
    stats = {"instances": 0, "images": 0}

    def step():
        b = next_targets(it, stats)
        for t in b["targets"]:
            if masks:
                assert t["masks"].shape[1:] == (args.seg_size, args.seg_size)
        return len(b["targets"])

    n, secs, k = timed(step, warmup=args.warmup, min_s=args.min_seconds, max_s=args.max_seconds,
                       sync=sync)
    pipe.close()
    mb = None if free is None else (free[0] - free[1]) / MB
    return {"name": f"detaug {device.upper()}, {SEG_NAMES[mode]}", "img_s": n / secs, "images": n,
            "seconds": round(secs, 2), "device_mb": mb,
            "notes": f"{k} batches of {args.batch_size}, {stats['instances'] / max(stats['images'], 1):.1f} "
                     "boxes/img" + ("" if mb is None else f", device {mb:,.0f} MB")}


SEG_NAMES = {"masks": "masks", "polygons": "polygons, masks made by the adapter",
             "boxes": "boxes only"}


def run_seg(args, smoke, gpu):
    """bench_gpu --seg: data, detaug masks / boxes rows, torchvision v2 (if importable), and
    the short table: img/s, the masks / boxes cost ratio, detaug / torchvision."""
    from gpu_peers import bench_tv_seg

    root = make_seg_dataset(args.data, args.num_images, args.gen_workers)
    device = "gpu" if gpu else "cpu"
    tv_name = f"torchvision v2 DataLoader ({args.seg_workers} workers), masks"
    if _version("torchvision") is None:  # first: its workers fork before CUDA starts here
        skip(tv_name, "torchvision not importable")
    else:
        section(tv_name, bench_tv_seg, args, root, args.seg_workers)
    for k in range(max(1, getattr(args, "seg_passes", 1))):  # alternated: a row's best pass
        for mode in SEG_MODES:  # (the first row of the first pass also pays what warms up once)
            r = section(f"detaug {device}, {SEG_NAMES[mode]}", bench_detaug_seg, args, root,
                        device, mode)
            if r is not None and k:
                r["notes"] = f"pass {k + 1}: " + str(r.get("notes") or r.get("error") or "")
    by = {}
    for r in ROWS:
        by[r["name"]] = max(r.get("img_s") or 0, by.get(r["name"]) or 0) or None
    m = by.get(f"detaug {device.upper()}, masks")
    b = by.get(f"detaug {device.upper()}, boxes only")
    tv = by.get(tv_name)
    print(f"\n| seg recipe ({args.seg_size} px, batch {args.batch_size}{', CPU smoke' if smoke else ''})"
          " | img/s | notes |\n|---|---:|---|")
    for r in ROWS:
        v = r.get("img_s")
        note = " ".join(str(r.get("notes") or r.get("error") or r.get("skipped") or "").split())
        print(f"| {r['name']} | {'-' if v is None else f'{v:,.1f}'} | {note[:200]} |")
    pm = by.get(f"detaug {device.upper()}, {SEG_NAMES['polygons']}")
    if m and b:
        print(f"| masks / boxes cost per image (target <= 2x) | {b / m:.2f}x | |")
    if m and b and pm:  # masks made in the graph (fn.instance_masks) or by the adapter
        print(f"| ms a batch over boxes only: masks in the graph / by the adapter | "
              f"{1e3 * args.batch_size * (1 / m - 1 / b):.2f} / "
              f"{1e3 * args.batch_size * (1 / pm - 1 / b):.2f} | |")
    if m and tv:
        print(f"| detaug masks / torchvision v2 (target >= 10x) | {m / tv:.2f}x | |")
    return 0 if m else 1

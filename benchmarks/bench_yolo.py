"""The YOLO-style row: detaug beside Ultralytics 8.4's data loader, same recipe, same data, one run.

    python benchmarks/bench_yolo.py [--num-images 1024] [--batch-size 64] [--workers 2,15]
                                    [--partners epoch,batch,pool] [--only ultralytics,cpu,gpu]
    python benchmarks/bench_yolo.py --cpu-smoke     # plumbing test: tiny data, CPU, seconds
    python benchmarks/bench_yolo.py --only profile --batch-size 8 --batches 4  # op by op

Recipe, per output image (Ultralytics' ``v8_transforms`` with its 8.4 defaults and mixup 0.5):
mosaic of 4 (imgsz 640: each image's longer side to 640, 1280 x 1280 canvas, centre in
[320, 960)) -> random perspective (degrees 10, translate 0.1, scale 0.5, shear 2, perspective
0.0005: ``fn.affine``'s perspective_x/y are its P[2, 0], P[2, 1]; no antialiasing, as its
cv2.warpPerspective) cut to the centre 640 x 640 -> mixup (p 0.5, r ~ Beta(32, 32)) -> HSV
(gains 0.015 / 0.7 / 0.4) -> horizontal flip 0.5 -> letterbox 640 x 640; batches of 64, uint8
images and padded boxes out (the trainer normalises on the GPU).

Rows:
* ``ultralytics`` (if ``import ultralytics`` works; AGPL, never a dependency of detaug: install it
  in the benchmark's environment only): ``build_yolo_dataset`` + ``build_dataloader`` with N
  workers (``--workers``), no RAM cache, on YOLO labels written beside the images. Its mosaic
  takes partners from its buffer of recently loaded images (``dataset.buffer``): about 1.5
  decodes per output at mixup 0.5 (counted: every ``imread`` of its workers).
* ``detaug cpu`` (host worker processes = N) and ``detaug gpu`` (nvImageCodec decode, device ops),
  each with ``--partners``: 'epoch' (partners read and decoded from the whole epoch: 4 decodes a
  mosaic, about 6 per output) and 'batch' (partners from the output's own batch: 1 decode per
  output) and 'pool' (partners from the output's batch and the one before it in the epoch order,
  each drawn image decoded once: about 2 drawn per output, about 1.5 decoded with the decode
  cache: detaug/runtime/decode_cache.py; ``--decode-cache-mb 0`` turns it off; a launch of
  ``--batches-per-launch`` k batches decodes an image drawn twice in it once). Decoded: counted
  on the CPU (``decode._decode_one``; cache hits are none), on the GPU the drawn (keyed draws).

Timing (:func:`timed_window`, every row): warm-up batches (prefetch depth + ``--warmup``), then
>= ``--min-seconds`` and >= ``--batches`` (over epochs), <= ``--max-seconds``; a window under 1 s
or of no image: INVALID; a row that raises: FAILED. Ultralytics' workers shut down gracefully.

``--only profile`` (:func:`profile`): no loader; the recipe step by step in one thread, each of
detaug's CPU ops (per ``--partners``) and the making of its outputs (the flip and letterbox
left pending) beside each of Ultralytics' steps and its collate_fn, in thread CPU ms per output
image, over ``--batches`` batches of ``--batch-size``.

Printed per row: img/s, decoded source images/s, the ratio to Ultralytics at the same worker count
(and to its largest N), on the GPU the device memory taken (the drop of ``cudaMemGetInfo``'s free
bytes from before the build: every process on the device). Data: bench_gpu's ``make_dataset``
(COCO-like JPEGs about 640 x 480). Ultralytics runs first, before CUDA starts here (its workers
fork). Not part of the test suite.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
import traceback

for _v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [p for p in (REPO, HERE) if p not in sys.path]
from bench_gpu import make_dataset  # noqa: E402  (the benchmark's COCO-like data)

MB = 1e6
ROWS = []
T0 = time.perf_counter()
HSV_GAINS = (0.015, 0.7, 0.4)  # Ultralytics' hsv_h, hsv_s, hsv_v
MIN_WINDOW_S = 1.0  # a shorter timed window is reported as invalid
PERSPECTIVE = 0.0005  # Ultralytics' perspective: P[2, 0], P[2, 1] ~ U(-p, p)
PERSPECTIVE_NOTE, OUTPUT_STEP = f"perspective {PERSPECTIVE}", "outputs (pending flip, letterbox)"


def log(msg):
    print(f"[{time.perf_counter() - T0:7.1f}s] {msg}", flush=True)


def row(name, **kw):
    kw["name"] = name
    ROWS.append(kw)
    if kw.get("img_s") is not None:
        log(f"{name}: {kw['img_s']:.1f} img/s, {kw.get('decoded_s', 0):.1f} decoded/s "
            f"{kw.get('notes', '')}")
    else:
        log(f"{name}: {kw.get('skipped') or kw.get('error')}")


def guarded(name, fn, *a, **kw):
    try:
        return fn(*a, **kw)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 -- one failure must not lose the other rows
        traceback.print_exc()
        print(f"FAILED {name}: {type(e).__name__}: {e}", flush=True)
        row(name, img_s=None, error=f"FAILED {type(e).__name__}: {e}"[:300])
        return None


def timed_window(next_batch, depth, args, sync=None, on_start=None):
    """Steady-state rate of a loader, the same for every row.

    Warm-up: ``depth + args.warmup`` batches (``depth``: the batches the loader may hold
    ready; consuming them all ensures nothing made before the clock starts is counted and that
    every worker has made at least one batch: workers deliver in bursts of about N batches).
    Then the clock runs over whole batches until both ``args.min_seconds`` and ``args.batches``
    are reached (over as many epochs as that takes), or ``args.max_seconds`` passed. ``sync``
    (the GPU's event) is waited on before the clock starts and before it stops.
    ``next_batch() -> images in the batch``. Returns (images, batches, seconds, warm-up s)."""
    t = time.perf_counter()
    for _ in range(depth + args.warmup):
        next_batch()
    if sync:
        sync()
    warm = time.perf_counter() - t
    if on_start:
        on_start()
    n = nb = 0
    t0 = time.perf_counter()
    while True:
        n += next_batch()
        nb += 1
        dt = time.perf_counter() - t0
        if (dt >= args.min_seconds and nb >= args.batches) or dt >= args.max_seconds:
            break
    if sync:
        sync()
    return n, nb, time.perf_counter() - t0, warm


def valid_row(name, n, nb, dt, warm, decoded, notes="", **kw):
    """A row from a timed window, or an INVALID row (no rate) when the window measured nothing:
    no image, or under ``MIN_WINDOW_S`` seconds."""
    notes = f"({n} images, {nb} batches in {dt:.2f} s after {warm:.1f} s warm-up; {notes})"
    if n <= 0 or dt < MIN_WINDOW_S:
        why = f"INVALID window: {n} images in {dt:.3f} s (needs > 0 images, >= {MIN_WINDOW_S} s)"
        print(f"FAILED {name}: {why}", flush=True)
        row(name, img_s=None, error=f"{why} {notes}", **kw)
        return
    row(name, img_s=n / dt, decoded_s=decoded / dt, seconds=dt, images=n, batches=nb,
        warmup_s=warm, notes=notes, **kw)


# ---------------------------------------------------------------------------- data
def write_yolo_labels(root):
    """YOLO text labels (``labels/<stem>.txt``: class cx cy w h, normalised) beside
    ``images/``, from annotations.json, and the class names; Ultralytics finds them by path."""
    with open(os.path.join(root, "annotations.json")) as f:
        coco = json.load(f)
    cats = sorted(c["id"] for c in coco["categories"])
    index = {c: k for k, c in enumerate(cats)}
    names = {c["id"]: c["name"] for c in coco["categories"]}
    images = {im["id"]: im for im in coco["images"]}
    lines = {i: [] for i in images}
    for a in coco["annotations"]:
        im = images[a["image_id"]]
        x, y, w, h = a["bbox"]
        lines[a["image_id"]].append(f"{index[a['category_id']]} {(x + w / 2) / im['width']:.6f} "
                                    f"{(y + h / 2) / im['height']:.6f} {w / im['width']:.6f} "
                                    f"{h / im['height']:.6f}")
    os.makedirs(os.path.join(root, "labels"), exist_ok=True)
    for i, im in images.items():
        stem = os.path.splitext(im["file_name"])[0]
        with open(os.path.join(root, "labels", stem + ".txt"), "w") as f:
            f.write("\n".join(lines[i]) + ("\n" if lines[i] else ""))
    return [names[c] for c in cats]


# ---------------------------------------------------------------------------- ultralytics
def ultralytics_loader(root, names, size, batch, workers, mixup):
    """Ultralytics' YOLODataset and InfiniteDataLoader, training mode, the recipe's settings;
    its imread counted across its workers (a shared counter, inherited at fork)."""
    from ultralytics.cfg import get_cfg
    from ultralytics.data import build_dataloader, build_yolo_dataset
    from ultralytics.data import base as ul_base

    cfg = get_cfg(overrides=dict(imgsz=size, mosaic=1.0, degrees=10.0, translate=0.1, scale=0.5,
                                 shear=2.0, perspective=0.0005, mixup=mixup, fliplr=0.5,
                                 hsv_h=HSV_GAINS[0], hsv_s=HSV_GAINS[1], hsv_v=HSV_GAINS[2],
                                 cache=False, rect=False, workers=workers, cutmix=0.0,
                                 copy_paste=0.0))
    data = {"names": dict(enumerate(names)), "nc": len(names), "channels": 3}
    counter, _undo = counted_calls(ul_base, "imread")
    ds = build_yolo_dataset(cfg, os.path.join(root, "images"), batch, data, mode="train")
    return build_dataloader(ds, batch, workers, shuffle=True), counter


def bench_ultralytics(args, root, names, workers):
    name = f"ultralytics 8.4 loader, {workers} workers"
    loader, counter = ultralytics_loader(root, names, args.size, args.batch_size, workers,
                                         args.mixup)
    # its queue: num_workers x prefetch_factor batches (build_dataloader sets 4)
    depth = loader.num_workers * (loader.prefetch_factor or 0)
    state = {"it": iter(loader)}
    marks = {}

    def mark():
        marks["decoded"] = counter.value

    def next_batch():
        # its InfiniteDataLoader ends an iteration after an epoch (16 batches of the 1,024
        # images) and keeps its workers: a new iteration goes on with them
        try:
            return len(next(state["it"])["img"])
        except StopIteration:
            state["it"] = iter(loader)
            return len(next(state["it"])["img"])

    try:
        n, nb, dt, warm = timed_window(next_batch, depth, args, on_start=mark)
        decoded = counter.value - marks["decoded"]
    finally:
        shutdown_ultralytics(loader)
    valid_row(name, n, nb, dt, warm, decoded, workers=workers,
              notes=f"depth {depth}; perspective 0.0005")


def shutdown_ultralytics(loader):
    """Stop the DataLoader's workers the graceful way (torch's ``_shutdown_workers``: its pin
    thread joined first, no batch half sent; its ``__del__`` terminates the workers first, which
    can cut a tensor's fd hand-over: ConnectionResetError in ``rebuild_storage_fd``)."""
    inner = getattr(loader, "iterator", None)
    if inner is not None and hasattr(inner, "_shutdown_workers"):
        inner._shutdown_workers()
    del loader


# ---------------------------------------------------------------------------- detaug
def detaug_pipe(root, size, batch, device, workers, partners, mixup, seed=0, budget=None,
                reduce=1, decode_cache_mb=None, batches_per_launch=None, **pipe_kwargs):
    from detaug import fn, pipeline_def

    gpu = device == "gpu"
    kw = dict(device_id=0) if gpu else dict(host_processes=workers)
    set_here = dict(device_memory_budget=budget, decode_cache_mb=decode_cache_mb,
                    batches_per_launch=batches_per_launch)
    kw.update({k: v for k, v in set_here.items() if v is not None}, **pipe_kwargs)

    @pipeline_def(batch_size=batch, num_threads=max(1, workers), seed=seed, **kw)
    def yolo():
        enc, boxes = fn.readers.coco(annotations_file=os.path.join(root, "annotations.json"),
                                     file_root=os.path.join(root, "images"), random_shuffle=True)
        if reduce != 1:  # CPU only: decode at 1/reduce, the boxes scaled with it
            img, boxes = fn.decoders.image(enc, boxes, reduce=reduce)
        else:
            img = fn.decoders.image(enc, device="mixed" if gpu else "cpu")
        img, boxes = fn.mosaic(img, boxes, size=size, antialias=False, partners=partners)
        u = fn.random.uniform
        t = 0.1 * size
        img, boxes = fn.affine(img, boxes, rotate=u(range=(-10, 10)), scale=u(range=(0.5, 1.5)),
                               shear_x=u(range=(-2, 2)), shear_y=u(range=(-2, 2)),
                               translate_x=u(range=(-t, t)), translate_y=u(range=(-t, t)),
                               perspective_x=u(range=(-PERSPECTIVE, PERSPECTIVE)),
                               perspective_y=u(range=(-PERSPECTIVE, PERSPECTIVE)),
                               fill=114.0, antialias=False)
        img, boxes = fn.crop(img, boxes, crop=(size, size), fill=114.0)
        boxes = fn.prune_boxes(boxes, min_size=2.0, min_visibility=0.1)
        img, boxes = fn.mixup(img, boxes, probability=mixup, partners=partners)
        h = HSV_GAINS[0] * 180
        img = fn.hsv(img, hue=u(range=(-h, h)), saturation=u(range=(1 - HSV_GAINS[1], 1 + HSV_GAINS[1])),
                     value=u(range=(1 - HSV_GAINS[2], 1 + HSV_GAINS[2])))
        img, boxes = fn.flip(img, boxes, horizontal=fn.random.coin_flip())
        img, boxes = fn.letterbox(img, boxes, size=(size, size), fill=114.0)
        return img, fn.pad_boxes(fn.prune_boxes(boxes, min_size=2.0))

    return yolo()


def counted_decodes():
    """A counter of detaug's CPU decodes across this process and its forked host workers (a
    shared value, inherited at fork): every ``decode._decode_one``, so a decoded image that the
    decode cache gave back is not counted. Returns (counter, undo)."""
    from detaug.ops import decode

    return counted_calls(decode, "_decode_one")


def counted_calls(owner, name):
    """``owner.name`` replaced by a wrapper that counts its calls across this process and its
    forked workers (a shared value, inherited at fork). Returns (counter, undo)."""
    counter = mp.get_context("fork").Value("q", 0, lock=True)
    one = getattr(owner, name)

    def counted(*a, **kw):
        with counter.get_lock():
            counter.value += 1
        return one(*a, **kw)

    setattr(owner, name, counted)
    return counter, lambda: setattr(owner, name, one)


def bench_detaug(args, root, device, workers, partners):
    from detaug.runtime.partners import decoded_per_batch

    name = f"detaug {device}, partners={partners}" + (f", {workers} workers" if device == "cpu" else "")
    if args.decode_cache_mb is not None and device == "cpu":
        name += f", decode_cache_mb={args.decode_cache_mb}"
    free0 = None
    if device == "gpu":
        import cupy as cp

        free0 = int(cp.cuda.runtime.memGetInfo()[0])
    from gpu_common import build_within_budget

    counter, undo = counted_decodes() if device == "cpu" else (None, None)
    pipe_kwargs = json.loads(args.pipe_kwargs)
    pipe, refused, _ = build_within_budget(
        lambda budget: detaug_pipe(root, args.size, args.batch_size, device, workers, partners,
                                   args.mixup, budget=budget, decode_cache_mb=args.decode_cache_mb,
                                   batches_per_launch=args.batches_per_launch, **pipe_kwargs),
        say=lambda m: log(f"{name}: {m}"))
    if refused:
        name += f" ({refused})"
    try:
        # batches kept in flight: the depth (launches) times a launch's batches, times the host
        # processes of a CPU pipeline
        depth = pipe.prefetch_queue_depth * pipe.batches_per_launch * (
            1 if pipe.has_device_stage else max(1, pipe.host_processes))
        done = []

        def one():
            e, b = pipe.epoch, pipe.state_dict()["batch"]
            img, _ = pipe.run()
            done.append((e, b))
            return len(img)

        def sync():
            if pipe.last_event is not None:
                pipe.last_event.synchronize()

        start = {}

        def mark():
            start["at"] = len(done)
            start["decoded"] = counter.value if counter is not None else 0

        n, nb, dt, warm = timed_window(one, depth, args, sync=sync, on_start=mark)
        k = pipe.batches_per_launch  # drawn per launch (a launch decodes an image once), each
        drawn = sum(decoded_per_batch(pipe, e, b - b % k, k) / k for e, b in done[start["at"]:])
        # counted on the CPU (the cache's hits left out); on the GPU the images drawn
        decoded = counter.value - start["decoded"] if counter is not None else drawn
        extra = {"drawn_s": drawn / dt if dt > 0 else None,
                 "host_cache_mb": pipe.build_plan.host_cache_bytes / MB}
        if free0 is not None:
            import cupy as cp

            extra["device_mb"] = (free0 - int(cp.cuda.runtime.memGetInfo()[0])) / MB
    finally:
        pipe.close()
        if undo is not None:
            undo()
    valid_row(name, n, nb, dt, warm, decoded, workers=workers, partners=partners,
              notes=f"depth {depth} batches, {k} a launch; {PERSPECTIVE_NOTE}; "
                    f"drawn {extra['drawn_s'] or 0:.1f}/s; decode caches {extra['host_cache_mb']:.0f} MB"
              + (f"; device memory {extra['device_mb']:.0f} MB" if "device_mb" in extra else ""),
              **extra)


# ---------------------------------------------------------------------------- profile
class StepClock:
    """Exclusive thread CPU time (``time.thread_time``: this thread's own work, OpenCV's with
    it at one OpenCV thread) by label, of calls nested on one thread: a call's time less its
    nested calls'."""

    def __init__(self):
        import threading

        self.t, self.n, self.local = {}, {}, threading.local()

    def wrap(self, label, f):
        def timed(*a, **kw):
            stack = self.local.__dict__.setdefault("stack", [])
            t0 = time.thread_time()
            stack.append(0.0)
            try:
                return f(*a, **kw)
            finally:
                dt = time.thread_time() - t0
                self.t[label] = self.t.get(label, 0.0) + dt - stack.pop()
                self.n[label] = self.n.get(label, 0) + 1
                if stack:
                    stack[-1] += dt
        return timed


def profile_detaug(args, root, partners):
    """{op: ms per output image} of detaug's CPU recipe, every op's impl timed in this thread
    (no worker process, one host thread; ops run one batch at a time) and the outputs' making
    (``OUTPUT_STEP``: the flip and letterbox left pending run there), and the images made."""
    from detaug.graph.trace import REGISTRY
    from detaug.runtime.gpu.device_stage import DeviceStage
    clock, saved = StepClock(), {}
    for name, schema in REGISTRY.items():
        if schema.impl is not None and schema.kind != "source":
            saved[name] = schema.impl
            object.__setattr__(schema, "impl", clock.wrap(name, schema.impl))
    collect, DeviceStage.collect = DeviceStage.collect, clock.wrap(OUTPUT_STEP, DeviceStage.collect)
    try:
        pipe = detaug_pipe(root, args.size, args.batch_size, "cpu", 0, partners, args.mixup,
                           reduce=args.reduce, decode_cache_mb=args.decode_cache_mb)
        pipe.build()
        pipe.run()  # warm-up (and the prefetched batches it starts)
        clock.t.clear()
        clock.n.clear()
        for _ in range(args.batches):
            pipe.run()
        pipe.close()
    finally:
        DeviceStage.collect = collect
        for name, impl in saved.items():
            object.__setattr__(REGISTRY[name], "impl", impl)
    # each call of an op makes one batch of outputs (a launch is one batch here), whichever
    # batches the executor had in flight when the window opened or closed
    images = clock.n.get("pad_boxes", 0) * args.batch_size
    return {k: 1e3 * v / (clock.n[k] * args.batch_size) for k, v in clock.t.items()}, images


def profile_ultralytics(args, root, names):
    """{step: ms per output image} of Ultralytics' dataset in this process: imread, the rest of
    load_image (its resize), each transform, nested calls (MixUp's own mosaic) in their own
    step, and its collate_fn on each batch."""
    import ultralytics.data.base as ul_base
    from ultralytics.cfg import get_cfg
    from ultralytics.data import build_yolo_dataset

    cfg = get_cfg(overrides=dict(imgsz=args.size, mosaic=1.0, degrees=10.0, translate=0.1,
                                 scale=0.5, shear=2.0, perspective=PERSPECTIVE, mixup=args.mixup,
                                 fliplr=0.5, hsv_h=HSV_GAINS[0], hsv_s=HSV_GAINS[1],
                                 hsv_v=HSV_GAINS[2], cache=False, rect=False, workers=0,
                                 cutmix=0.0, copy_paste=0.0))
    data = {"names": dict(enumerate(names)), "nc": len(names), "channels": 3}
    clock, imread = StepClock(), ul_base.imread
    ul_base.imread = clock.wrap("decode (imread)", imread)
    try:
        ds = build_yolo_dataset(cfg, os.path.join(root, "images"), args.batch_size, data,
                                mode="train")
        ds.load_image = clock.wrap("resize (load_image less imread)", ds.load_image)
        seen = set()

        def walk(compose):
            ts = getattr(compose, "transforms", None)
            if not isinstance(ts, list) or id(compose) in seen:
                return
            seen.add(id(compose))
            for k, t in enumerate(ts):
                walk(t)
                walk(getattr(t, "pre_transform", None))
                if not hasattr(t, "transforms"):
                    ts[k] = _TimedStep(clock.wrap(type(t).__name__, t.__call__), t)

        walk(ds.transforms)
        collate = clock.wrap("collate (collate_fn)", ds.collate_fn)
        ds[0]
        clock.t.clear()
        images = args.batches * args.batch_size
        for b in range(args.batches):
            collate([ds[(b * args.batch_size + i) % len(ds)] for i in range(args.batch_size)])
    finally:
        ul_base.imread = imread
    return {k: 1e3 * v / images for k, v in clock.t.items()}, images


class _TimedStep:
    """A transform whose call is timed; its attributes (MixUp's pre_transform...) its own."""
    def __init__(self, call, inner):
        self._call, self._inner = call, inner

    def __call__(self, *a, **kw):
        return self._call(*a, **kw)

    def __getattr__(self, k):
        return getattr(self._inner, k)


def profile(args, root, names):
    """``--only profile``: the recipe step by step on the CPU, detaug's ops beside Ultralytics'
    steps, in thread CPU ms per output image (one thread, one OpenCV thread each), so the gap is
    located op by op. On a shared machine rerun it: compare runs, not one number."""
    import cv2

    cv2.setNumThreads(1)
    tables = {}
    for p in [p for p in args.partners.split(",") if p.strip()]:
        tables[f"detaug cpu, partners={p}"] = profile_detaug(args, root, p)
    try:
        tables["ultralytics 8.4"] = profile_ultralytics(args, root, names)
    except ImportError as e:
        log(f"profile: ultralytics is not importable ({e}); its steps left out")
    for name, (steps, images) in tables.items():
        total = sum(steps.values())
        print(f"\n### {name}: {total:.2f} thread ms per output image in its steps "
              f"({images} images)\n| step | ms / image | share |\n|---|---:|---:|")
        for k, v in sorted(steps.items(), key=lambda kv: -kv[1]):
            if v >= 0.005:
                print(f"| {k} | {v:.2f} | {100 * v / total:.0f}% |")
        ROWS.append({"name": f"profile: {name}", "img_s": None, "steps_ms": steps,
                     "images": images, "skipped": "profile (thread ms per image)"})


# ---------------------------------------------------------------------------- report
def report(args):
    ul = {r["workers"]: r["img_s"] for r in ROWS
          if r["name"].startswith("ultralytics") and r.get("img_s")}
    best = max(ul.values()) if ul else None
    print("\n| row | img/s | decoded img/s | x Ultralytics (same N) | x Ultralytics (best N) | "
          "device MB | window |")
    print("|---|---|---|---|---|---|---|")
    for r in ROWS:
        if r.get("img_s") is None:
            print(f"| {r['name']} | - | - | - | - | - | {r.get('skipped') or r.get('error')} |")
            continue
        same = ul.get(r.get("workers"))
        ratio = f"{r['img_s'] / same:.2f}" if same and not r["name"].startswith("ultra") else "-"
        vs_best = f"{r['img_s'] / best:.2f}" if best and not r["name"].startswith("ultra") else "-"
        mem = f"{r['device_mb']:.0f}" if r.get("device_mb") is not None else "-"
        print(f"| {r['name']} | {r['img_s']:.1f} | {r['decoded_s']:.1f} | {ratio} | {vs_best} | "
              f"{mem} | {r['images']} img / {r['seconds']:.1f} s |")
    out = args.json or (os.path.join(os.environ["OUT"], "bench_yolo.json")
                        if os.environ.get("OUT") else None)
    if out:
        with open(out, "w") as f:
            json.dump({"rows": ROWS, "args": vars(args), "cpus": os.cpu_count()}, f, indent=1)
        log(f"wrote {out}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num-images", type=int, default=1024)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--size", type=int, default=640)
    ap.add_argument("--mixup", type=float, default=0.5)
    ap.add_argument("--reduce", type=int, default=1,
                    help="profile only: detaug's CPU decode at 1/reduce (2, 4, 8; not the pixels "
                         "of a full decode): for sources much larger than --size")
    ap.add_argument("--workers", default="2,15", help="worker counts (Ultralytics, detaug cpu)")
    ap.add_argument("--partners", default="epoch,batch,pool", help="detaug's: epoch, batch, pool")
    ap.add_argument("--only", default="ultralytics,cpu,gpu",
                    help="rows: ultralytics, cpu, gpu; profile: the per-op CPU profile")
    ap.add_argument("--batches", type=int, default=20, help="timed batches a row (at least)")
    ap.add_argument("--min-seconds", type=float, default=10.0, help="timed window a row, at least")
    ap.add_argument("--max-seconds", type=float, default=40.0,
                    help="the timed window stops here even short of --batches")
    ap.add_argument("--warmup", type=int, default=3, help="warm-up batches beyond the prefetched")
    ap.add_argument("--data", default=None, help="data folder (default: a temporary one)")
    ap.add_argument("--json", default=None, help="rows to this file (default: $OUT/, if set)")
    ap.add_argument("--batches-per-launch", type=int, default=None, help="detaug rows (plan's)")
    ap.add_argument("--pipe-kwargs", default="{}",
                    help="more Pipeline arguments for the detaug rows, as JSON, as bench_gpu's "
                         "(e.g. '{\"prefetch_queue_depth\": 6, \"device_workers\": 12}')")
    ap.add_argument("--decode-cache-mb", type=int, default=None,
                    help="detaug cpu rows and profile: the pipeline's decode_cache_mb (0: no "
                         "cache; default: the pipeline's)")
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="tiny run on the CPU: 32 images of 160, batches of 4, 2 timed")
    args = ap.parse_args(argv)
    if args.cpu_smoke:
        args.num_images, args.batch_size, args.size, args.batches, args.warmup = 32, 4, 160, 2, 1
        args.workers, args.min_seconds, args.max_seconds = "0,2", 1.0, 5.0
        args.only = args.only.replace(",gpu", "").replace("gpu", "")
    workers = [int(w) for w in args.workers.split(",") if w.strip()]
    only = set(args.only.split(","))
    root = args.data or os.path.join(tempfile.gettempdir(), f"detaug_bench_yolo_{args.num_images}")
    os.environ.setdefault("YOLO_CONFIG_DIR", os.path.join(root, "ultralytics_config"))
    os.environ.setdefault("YOLO_OFFLINE", "1")  # no DNS probe at its import
    make_dataset(root, args.num_images, min(8, os.cpu_count() or 1))
    names = write_yolo_labels(root)
    log(f"data: {args.num_images} images in {root}, {len(names)} classes; {os.cpu_count()} CPUs")
    if "profile" in only:
        profile(args, root, names)
    if "ultralytics" in only:
        try:
            import ultralytics  # noqa: F401
        except ImportError as e:
            row("ultralytics 8.4 loader", img_s=None,
                skipped=f"ultralytics is not importable ({e}); install it in this environment "
                        "only (AGPL): pip install 'ultralytics==8.4.*'")
        else:
            for n in workers:
                guarded(f"ultralytics {n} workers", bench_ultralytics, args, root, names, n)
    partners = [p for p in args.partners.split(",") if p.strip()]
    if "cpu" in only:
        for p in partners:
            for n in workers:
                guarded(f"detaug cpu {p} {n}", bench_detaug, args, root, "cpu", n, p)
    if "gpu" in only:
        from detaug.core.backend import gpu_available
        if not gpu_available():
            row("detaug gpu", img_s=None, skipped="no GPU")
        else:
            for p in partners:
                guarded(f"detaug gpu {p}", bench_detaug, args, root, "gpu", 0, p)
    report(args)


if __name__ == "__main__":
    main()

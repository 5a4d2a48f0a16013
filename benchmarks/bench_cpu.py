"""CPU throughput of one detection pipeline: detaug vs torchvision.transforms.v2 vs albumentations.

    python benchmarks/bench_cpu.py [--workers N] [--epochs 5] [--min-seconds 10] [--data DIR]

The pipeline, per image: decode JPEG -> random IoU crop (SSD) -> random horizontal flip ->
resize to 640x640 -> drop degenerate boxes -> normalize to float32 CHW; batches of 16.

* detaug: ``fn.readers.coco`` -> ``fn.decoders.image`` (Pillow) -> ``fn.random_iou_crop`` ->
  ``fn.flip(coin_flip)`` -> ``fn.resize(640, 640)`` -> ``fn.prune_boxes`` -> ``fn.normalize(CHW)``
  (+ ``fn.pad_boxes``), CPU backend, ``num_threads = N`` host threads in one process.
* torchvision v2: ``decode_jpeg`` -> RandomIoUCrop, RandomHorizontalFlip, Resize((640, 640)),
  SanitizeBoundingBoxes, ToDtype(float32, scale=True), Normalize; a torch DataLoader with
  ``num_workers = N`` processes (``torch.set_num_threads(1)`` in each), batch 16.
* albumentations 2.0.8: ``cv2.imdecode`` (+ BGR->RGB) -> RandomSizedBBoxSafeCrop(640, 640),
  HorizontalFlip, Normalize, HWC->CHW; a torch DataLoader with N workers (or, without torch, a
  multiprocessing Pool of N), batch 16.

Every engine gets the same N (default ``os.cpu_count()``). OpenCV's own thread pool is set to
``--cv2-threads`` (default 1) everywhere and torch's intra-op threads to 1, so that N is the
number of busy cores for each engine ("core for core"). Each engine runs ``--warmup`` epochs of
the data set (68 images for coco-mini) untimed, then timed epochs until both ``--epochs`` and
``--min-seconds`` are reached; img/s counts the images delivered. A peer that is not installed
is skipped with a note. This script is not part of the test suite.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time

# Single-threaded BLAS/OpenMP everywhere (set before numpy / torch / cv2 are imported).
for _v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# one definition of the pipelines and the peers' dataset, in bench_gpu
from bench_gpu import (MEAN, SIZE, STD, TVFileDataset, _version,  # noqa: E402
                       make_det_pipe)


# ---------------------------------------------------------------------------- data
def load_coco(data):
    """[(path, boxes xyxy float32 (n, 4), labels int64 (n,))] for the peers, through the
    project's own COCO reader (crowd boxes left out, as the peers' transforms expect)."""
    from readers import read_coco

    ds = read_coco(os.path.join(data, "annotations.json"), os.path.join(data, "images"),
                   include_iscrowd=False)
    return [(r.path, r.boxes, r.labels) for r in ds.records]


def cpu_seconds():
    """CPU time (user + system) of this process (all threads) and of its live child processes
    (DataLoader / Pool workers), from /proc. On a shared or loaded machine wall-clock img/s
    depends on the neighbours; images per CPU-second does much less."""
    t = os.times()
    total = t.user + t.system
    tick = os.sysconf("SC_CLK_TCK")
    me = os.getpid()
    for d in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:  # ppid
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def timed_epochs(run_epoch, warmup, epochs, min_seconds):
    """Run ``warmup`` untimed epochs, then timed ones until >= epochs and >= min_seconds.
    ``run_epoch()`` returns the images it delivered.
    Returns (images, wall seconds, epochs, CPU seconds of this process and its workers)."""
    for _ in range(warmup):
        run_epoch()
    n, e, c0, t0 = 0, 0, cpu_seconds(), time.perf_counter()
    while e < epochs or time.perf_counter() - t0 < min_seconds:
        n += run_epoch()
        e += 1
    return n, time.perf_counter() - t0, e, cpu_seconds() - c0


def _set_cv2_threads(n):
    try:
        import cv2

        cv2.setNumThreads(n)
    except ImportError:
        pass


# ---------------------------------------------------------------------------- detaug
def bench_detaug(args):
    pipe = make_det_pipe(args.data, "cpu", max_boxes=None, batch_size=args.batch_size,
                         num_threads=args.workers, seed=0, prefetch_queue_depth=args.prefetch,
                         last_batch_policy="partial")
    pipe.build()

    def epoch():
        n = 0
        for img, _boxes in pipe:
            n += len(img.data)
            assert img.data.shape[1:] == (3, SIZE, SIZE) and img.data.dtype == np.float32
        pipe.reset()
        return n

    try:
        return timed_epochs(epoch, args.warmup, args.epochs, args.min_seconds)
    finally:
        pipe.close()


# ---------------------------------------------------------------------------- peers (shared)
def _worker_init(_):
    _set_cv2_threads(_CV2_THREADS)
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass


_CV2_THREADS = 1


def make_loader(dataset, collate, workers, batch_size):
    """The peers' torch DataLoader: ``workers`` processes kept across epochs, shuffled, batch
    ``batch_size`` (bench_cpu and bench_startup)."""
    import torch
    from torch.utils.data import DataLoader

    return DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=workers,
                      collate_fn=collate, persistent_workers=workers > 0,
                      worker_init_fn=_worker_init, prefetch_factor=2 if workers else None,
                      generator=torch.Generator().manual_seed(0))


def stop_loader(loader):
    """Stop a DataLoader's persistent workers now, not when the loader is collected."""
    it = getattr(loader, "_iterator", None)
    if it is not None and hasattr(it, "_shutdown_workers"):
        it._shutdown_workers()


def _loader_epochs(dataset, collate, args):
    """Drive ``dataset`` with a torch DataLoader (N worker processes, kept across epochs)."""
    loader = make_loader(dataset, collate, args.workers, args.batch_size)

    def epoch():
        n = 0
        for img, _targets in loader:
            n += img.shape[0]
        return n

    try:
        return timed_epochs(epoch, args.warmup, args.epochs, args.min_seconds)
    finally:
        stop_loader(loader)


# ---------------------------------------------------------------------------- torchvision v2
def _collate_images(batch):
    """Images stacked by torch's ``default_collate`` (inside a worker it stacks straight into
    shared memory, so the batch reaches the main process without a further copy); targets stay
    a list of dicts, as detection models take them."""
    from torch.utils.data import default_collate

    return default_collate([b[0] for b in batch]), [b[1] for b in batch]


def bench_torchvision(args, records):
    import torchvision  # noqa: F401

    return _loader_epochs(TVFileDataset(records, args.tv_decode), _collate_images, args)


# ---------------------------------------------------------------------------- albumentations
class AlbuDataset:
    def __init__(self, records):
        import albumentations as A

        self.records = records
        self.tf = A.Compose(
            [A.RandomSizedBBoxSafeCrop(SIZE, SIZE), A.HorizontalFlip(p=0.5),
             A.Normalize(mean=[m / 255 for m in MEAN], std=[s / 255 for s in STD],
                         max_pixel_value=255.0)],
            bbox_params=A.BboxParams(format="pascal_voc", label_fields=["labels"], min_area=1.0),
            seed=0)

    def __len__(self):
        return len(self.records)

    def __getitem__(self, i):
        import cv2

        path, boxes, labels = self.records[i]
        img = cv2.imdecode(np.fromfile(path, np.uint8), cv2.IMREAD_COLOR)
        img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
        h, w = img.shape[:2]
        boxes = np.clip(boxes, 0, [w, h, w, h])  # albumentations refuses boxes past the edge
        r = self.tf(image=img, bboxes=boxes, labels=labels)
        chw = np.ascontiguousarray(r["image"].transpose(2, 0, 1))
        return chw, {"boxes": np.asarray(r["bboxes"], np.float32).reshape(-1, 4),
                     "labels": np.asarray(r["labels"], np.int64)}


def _collate_np(batch):
    return np.stack([b[0] for b in batch]), [b[1] for b in batch]


_POOL_DS = None


def _pool_init(ds):
    global _POOL_DS
    _POOL_DS = ds
    _worker_init(0)


def _pool_batch(indices):
    return _collate_np([_POOL_DS[i] for i in indices])  # pickled back to the parent


def bench_albumentations(args, records):
    import albumentations  # noqa: F401

    ds = AlbuDataset(records)
    try:
        import torch  # noqa: F401
    except ImportError:
        torch = None
    if torch is not None and not args.albu_pool:
        return _loader_epochs(ds, _collate_images, args)
    import multiprocessing as mp

    rng = np.random.default_rng(0)
    with mp.get_context("fork").Pool(args.workers, _pool_init, (ds,)) as pool:
        def epoch():
            order = rng.permutation(len(ds))
            chunks = [order[i:i + args.batch_size] for i in range(0, len(order), args.batch_size)]
            return sum(len(img) for img, _targets in pool.imap(_pool_batch, chunks))

        return timed_epochs(epoch, args.warmup, args.epochs, args.min_seconds)


# ---------------------------------------------------------------------------- main
def main(argv=None):
    global _CV2_THREADS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=os.cpu_count(),
                    help="detaug num_threads = DataLoader num_workers = Pool size (default: cores)")
    ap.add_argument("--epochs", type=int, default=5, help="timed epochs, at least (default 5)")
    ap.add_argument("--min-seconds", type=float, default=10.0, help="timed seconds, at least")
    ap.add_argument("--warmup", type=int, default=1, help="untimed epochs first (default 1)")
    ap.add_argument("--data", default=os.path.join(REPO, "examples", "data", "coco-mini"),
                    help="COCO folder with annotations.json and images/")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--prefetch", type=int, default=2, help="detaug prefetch_queue_depth")
    ap.add_argument("--cv2-threads", type=int, default=1,
                    help="cv2.setNumThreads in every process (default 1: N busy cores each)")
    ap.add_argument("--tv-decode", choices=("tensor", "pil"), default="tensor",
                    help="torchvision decode: torchvision.io.decode_jpeg (default) or PIL")
    ap.add_argument("--albu-pool", action="store_true",
                    help="parallelise albumentations with multiprocessing.Pool, not a DataLoader")
    ap.add_argument("--only", default="detaug,torchvision,albumentations",
                    help="comma-separated subset of engines to run")
    ap.add_argument("--rounds", type=int, default=1,
                    help="repeat all engines R times, interleaved; the table gives each engine's "
                         "best img/s (and its cores busy) and best img per CPU-s over the rounds")
    args = ap.parse_args(argv)
    args.data = os.path.abspath(args.data)
    _CV2_THREADS = args.cv2_threads
    _set_cv2_threads(args.cv2_threads)
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass

    records = load_coco(args.data)
    engines = [e.strip() for e in args.only.split(",") if e.strip()]
    runners = {"detaug": lambda: bench_detaug(args),
               "torchvision": lambda: bench_torchvision(args, records),
               "albumentations": lambda: bench_albumentations(args, records)}
    needs = {"torchvision": ("torch", "torchvision"), "albumentations": ("albumentations",)}
    cv2v = _version("cv2")
    print(f"machine: {platform.machine()} {platform.system()}, {os.cpu_count()} cores "
          f"({platform.processor() or '?'}); python {platform.python_version()}; "
          f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"workers N = {args.workers}; batch {args.batch_size}; data {args.data} "
          f"({len(records)} images); warm-up {args.warmup} epoch(s), then >= {args.epochs} epochs "
          f"and >= {args.min_seconds:g} s; detaug prefetch_queue_depth={args.prefetch}; "
          f"cv2.setNumThreads({args.cv2_threads}); torch.set_num_threads(1); "
          f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}")
    print("versions: " + ", ".join(f"{m} {_version(m)}" for m in
                                   ("detaug", "numpy", "PIL", "torch", "torchvision",
                                    "albumentations") if _version(m)) + f", opencv {cv2v}")
    best = {}
    for r in range(args.rounds):
        for name in engines:
            missing = [m for m in needs.get(name, ()) if _version(m) is None]
            if missing:
                if r == 0:
                    print(f"note: skipping {name}: {', '.join(missing)} not installed "
                          f"in {sys.executable}")
                continue
            n, secs, ep, cpu = runners[name]()
            rate = n / secs
            print(f"  round {r + 1}: {name:15s} {n:5d} images in {secs:6.2f} s ({ep} epochs): "
                  f"{rate:7.1f} img/s; {cpu:6.2f} CPU-s ({cpu / secs:.2f} cores busy), "
                  f"{n / cpu:6.1f} img per CPU-s", flush=True)
            prev = best.get(name, (0, 0, 0, 0, 0))
            if rate > prev[0]:
                prev = (rate, n, secs, prev[3], cpu / secs)
            best[name] = prev[:3] + (max(prev[3], n / cpu),) + prev[4:]
    if not best:
        return 1
    print()
    det = best.get("detaug", (None,))[0]
    det_c = best.get("detaug", (None,) * 4)[3]
    print(f"| engine (N={args.workers}) | img/s | detaug / engine | cores busy | img per CPU-s "
          "| detaug / engine (per CPU-s) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in engines:
        if name not in best:
            continue
        rate, _, _, per_cpu, busy = best[name]
        ratio = f"{det / rate:.2f}x" if det else "-"
        ratio_c = f"{det_c / per_cpu:.2f}x" if det_c else "-"
        print(f"| {name} | {rate:.1f} | {ratio} | {busy:.2f} | {per_cpu:.1f} | {ratio_c} |")
    peers = [best[n][0] for n in best if n != "detaug"]
    if det and peers:
        print(f"\ndetaug / fastest peer (img/s): {det / max(peers):.2f}x")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

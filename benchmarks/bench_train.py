"""Training throughput of torchvision's RetinaNet, fed by detaug and by its peers.

    python benchmarks/bench_train.py --data DIR [--warmup 20] [--steps 100] [--json F]
    python benchmarks/bench_train.py --cpu-smoke     # plumbing test on a machine without a GPU

The model: torchvision's ``retinanet_resnet50_fpn(weights=None, weights_backbone=None)`` (91
classes, its default; the data's labels are 0..79), built with ``min_size=max_size=640`` and
``image_mean=[0, 0, 0], image_std=[1, 1, 1]``: the images reach it already 640 x 640 and
normalised by the feeder with ImageNet's mean and std (``bench_gpu.MEAN`` / ``STD``, pixel
units: ``(x - 255 * (0.485, 0.456, 0.406)) / (255 * (0.229, 0.224, 0.225))``), so torchvision's
transform neither resizes (its resize runs at scale 1, an identity; 640 is a multiple of its size
divisor 32) nor normalises a second time (it subtracts 0 and divides by 1). Batch 16, bf16
autocast (``torch.autocast("cuda", dtype=torch.bfloat16)`` around the forward; backward and the
step outside it), ``SGD(lr=0.01, momentum=0.9)``, no gradient clipping, no ``.item()`` in the
loop. Each row builds a fresh model from the same seed.

The rows, all with the same augmentation (bench_gpu's pipeline: random IoU crop -> random
horizontal flip -> resize 640 x 640 -> drop boxes under 1 px -> normalise, float32 CHW):

* (a) one batch made once by the detaug pipeline and kept on the GPU: the upper bound. Measured
  first and again last (A/B/A: the GPU's clock drifts); the ratios are to the mean of the two.
* (b) the detaug GPU pipeline (``bench_gpu.make_det_pipe``, decode ``mixed``) at its defaults
  (the default 2.3 GB device memory budget: the low-memory setting),
  through ``DetaugIterator(pipe, output_map=("images", "boxes"), boxes_format="list",
  auto_reset=True)``: the pipeline's own batches of 16.
* (c) the same at the high-throughput setting: ``device_memory_budget="8GB"``.
  ``--config NAME=k=v,k=v`` adds more detaug rows (values are Python
  literals), e.g. ``--config mid=decode_processes=2,prefetch_queue_depth=3,batches_per_launch=2``.
* (d) torchvision.transforms.v2 (``bench_gpu.TVFileDataset``: read, ``decode_jpeg``, the
  transforms) in a torch DataLoader with ``cpu_count - 1`` workers (forked, torch's default on
  Linux, as in a training script: after CUDA is initialised), prefetch factor 2,
  ``pin_memory=True``, copies to the GPU with ``non_blocking=True``.

Per row: ``--warmup`` untimed steps, ``torch.cuda.synchronize()``, ``--steps`` timed steps (at
most ``--max-row-seconds``), ``torch.cuda.synchronize()``: train img/s = images / seconds. Also
the device memory the row takes: the drop of ``cudaMemGetInfo``'s free bytes (the whole device:
the feeder's decode processes count) from before the model and the feeder are made to the end of
the timed steps, in MB of 10^6 bytes, and the part of it outside torch's caching allocator
(the growth of ``torch.cuda.memory_reserved`` taken off): roughly the feeder's own (for the
detaug rows: its decode processes, its device threads' pool, its kernels). The one batch of (a) is made before
every row and is not counted. Recorded too: the time the loop spent in the feeder's ``next()``
per step, and the training loop thread's CPU time per step. A first untimed model (two steps on
batch (a)) loads CUDA's libraries and kernels, so that no row's memory or time includes that
one-time cost. detaug's ``num_threads`` is ``--threads`` (min(4, cores)); importing bench_gpu
sets ``OMP_NUM_THREADS=1`` unless it is set (one intra-op CPU thread for torch here too).

Data: ``bench_gpu.make_dataset`` into ``--data`` (default: a temporary folder): 1,024 COCO-like
640x480 JPEGs. Time: 20 + 100 steps of 0.12-0.14 s per row (RetinaNet trained at 115-117
img/s on an H100 here, 129-133 on an H200), five rows of 17-26 s with the model's and
the feeder's set-up: 123 s in all on an H100 (2026-11-23, data made beforehand); rows not started
within ``--budget`` seconds are skipped. ``--cpu-smoke``: the CPU backend, 64 x 64 images, batch
2, 16 images, 1 + 2 steps; without torchvision it says so and runs the detaug rows with a tiny
stand-in model (``--stand-in-model``) that takes RetinaNet's inputs. Prints a table and writes
JSON to ``--json`` (default ``$OUT/bench_train.json`` when OUT is set). Not part of the test
suite (tests/frontends/test_bench_train.py runs the smoke).
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import datetime
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import bench_gpu as bg  # noqa: E402  (puts the repository on sys.path; imports no GPU library)
from detaug.runtime.gpu.allocator import device_pool  # noqa: E402

HIGH_THROUGHPUT = {"device_memory_budget": "8GB"}
ROWS = []
log = bg.log


# ---------------------------------------------------------------------------- options
def parse_config(text):
    """'NAME=k=v,k=v' -> (NAME, {k: literal v}); a value that is not a Python literal stays a
    string. 'NAME=' gives no keywords (the defaults)."""
    name, sep, rest = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"--config takes NAME=k=v,k=v, not {text!r}")
    kwargs = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            raise argparse.ArgumentTypeError(f"--config {name}: {item!r} is not k=v")
        try:
            kwargs[k.strip()] = ast.literal_eval(v.strip())
        except (ValueError, SyntaxError):
            kwargs[k.strip()] = v.strip()
    return name.strip(), kwargs


def plan_rows(args):
    """The rows in the order they run: (a), detaug rows (``--rounds`` times: (a) and the detaug
    rows alternate, so that a drift of the machine reaches both), torchvision, (a) again."""
    det = [("defaults", "(b) detaug GPU pipeline, defaults", {}),
           ("high-throughput", "(c) detaug, " + ", ".join(f"{k}={v}" for k, v in HIGH_THROUGHPUT.items()),
            dict(HIGH_THROUGHPUT))]
    for name, kw in args.config:
        det.append((name, f"detaug {name}: " + (", ".join(f"{k}={v!r}" for k, v in kw.items())
                                                or "defaults"), kw))
    rows, rounds = [], max(1, getattr(args, "rounds", 1))
    for k in range(rounds):  # (a) and the detaug rows, alternated
        again = "" if k == 0 else (", again" if k == 1 else f", again ({k + 1})")
        rows.append({"key": "fixed", "kind": "fixed", "label": "(a) one batch kept on the GPU" + again})
        rows += [{"key": key, "kind": "detaug", "label": label + again, "pipe_kwargs": kw}
                 for key, label, kw in det]
    rows.append({"key": "tv", "kind": "tv",
                 "label": f"(d) torchvision v2 DataLoader, {args.tv_workers} workers"})
    rows.append({"key": "fixed", "kind": "fixed", "label": "(a) one batch kept on the GPU, last"
                 if rounds > 1 else "(a) one batch kept on the GPU, again"})
    if not args.gpu:
        for r in rows:
            r["label"] = r["label"].replace("on the GPU", "in memory").replace(" GPU pipeline",
                                                                                " pipeline")
    keep = set(args.only) if args.only else None
    return [r for r in rows if keep is None or r["key"] in keep]


# ---------------------------------------------------------------------------- model
def stand_in_model(num_classes):
    """A tiny model with RetinaNet's training interface (a list of (3, H, W) images and a list
    of {"boxes", "labels"} -> a dict of losses), for checking the plumbing without torchvision."""
    import torch
    from torch import nn

    class StandInDetector(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, stride=4, padding=1)
            self.head = nn.Linear(8, 4 + num_classes)

        def forward(self, images, targets):
            x = torch.stack(images)
            out = self.head(self.conv(x).relu().mean((2, 3))).float()
            side = float(x.shape[-1])
            box = [(out[i, :4] - t["boxes"].mean(0) / side).abs().sum() if len(t["boxes"])
                   else out[i, :4].sum() * 0 for i, t in enumerate(targets)]
            first = torch.stack([t["labels"][0] if len(t["labels"])
                                 else torch.zeros((), dtype=torch.int64, device=x.device)
                                 for t in targets])
            return {"classification": nn.functional.cross_entropy(out[:, 4:], first),
                    "bbox_regression": torch.stack(box).mean()}

    return StandInDetector()


def build_model(args, dev):
    import torch

    torch.manual_seed(args.seed)
    if args.stand_in_model:
        model = stand_in_model(args.num_classes)
    else:
        from torchvision.models.detection import retinanet_resnet50_fpn

        model = retinanet_resnet50_fpn(weights=None, weights_backbone=None,
                                       num_classes=args.num_classes, min_size=args.size,
                                       max_size=args.size, image_mean=[0.0, 0.0, 0.0],
                                       image_std=[1.0, 1.0, 1.0])
    model = model.to(dev).train()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    return model, opt


def train_step(model, opt, images, targets, amp_device):
    import torch

    with torch.autocast(amp_device, dtype=torch.bfloat16):
        losses = model(images, targets)
    loss = sum(losses.values())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.detach()


def check_batch(images, targets, args, dev):
    """The first batch of every feeder: what the model is given (once per row: reads to host)."""
    import torch

    assert len(images) == len(targets) == args.batch_size, (len(images), len(targets))
    for im in images:
        assert tuple(im.shape) == (3, args.size, args.size), tuple(im.shape)
        assert im.dtype == torch.float32 and im.device.type == dev.type, (im.dtype, im.device)
    for t in targets:
        b, lab = t["boxes"], t["labels"]
        assert b.ndim == 2 and b.shape[1] == 4 and b.dtype == torch.float32, (b.shape, b.dtype)
        assert lab.shape == (b.shape[0],) and lab.dtype == torch.int64, (lab.shape, lab.dtype)
        assert b.device.type == dev.type and lab.device.type == dev.type
        if len(b):
            assert bool(((b[:, 2] > b[:, 0]) & (b[:, 3] > b[:, 1])).all()), "empty boxes"
            assert int(lab.min()) >= 0 and int(lab.max()) < args.num_classes, "labels out of range"
    mean = float(torch.stack([im.mean() for im in images]).mean())
    return (f"{len(images)} x {tuple(images[0].shape)} {images[0].dtype} on {images[0].device}, "
            f"mean {mean:+.3f}; {sum(len(t['boxes']) for t in targets)} boxes")


# ---------------------------------------------------------------------------- feeders
class FixedFeeder:
    """(a): the same batch every step."""

    def __init__(self, batch):
        self.images, self.targets = batch
        self.settings = {}

    def next(self):
        return list(self.images.unbind(0)), self.targets

    def close(self):
        pass


def _endless(it):
    """next() of an auto_reset DetaugIterator, across epoch ends (it raises StopIteration once
    at each end, after starting the next epoch)."""
    try:
        return next(it)
    except StopIteration:
        return next(it)


class DetaugFeeder:
    """(b), (c): the detaug pipeline through DetaugIterator(boxes_format="list")."""

    def __init__(self, args, root, dev, pipe_kwargs, batch_size=None):
        from detaug.adapters.torch import DetaugIterator

        kw = dict(batch_size=batch_size or args.batch_size, num_threads=args.threads,
                  device_id=0 if args.gpu else None, seed=args.seed)
        kw.update(pipe_kwargs)
        self.pipe = bg.make_det_pipe(root, "mixed" if args.gpu else "cpu", size=args.size, **kw)
        try:
            self.it = DetaugIterator(self.pipe, output_map=("images", "boxes"),
                                     boxes_format="list", auto_reset=True)
        except BaseException:
            self.pipe.close()
            raise
        self.settings = bg.pipe_settings(self.pipe)
        self.dev = dev

    def next(self):
        b = _endless(self.it)
        images = b["images"]  # one (B, 3, H, W) tensor (a list if the sizes differed)
        images = list(images.unbind(0) if hasattr(images, "unbind") else images)
        images = [im.to(self.dev, non_blocking=True) for im in images]  # there already on the GPU
        targets = [{"boxes": t["boxes"].to(self.dev, non_blocking=True),
                    "labels": t["labels"].to(self.dev, non_blocking=True)} for t in b["boxes"]]
        return images, targets

    def memory(self) -> dict:
        """Where this process's device memory of the pipeline is, in MB (for a row that takes
        more than its budget): its device threads' pool (in use / held: runtime/gpu/allocator.py),
        the decode plan, the launch's outputs, and the output slots (now / the most admitted at
        once)."""
        import cupy as cp

        pool, p = device_pool(0), self.pipe
        plan = getattr(p, "memory_plan", None)
        return dict(pool_used_mb=pool.used_bytes() / bg.MB, pool_held_mb=pool.total_bytes() / bg.MB,
                    decode_plan_mb=(plan.bytes / bg.MB) if plan is not None else None,
                    launch_out_mb=(p._output_budget.launch_bytes or 0) / bg.MB,
                    output_slots=p.output_slots, output_slots_peak=p.output_slots_peak)

    def close(self):
        self.it = None
        self.pipe.close()
        self.pipe = None


def _tv_worker_init(_):
    """One torch thread per DataLoader worker. Not bench_gpu._tv_worker_init: its
    cv2.setNumThreads(1) hung a worker forked after this process had used OpenCV's thread pool
    (detaug's CPU backend, in the smoke run); torchvision's transforms do not use OpenCV."""
    import torch

    torch.set_num_threads(1)


class TorchvisionFeeder:
    """(d): torchvision v2 per sample in DataLoader workers, pinned batches, non-blocking copies."""

    def __init__(self, args, recs, dev):
        import torch
        from torch.utils.data import DataLoader, RandomSampler

        ds = bg.TVFileDataset(recs, decode=args.tv_decode, size=args.size)
        sampler = RandomSampler(ds, replacement=False, num_samples=len(ds) * 10_000,
                                generator=torch.Generator().manual_seed(args.seed))
        w = args.tv_workers
        self.loader = DataLoader(ds, batch_size=args.batch_size, sampler=sampler, num_workers=w,
                                 collate_fn=bg._tv_collate, worker_init_fn=_tv_worker_init,
                                 pin_memory=args.gpu, prefetch_factor=2 if w else None,
                                 drop_last=True, timeout=120 if w else 0,
                                 multiprocessing_context=args.tv_start_method if w else None)
        self.it = iter(self.loader)
        self.dev = dev
        self.settings = {"workers": w, "prefetch_factor": 2 if w else None,
                         "pin_memory": args.gpu, "decode": args.tv_decode,
                         "start_method": args.tv_start_method}

    def next(self):
        import torch

        images, targets = next(self.it)
        images = images.to(self.dev, non_blocking=True)
        targets = [{"boxes": t["boxes"].as_subclass(torch.Tensor).to(self.dev, non_blocking=True),
                    "labels": t["labels"].to(self.dev, non_blocking=True)} for t in targets]
        return list(images.unbind(0)), targets

    def close(self):
        self.it = None  # the iterator's end stops the workers
        self.loader = None


def make_fixed_batch(args, root, dev):
    """One batch from the detaug pipeline (one decode process: no decoder is left in this
    process, whose DataLoader workers fork later), copied so that it outlives the pipeline."""
    f = DetaugFeeder(args, root, dev, {"decode_processes": 1, "prefetch_queue_depth": 1,
                                       "batches_per_launch": 1})
    try:
        images, targets = f.next()
        images = [im.clone() for im in images]
        targets = [{k: v.clone() for k, v in t.items()} for t in targets]
        sync(args)
    finally:
        f.close()
    import torch

    return torch.stack(images), targets


# ---------------------------------------------------------------------------- measuring
def sync(args):
    if args.gpu:
        import torch

        torch.cuda.synchronize()


def free_bytes(args):
    return bg.device_free_bytes() if args.gpu else None


def settled_free_bytes(args, tol=8e6, tries=12):
    """Free device bytes once they stop changing (a previous row's decode processes and their
    CUDA contexts may still be on their way out): two readings 0.25 s apart within ``tol``."""
    if not args.gpu:
        return None
    a = bg.device_free_bytes()
    for _ in range(tries):
        time.sleep(0.25)
        b = bg.device_free_bytes()
        if abs(b - a) <= tol:
            return b
        a = b
    return a


def run_row(args, row, root, recs, fixed, dev):
    import torch

    bg.free_gpu_memory()
    before = settled_free_bytes(args)
    reserved0 = torch.cuda.memory_reserved() if args.gpu else 0  # batch (a) lives there already
    if args.gpu:
        torch.cuda.reset_peak_memory_stats()
    t_row = time.perf_counter()
    model, opt = build_model(args, dev)
    feeder = None
    res = {"name": row["label"], "key": row["key"], "kind": row["kind"]}
    try:
        if row["kind"] == "fixed":
            feeder = FixedFeeder(fixed)
        elif row["kind"] == "detaug":
            feeder = DetaugFeeder(args, root, dev, row["pipe_kwargs"])
            res["pipe_kwargs"] = row["pipe_kwargs"]
        else:
            feeder = TorchvisionFeeder(args, recs, dev)
        res["settings"] = feeder.settings
        amp = "cuda" if args.gpu else "cpu"
        images, targets = feeder.next()
        res["check"] = check_batch(images, targets, args, dev)
        train_step(model, opt, images, targets, amp)
        del images, targets
        t0 = time.perf_counter()
        for _ in range(max(0, args.warmup - 1)):
            train_step(model, opt, *feeder.next(), amp)
            if time.perf_counter() - t0 > args.max_row_seconds:
                break
        sync(args)
        res["setup_and_warmup_s"] = round(time.perf_counter() - t_row, 2)
        wait = 0.0
        k, c0, t0 = 0, time.thread_time(), time.perf_counter()
        while k < args.steps:
            t = time.perf_counter()
            images, targets = feeder.next()
            wait += time.perf_counter() - t
            loss = train_step(model, opt, images, targets, amp)
            k += 1
            if time.perf_counter() - t0 > args.max_row_seconds:
                break
        del images, targets
        sync(args)
        secs = time.perf_counter() - t0
        loop_cpu = time.thread_time() - c0
        after = free_bytes(args)
        loss = float(loss)
        res.update(img_s=k * args.batch_size / secs, steps=k, seconds=round(secs, 3),
                   next_ms_per_step=1e3 * wait / k, loop_cpu_ms_per_step=1e3 * loop_cpu / k,
                   final_loss=loss, loss_finite=bool(loss == loss and abs(loss) != float("inf")))
        if k < args.steps:
            res["cut_short"] = f"{k} of {args.steps} steps within --max-row-seconds"
        if args.gpu:
            reserved = torch.cuda.memory_reserved() - reserved0
            res.update(device_mem_mb=(before - after) / bg.MB, torch_reserved_mb=reserved / bg.MB,
                       outside_torch_mb=(before - after - reserved) / bg.MB,
                       torch_peak_allocated_mb=torch.cuda.max_memory_allocated() / bg.MB)
            if hasattr(feeder, "memory"):
                res["pipeline_memory"] = {k: (round(v, 1) if isinstance(v, float) else v)
                                          for k, v in feeder.memory().items()}
                log(f"{row['label']}: pipeline memory {res['pipeline_memory']}")
    finally:
        if feeder is not None:
            with contextlib.suppress(BaseException):
                feeder.close()
        del feeder, model, opt
        bg.free_gpu_memory()
    res["row_s"] = round(time.perf_counter() - t_row, 2)
    return res


def row_notes(r):
    s = r.get("settings") or {}
    parts = []
    if r["kind"] == "detaug" and s:
        parts.append(f"{s.get('decode_processes')} decode proc, prefetch "
                     f"{s.get('prefetch_queue_depth')}, {s.get('batches_per_launch')} batch/launch")
    if r.get("steps") is not None:
        parts.append(f"{r['steps']} steps in {r['seconds']:.1f} s")
        parts.append(f"next() {r['next_ms_per_step']:.2f} ms/step, loop thread CPU "
                     f"{r['loop_cpu_ms_per_step']:.1f} ms/step")
        parts.append(f"loss {r['final_loss']:.3f}" + ("" if r["loss_finite"] else " (not finite)"))
    if r.get("cut_short"):
        parts.append(r["cut_short"])
    return "; ".join(parts)


# ---------------------------------------------------------------------------- report
def git_commit():
    with contextlib.suppress(BaseException):
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=bg.REPO,
                             capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=bg.REPO, capture_output=True, text=True, timeout=10)
        if out.returncode == 0:
            return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    return None


def report(args, info):
    fixed = [r["img_s"] for r in ROWS if r.get("kind") == "fixed" and r.get("img_s")]
    base = sum(fixed) / len(fixed) if fixed else None
    mb = (lambda v: f"{v:,.0f}" if v is not None else "-")
    print()
    print(f"date {info['date']}; commit {info.get('commit')}; device: {info.get('device')}"
          + (f" ({info['device_mem_gib']} GiB)" if info.get("device_mem_gib") else "")
          + f"; CPU count {info['cpu_count']}; python {info['python']}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()))
    print(f"model: {'stand-in (no torchvision)' if args.stand_in_model else 'retinanet_resnet50_fpn'}"
          f", batch {args.batch_size}, {args.size}x{args.size}, bf16 autocast, SGD lr {args.lr} "
          f"momentum 0.9; {args.warmup} warm-up + {args.steps} timed steps per row; detaug "
          f"num_threads {args.threads}")
    print()
    print("| feeder | train img/s | ratio to (a) | device memory (MB) | outside torch (MB) | notes |")
    print("|---|---:|---:|---:|---:|---|")
    for r in ROWS:
        if r.get("img_s"):
            ratio = f"{r['img_s'] / base:.3f}" if base else "-"
            print(f"| {r['name']} | {r['img_s']:.1f} | {ratio} | {mb(r.get('device_mem_mb'))} | "
                  f"{mb(r.get('outside_torch_mb'))} | {row_notes(r)} |")
        else:
            why = r.get("error") or r.get("skipped") or "no result"
            print(f"| {r['name']} | - | - | - | - | {'FAILED: ' if r.get('error') else 'skipped: '}"
                  f"{why} |")
    print()
    if fixed:
        drift = f" (last / first {fixed[-1] / fixed[0]:.3f})" if len(fixed) > 1 else ""
        print("(a): " + " / ".join(f"{v:.1f}" for v in fixed) + f" img/s, mean {base:.1f}{drift}")
    for key, what in (("defaults", "(b) defaults"), ("high-throughput", "(c) high-throughput")):
        rates = [x["img_s"] for x in ROWS if x.get("key") == key and x.get("img_s")]
        if rates and base:
            each = f" (rows {', '.join(f'{v / base:.3f}' for v in rates)})" if len(rates) > 1 else ""
            print(f"{what} / (a) = {sum(rates) / len(rates) / base:.3f}{each} (target: >= 0.98)")
    print(f"total wall time {time.perf_counter() - bg.T_START:.1f} s")
    out = {"date": info["date"], "commit": info.get("commit"), "device": info,
           "args": {k: v for k, v in vars(args).items()}, "rows": ROWS, "fixed_img_s": fixed,
           "fixed_mean_img_s": base, "total_s": round(time.perf_counter() - bg.T_START, 1)}
    bg.write_json(out, args.json, "bench_train.json")


# ---------------------------------------------------------------------------- main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="no GPU: CPU backend, tiny settings (64x64, batch 2, 16 images, 1+2 steps)")
    ap.add_argument("--data", default=None, help="dataset folder (made if missing; default temp)")
    ap.add_argument("--keep-data", action="store_true", help="keep the temporary dataset")
    ap.add_argument("--num-images", type=int, default=None, help="default 1024 (16 with --cpu-smoke)")
    ap.add_argument("--gen-workers", type=int, default=min(16, os.cpu_count() or 1))
    ap.add_argument("--batch-size", type=int, default=None, help="default 16 (2 with --cpu-smoke)")
    ap.add_argument("--size", type=int, default=None, help="square image side, default 640 (64)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed steps per row (20; 1)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps per row (100; 2)")
    ap.add_argument("--max-row-seconds", type=float, default=60.0,
                    help="a row's warm-up, and its timed steps, stop after this many seconds")
    ap.add_argument("--budget", type=float, default=210.0,
                    help="rows not started within this many seconds of the start are skipped")
    ap.add_argument("--threads", type=int, default=min(4, os.cpu_count() or 1),
                    help="detaug num_threads (default min(4, cores))")
    ap.add_argument("--tv-workers", type=int, default=None,
                    help="torchvision DataLoader workers (cpu_count - 1; 1 with --cpu-smoke)")
    ap.add_argument("--tv-decode", choices=("tensor", "pil"), default=None,
                    help="torchvision row's decode: torchvision.io.decode_jpeg (default) or Pillow "
                         "(default with --cpu-smoke)")
    ap.add_argument("--tv-start-method", choices=("fork", "forkserver", "spawn"), default="fork",
                    help="how the DataLoader starts its workers (fork: torch's default on Linux)")
    ap.add_argument("--config", action="append", type=parse_config, default=[],
                    metavar="NAME=k=v,...", help="an extra detaug row with these pipeline keywords "
                    "(repeatable), e.g. mid=decode_processes=2,prefetch_queue_depth=3")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run (a) and the detaug rows this many times, alternated; a feeder's ratio "
                         "is the mean of its rows over the mean of every (a) row")
    ap.add_argument("--only", default=None,
                    help="comma-separated rows to run: fixed, defaults, high-throughput, tv, config names")
    ap.add_argument("--num-classes", type=int, default=91, help="RetinaNet classes (torchvision's 91)")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stand-in-model", action="store_true",
                    help="a tiny stand-in for RetinaNet (plumbing only; no torchvision needed)")
    ap.add_argument("--json", default=None,
                    help="write the table as JSON here (default: $OUT/bench_train.json when OUT is set)")
    args = ap.parse_args(argv)
    smoke = args.cpu_smoke
    for k, (a, b) in dict(num_images=(16, 1024), batch_size=(2, 16), size=(64, 640), warmup=(1, 20),
                          steps=(2, 100), tv_workers=(1, max(1, (os.cpu_count() or 2) - 1)),
                          tv_decode=("pil", "tensor")).items():
        if getattr(args, k) is None:
            setattr(args, k, a if smoke else b)
    if args.steps < 1 or args.warmup < 1:
        ap.error("--steps and --warmup must be at least 1")
    if args.size % 32:
        ap.error("--size must be a multiple of 32 (torchvision pads to multiples of 32)")
    args.only = [s.strip() for s in args.only.split(",") if s.strip()] if args.only else None
    names = {"fixed", "defaults", "high-throughput", "tv"} | {n for n, _ in args.config}
    if args.only and set(args.only) - names:
        ap.error(f"--only: unknown rows {sorted(set(args.only) - names)}; choose from {sorted(names)}")

    if bg._version("torch") is None:
        print("bench_train needs torch (not importable here)")
        return 0 if smoke else 1
    tv_missing = bg._version("torchvision") is None
    if tv_missing and not args.stand_in_model:
        if not smoke:
            print("bench_train needs torchvision (not importable here); --stand-in-model runs the "
                  "rows with a tiny stand-in model")
            return 1
        print("needs torchvision: not importable here, so RetinaNet and the torchvision v2 row are "
              "not run; the other rows run with a tiny stand-in model (plumbing check only)")
        args.stand_in_model = True
    args.gpu = False if smoke else bg.gpu_available()
    if not smoke and not args.gpu:
        print("bench_train: no CUDA device visible to cupy; use --cpu-smoke for a plumbing test")
        return 1
    import torch

    if args.gpu and not torch.cuda.is_available():
        print("bench_train: torch sees no CUDA device")
        return 1
    dev = torch.device("cuda", 0) if args.gpu else torch.device("cpu")
    log(f"bench_train: {'CPU smoke' if smoke else 'GPU'} run; python {platform.python_version()}; "
        f"{os.cpu_count()} cores; torch {torch.__version__}")
    rows = plan_rows(args)
    if tv_missing:
        rows = [r for r in rows if r["kind"] != "tv"]

    tmp = None
    root = args.data
    if root is None:
        tmp = root = tempfile.mkdtemp(prefix="detaug_bench_train_")
    try:
        bg.make_dataset(root, args.num_images, args.gen_workers)
        recs = None
        if any(r["kind"] == "tv" for r in rows):
            recs, _blobs = bg.load_records(root)
            del _blobs
        if args.gpu:
            torch.cuda.init()
            bg.device_free_bytes()  # the CUDA context exists before any baseline
        t0 = time.perf_counter()
        fixed = make_fixed_batch(args, root, dev)
        log(f"fixed batch (a): {check_batch(list(fixed[0].unbind(0)), fixed[1], args, dev)}; "
            f"{time.perf_counter() - t0:.1f} s")
        t0 = time.perf_counter()  # one-time costs (libraries, kernels, cuDNN plans) before any row
        model, opt = build_model(args, dev)
        for _ in range(2):
            train_step(model, opt, list(fixed[0].unbind(0)), fixed[1], "cuda" if args.gpu else "cpu")
        sync(args)
        del model, opt
        bg.free_gpu_memory()
        log(f"first model and two steps (untimed): {time.perf_counter() - t0:.1f} s")
        for row in rows:
            spent = time.perf_counter() - bg.T_START
            if spent > args.budget:
                log(f"{row['label']}: skipped (budget of {args.budget:.0f} s spent)")
                ROWS.append({"name": row["label"], "key": row["key"], "kind": row["kind"],
                             "img_s": None, "skipped": f"time budget of {args.budget:.0f} s spent"})
                continue
            log(f"--- {row['label']}")
            try:
                res = run_row(args, row, root, recs, fixed, dev)
            except KeyboardInterrupt:
                raise
            except BaseException as e:  # noqa: BLE001 -- one failure must not lose the others
                traceback.print_exc()
                res = {"name": row["label"], "key": row["key"], "kind": row["kind"], "img_s": None,
                       "error": f"{type(e).__name__}: {e}".strip()[:300]}
            ROWS.append(res)
            if res.get("img_s"):
                mem = (f"; device memory {res['device_mem_mb']:,.0f} MB "
                       f"({res['outside_torch_mb']:,.0f} outside torch)"
                       if res.get("device_mem_mb") is not None else "")
                log(f"{row['label']}: {res['img_s']:.1f} img/s{mem}; {row_notes(res)}; "
                    f"first batch {res['check']}")
            else:
                log(f"{row['label']}: FAILED ({res.get('error')})")
        info = bg.device_info(args.gpu)
        info["date"] = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        info["commit"] = git_commit()
        report(args, info)
    finally:
        if tmp and not args.keep_data:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

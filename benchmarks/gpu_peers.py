"""The peers of the benchmark pipeline: torchvision.transforms.v2 (on the GPU, and in a CPU
DataLoader) and kornia for bench_gpu, on the same bytes; and NVIDIA DALI 2.4 (``make_dali_pipe``,
its configurations, ``bench_dali``) for bench_startup and bench_gpu.

This module imports only the standard library at its top (gpu_common, numpy and the peers'
libraries inside the functions), so that bench_startup's DALI child, which imports it, pays for
DALI alone."""
from __future__ import annotations

import collections
import contextlib
import gc
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def make_tv_transform(size=None):
    """torchvision v2's twin of make_det_pipe's augmentation (``size`` x ``size``, default SIZE)."""
    import torch
    from torchvision.transforms import v2

    from gpu_common import MEAN, SIZE, STD

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

    from gpu_common import SIZE, device_free_bytes, index_stream, timed

    free0 = device_free_bytes()

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
            "seconds": round(secs, 2), "device_mem_mb": (free0 - device_free_bytes()) / 1e6,
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
        import numpy as np
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


def bench_tv_cpu(args, recs, workers=None, to_gpu=False):
    """torchvision v2 in a DataLoader of ``workers`` processes (default ``args.tv_workers``).
    ``to_gpu``: what a user training on the GPU writes: ``pin_memory=True`` and each batch
    copied to the GPU (``non_blocking``), synchronised at the end of the window; the batches
    then land where detaug's do. Without it the batches stay on the host."""
    import torch
    import torchvision  # noqa: F401
    from torch.utils.data import DataLoader, RandomSampler

    workers = args.tv_workers if workers is None else workers
    ds = TVFileDataset(recs)
    # one long stream of successive permutations: no epoch-end bubbles for the peer
    sampler = RandomSampler(ds, replacement=False, num_samples=len(ds) * 10_000,
                            generator=torch.Generator().manual_seed(0))
    pf = 2
    loader = DataLoader(ds, batch_size=args.batch_size, sampler=sampler, num_workers=workers,
                        collate_fn=_tv_collate, worker_init_fn=_tv_worker_init,
                        prefetch_factor=pf if workers else None, drop_last=True,
                        pin_memory=to_gpu)
    move = (lambda x: x.to("cuda", non_blocking=True)) if to_gpu else (lambda x: x)
    sync = torch.cuda.synchronize if to_gpu else (lambda: None)
    it = iter(loader)
    try:
        # warm-up: every worker started and past its first batches, prefetch queue drained
        t0 = time.perf_counter()
        warm = 0
        while warm < max(2, workers * (pf + 1)) and time.perf_counter() - t0 < args.peer_seconds:
            move(next(it)[0])
            warm += 1
        sync()
        n, k, t0 = 0, 0, time.perf_counter()
        while True:
            img = move(next(it)[0])
            n += img.shape[0]
            k += 1
            el = time.perf_counter() - t0
            if el >= args.peer_seconds and k >= 3:
                break
            if el >= args.peer_seconds * 2:
                break
        sync()
        secs = time.perf_counter() - t0
    finally:
        del it
        del loader
        gc.collect()
    return {"name": f"torchvision v2 DataLoader CPU ({workers} workers"
                    + (", pin_memory, to the GPU)" if to_gpu else ")"), "img_s": n / secs,
            "images": n, "seconds": round(secs, 2),
            "notes": f"decode_jpeg on CPU, batch {args.batch_size} collate, {warm} warm-up "
                     "batches; " + ("pinned batches copied to the GPU (non_blocking)" if to_gpu
                                    else "batches stay on the host (no H2D counted)")}


# ---------------------------------------------------------------------------- DALI 2.4
# DALI is never a dependency of detaug: it travels as a wheel for the device run only.
DALI_DECODES = ("whole", "slice")
DALI_CONFIGS = "whole,whole:8,slice:4,slice:8,slice,slice:8:0.9"  # bench_startup / bench_gpu default
_MEAN = (123.675, 116.28, 103.53)  # = gpu_common.MEAN / STD (not imported: see the docstring)
_STD = (58.395, 57.12, 57.375)


def parse_dali_config(text, cores=None):
    """One DALI configuration from ``DECODE[:THREADS[:HW_LOAD]]``: DECODE ``whole`` (decode the
    whole image, then resize the crop window: ``resize(roi_start, roi_end)``) or ``slice`` (decode
    only the window: ``decoders.image_slice``, as DALI's SSD example); THREADS DALI's
    ``num_threads`` (default: ``cores``, this machine's CPU count); HW_LOAD the decoder's
    ``hw_decoder_load``, the share of images the hardware JPEG decoder takes, in [0, 1]
    (default: DALI's own, 0.65). Returns ``{"decode", "num_threads", "hw_decoder_load"}``."""
    parts = str(text).strip().split(":")
    if not 1 <= len(parts) <= 3 or parts[0] not in DALI_DECODES:
        raise ValueError(f"DALI configuration {text!r}: expected DECODE[:THREADS[:HW_LOAD]] with "
                         f"DECODE one of {DALI_DECODES} (e.g. 'slice:8' or 'whole:16:0.9')")
    threads = cores or os.cpu_count() or 1
    if len(parts) > 1 and parts[1]:
        if not parts[1].isdigit() or int(parts[1]) < 1:
            raise ValueError(f"DALI configuration {text!r}: THREADS must be a positive integer, "
                             f"not {parts[1]!r}")
        threads = int(parts[1])
    load = None
    if len(parts) > 2 and parts[2]:
        try:
            load = float(parts[2])
        except ValueError:
            load = -1.0
        if not 0.0 <= load <= 1.0:
            raise ValueError(f"DALI configuration {text!r}: HW_LOAD must be a number in [0, 1], "
                             f"not {parts[2]!r}")
    return {"decode": parts[0], "num_threads": threads, "hw_decoder_load": load}


def parse_dali_configs(text, cores=None):
    """A comma-separated list of configurations (``parse_dali_config``), duplicates dropped."""
    out = []
    for item in str(text).split(","):
        if item.strip():
            c = parse_dali_config(item, cores)
            if c not in out:
                out.append(c)
    if not out:
        raise ValueError(f"no DALI configuration in {text!r}")
    return out


def dali_config_text(cfg):
    """The configuration back as ``DECODE:THREADS[:HW_LOAD]`` (parse_dali_config's inverse)."""
    load = cfg.get("hw_decoder_load")
    return f"{cfg['decode']}:{cfg['num_threads']}" + ("" if load is None else f":{load:g}")


def dali_label(cfg):
    """A row's name: ``DALI 2.4, slice decode, 8 threads[, hw_decoder_load 0.9]``."""
    load = cfg.get("hw_decoder_load")
    n = cfg["num_threads"]
    return (f"DALI 2.4, {cfg['decode']} decode, {n} thread{'s' if n != 1 else ''}"
            + ("" if load is None else f", hw_decoder_load {load:g}"))


def best_row(rows, key="img_s"):
    """The row with the highest ``key`` among those that have one (None if none)."""
    return max((r for r in rows if r.get(key)), key=lambda r: r[key], default=None)


def make_dali_pipe(root, device="mixed", *, batch_size=64, num_threads=4, device_id=0, seed=0,
                   max_boxes=64, size=640, prefetch_queue_depth=2, decode="whole",
                   hw_decoder_load=None):
    """The benchmark pipeline (``bench_gpu.make_det_pipe``) in DALI's operators (not built), over
    the data set at ``root`` (images/, annotations.json). Outputs: images (batch, 3, size, size)
    float32, boxes (batch, max_boxes, 4) ltrb pixels (zero rows past each sample's count),
    labels (batch, max_boxes) int32 (-1 past the count). ``device``: "mixed" (GPU decode and GPU
    image ops) or "cpu" (every op on the host: a check of the graph without a GPU).

    Per image: ``readers.coco(ltrb=True, ratio=True, random_shuffle=True, skip_empty=False)``
    (boxes relative to the image: random_bbox_crop refuses pixel boxes) -> ``random_bbox_crop``:
    SSD's window (IoU thresholds 0.1 ... 0.9 or no crop, scaling 0.3-1.0, aspect ratio 0.5-2.0 in
    pixels through ``input_shape`` = ``peek_image_shape``, 50 attempts per threshold; boxes whose
    centre leaves the window dropped, as detaug's random_iou_crop) -> the image of the window at
    ``size`` x ``size``, by ``decode``: "whole" decodes the whole image (as detaug does) and
    resizes the window (``roi_start``/``roi_end``: crop and resize in one kernel, antialiased as
    detaug's resize); "slice" decodes only the window (``decoders.image_slice`` with the crop's
    relative anchor and shape, as DALI's SSD example: less decode work than detaug does), then
    resizes it (antialiased) -> ``crop_mirror_normalize(mirror=coin_flip, mean/std, float32,
    CHW)``; boxes ``bb_flip``ped with the same coin, scaled to pixels, padded to ``max_boxes``.
    ``hw_decoder_load`` (None: DALI's default) goes to the decoder.

    What differs from detaug's pipeline: detaug does crop + flip + resize + normalize in one warp
    launch, DALI in two kernels; detaug drops boxes under 1 px after the resize, DALI has no such
    operator and keeps them; when no window passes DALI takes its best candidate where detaug
    keeps the whole image; DALI's boxes stay on the host (CPU operators); the random draws
    differ. ``decoders.image_random_crop`` is not offered: it draws its own window without
    returning it, so the boxes could not follow."""
    from nvidia.dali import fn, pipeline_def, types

    if device not in ("mixed", "cpu"):
        raise ValueError(f"make_dali_pipe: device must be 'mixed' or 'cpu', not {device!r}")
    if decode not in DALI_DECODES:
        raise ValueError(f"make_dali_pipe: decode must be one of {DALI_DECODES}, not {decode!r}")
    dev = "gpu" if device == "mixed" else "cpu"
    dec_kw = {} if hw_decoder_load is None or device == "cpu" else {"hw_decoder_load": hw_decoder_load}

    @pipeline_def(batch_size=batch_size, num_threads=num_threads,
                  device_id=device_id if device == "mixed" else None, seed=seed,
                  prefetch_queue_depth=prefetch_queue_depth)
    def dali_det_pipe():
        jpegs, boxes, labels = fn.readers.coco(
            file_root=os.path.join(root, "images"),
            annotations_file=os.path.join(root, "annotations.json"),
            ltrb=True, ratio=True, random_shuffle=True, skip_empty=False, name="Reader")
        hw = fn.peek_image_shape(jpegs, dtype=types.INT32)[0:2]  # (H, W) of each image
        anchor, shape, boxes, labels = fn.random_bbox_crop(
            boxes, labels, input_shape=hw, shape_layout="HW", bbox_layout="xyXY",
            thresholds=[0.1, 0.3, 0.5, 0.7, 0.9], allow_no_crop=True, scaling=[0.3, 1.0],
            aspect_ratio=[0.5, 2.0], num_attempts=50, total_num_attempts=250, quiet=True)
        if decode == "slice":  # anchor and shape: relative, (x, y) order
            images = fn.decoders.image_slice(jpegs, anchor, shape, device=device,
                                             output_type=types.RGB, axis_names="WH",
                                             normalized_anchor=True, normalized_shape=True,
                                             **dec_kw)
            images = fn.resize(images, resize_x=size, resize_y=size, antialias=True, device=dev)
        else:
            images = fn.decoders.image(jpegs, device=device, output_type=types.RGB, **dec_kw)
            # the window (relative) as the resize's region of interest, in (y, x) order
            start = fn.stack(anchor[1], anchor[0])
            end = fn.stack(anchor[1] + shape[1], anchor[0] + shape[0])
            images = fn.resize(images, resize_x=size, resize_y=size, roi_start=start,
                               roi_end=end, roi_relative=True, antialias=True, device=dev)
        coin = fn.random.coin_flip(probability=0.5)
        images = fn.crop_mirror_normalize(images, mirror=coin, mean=list(_MEAN), std=list(_STD),
                                          dtype=types.FLOAT, output_layout="CHW", device=dev)
        # boxes: [0, 1] of the window (random_bbox_crop's output) -> flipped -> pixels of the output
        boxes = fn.bb_flip(boxes, ltrb=True, horizontal=coin)
        boxes = fn.pad(boxes * float(size), axes=(0,), shape=(max_boxes,), fill_value=0.0)
        labels = fn.pad(fn.cast(labels, dtype=types.INT32), axes=(0,), shape=(max_boxes,),
                        fill_value=-1)
        return images, boxes, labels

    return dali_det_pipe()


def bench_dali(args, root):
    """bench_gpu's DALI rows: each configuration of ``args.dali_configs`` in a fresh process
    (bench_startup's steady child: img/s over ``args.peer_seconds`` after 2 s, CPU ms per image of
    the process tree, device memory = the drop of cuMemGetInfo's free bytes, whole device, from
    before the build with the child's context made first). Appends one row per configuration
    to gpu_common.ROWS and returns None; a failed configuration is a row with its error."""
    from gpu_common import ROWS, log

    configs = parse_dali_configs(args.dali_configs)
    for cfg in configs:
        cmd = [sys.executable, os.path.join(HERE, "bench_startup.py"), "--child", "dali",
               "--mode", "steady", "--data", os.path.abspath(root), "--batch-size",
               str(args.batch_size), "--seconds", str(args.peer_seconds), "--warmup", "2",
               "--dali-config", dali_config_text(cfg)]
        row = {"name": dali_label(cfg), "img_s": None, "dali_config": dali_config_text(cfg)}
        try:
            p = subprocess.run(cmd, capture_output=True, text=True,
                               timeout=60 + 2 * args.peer_seconds)
            line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                raise RuntimeError(f"rc {p.returncode}: "
                                   + " | ".join(p.stderr.strip().splitlines()[-3:])[-300:])
            r = json.loads(line[7:])
            row.update(img_s=r["img_s"], images=r["images"], seconds=round(r["seconds"], 2),
                       device_mem_mb=r.get("device_mb"), cpu_ms_per_img=r["cpu_ms_per_img"],
                       notes=f"a fresh process; {r['cpu_ms_per_img']:.2f} CPU ms per image "
                             f"({r['cores']:.1f} cores busy); boxes stay on the host")
            log(f"{row['name']}: {row['img_s']:,.0f} img/s, {row['device_mem_mb'] or 0:,.0f} MB")
        except Exception as e:  # noqa: BLE001 -- one configuration's failure never loses the others
            row["error"] = f"{type(e).__name__}: {e}"[:300]
            log(f"{row['name']}: FAILED ({row['error']})")
        ROWS.append(row)
    return None


# ---------------------------------------------------------------------------- 3d. kornia
def bench_kornia(args, recs, blobs, gpu):
    import numpy as np
    import torch
    import torch.nn.functional as F
    import kornia
    import kornia.augmentation as K

    from gpu_common import (MEAN, SIZE, STD, _version, decode_params, device_free_bytes,
                            import_nvimgcodec, index_stream, timed)

    free0 = device_free_bytes() if gpu else None

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
            "device_mem_mb": (free0 - device_free_bytes()) / 1e6 if gpu else None,
            "notes": f"decode {decode_note} (batched), per-sample interpolate to {SIZE}x{SIZE}, "
                     "AugmentationSequential(RandomResizedCrop, HFlip, Normalize) on the batch, "
                     "boxes padded (not pruned); bytes preloaded"}


# ---------------------------------------------------------------------------- 4. warp alone


# ---------------------------------------------------------------------------- instance segmentation
class TVSegDataset:
    """torchvision v2's instance-segmentation recipe per sample, CPU: read, decode, each
    annotation's polygons decoded to a mask (pycocotools, as torchvision's detection reference
    does), then ``ScaleJitter(size, (0.1, 2.0))``, ``RandomCrop(size, pad_if_needed)`` (crop and
    pad to size), ``RandomHorizontalFlip``, ``SanitizeBoundingBoxes`` on Image, BoundingBoxes
    and Mask together."""

    def __init__(self, root, size):
        with open(os.path.join(root, "annotations.json")) as f:
            d = json.load(f)
        by_image = {}
        for a in d["annotations"]:
            by_image.setdefault(a["image_id"], []).append(a)
        self.items = [(os.path.join(root, "images", im["file_name"]), im["height"], im["width"],
                       by_image.get(im["id"], [])) for im in d["images"]]
        self.size, self.tf = size, None

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        import numpy as np
        import torch
        from pycocotools import mask as coco_mask
        from torchvision import io, tv_tensors
        from torchvision.transforms import v2

        if self.tf is None:
            s = (self.size, self.size)
            self.tf = v2.Compose([v2.ScaleJitter(s, scale_range=(0.1, 2.0)),
                                  v2.RandomCrop(s, pad_if_needed=True,
                                                fill={tv_tensors.Image: 128, "others": 0}),
                                  v2.RandomHorizontalFlip(), v2.SanitizeBoundingBoxes(min_size=1)])
        path, h, w, anns = self.items[i]
        img = io.decode_jpeg(io.read_file(path), mode=io.ImageReadMode.RGB)
        masks = np.zeros((len(anns), h, w), np.uint8)
        for k, a in enumerate(anns):
            masks[k] = coco_mask.decode(coco_mask.merge(coco_mask.frPyObjects(a["segmentation"], h, w)))
        xywh = torch.tensor([a["bbox"] for a in anns], dtype=torch.float32).reshape(-1, 4)
        target = {"boxes": tv_tensors.BoundingBoxes(xywh, format="XYWH", canvas_size=(h, w)),
                  "masks": tv_tensors.Mask(torch.from_numpy(masks)),
                  "labels": torch.tensor([a["category_id"] for a in anns], dtype=torch.int64)}
        return self.tf(tv_tensors.Image(img), target)


def _seg_collate(batch):
    return tuple(zip(*batch))


def bench_tv_seg(args, root, workers):
    """:class:`TVSegDataset` in a DataLoader of ``workers`` processes, batches of
    ``args.batch_size`` as lists (images of one size, targets with masks)."""
    import torch
    from torch.utils.data import DataLoader, RandomSampler

    from gpu_common import timed

    ds = TVSegDataset(root, args.seg_size)
    sampler = RandomSampler(ds, replacement=False, num_samples=len(ds) * 1000,
                            generator=torch.Generator().manual_seed(0))
    loader = DataLoader(ds, batch_size=args.batch_size, sampler=sampler, num_workers=workers,
                        collate_fn=_seg_collate, worker_init_fn=_tv_worker_init,
                        prefetch_factor=2 if workers else None, drop_last=True)
    it = iter(loader)

    def step():
        imgs, targets = next(it)
        assert all(t["masks"].shape[-2:] == (args.seg_size, args.seg_size) for t in targets)
        return len(imgs)

    try:
        n, secs, k = timed(step, warmup=max(2, workers), min_s=args.peer_seconds,
                           max_s=args.peer_seconds * 2)
    finally:
        del it, loader
        gc.collect()
    return {"name": f"torchvision v2 DataLoader ({workers} workers), masks", "img_s": n / secs,
            "images": n, "seconds": round(secs, 2),
            "notes": f"decode + pycocotools masks + v2 on the CPU; {k} batches"}
